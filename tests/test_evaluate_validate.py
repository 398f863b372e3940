"""evaluate.validate: each result's checks, and the fairness check over a set of results."""

import copy
import json
from pathlib import Path

import pytest

from evaluate import validate
from evaluate.collect import Loaded

GOLDEN = Path(__file__).parent / "fixtures" / "results" / "extract"
FINGERPRINTS = {"dataset_fingerprint": "d" * 64, "tokenizer_fingerprint": "t" * 64}


def result(name, **training):
    data = json.loads((GOLDEN / f"{name}.json").read_text())
    data["training"].update(FINGERPRINTS, **training)
    return data


def checks(data):
    return {(f.check, f.fatal) for f in validate.check_result(Loaded("test", data, {}))}


def test_a_sound_run_passes_every_check():
    assert checks(result("megatron")) == set()


def test_a_cut_off_run_fails_status_and_steps():
    assert checks(result("megatron_truncated")) == {("status", True), ("steps", True)}


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
])
def test_fairness_lists_each_mismatched_field(section, key, value, label):
    nvidia, amd = result("nemo"), result("primus")
    amd["run"]["id"] = "prim-llama"
    amd[section][key] = value
    found = validate.fairness([Loaded("a", nvidia, {}), Loaded("b", amd, {})])
    assert [f.message.split(":")[1].strip() for f in found] == [f"{label} differs"]
    assert "amd/prim-llama" in found[0].message


def test_unknown_fingerprints_make_a_comparison_unprovable():
    data = json.loads((GOLDEN / "megatron.json").read_text())
    found = validate.fairness([Loaded("a", data, {})])
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
