"""evaluate.extract and evaluate.logs: Megatron, Primus and NeMo logs become the one result shape.

The fixture logs (tests/fixtures/logs/) were written from the format descriptions in
reference/log-formats.md; each shows one thing a parser must survive. Step times are the same in
every fixture: 15 s, 9.8 s, then ten steps whose median is 9.3 s (WARMUP_SKIP = 2).
"""

import json
import re
import shutil
from pathlib import Path

import pytest

from evaluate import extract, logs, validate
from tests.fixtures.data.verified import write_manifest

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
GOLDEN = Path(__file__).parent / "fixtures" / "results" / "extract"
TOKENS_PER_S_PER_GPU = 128 * 2048 / 9.3 / 8
VOLATILE = ("log_files",)


def run_extract(tmp_path, log, config="config-nvd.json", *flags):
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    shutil.copy(FIXTURES / config, run_dir / "config.json")
    out = run_dir / "result.json"
    code = extract.main([str(FIXTURES / log), "--run-dir", str(run_dir), "-o", str(out), *flags])
    return code, (json.loads(out.read_text()) if out.exists() else None)


def comparable(result):
    result = json.loads(json.dumps(result))
    for key in VOLATILE:
        result["run"].pop(key, None)
    return result


@pytest.mark.parametrize("log, config", [
    ("megatron.log", "config-nvd.json"), ("megatron_old_spelling.log", "config-nvd.json"),
    ("megatron_new_spelling.log", "config-nvd.json"), ("megatron_interleaved_crlf.log", "config-nvd.json"),
    ("megatron_truncated.log", "config-nvd.json"), ("megatron_nan.log", "config-nvd.json"),
    ("megatron_two_runs.log", "config-nvd.json"), ("primus.log", "config-amd.json"),
    ("primus_old_spelling.log", "config-amd.json"), ("primus_new_spelling.log", "config-amd.json"),
    ("primus_mock.log", "config-amd.json"), ("nemo.log", "config-nemo.json"),
    ("nemo_new_spelling.log", "config-nemo.json"), ("nemo_timed.log", "config-nemo.json"),
])
def test_every_fixture_log_gives_its_golden_result(tmp_path, log, config):
    code, result = run_extract(tmp_path, log, config)
    assert code == 0
    golden = json.loads((GOLDEN / log.replace(".log", ".json")).read_text())
    assert comparable(result) == comparable(golden)


@pytest.mark.parametrize("log, config, framework", [
    ("megatron.log", "config-nvd.json", "mega"), ("megatron_old_spelling.log", "config-nvd.json", "mega"),
    ("megatron_new_spelling.log", "config-nvd.json", "mega"), ("primus.log", "config-amd.json", "prim"),
    ("primus_old_spelling.log", "config-amd.json", "prim"), ("primus_new_spelling.log", "config-amd.json", "prim"),
    ("nemo.log", "config-nemo.json", "nemo"), ("nemo_new_spelling.log", "config-nemo.json", "nemo"),
    ("nemo_timed.log", "config-nemo.json", "nemo"),
])
def test_older_and_newer_spellings_give_the_same_figures(tmp_path, log, config, framework):
    code, result = run_extract(tmp_path, log, config, "--framework", "auto")
    assert code == 0
    assert logs.parse_logs([FIXTURES / log]).framework == framework
    assert result["run"]["status"] == "ok"
    assert result["series"]["step"] == list(range(1, 13))
    assert result["performance"]["step_time_s"]["median"] == pytest.approx(9.3)
    assert result["performance"]["tokens_per_s_per_gpu"] == pytest.approx(TOKENS_PER_S_PER_GPU)
    assert result["series"]["loss"][0] == pytest.approx(10.8)
    assert result["series"]["lr"][-1] == pytest.approx(3.6e-4)


def test_framework_figures_are_kept_apart_as_raw(tmp_path):
    _, result = run_extract(tmp_path, "primus.log", "config-amd.json")
    raw = result["raw_framework"]
    assert raw["tokens_per_s_per_gpu_avg_last"] == 3520.0  # Primus's running average, as printed
    assert raw["tflop_per_s_per_gpu_avg_last"] == 561.0
    # TPrimat's own TFLOP/s comes from the formula, not from Primus's counter
    assert result["performance"]["tflop_per_s_per_gpu"] == pytest.approx(46.64e9 * TOKENS_PER_S_PER_GPU / 1e12, rel=1e-3)
    assert result["memory"]["peak_device_used_gib"] == pytest.approx(150.32)


def test_megatron_memory_report_gives_peak_memory_in_gib(tmp_path):
    _, result = run_extract(tmp_path, "megatron.log")
    assert result["memory"] == {"peak_allocated_gib": pytest.approx(61234.25 / 1024),
                                "peak_reserved_gib": pytest.approx(65000.0 / 1024)}


def test_nemo_counts_from_zero_and_reports_bytes(tmp_path):
    _, result = run_extract(tmp_path, "nemo.log", "config-nemo.json")
    assert result["framework"] == "nemo"
    assert result["run"]["steps_completed"] == 12
    assert result["memory"]["peak_reserved_gib"] == pytest.approx((70833405952 + 12000) / 2 ** 30)


def test_nemo_step_time_and_peak_memory_come_from_tprimats_own_timer(tmp_path):
    """train/nemo_timer.py's TPRIMAT_STEP line: device-synchronised step time, every rank's peak memory."""
    _, result = run_extract(tmp_path, "nemo_timed.log", "config-nemo.json")
    assert result["series"]["step_time_s"][:3] == [15.0, 9.8, 9.3]
    assert result["performance"]["step_time_s"]["median"] == pytest.approx(9.3)
    assert result["memory"] == {"peak_allocated_gib": 61.75, "peak_reserved_gib": 70.5}
    # NeMo's own figures stay raw: TimingCallback's host time, rank 0's current allocation and peak reserved
    raw = result["raw_framework"]
    assert raw["step_time_s_median"] == pytest.approx(8.5)
    assert raw["mem_allocated_now_gib_last"] == pytest.approx(44271700728 / 2 ** 30)
    assert raw["mem_reserved_gib_last"] == pytest.approx(68.0)
    assert not any("TPRIMAT_STEP" in w for w in result["warnings"])


def test_a_nemo_log_without_tprimats_timer_keeps_nemos_figures_and_says_so(tmp_path):
    _, result = run_extract(tmp_path, "nemo.log", "config-nemo.json")
    assert result["performance"]["step_time_s"]["median"] == pytest.approx(9.3)  # TimingCallback's
    assert result["memory"]["peak_allocated_gib"] is None  # memory_allocated is a current allocation, not a peak
    assert any(w.startswith("no TPRIMAT_STEP line: step times are NeMo's TimingCallback host times")
               for w in result["warnings"])


def test_a_broken_tprimat_step_line_loses_only_its_step_time(tmp_path):
    text = (FIXTURES / "nemo_timed.log").read_text().replace('"step": 6, "steps": 12, "step_time_s": 9.305',
                                                             '"step": 6, "steps": 12, "step_ti')
    log = tmp_path / "nemo_timed.log"
    log.write_text(text)
    parsed = logs.parse_logs([log])
    assert [r["step_time_s"] for r in parsed.records][4:7] == [9.29, None, 9.295]
    assert parsed.records[5]["loss"] == pytest.approx(9.8)
    assert any(w.startswith("step 6 lacks step_time_s") for w in parsed.warnings)


def test_nemo_effective_settings_line_is_read_back(tmp_path):
    _, result = run_extract(tmp_path, "nemo.log", "config-nemo.json")
    assert result["effective"]["tp"] == 1 and result["effective"]["seq_len"] == 2048
    assert result["features"] == {"apply_rope_fusion": True, "bias_activation_fusion": True}


def test_megatron_argument_dump_is_read_back_as_effective_settings():
    effective = logs.parse_logs([FIXTURES / "megatron.log"]).effective
    assert {k: effective[k] for k in ("tp", "pp", "dp", "ga", "mbs", "gbs", "seq_len", "steps", "precision")} == \
        {"tp": 1, "pp": 1, "dp": 8, "ga": 16, "mbs": 1, "gbs": 128, "seq_len": 2048, "steps": 12, "precision": "bf16"}
    assert effective["mock_data"] is False


@pytest.mark.parametrize("data_path, train_data_path", [("['/data/bc_llama_text_document']", "None"),
                                                         ("None", "['/data/bc_llama_text_document']")])
def test_the_data_path_is_read_back_whichever_argument_names_it(tmp_path, data_path, train_data_path):
    """Megatron and Primus print both data_path and train_data_path; the one that is set counts."""
    text = (FIXTURES / "megatron.log").read_text()
    dump = (f"  data_path {'.' * 44} {data_path}\n  train_data_path {'.' * 38} {train_data_path}\n"
            "  use_distributed_optimizer")
    log = tmp_path / "megatron.log"
    log.write_text(text.replace("  use_distributed_optimizer", dump, 1))
    assert logs.parse_logs([log]).effective["data_path"] == "['/data/bc_llama_text_document']"


def test_ansi_codes_and_carriage_returns_do_not_hide_steps(tmp_path):
    assert b"\x1b[" in (FIXTURES / "primus.log").read_bytes()
    assert b"\r" in (FIXTURES / "nemo.log").read_bytes()
    for log, config in (("primus.log", "config-amd.json"), ("nemo.log", "config-nemo.json")):
        _, result = run_extract(tmp_path, log, config)
        assert len(result["series"]["step"]) == 12


def test_interleaved_ranks_and_crlf_keep_every_step_and_null_the_broken_fields(tmp_path):
    _, result = run_extract(tmp_path, "megatron_interleaved_crlf.log")
    assert result["series"]["step"] == list(range(1, 13))
    assert result["series"]["loss"][5] is None  # step 6's line was split by another rank's output
    assert result["series"]["step_time_s"][5] == pytest.approx(9.305)
    assert any(w.startswith("step 6 lacks grad_norm, loss, lr") for w in result["warnings"])


def test_a_log_cut_mid_line_is_incomplete_with_every_step_kept(tmp_path):
    code, result = run_extract(tmp_path, "megatron_truncated.log")
    assert code == 0
    assert result["run"]["status"] == "incomplete"
    assert result["run"]["steps_completed"] == 8
    assert result["series"]["step_time_s"][7] is None  # "93" of "9300.0" is not taken as a step time
    assert result["series"]["step_time_s"][6] == pytest.approx(9.295)
    assert result["run"]["error_excerpt"]


def test_nan_and_inf_become_flagged_nulls(tmp_path):
    _, result = run_extract(tmp_path, "megatron_nan.log")
    assert result["series"]["loss"][6] is None
    assert result["series"]["grad_norm"][6:8] == [None, None]
    assert result["health"]["nonfinite"] == [{"step": 7, "field": "loss"}, {"step": 7, "field": "grad_norm"},
                                             {"step": 8, "field": "grad_norm"}]
    assert result["health"]["nan_iterations"] == 1


def test_two_runs_in_one_file_keep_the_last(tmp_path):
    _, result = run_extract(tmp_path, "megatron_two_runs.log")
    assert result["series"]["step_time_s"][0] == 15.0  # the first run's steps took 20 s
    assert result["run"]["status"] == "ok"
    assert any("holds 2 runs" in w for w in result["warnings"])


def test_primus_mock_data_is_detected_and_flagged(tmp_path):
    evidence = logs.parse_logs([FIXTURES / "primus_mock.log"]).mock_evidence
    assert evidence and "mock_data" in evidence
    assert logs.parse_logs([FIXTURES / "primus.log"]).mock_evidence is None
    _, result = run_extract(tmp_path, "primus_mock.log", "config-amd.json")
    assert result["effective"]["mock_data"] is True
    assert any(w.startswith("MOCK DATA") for w in result["warnings"])


def test_no_iteration_line_is_a_clear_error(tmp_path, capsys):
    code, result = run_extract(tmp_path, "no_iterations.log")
    assert code == 1 and result is None
    assert "no training iteration line" in capsys.readouterr().err


def test_no_iteration_line_with_a_failed_exit_code_still_records_the_failure(tmp_path):
    code, result = run_extract(tmp_path, "no_iterations.log", "config-nvd.json", "--exit-code", "3")
    assert code == 1
    assert result["run"]["status"] == "failed" and result["run"]["exit_code"] == 3
    assert "NCCL error" in result["run"]["error_excerpt"]


def test_a_non_zero_exit_code_marks_the_run_failed(tmp_path):
    _, result = run_extract(tmp_path, "megatron.log", "config-nvd.json", "--exit-code", "137")
    assert result["run"]["status"] == "failed"


def test_settings_the_log_lacks_are_named_in_one_line_with_their_flags(tmp_path, capsys):
    """megatron.log's dump has the layout, batch, steps and precision, but no architecture or LR schedule."""
    log = FIXTURES / "megatron.log"
    code = extract.main([str(log), "-o", str(tmp_path / "r.json"), "--platform", "nvd"])
    assert code == 2
    assert capsys.readouterr().err == (
        f"evaluate.extract: {log} does not say model variant, minimum LR, LR warm-up steps; give "
        "--variant llama3.1-8b|llama3.1-8b-tiny|qwen2.5-7b|qwen2.5-7b-tiny --min-lr LR --warmup-steps N\n")
    assert not (tmp_path / "r.json").exists()


def test_tokens_in_secrets_never_reach_the_excerpt():
    assert extract.redact("HF_TOKEN=hf_abcdefghijklmnopqrstuvwx fails") == "HF_TOKEN=*** fails"
    assert "hf_abc" not in extract.redact("token hf_abcdefghijklmnopqrstuvwx")


# --- A log from elsewhere: no run directory, the settings read from what the log prints ----------------

def extract_alone(tmp_path, log, *flags):
    """Extract with no run directory: (exit code, the result or None)."""
    out = tmp_path / "result.json"
    code = extract.main([str(log), "-o", str(out), *flags])
    return code, (json.loads(out.read_text()) if out.exists() else None)


def with_lines_before(tmp_path, fixture, *lines):
    """The fixture log with lines printed before it (a job script's device listing, NCCL's start-up)."""
    log = tmp_path / fixture
    log.write_text("".join(line + "\n" for line in lines) + (FIXTURES / fixture).read_text())
    return log


def prepared_data(tmp_path):
    """A data prefix as data.verify leaves it: a tiny pair, its tokenizer and a manifest of the files' hashes."""
    prefix = tmp_path / "bc_llama_text_document"
    tokenizer = tmp_path / "tokenizers" / "llama"
    tokenizer.mkdir(parents=True)
    (tokenizer / "tokenizer.json").write_text("{}")
    Path(f"{prefix}.bin").write_bytes(bytes(16))
    Path(f"{prefix}.idx").write_bytes(b"MMIDIDX\x00\x00\x01" + bytes(7) + b"\x04" + bytes(16))
    write_manifest(prefix, tokenizer, "llama")
    return prefix


def test_a_megatron_lm_log_says_everything_but_the_platform(tmp_path, capsys):
    log = FIXTURES / "megatron_lm_arguments.log"
    code, result = extract_alone(tmp_path, log)
    assert (code, result) == (2, None)
    assert capsys.readouterr().err == (f"evaluate.extract: {log} does not say platform; give --platform amd|nvd|cpu\n")


def test_a_megatron_lm_log_with_the_platform_gives_a_result_that_validates(tmp_path, capsys):
    code, result = extract_alone(tmp_path, FIXTURES / "megatron_lm_arguments.log", "--platform", "nvd",
                                 "--warmup-skip", "2", "--data-prefix", str(prepared_data(tmp_path)))
    assert code == 0
    assert (result["platform"], result["framework"], result["model"]["variant"]) == ("nvd", "mega", "llama3.1-8b")
    assert {k: result["parallelism"][k] for k in ("tp", "pp", "dp", "ga", "num_gpus", "sequence_parallel",
                                                   "distributed_optimizer")} == \
        {"tp": 2, "pp": 1, "dp": 4, "ga": 16, "num_gpus": 8, "sequence_parallel": True, "distributed_optimizer": True}
    training = result["training"]
    assert {k: training[k] for k in ("steps", "mbs", "gbs", "seq_len", "precision", "lr", "min_lr", "warmup_steps",
                                     "seed", "lr_decay_style", "weight_decay", "beta2", "grad_clip")} == \
        {"steps": 12, "mbs": 2, "gbs": 128, "seq_len": 2048, "precision": "bf16", "lr": 3e-4, "min_lr": 3e-5,
         "warmup_steps": 5, "seed": 1234, "lr_decay_style": "cosine", "weight_decay": 0.1, "beta2": 0.95,
         "grad_clip": 1.0}
    assert result["performance"]["tokens_per_s_per_gpu"] == pytest.approx(TOKENS_PER_S_PER_GPU)
    assert result["run"]["commit"] is None  # a log from elsewhere did not run this checkout
    capsys.readouterr()
    assert validate.main([str(tmp_path / "result.json")]) == 0, capsys.readouterr().out


def test_data_changed_since_its_verification_gives_the_fingerprint_of_what_is_there_and_says_so(tmp_path):
    prefix = prepared_data(tmp_path)
    _, clean = extract_alone(tmp_path, FIXTURES / "megatron_lm_arguments.log", "--platform", "nvd",
                             "--data-prefix", str(prefix))
    Path(f"{prefix}.bin").write_bytes(b"\x01" + bytes(15))  # one byte changed, same size
    _, changed = extract_alone(tmp_path, FIXTURES / "megatron_lm_arguments.log", "--platform", "nvd",
                               "--data-prefix", str(prefix))
    assert changed["training"]["dataset_fingerprint"] != clean["training"]["dataset_fingerprint"]
    assert not any("not the verified data" in note for note in clean["warnings"])
    assert any("not the verified data" in note for note in changed["warnings"])


@pytest.mark.parametrize("line, platform, peak", [
    ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c4e7a4d-09f1-2b7e-8a1c-3d9e0f6b2a71)", "nvd", 989.4),
    ("GPU[0]          : Card Series: AMD Instinct MI300X", "amd", 1307.4),
    ("node-1:4242:4242 [0] NCCL INFO NCCL version 2.21.5+cuda12.4", "nvd", None),
    ("RCCL version 2.27.7+hip7.1", "amd", None),
])
def test_the_platform_comes_from_a_device_or_collective_library_the_log_names(tmp_path, line, platform, peak):
    log = with_lines_before(tmp_path, "megatron_lm_arguments.log", line)
    code, result = extract_alone(tmp_path, log, "--warmup-skip", "2")
    assert code == 0 and result["platform"] == platform
    assert result["performance"]["peak_tflop_per_s_per_gpu"] == peak  # a named device gives MFU its peak


def test_without_such_a_line_the_platform_comes_from_the_system_description(tmp_path):
    system = tmp_path / "system.json"
    system.write_text(json.dumps({"gpu": {"vendor": "amd", "name": "AMD Instinct MI300X", "count": 8}}))
    code, result = extract_alone(tmp_path, FIXTURES / "megatron_lm_arguments.log", "--system", str(system),
                                 "--warmup-skip", "2")
    assert code == 0 and result["platform"] == "amd"
    assert "platform amd from system.json's GPU vendor (the log does not show it)" in result["warnings"]


def test_a_primus_log_needs_no_flag_at_all(tmp_path, monkeypatch):
    """Primus prints Megatron's dump (a Qwen model in FP8 here) and HIP memory fields: only ROCm has HIP."""
    monkeypatch.setenv("WARMUP_SKIP", "2")  # what a run would use: the environment over config.env
    code, result = extract_alone(tmp_path, FIXTURES / "primus_arguments.log")
    assert code == 0
    assert (result["platform"], result["framework"], result["model"]["variant"], result["training"]["precision"]) \
        == ("amd", "prim", "qwen2.5-7b", "fp8")
    assert {k: result["parallelism"][k] for k in ("tp", "pp", "dp", "ga")} == {"tp": 1, "pp": 1, "dp": 8, "ga": 16}
    assert result["performance"]["warmup_skip"] == 2
    assert "WARMUP_SKIP=2 from environment (no run directory gave it; --warmup-skip sets another)" in result["warnings"]
    assert result["performance"]["tokens_per_s_per_gpu"] == pytest.approx(TOKENS_PER_S_PER_GPU)


def test_a_nemo_log_says_its_layout_batch_and_model_but_not_its_precision_or_lr_schedule(tmp_path, capsys):
    log = FIXTURES / "nemo_settings.log"
    code, _ = extract_alone(tmp_path, log)
    assert code == 2
    assert capsys.readouterr().err == (
        f"evaluate.extract: {log} does not say platform, precision, minimum LR, LR warm-up steps; give "
        "--platform amd|nvd|cpu --precision bf16|fp8|fp32 --min-lr LR --warmup-steps N\n")
    code, result = extract_alone(tmp_path, log, "--platform", "nvd", "--precision", "bf16", "--min-lr", "3e-5",
                                 "--warmup-steps", "5", "--warmup-skip", "2")
    assert code == 0
    # the parallel groups give TP, PP and DP, the micro-batch count GA, and GBS / (DP x GA) the micro-batch size
    assert {k: result["parallelism"][k] for k in ("tp", "pp", "dp", "ga")} == {"tp": 1, "pp": 1, "dp": 8, "ga": 16}
    assert result["model"]["variant"] == "llama3.1-8b"  # 8,030,261,248 parameters with TP = PP = 1
    assert {k: result["training"][k] for k in ("mbs", "gbs", "seq_len", "steps", "lr", "seed", "grad_clip")} == \
        {"mbs": 1, "gbs": 128, "seq_len": 2048, "steps": 12, "lr": 3e-4, "seed": 1234, "grad_clip": 1.0}
    assert result["parallelism"]["distributed_optimizer"] is True


def test_a_flag_gives_what_the_log_does_not_say_and_overrides_the_run_request(tmp_path):
    """megatron.log does not print min_lr: the flag wins over config.json's 0.0; --tp equal to the log's is fine."""
    code, result = run_extract(tmp_path, "megatron.log", "config-nvd.json", "--min-lr", "3e-5", "--tp", "1")
    assert code == 0
    assert result["training"]["min_lr"] == 3e-5 and result["parallelism"]["tp"] == 1


def test_flags_that_contradict_the_log_are_refused_in_one_line_naming_both_values(tmp_path, capsys):
    log = with_lines_before(tmp_path, "megatron_lm_arguments.log", "NCCL version 2.21.5+cuda12.4")
    code, result = extract_alone(tmp_path, log, "--platform", "amd", "--tp", "4", "--variant", "qwen2.5-7b")
    assert (code, result) == (2, None)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"evaluate.extract: {log} shows what ran, and these flags contradict it: ")
    assert "--platform amd (the log: nvd, from 'NCCL version 2.21.5+cuda12.4')" in err
    assert "--tp 4 (the log: 2)" in err
    assert "--variant qwen2.5-7b (the log's model: num_layers 32, hidden_size 4096" in err


def test_a_model_that_is_none_of_the_variants_is_refused(tmp_path, capsys):
    log = tmp_path / "other_model.log"
    text = (FIXTURES / "megatron_lm_arguments.log").read_text()
    log.write_text(text.replace(f"  num_layers {'.' * 38} 32", f"  num_layers {'.' * 38} 40"))
    code, _ = extract_alone(tmp_path, log, "--platform", "nvd")
    assert code == 2
    assert capsys.readouterr().err.startswith(
        f"evaluate.extract: {log}: the model (num_layers 40, hidden_size 4096, ffn_hidden_size 14336, "
        "num_attention_heads 32, num_kv_heads 8, qkv_bias False) is none of TPrimat's variants")


def test_the_missing_line_offers_only_the_variants_the_log_allows(tmp_path, capsys):
    """Two layers of width 128 are both tiny variants; the platform and schedule are given."""
    log = tmp_path / "tiny.log"
    log.write_text((FIXTURES / "nemo.log").read_text().replace('"tp": 1,', '"tp": 1, "num_layers": 2, "hidden_size": 128,'))
    code, _ = extract_alone(tmp_path, log, "--platform", "cpu", "--min-lr", "0", "--warmup-steps", "5", "--lr", "3e-4")
    assert code == 2
    assert capsys.readouterr().err == (f"evaluate.extract: {log} does not say model variant; give "
                                       "--variant llama3.1-8b-tiny|qwen2.5-7b-tiny\n")


def test_printed_settings_become_effective_settings_but_a_split_models_parameters_do_not():
    nemo = logs.parse_logs([FIXTURES / "nemo_settings.log"]).effective
    assert {k: nemo[k] for k in ("tp", "pp", "dp", "cp", "ga", "mbs", "parameters", "seq_len", "seed", "lr")} == \
        {"tp": 1, "pp": 1, "dp": 8, "cp": 1, "ga": 16, "mbs": 1, "parameters": 8030261248, "seq_len": 2048,
         "seed": 1234, "lr": 3e-4}
    assert "min_lr" not in nemo  # NeMo's OptimizerConfig prints min_lr=None: the scheduler holds it
    megatron = logs.parse_logs([FIXTURES / "megatron_lm_arguments.log"]).effective
    assert (megatron["num_kv_heads"], megatron["num_gpus"], megatron["qkv_bias"]) == (8, 8, False)
    assert "parameters" not in megatron  # rank (0, 0) holds half of a TP=2 model


def test_a_precision_the_platform_is_not_benchmarked_in_is_refused(tmp_path, capsys):
    """A Megatron-LM run with bf16 and fp8 off trained in fp32, which TPrimat runs on CPUs only."""
    log = with_lines_before(tmp_path, "megatron_lm_arguments.log", "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)")
    log.write_text(log.read_text().replace(f"  bf16 {'.' * 44} True", f"  bf16 {'.' * 44} False"))
    code, result = extract_alone(tmp_path, log, "--warmup-skip", "2")
    assert (code, result) == (2, None)
    assert capsys.readouterr().err == ("evaluate.extract: precision fp32 on nvd: TPrimat runs nvd in bf16 or fp8 only, "
                                       "so no result compares with it\n")


# NCCL 2.21's and RCCL's lines at a communicator's creation with NCCL_DEBUG=INFO (host:pid:tid [rank] prefix).
NET_IB = "gpu-01:4242:4301 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB ens1f0:10.0.0.1<0>"
USING_IB = "gpu-01:4242:4301 [0] NCCL INFO Using network IB"
USING_SOCKET = "gpu-02:5151:5190 [3] NCCL INFO Using network Socket"


@pytest.mark.parametrize("lines, transport, rdma", [
    ((NET_IB, USING_IB), "IB", True),
    (("gpu-01:4242:4301 [0] NCCL INFO NET/Socket : Using [0]ens1f0:10.0.0.1<0>", USING_SOCKET), "Socket", False),
    ((USING_IB, USING_SOCKET), "IB, Socket", False),  # one rank without RDMA slows every collective
    (("gpu-01:4242:4301 [0] NCCL INFO Using network AWS Libfabric",), "AWS Libfabric", None),  # a plugin: unknown
])
def test_the_collective_librarys_network_is_read_back_with_whether_it_is_rdma(tmp_path, lines, transport, rdma):
    effective = logs.parse_logs([with_lines_before(tmp_path, "primus.log", *lines)]).effective
    assert effective["collective_transport"] == transport
    assert effective.get("collective_rdma") is rdma


def test_communicators_created_once_training_runs_count_too(tmp_path):
    log = tmp_path / "megatron.log"
    text = (FIXTURES / "megatron.log").read_text()
    cut = text.index("\n", text.index(" iteration ")) + 1  # after the first iteration line
    log.write_text(text[:cut] + USING_SOCKET + "\n" + text[cut:])
    assert logs.parse_logs([log]).effective["collective_transport"] == "Socket"


def test_without_nccls_info_lines_the_transport_is_not_guessed():
    effective = logs.parse_logs([FIXTURES / "megatron.log"]).effective
    assert "collective_transport" not in effective and "collective_rdma" not in effective


# --- No figure a log did not earn ------------------------------------------------------------------------

def test_a_traceback_quoting_an_iteration_line_is_no_step(tmp_path, capsys):
    """Only lines the framework printed count: an indented source line, a quoted string or an exception
    message that holds an iteration record are the traceback's, not a step."""
    assert logs.parse_logs([FIXTURES / "megatron_traceback_quotes_iteration.log"]).records == []
    code, result = run_extract(tmp_path, "megatron_traceback_quotes_iteration.log")
    assert (code, result) == (1, None)
    assert "no training iteration line" in capsys.readouterr().err


@pytest.mark.parametrize("quoted", [
    "ValueError: TPRIMAT_STEP {\"step\": 12, \"steps\": 12, \"step_time_s\": 0.001}",
    "    Training epoch 0, iteration 11/11 | global_step: 11 | train_step_timing in s: 0.001",
    "RuntimeError: bad line [20251218 10:11:12][rank-7/8][INFO]     [--------trainer.py:2660] :  iteration   12/  12 "
    "| elapsed time per iteration (ms): 1.0/1.0 |",
    "RuntimeError: [Rank 0] (after 12 iterations) memory (MB) | allocated: 1 | max allocated: -5 | reserved: 1 | "
    "max reserved: -5",
])
def test_records_quoted_inside_other_output_are_not_records(tmp_path, quoted):
    log = tmp_path / "quoted.log"
    log.write_text((FIXTURES / "no_iterations.log").read_text() + quoted + "\n")
    parsed = logs.parse_logs([log])
    assert parsed.records == [] and parsed.error_seen
    assert not logs.parse_logs([FIXTURES / "megatron.log", log]).records[-1]["mem_reserved_gib"]


@pytest.mark.parametrize("prefix", ["7: ", "[rank7]:", "[default7]:"])
def test_a_launchers_rank_label_before_the_frameworks_line_is_still_its_line(tmp_path, prefix):
    """srun --label and torchrun --tee put the rank in front of every line a rank prints."""
    log = tmp_path / "labelled.log"
    log.write_text("".join(prefix + line for line in (FIXTURES / "megatron.log").read_text().splitlines(True)))
    parsed = logs.parse_logs([log])
    assert [r["step"] for r in parsed.records] == list(range(1, 13))
    assert parsed.records[0]["mem_reserved_gib"] == pytest.approx(65000.0 / 1024)


def test_missing_steps_make_the_run_incomplete_and_are_named(tmp_path):
    code, result = run_extract(tmp_path, "megatron_missing_steps.log")
    assert code == 0
    assert result["series"]["step"] == [1, 2, 3, 12]
    assert result["run"]["status"] == "incomplete"
    assert "missing steps 4-11 (no iteration line for them)" in result["warnings"]
    assert "missing steps 4-11" in result["run"]["error_excerpt"]


def test_the_argument_dumps_log_interval_says_which_steps_are_printed(tmp_path):
    """Megatron prints every log_interval-th iteration: steps 4, 8 and 12 of 12 are all of them."""
    text = (FIXTURES / "megatron.log").read_text()
    kept = [line for line in text.splitlines(True) if " iteration " not in line
            or any(f"iteration {step:8d}/" in line for step in (4, 8, 12))]
    log = tmp_path / "megatron.log"
    log.write_text("".join(kept).replace("  lr ....", f"  log_interval {'.' * 36} 4\n  lr ....", 1))
    parsed = logs.parse_logs([log])
    assert [r["step"] for r in parsed.records] == [4, 8, 12] and parsed.effective["log_interval"] == 4
    assert logs.missing_steps(parsed) == []


def test_a_field_cut_off_by_another_ranks_line_is_refused():
    """Megatron ends every field with " |": "elapsed time per iteration (ms): 9" before another rank's
    line is a fragment of 9295.0, not a step of 9 ms."""
    parsed = logs.parse_logs([FIXTURES / "megatron_glued_fragment.log"])
    assert [r["step"] for r in parsed.records] == list(range(1, 13))
    assert parsed.records[6]["step_time_s"] is None
    assert parsed.records[7]["step_time_s"] == pytest.approx(9.3)


def test_a_step_time_of_zero_or_below_is_flagged_not_a_crash(tmp_path):
    code, result = run_extract(tmp_path, "megatron_zero_step_time.log")
    assert code == 0
    assert result["series"]["step_time_s"][6:8] == [None, None]
    assert {"step": 7, "field": "step_time_s"} in result["health"]["nonfinite"]
    assert "step 8: step time -9.3 s is no duration (flagged like nan)" in result["warnings"]


def test_every_step_time_zero_gives_no_figure_and_no_traceback(tmp_path):
    log = tmp_path / "zeros.log"
    log.write_text(re.sub(r"\(ms\): [\d.]+", "(ms): 0.0", (FIXTURES / "megatron.log").read_text()))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(FIXTURES / "config-nvd.json", run_dir / "config.json")
    assert extract.main([str(log), "--run-dir", str(run_dir), "-o", str(run_dir / "result.json")]) == 0
    assert json.loads((run_dir / "result.json").read_text())["performance"]["tokens_per_s_per_gpu"] is None


def test_an_iteration_counter_that_goes_back_starts_a_new_run(tmp_path):
    """A run resumed from a checkpoint prints steps it printed before: the two are not mixed."""
    code, result = run_extract(tmp_path, "megatron_resumed.log")
    assert code == 0
    assert result["series"]["step"] == list(range(5, 13))
    assert result["run"]["status"] == "incomplete"
    assert "missing steps 1-4 (no iteration line for them)" in result["warnings"]
    assert any("holds 2 runs" in w for w in result["warnings"])


def test_a_step_printed_again_with_other_values_starts_a_new_run(tmp_path):
    lines = (FIXTURES / "megatron.log").read_text().splitlines(True)
    sixth = next(i for i, line in enumerate(lines) if "iteration        6/" in line)
    log = tmp_path / "again.log"
    log.write_text("".join(lines[:sixth + 1] + [lines[sixth].replace("9305.0", "8000.0")] + lines[sixth + 1:]))
    parsed = logs.parse_logs([log])
    assert [r["step"] for r in parsed.records] == list(range(6, 13)) and parsed.runs_found == 2
    assert parsed.records[0]["step_time_s"] == pytest.approx(8.0)


def test_a_line_printed_twice_is_one_step(tmp_path):
    log = tmp_path / "tee.log"
    log.write_text("".join(line * 2 for line in (FIXTURES / "megatron.log").read_text().splitlines(True)))
    parsed = logs.parse_logs([log])
    assert [r["step"] for r in parsed.records] == list(range(1, 13)) and parsed.runs_found == 1


def test_iteration_zero_is_no_step(tmp_path):
    text = (FIXTURES / "megatron.log").read_text()
    first = next(line for line in text.splitlines(True) if " iteration " in line)
    log = tmp_path / "zero.log"
    log.write_text(text.replace(first, first.replace("iteration        1/", "iteration        0/") + first, 1))
    parsed = logs.parse_logs([log])
    assert [r["step"] for r in parsed.records] == list(range(1, 13))
    assert any(w.endswith("a step numbered 0 is no step (steps count from 1): ignored") for w in parsed.warnings)


@pytest.mark.parametrize("old, new", [('"step": 6, "steps": 12', '"step": 0, "steps": 12'),
                                      ("global_step: 5 |", "global_step: -5 |")])
def test_a_step_numbered_below_one_is_no_step_and_no_crash(tmp_path, old, new):
    log = tmp_path / "nemo_timed.log"
    log.write_text((FIXTURES / "nemo_timed.log").read_text().replace(old, new))
    parsed = logs.parse_logs([log])
    assert min(r["step"] for r in parsed.records) == 1
    assert any("is no step (steps count from 1): ignored" in w for w in parsed.warnings)


@pytest.mark.parametrize("count", ["-3", "1.5"])
def test_a_nan_count_that_is_no_whole_number_counts_as_a_nan_iteration(tmp_path, count):
    log = tmp_path / "count.log"
    log.write_text((FIXTURES / "megatron.log").read_text().replace("nan iterations:   0", f"nan iterations: {count}", 1))
    assert logs.parse_logs([log]).records[0]["nan"] == 1


@pytest.mark.parametrize("argument, setting", [("micro_batch_size", "mbs"), ("data_parallel_size", "dp"),
                                               ("global_batch_size", "gbs")])
def test_a_setting_that_is_no_number_is_ignored_and_named(tmp_path, capsys, argument, setting):
    text = re.sub(rf"(  {argument} \.+ )\d+", r"\g<1>12x", (FIXTURES / "megatron_lm_arguments.log").read_text())
    log = tmp_path / "garbage.log"
    log.write_text(text)
    parsed = logs.parse_logs([log])
    assert setting not in parsed.effective or parsed.effective[setting] != "12x"
    assert f"the log's {argument} is '12x', not a whole number above 0: ignored" in parsed.warnings
    code, _ = extract_alone(tmp_path, log, "--platform", "nvd", "--warmup-skip", "2")
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err and err.count("\n") <= 1


def test_non_utf8_bytes_cost_only_the_field_they_are_in(tmp_path):
    text = (FIXTURES / "megatron.log").read_bytes()
    log = tmp_path / "latin1.log"
    log.write_bytes(text.replace(b"grad norm: 2.400", b"grad norm: 2.4\xff00").replace(b"  seed", b"  \xfe\xff x\n  seed"))
    parsed = logs.parse_logs([log])
    assert [r["step"] for r in parsed.records] == list(range(1, 13))
    assert parsed.records[5]["grad_norm"] is None and parsed.records[5]["step_time_s"] == pytest.approx(9.305)
