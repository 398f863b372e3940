"""mega's forward / backward / optimizer breakdown: measured in every step of a real run, absent in bench mode.

One tiny run with two pipeline stages over two processes (PP=2, GA=2, so that 1F1B interleaves the
microbatches' forwards and backwards: test_train_mega_runs.py's pp2_ga2, trained once for both files) carries the
assertions on the result; the arithmetic of the marks is checked on its own with a clock the test sets; bench mode is
the instrumentation benchmark's own off blocks.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.shell_harness import HANG_TIMEOUT_S, REPO
from tests.test_train_mega_runs import BASE, assert_trained, trained, trainer_env
from train.common import step_marks
from train.mega.trainer import breakdown_method
from utils.spec.metrics import BREAKDOWN_KEYS

STEPS = 4
ROUNDING = 1e-9  # seconds: the result's means against the step time, both from the same floats


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    done = trained(tmp_path_factory, "pp2_ga2")
    assert_trained(done, STEPS)
    return done


def test_every_step_carries_its_forward_backward_and_optimizer_seconds_within_its_step_time(run):
    for step in run.steps:
        parts = [step[key] for key in BREAKDOWN_KEYS]
        assert all(part > 0 for part in parts), step  # each measured: a tiny model still takes microseconds
        assert sum(parts) <= step["step_time_s"], step


def test_the_result_names_the_method_and_its_four_parts_add_up_to_the_step_time(run):
    result = run.result
    breakdown = result["performance"]["breakdown"]
    assert breakdown["method"] == breakdown_method(on_device=False)
    window = result["performance"]["window"]
    assert breakdown["count"] == window["last_step"] - window["first_step"] + 1
    assert breakdown["other_s"] >= 0
    assert sum(breakdown[key] for key in (*BREAKDOWN_KEYS, "other_s")) == pytest.approx(breakdown["step_time_s"],
                                                                                         abs=ROUNDING)
    assert result["series"]["forward_s"] == run.series("forward_s")


def test_the_parts_are_sums_of_the_marked_intervals_with_the_batch_fetches_left_to_other():
    marks = step_marks.StepMarks(on_device=False)  # on the CPU a mark is the host clock's reading
    marks.reset()
    marks.marks.update({step_marks.SCHEDULE: [-1.0, 12.0], step_marks.OPTIMIZER: [20.0, 21.0],
                        step_marks.FETCH: [0.0, 5.0], step_marks.FORWARD_BEGIN: [1.0, 6.0],
                        step_marks.FORWARD_END: [4.0, 8.0]})  # two microbatches: fetches 1 s, forwards 3 s + 2 s
    assert marks.parts() == {"forward_s": 5.0, "backward_s": 13.0 - 5.0 - 2.0, "optimizer_s": 1.0}


def test_a_loss_that_ends_the_forward_replaces_the_models_end(monkeypatch):
    clock = iter([3.0, 3.0, 4.0, 4.0])  # each mark reads the clock twice: the stamp, then its own cost
    monkeypatch.setattr(step_marks.time, "perf_counter", lambda: next(clock))
    marks = step_marks.StepMarks(on_device=False)
    marks.reset()
    marks.mark(step_marks.FORWARD_END)
    marks.mark(step_marks.FORWARD_END, replace_last=True)
    assert marks.marks[step_marks.FORWARD_END] == [4.0] and marks.made == 2


def test_unpaired_marks_are_an_error_not_a_guess():
    marks = step_marks.StepMarks(on_device=False)
    marks.reset()
    marks.mark(step_marks.SCHEDULE)
    with pytest.raises(RuntimeError, match="unpaired step marks"):
        marks.parts()


def test_bench_mode_makes_no_marks_and_the_benchmark_reports_the_breakdowns_share(tmp_path):
    env = trainer_env(tmp_path / "no-data", {**BASE, "MOCK_DATA": 1, "TRAIN_ITERS": 4, "WARMUP_STEPS": 1})
    out = subprocess.run([sys.executable, "-m", "bench.instrumentation", "--model", "llama", "--blocks", "1",
                          "--block-steps", "1", "--warmup-steps", "1"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=HANG_TIMEOUT_S)
    assert out.returncode in (0, 1), out.stdout + out.stderr  # 1: over budget on a noisy machine, still measured
    assert "marks made with instrumentation off: 0" in out.stdout, out.stdout
    share = re.search(r"breakdown marks: \d+ per step, [0-9.]+ ms per step = ([0-9.]+)% of step time", out.stdout)
    assert share and float(share.group(1)) < 100, out.stdout
    assert re.search(r"budget 1%: (met|EXCEEDED)\n  reproduce: cd .* -m bench.instrumentation --model llama", out.stdout)
