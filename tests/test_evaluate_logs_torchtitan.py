"""evaluate.logs reads torchtitan's log: its metrics line per step (torchtitan 0.3.0's components/metrics.py, through its
"[titan] ..." logger prefix), its "Trainer is initialized with" line, and TPrimat's TPRIMAT_STEP and TPRIMAT_EFFECTIVE
lines (train/torchtitan/trainer.py); the fixture is tests/fixtures/logs/torchtitan_timed.log."""

from __future__ import annotations

import json
import math

import pytest

from evaluate.logs.evaluations import evaluation_of
from evaluate.logs.parse import parse_logs
from tests.fixtures.logs.extracting import FIXTURES, TOKENS_PER_S_PER_GPU, run_extract
from utils.spec.evaluation import Evaluation

LOG = FIXTURES / "torchtitan_timed.log"
LINE = ("[titan] 2026-11-26 12:00:19,100 - root - INFO - step:  {step}  loss: 10.80000  grad_norm:  3.0416  "
        "memory: 68.25GiB(86.19%)  tps: 2,185  tflops: 1,105.25  mfu: {mfu}")


def test_each_step_takes_torchtitans_loss_and_grad_norm_and_tprimats_step_time_and_peaks():
    parsed = parse_logs([LOG], framework="torchtitan")
    assert (parsed.framework, parsed.total_steps, parsed.warnings) == ("torchtitan", 12, [])
    first, last = parsed.records[0], parsed.records[-1]
    assert (first["step"], first["loss"], first["grad_norm"], first["step_time_s"]) == (1, 10.8, 3.0416, 15.0)
    assert (last["step"], last["loss"], last["step_time_s"]) == (12, pytest.approx(8.6), 9.31)
    assert (last["mem_allocated_gib"], last["mem_reserved_gib"]) == (61.75, 71.5)  # every rank's, TPrimat's timer


def test_torchtitans_own_throughput_and_memory_are_raw_figures():
    first = parse_logs([LOG]).records[0]
    assert (first["fw_tokens_per_s_per_gpu"], first["fw_tflop_per_s_per_gpu"], first["fw_mfu_pct"],
            first["fw_mem_reserved_gib"]) == (2185.0, 105.25, 10.64, 68.25)


def test_the_trainers_batch_line_and_tprimats_read_back_are_the_effective_settings():
    effective = parse_logs([LOG]).effective
    assert {key: effective[key] for key in ("tp", "pp", "dp", "mbs", "gbs", "ga", "seq_len", "steps", "warmup_steps",
                                            "precision", "data_parallel", "compile")} == \
        {"tp": 1, "pp": 1, "dp": 8, "mbs": 1, "gbs": 128, "ga": 16, "seq_len": 2048, "steps": 12, "warmup_steps": 5,
         "precision": "bf16", "data_parallel": "fsdp", "compile": False}


def test_thousands_separators_are_read_and_an_mfu_of_na_is_left_out(tmp_path):
    log = tmp_path / "titan.log"
    log.write_text(LINE.format(step=1, mfu="N/A") + "\n")
    record = parse_logs([log]).records[0]
    assert record["fw_tflop_per_s_per_gpu"] == 1105.25 and "fw_mfu_pct" not in record


def test_a_line_cut_off_loses_its_last_field_only(tmp_path):
    log = tmp_path / "titan.log"
    log.write_text(LINE.format(step=1, mfu="10.64%") + "\n" + LINE.format(step=2, mfu="10.6"))
    parsed = parse_logs([log])
    assert parsed.truncated and [r["step"] for r in parsed.records] == [1, 2]
    assert "fw_mfu_pct" not in parsed.records[1] and parsed.records[1]["loss"] == 10.8


def test_a_validation_line_and_a_quoted_step_are_no_steps(tmp_path):
    log = tmp_path / "titan.log"
    log.write_text("[titan] 2026-11-26 12:00:19,100 - root - INFO - validate step:  5  loss:  7.1000  memory: "
                   "68.25GiB(86.19%)  tps: 2,185\n"
                   "    logger.info(f\"step: 3  loss: 1.0\")\n")
    assert parse_logs([log]).records == []


def test_without_tprimats_timer_the_steps_have_no_step_time_and_say_why(tmp_path):
    log = tmp_path / "titan.log"
    log.write_text("".join(line + "\n" for line in LOG.read_text().splitlines() if not line.startswith("TPRIMAT_STEP")))
    parsed = parse_logs([log])
    assert parsed.framework == "torchtitan" and {r["step_time_s"] for r in parsed.records} == {None}
    assert any("no TPRIMAT_STEP line" in note for note in parsed.warnings)


def test_a_torchtitan_run_is_extracted_into_one_result_with_the_common_steady_state(tmp_path):
    request = json.loads((FIXTURES / "config-nvd.json").read_text())
    request["identity"]["framework"] = "torchtitan"
    request["fairness"]["workload"]["lr_warmup_convention"] = "torchtitan"
    config = tmp_path / "config-torchtitan.json"
    config.write_text(json.dumps(request))
    code, result = run_extract(tmp_path, LOG, config)
    assert code == 0, result
    assert (result["framework"], result["run"]["status"], result["training"]["lr_warmup_convention"]) == \
        ("torchtitan", "ok", "torchtitan")
    assert result["performance"]["tokens_per_s_per_gpu"] == pytest.approx(TOKENS_PER_S_PER_GPU, rel=1e-3)
    assert result["raw_framework"]["tflop_per_s_per_gpu_median"] == pytest.approx(169.76, abs=0.2)


VALIDATION_SPLIT = {"megatron_split": "95,5,0", "documents": 29, "fingerprint": "ab" * 32, "percent": 5}


def titan_log_with_evaluations(tmp_path, losses: dict[int, float], last_step: int):
    """The fixture cut after last_step, with TPrimat's validation line after each evaluated step and the split the
    trainer read back in its TPRIMAT_EFFECTIVE line (train/torchtitan/trainer.py)."""
    lines = []
    for line in LOG.read_text().splitlines():
        if line.startswith("TPRIMAT_EFFECTIVE "):
            line = "TPRIMAT_EFFECTIVE " + json.dumps({**json.loads(line.split(" ", 1)[1]),
                                                      "validation": VALIDATION_SPLIT})
        lines.append(line)
        if line.startswith("TPRIMAT_STEP "):
            step = json.loads(line.split(" ", 1)[1])["step"]
            if step in losses:
                lines.append(f" validation loss at iteration {step} on validation set | lm loss value: "
                             f"{losses[step]:.6E} | lm loss PPL: 1.0E+04 | evaluation time (s): 2.000 |")
            if step == last_step:
                break
    log = tmp_path / "titan_validation.log"
    log.write_text("\n".join(lines) + "\n")
    return log


def test_a_torchtitan_run_stopped_at_its_target_records_the_split_it_read_and_its_time_to_train(tmp_path):
    request = json.loads((FIXTURES / "config-nemo-validation.json").read_text())  # every 4 steps, target 9.5
    request["identity"]["framework"] = "torchtitan"
    request["fairness"]["workload"]["lr_warmup_convention"] = "torchtitan"
    config = tmp_path / "config-torchtitan.json"
    config.write_text(json.dumps(request))
    code, result = run_extract(tmp_path, titan_log_with_evaluations(tmp_path, {4: 9.9, 8: 9.4}, last_step=8), config)
    assert code == 0, result
    assert (result["run"]["status"], result["run"]["steps_completed"]) == ("ok", 8)  # of 12: the target ended it
    evaluation = result["evaluation"]
    assert (evaluation["points"]["step"], evaluation["points"]["loss"]) == ([4, 8], [9.9, 9.4])
    assert evaluation["split"] == VALIDATION_SPLIT and evaluation["time_s"] == pytest.approx(4.0)
    to_target = result["time_to_train"]
    assert (to_target["reached"], to_target["step"], to_target["stopped_at_target"]) == (True, 8, True)


@pytest.mark.parametrize("printed", [
    "95,5,0",  # not an object
    {**VALIDATION_SPLIT, "megatron_split": "80,20,0"},  # another cut than the request's
    {**VALIDATION_SPLIT, "documents": -3},
    {**VALIDATION_SPLIT, "documents": True},
    {**VALIDATION_SPLIT, "fingerprint": 7},
])
def test_a_printed_split_that_is_not_the_requests_keeps_only_the_requests_with_a_note(printed):
    notes = []
    evaluation, _ = evaluation_of([{"step": 4, "loss": 9.9, "eval_time_s": 2.0, "wall_s": 40.0}], [],
                                  Evaluation(interval_steps=4, tokens=16384, validation_percent=5), framework="torchtitan", gbs=8, seq_len=2048,
                                  steps=12, notes=notes, split=printed)
    assert evaluation["split"] == {"megatron_split": "95,5,0", "documents": None, "fingerprint": None, "percent": 5}
    assert len(notes) == 1 and "is not a split of the request's 95,5,0" in notes[0]


def test_a_time_or_loss_that_is_not_finite_is_no_figure():
    evaluation, _ = evaluation_of([{"step": 4, "loss": math.inf, "eval_time_s": math.nan, "wall_s": math.inf}], [],
                                  Evaluation(interval_steps=4, tokens=16384, validation_percent=5), framework="torchtitan", gbs=8, seq_len=2048,
                                  steps=12, notes=[])
    points = evaluation["points"]
    assert (points["loss"], points["eval_time_s"], points["wall_s"]) == ([None], [None], [None])
