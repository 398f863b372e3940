"""evaluate.logs.parse and evaluate.extract: no figure a log did not earn. Quoted records, broken, cut or repeated
lines, runs appended or resumed, and damaged values are each what they are, never a step or a setting."""

import json
import re
import shutil

import pytest

from evaluate import extract
from evaluate.logs import parse as logs
from tests.fixtures.logs.extracting import FIXTURES, extract_alone, run_extract


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
