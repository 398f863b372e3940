"""evaluate.validate: each result's checks, and the fairness check over a set of results."""

import copy
import json
import shutil
from pathlib import Path

import pytest

from evaluate import extract, validate
from evaluate.collect import Loaded
from utils.spec.fairness import IDENTITY_KEYS

GOLDEN = Path(__file__).parent / "fixtures" / "results" / "extract"
LOGS = Path(__file__).parent / "fixtures" / "logs"
FINGERPRINTS = {"dataset_fingerprint": "d" * 64, "tokenizer_fingerprint": "t" * 64}


def result(name, **training):
    """A golden result with the fingerprints of prepared data (the golden requests' data prefix has none)."""
    data = json.loads((GOLDEN / f"{name}.json").read_text())
    data["training"].update(FINGERPRINTS, **training)
    return data


def checks(data):
    return {(f.check, f.fatal) for f in validate.check_result(Loaded("test", data, {}))}


def test_a_sound_run_passes_every_check():
    assert checks(result("megatron")) == set()


def test_a_cut_off_run_fails_status_and_steps():
    assert checks(result("megatron_truncated")) == {("status", True), ("steps", True)}


def test_a_failed_runs_status_names_the_exception_its_worker_raised():
    data = result("megatron_truncated")
    data["run"].update(status="failed", exit_code=1, error_excerpt="rank 0's last lines:\n  ValueError: bad shard\n====")
    status = [f.message for f in validate.check_result(Loaded("test", data, {})) if f.check == "status"]
    assert status == ["failed (exit code 1): ValueError: bad shard"]


def test_nan_losses_and_nan_iterations_fail():
    assert checks(result("megatron_nan")) == {("finite loss", True), ("nan/skipped iterations", True)}


def test_mock_data_fails_unless_requested():
    assert ("real data", True) in checks(result("primus_mock"))
    requested = result("primus_mock", mock_data=True)
    assert ("real data", True) not in checks(requested)
    assert ("real data", False) in checks(requested)  # still flagged


def test_effective_settings_must_equal_the_request():
    data = result("megatron")
    data["effective"]["tp"] = 2
    found = validate.check_result(Loaded("test", data, {}))
    assert [f.message for f in found] == ["tp is 2 in the framework, 1 requested"]


def test_loss_that_does_not_fall_fails_but_only_flags_a_very_short_run():
    data = result("megatron")
    data["series"]["loss"] = list(reversed(data["series"]["loss"]))
    assert checks(data) == {("loss decreases", False)}  # 12 steps: very short
    longer = copy.deepcopy(data)
    longer["training"]["steps"] = longer["run"]["steps_completed"] = 100
    assert ("loss decreases", True) in checks(longer)


def test_schema_violation_is_reported_first():
    data = result("megatron")
    del data["performance"]
    assert checks(data) == {("schema", True)}


@pytest.mark.parametrize("section, key, value, label", [
    ("model", "variant", "llama3.1-8b-tiny", "model variant"),
    ("training", "seq_len", 4096, "sequence length"),
    ("training", "gbs", 256, "global batch size"),
    ("training", "precision", "fp8", "precision"),
    ("training", "steps", 500, "steps"),
    ("training", "dataset_fingerprint", "e" * 64, "dataset fingerprint"),
    ("training", "tokenizer_fingerprint", "u" * 64, "tokenizer fingerprint"),
    ("training", "fairness_profile", "tuned", "fairness profile"),
    ("training", "init_method_std", 0.008, "init std"),  # Primus's shipped value
    ("training", "padded_vocab_size", 128512, "padded vocabulary"),  # Primus's own padding at TP4
    ("training", "eod_mask_loss", True, "EOD loss masking"),
    ("training", "dataloader_type", "cyclic", "sampler"),
    ("training", "check_for_nan_in_grad", True, "NaN check"),
    ("training", "fp8_recipe", {"fp8_format": "hybrid", "fp8_recipe": "delayed", "fp8_margin": 0,
                                "fp8_amax_history_len": 1, "fp8_amax_compute_algo": "most_recent"}, "FP8 recipe"),
    ("training", "validation_split", "95,5,0", "validation split"),  # other documents held out, others trained on
])
def test_fairness_lists_each_mismatched_field(section, key, value, label):
    nvidia, amd = result("nemo"), result("primus")
    amd["run"]["id"] = "prim-llama"
    amd[section][key] = value
    found = [f for f in validate.fairness([Loaded("a", nvidia, {}), Loaded("b", amd, {})]) if f.fatal]
    assert [f.message.split(":")[1].strip() for f in found] == [f"{label} differs"]
    assert "amd/prim-llama" in found[0].message


def test_a_run_on_megatron_cores_local_layers_is_not_compared_with_a_transformer_engine_run():
    nvidia, amd = result("nemo"), result("primus")
    amd["run"]["id"] = "prim-llama"
    nvidia.setdefault("features", {})["layer_spec"] = "local"  # TRANSFORMER_IMPL=local on a GPU without TE
    unknown = [f for f in validate.fairness([Loaded("a", nvidia, {}), Loaded("b", amd, {})]) if f.fatal]
    amd.setdefault("features", {})["layer_spec"] = "transformer_engine"
    found = [f for f in validate.fairness([Loaded("a", nvidia, {}), Loaded("b", amd, {})]) if f.fatal]
    assert unknown == [] and [f.message.split(":")[1].strip() for f in found] == ["layer implementation differs"]


def test_nemos_warm_up_convention_is_a_warning_that_says_why():
    found = validate.fairness([Loaded("a", result("nemo"), {}), Loaded("b", result("primus"), {})])
    assert [(f.fatal, f.message.split(":")[1].strip()) for f in found] == [(False, "LR warm-up convention differs")]
    assert "NeMo 2.3's scheduler has no Megatron-style warm-up" in found[0].message


def test_mega_and_prim_share_the_whole_workload():
    assert validate.fairness([Loaded("a", result("megatron"), {}), Loaded("b", result("primus"), {})]) == []


def test_results_without_workload_identity_fields_only_warn():
    old = result("megatron")
    for key in IDENTITY_KEYS:  # as a result written before the profiles existed
        del old["training"][key]
    found = validate.fairness([Loaded("a", old, {})])
    assert found and all(not f.fatal and "unknown" in f.message for f in found)
    assert any("init std unknown" in f.message for f in found)


@pytest.mark.parametrize("key, value, says", [
    ("eod_mask_loss", True, "eod_mask_loss is True in the framework, False requested"),
    ("padded_vocab_size", 128512, "padded_vocab_size is 128512 in the framework, 128256 requested"),
    ("overlap_grad_reduce", True, "overlap_grad_reduce is True in the framework, False in the fairness profile spec"),
    ("grad_reduce_in_fp32", True, "grad_reduce_in_fp32 is True in the framework, False in the fairness profile spec"),
    ("average_in_collective", True,
     "average_in_collective is True in the framework, False in the fairness profile spec"),
])
def test_a_workload_or_profile_setting_that_did_not_apply_fails(key, value, says):
    data = result("primus")
    data["effective"][key] = value
    assert [f.message for f in validate.check_result(Loaded("test", data, {}))] == [says]


@pytest.mark.parametrize("key", ["overlap_grad_reduce", "overlap_param_gather", "grad_reduce_in_fp32",
                                 "average_in_collective"])
def test_a_profile_setting_the_framework_does_not_report_fails(key):  # autotp's reported none, and none was checked
    data = result("primus")
    del data["effective"][key]
    assert [(f.fatal, f.message) for f in validate.check_result(Loaded("test", data, {}))] == [
        (True, f"{key} is not reported by the framework, False in the fairness profile spec")]


def test_what_a_framework_has_no_switch_for_is_warned_of_with_its_reason_and_fp32_needs_no_reduce_dtype():
    (data := result("primus", precision="fp32"))["effective"].update(precision="fp32", overlap_grad_reduce=True, grad_reduce_in_fp32=None,
                             profile_fixed={"overlap_grad_reduce": "FSDP2 reduce-scatters during backward"})
    assert [(f.fatal, f.message) for f in validate.check_result(Loaded("test", data, {}))] == [
        (False, "overlap_grad_reduce is True in the framework, False in the fairness profile spec (the framework "
                "has no switch for it: FSDP2 reduce-scatters during backward)")]


def test_the_fp8_recipe_a_framework_prints_is_checked_against_the_recorded_one():
    data = result("primus", precision="fp8")
    data["training"]["fp8_recipe"] = {"fp8_format": "hybrid", "fp8_recipe": "delayed", "fp8_margin": 0,
                                      "fp8_amax_history_len": 1024, "fp8_amax_compute_algo": "max"}
    data["effective"].update(precision="fp8", fp8_amax_history_len=1, fp8_amax_compute_algo="most_recent")
    assert [f.message for f in validate.check_result(Loaded("test", data, {}))] == [
        "fp8_amax_history_len is 1 in the framework, 1024 in the fairness profile spec",
        "fp8_amax_compute_algo is 'most_recent' in the framework, 'max' in the fairness profile spec"]


def test_unknown_fingerprints_make_a_comparison_unprovable():
    data = json.loads((GOLDEN / "megatron.json").read_text())
    found = [f for f in validate.fairness([Loaded("a", data, {})]) if f.fatal]
    assert {f.message.split(" unknown")[0] for f in found} == {"llama: dataset fingerprint", "llama: tokenizer fingerprint"}


def test_results_of_different_models_are_not_compared_with_each_other():
    llama = result("megatron")
    qwen = result("megatron", seq_len=4096)
    qwen["model"]["key"], qwen["model"]["variant"] = "qwen", "qwen2.5-7b"
    assert validate.fairness([Loaded("a", llama, {}), Loaded("b", qwen, {})]) == []


def on_nodes(name, nodes, gbs, run_id):
    data = result(name, gbs=gbs)
    data["parallelism"]["nnodes"], data["run"]["id"] = nodes, run_id
    return Loaded(run_id, data, {})


def test_a_global_batch_that_grows_with_the_nodes_is_weak_scaling_not_unfair():
    one, two = on_nodes("megatron", 1, 128, "one-node"), on_nodes("megatron", 2, 256, "two-nodes")
    assert validate.fairness([one, two]) == []


def test_runs_on_the_same_number_of_nodes_must_share_the_global_batch():
    found = validate.fairness([on_nodes("megatron", 1, 128, "a"), on_nodes("megatron", 2, 256, "b"),
                               on_nodes("primus", 2, 512, "c")])
    assert [f.message.split(":")[:2] for f in found] == [["llama on 2 node(s)", " global batch size differs"]]


def test_the_node_count_of_a_schema_1_0_result_comes_from_its_system():
    data = result("megatron")
    del data["parallelism"]["nnodes"]
    assert Loaded("a", data, {"nodes": 4}).nodes == 4 and Loaded("a", data, {}).nodes is None


def test_cli_prints_one_line_per_problem_and_exits_1(capsys):
    code = validate.main([str(GOLDEN / "megatron_truncated.json"), str(GOLDEN / "megatron.json")])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert "FAIL nvd/fixture: status: incomplete (exit code None)" in out[0]
    assert out[-1].startswith("2 result(s):")


def test_cli_rejects_a_missing_input_with_exit_2(tmp_path, capsys):
    assert validate.main([str(tmp_path / "nothing")]) == 2
    assert "no such file" in capsys.readouterr().err


# --- No figure a result did not earn: every result is checked, whatever wrote it ---------------------------

H100_BF16 = 989.4  # utils/machine/hardware.py's NVIDIA H100 SXM


def on_h100(data):
    """A result whose device peak is known (the golden logs name no device)."""
    performance = data["performance"]
    performance["peak_tflop_per_s_per_gpu"] = H100_BF16
    performance["mfu"] = performance["tflop_per_s_per_gpu"] / H100_BF16
    return data


def messages(data, check):
    return [f.message for f in validate.check_result(Loaded("test", data, {})) if f.check == check and f.fatal]


def extracted(tmp_path, log_text):
    """The result evaluate.extract makes of a log, under the golden logs' request."""
    log, run_dir = tmp_path / "train.log", tmp_path / "run"
    log.write_text(log_text)
    run_dir.mkdir()
    shutil.copy(LOGS / "config-nvd.json", run_dir / "config.json")
    assert extract.main([str(log), "--run-dir", str(run_dir), "-o", str(run_dir / "result.json")]) == 0
    data = json.loads((run_dir / "result.json").read_text())
    data["training"].update(FINGERPRINTS)
    return data


def test_a_sound_result_on_a_known_device_passes():
    assert checks(on_h100(result("megatron"))) == set()


def test_an_mfu_above_one_is_impossible_and_fails():
    data = on_h100(result("megatron"))
    data["performance"].update(mfu=1545.0, tflop_per_s_per_gpu=1.528e6)
    found = messages(data, "figures")
    assert "MFU 1545 is above 1: no device computes faster than its peak" in found
    assert any(m.startswith("tflop_per_s_per_gpu is 1.528e+06 in the result, 164.") for m in found)


def test_a_headline_its_step_times_do_not_give_fails_naming_the_field():
    data = result("megatron")
    data["performance"]["tokens_per_s_per_gpu"] = 32768000.0
    assert messages(data, "figures") == ["tokens_per_s_per_gpu is 3.277e+07 in the result, 3523 from its step times"]


def test_step_times_faster_than_the_device_allows_fail_and_are_named():
    """The fastest step: FLOPs per token (utils.spec.models' one formula) x tokens per step / GPUs / the peak."""
    data = on_h100(result("megatron"))
    data["series"]["step_time_s"][6] = data["series"]["step_time_s"][8] = 0.009  # the median is still 9.3 s
    assert messages(data, "step times") == [
        "step(s) 7, 9: faster than 1.54 s, the least 1.53e+15 FLOPs per GPU take at the device's peak 989.4 TFLOP/s"]


def test_without_a_known_device_the_fastest_device_of_the_table_bounds_the_step_time():
    data = result("megatron")
    assert data["performance"]["peak_tflop_per_s_per_gpu"] is None
    data["series"]["step_time_s"][6] = 0.009
    assert messages(data, "step times") == ["step(s) 7: faster than 0.607 s, the least 1.53e+15 FLOPs per GPU take "
                                            "at the fastest peak in utils/machine/hardware.py 2516.6 TFLOP/s"]


def test_a_peak_that_is_no_devices_fails():
    data = result("megatron")
    data["performance"].update(peak_tflop_per_s_per_gpu=1e9, mfu=data["performance"]["tflop_per_s_per_gpu"] / 1e9)
    assert messages(data, "figures") == ["peak 1e+09 TFLOP/s is no device's: utils/machine/hardware.py's highest is 2516.6"]


def test_non_finite_step_times_fail_named_and_no_figure_fails(tmp_path):
    data = extracted(tmp_path, (LOGS / "megatron_inf_step_times.log").read_text())
    assert messages(data, "step times") == ["step(s) 1-12: step time nan/inf, 0 or below"]
    assert messages(data, "figures") == ["no throughput figure: no step after WARMUP_SKIP=2 has a step time"]


def test_a_step_time_of_zero_fails_named(tmp_path):
    data = extracted(tmp_path, (LOGS / "megatron_zero_step_time.log").read_text())
    assert messages(data, "step times") == ["step(s) 7-8: step time nan/inf, 0 or below"]


def test_missing_steps_are_named():
    data = result("megatron")
    for values in data["series"].values():
        del values[3:11]
    assert messages(data, "steps") == ["missing steps 4-11"]


def test_steps_after_the_log_interval_are_all_the_steps(tmp_path):
    text = (LOGS / "megatron.log").read_text()
    kept = [line for line in text.splitlines(True) if " iteration " not in line
            or any(f"iteration {step:8d}/" in line for step in (4, 8, 12))]
    data = extracted(tmp_path, "".join(kept).replace("  lr ....", f"  log_interval {'.' * 36} 4\n  lr ....", 1))
    assert data["series"]["step"] == [4, 8, 12] and messages(data, "steps") == []


def test_more_steps_than_requested_fail():
    data = result("megatron")
    data["run"]["steps_completed"] = 13
    assert messages(data, "steps") == ["13 steps ran, 12 requested; steps_completed 13 but the last recorded step is 12"]


def test_negative_memory_fails():
    data = result("megatron")
    data["memory"]["peak_reserved_gib"] = -1.0
    data["series"]["mem_allocated_gib"][0] = -59.8
    assert messages(data, "memory") == ["below 0: peak_reserved_gib; mem_allocated_gib at step(s) 1"]


def test_an_mfu_without_a_peak_fails():
    data = result("megatron")
    data["performance"]["mfu"] = 0.4
    assert messages(data, "figures") == ["mfu is 0.4 in the result, none from its step times"]


def test_figures_without_a_step_time_behind_them_fail():
    data = result("megatron")
    data["series"]["step_time_s"] = [None] * len(data["series"]["step"])
    found = messages(data, "figures")
    assert found[0] == "no throughput figure: no step after WARMUP_SKIP=2 has a step time"
    assert "tokens_per_s_per_gpu is 3523 in the result, none from its step times" in found
