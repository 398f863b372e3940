"""evaluate.extract of a TPrimat run directory's log: Megatron, Primus and NeMo logs become the one result shape.

The fixture logs (tests/fixtures/logs/) were written from the format descriptions in
reference/log-formats.md; each shows one thing a parser must survive. Step times are the same in
every fixture: 15 s, 9.8 s, then ten steps whose median is 9.3 s (WARMUP_SKIP = 2).
"""

import json
from pathlib import Path

import pytest

from evaluate import extract
from evaluate.logs import parse as logs
from evaluate.logs.evaluations import evaluation_of
from evaluate.logs.records import VALIDATION, validation_point
from tests.fixtures.logs.extracting import FIXTURES, TOKENS_PER_S_PER_GPU, run_extract
from train.common.evaluation import EvalPoint, validation_line
from utils.spec.result import schema_errors

GOLDEN = Path(__file__).parent / "fixtures" / "results" / "extract"
VOLATILE = ("log_files",)


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
    """train/nemo/timer.py's TPRIMAT_STEP line: device-synchronised step time, every rank's peak memory."""
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
        "--variant llama3.1-8b|llama3.1-8b-tiny|qwen2.5-7b|qwen2.5-7b-tiny|llama3.1-70b|llama3.1-70b-tiny|"
        "mistral-7b-v0.1|mistral-7b-v0.1-tiny|llama3.2-3b|llama3.2-3b-tiny|qwen3-30b-a3b|qwen3-30b-a3b-tiny|"
        "gpt-oss-20b|gpt-oss-20b-tiny --min-lr LR "
        "--warmup-steps N\n")
    assert not (tmp_path / "r.json").exists()


def test_tokens_in_secrets_never_reach_the_excerpt():
    assert extract.redact("HF_TOKEN=hf_abcdefghijklmnopqrstuvwx fails") == "HF_TOKEN=*** fails"
    assert "hf_abc" not in extract.redact("token hf_abcdefghijklmnopqrstuvwx")



# --- validation (utils/spec/evaluation.py): the frameworks' own reports, in Megatron-LM's form ---

def test_primus_validation_reports_become_the_result_s_evaluation_and_time_to_train(tmp_path):
    code, result = run_extract(tmp_path, "primus_validation.log", "config-amd-validation.json")
    assert code == 0 and schema_errors(result) == []
    evaluation, step_times = result["evaluation"], result["series"]["step_time_s"]
    assert result["series"]["step"] == list(range(1, 13))  # a report is no training step
    assert (evaluation["interval_steps"], evaluation["iters"], evaluation["tokens"]) == (4, 2, 2 * 128 * 2048)
    assert evaluation["split"] == {"megatron_split": "95,5,0", "documents": None, "fingerprint": None, "percent": 5}
    points = evaluation["points"]
    # the report after training at step 12 ("on validation set") repeats step 12's: the first one is kept
    assert (points["step"], points["loss"]) == ([4, 8, 12], [10.2, 9.5, 9.1])
    assert points["tokens"] == [step * 128 * 2048 for step in (4, 8, 12)]
    assert points["train_time_s"] == pytest.approx([sum(step_times[:step]) for step in (4, 8, 12)])
    assert points["wall_s"] == points["eval_time_s"] == [None] * 3 and evaluation["time_s"] == 0
    assert any("give no duration (Primus prints none)" in note for note in result["warnings"])
    to_target = result["time_to_train"]
    assert (to_target["reached"], to_target["step"], to_target["stopped_at_target"]) == (True, 8, False)
    assert to_target["train_time_s"] == pytest.approx(sum(step_times[:8]))
    assert to_target["how"] == "read from the validation series: Primus cannot stop at a target"


def test_tprimat_s_validation_line_gives_the_evaluation_s_seconds_and_the_wall_time_since_step_1():
    line = validation_line(EvalPoint(step=20, tokens=0, train_time_s=30.0, wall_s=41.25, loss=6.25, eval_time_s=1.25))
    match = VALIDATION.match(line)
    assert validation_point(int(match.group(1)), line[match.end():]) == {"step": 20, "loss": 6.25,
                                                                          "eval_time_s": 1.25, "wall_s": 41.25}


def test_megatron_lm_s_validation_line_gives_neither():
    line = (" validation loss at iteration 20 on validation set | lm loss value: 6.250000E+00 | "
            "lm loss PPL: 5.180128E+02 |")
    match = VALIDATION.match(line)
    assert validation_point(int(match.group(1)), line[match.end():]) == {"step": 20, "loss": 6.25,
                                                                          "eval_time_s": None, "wall_s": None}


def test_another_validation_set_s_report_is_not_the_held_out_loss():
    assert VALIDATION.match(" validation-0 loss at iteration 4 | lm loss value: 1.0E+01 |") is None


def test_a_log_without_its_request_keeps_its_validation_losses_out_and_says_so():
    notes = []
    reports = [{"step": 4, "loss": 10.2, "eval_time_s": None}]
    assert evaluation_of(reports, [], None, framework="prim", gbs=128, seq_len=2048, steps=12, notes=notes) \
        == (None, None)
    assert notes == ["the log holds 1 validation losses, but without the run's request (--run-dir) their cadence "
                     "and split are unknown: left out of the result"]


def test_a_nemo_run_stopped_at_its_target_is_complete_and_says_it_stopped_there(tmp_path):
    code, result = run_extract(tmp_path, "nemo_timed_validation.log", "config-nemo-validation.json")
    assert code == 0 and schema_errors(result) == []
    assert result["run"]["status"] == "ok" and result["run"]["steps_completed"] == 8  # of 12: the target ended it
    points = result["evaluation"]["points"]
    assert (points["step"], points["loss"], points["eval_time_s"]) == ([4, 8], [9.9, 9.4], [2.5, 2.4])
    assert result["evaluation"]["time_s"] == pytest.approx(4.9)
    to_target = result["time_to_train"]
    assert (to_target["reached"], to_target["step"], to_target["stopped_at_target"]) == (True, 8, True)
    assert to_target["how"] == "the trainer stopped at the first evaluation at or below the target"


def test_a_report_before_the_first_step_evaluates_no_training_and_is_not_a_point(tmp_path):
    log = tmp_path / "skip_train.log"
    log.write_text((FIXTURES / "megatron.log").read_text() + " validation loss at iteration 0 on validation set | "
                   "lm loss value: 1.2E+01 | lm loss PPL: 1.6E+05 |\n")
    assert logs.parse_logs([log]).validations == []
