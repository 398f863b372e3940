"""train.common.evaluation: which steps are evaluated, that no step time holds an evaluation, the points kept in
evals.jsonl and the result the judge makes of them (evaluate/trainer_account.py), and TARGET_LOSS (in-process, a stand-in evaluation and clock; the trainers' real
evaluations are in tests/test_train_{mega,fsdp,autotp}_runs.py)."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from evaluate import trainer_account
from tests.test_evaluate_validate import checks, result
from train.common.evaluation import Evaluator
from train.common.step_log import StepLog
from train.common.step_timer import StepClock
from utils.spec.evaluation import Evaluation
from utils.spec.metrics import time_to_target
from utils.spec.result import schema_errors

EVALUATION_S = 0.1  # far longer than a stand-in step
STEP_S = 0.005


def request(target_loss: float | None = None, steps: int = 7) -> SimpleNamespace:
    return SimpleNamespace(evaluation=Evaluation(interval_steps=3, tokens=512, validation_percent=5,
                                                 target_loss=target_loss),
                           training=SimpleNamespace(steps=steps, gbs=4, seq_len=64))


def split() -> SimpleNamespace:
    return SimpleNamespace(iters=2, samples=8, result_split=lambda: {
        "megatron_split": "95,5,0", "documents": 12, "fingerprint": "sha256:ab", "percent": 5})


def evaluator_in(run_dir, target_loss: float | None = None, steps: int = 7) -> tuple[Evaluator, StepClock]:
    """An evaluator keeping its points in run_dir's evals.jsonl, as the last rank's does, and its clock."""
    clock = StepClock(sync=lambda: None)
    return Evaluator(request(target_loss, steps), split(), clock, log=StepLog(run_dir / "evals.jsonl")), clock


def judged_sections(evaluator: Evaluator, run_dir) -> dict:
    """The result's evaluation and time_to_train, as the judge makes them from evals.jsonl and the trainer's account."""
    evaluator.log.close()
    return trainer_account.evaluation_of(evaluator.request, run_dir, {"evaluation": evaluator.account()})


def train(evaluator: Evaluator, clock: StepClock, losses: list[float]) -> list[float]:
    """Steps of STEP_S, each evaluation of EVALUATION_S giving the next loss (sum, count); the step times."""
    given = iter(losses)

    def evaluate() -> tuple[float, float]:
        time.sleep(EVALUATION_S)
        return next(given) * 100.0, 100.0

    times = []
    for step in range(1, evaluator.request.training.steps + 1):
        clock.start()
        time.sleep(STEP_S)
        times.append(clock.lap())
        if evaluator.after_step(step, times[-1], evaluate):
            break
    return times


def test_evaluations_follow_every_interval_and_the_last_step_outside_every_step_time(tmp_path):
    evaluator, clock = evaluator_in(tmp_path)
    times = train(evaluator, clock, [7.0, 6.0, 5.5])
    assert len(times) == 7 and max(times) < EVALUATION_S / 2  # steps 4 and 7 follow an evaluation
    sections = judged_sections(evaluator, tmp_path)
    points = sections["evaluation"]["points"]
    assert points["step"] == [3, 6, 7] and points["loss"] == [7.0, 6.0, 5.5]
    assert points["tokens"] == [3 * 4 * 64, 6 * 4 * 64, 7 * 4 * 64]
    assert points["train_time_s"] == pytest.approx([sum(times[:3]), sum(times[:6]), sum(times)])
    assert points["wall_s"][-1] >= sum(times) + 3 * EVALUATION_S  # MLPerf's clock holds the evaluations
    assert all(seconds >= EVALUATION_S for seconds in points["eval_time_s"])
    assert (sections["evaluation"]["iters"], sections["evaluation"]["tokens"]) == (2, 8 * 64)
    assert sections["time_to_train"] is None
    kept = [json.loads(line) for line in (tmp_path / "evals.jsonl").read_text().splitlines()]
    assert [point["loss"] for point in kept] == [7.0, 6.0, 5.5]


@pytest.mark.parametrize("target, steps, reached", [(6.0, 6, True), (5.0, 7, False)])
def test_a_target_loss_stops_every_rank_at_the_first_evaluation_at_or_below_it(target, steps, reached, tmp_path):
    evaluator, clock = evaluator_in(tmp_path, target)
    assert len(train(evaluator, clock, [7.0, 6.0, 5.5])) == steps
    to_train = judged_sections(evaluator, tmp_path)["time_to_train"]
    assert (to_train["reached"], to_train["stopped_at_target"], to_train["step"]) == \
        (reached, reached, 6 if reached else None)
    assert to_train["last_loss"] == (6.0 if reached else 5.5)


def test_a_non_finite_validation_loss_is_recorded_as_none_and_reaches_no_target(tmp_path):
    evaluator, clock = evaluator_in(tmp_path, target_loss=100.0, steps=3)
    clock.start()
    assert not evaluator.after_step(3, 0.1, lambda: (float("nan"), 10.0))
    assert judged_sections(evaluator, tmp_path)["evaluation"]["points"]["loss"] == [None]


def test_the_sections_fit_the_result_schema(tmp_path):
    from tests.test_utils_result import build  # a valid result to put them in

    evaluator, clock = evaluator_in(tmp_path, 6.0)
    train(evaluator, clock, [7.0, 6.0])
    assert schema_errors({**build(), **judged_sections(evaluator, tmp_path)}) == []


def stopped_at_target(data, step: int) -> dict:
    """data as a TARGET_LOSS run that stopped at the evaluation after `step` of twice as many requested, its points
    consistent with its own steps (validate recomputes them: evaluate/evaluation_checks.py)."""
    data["training"]["steps"] = data["effective"]["steps"] = 2 * step
    data["training"]["validation_split"] = "95,5,0"
    batch_tokens = data["training"]["gbs"] * data["training"]["seq_len"]
    trained = sum(t for s, t in zip(data["series"]["step"], data["series"]["step_time_s"]) if s <= step and t)
    points = {"step": [step], "tokens": [step * batch_tokens], "train_time_s": [trained],
              "wall_s": [trained + 10.0], "loss": [3.2], "eval_time_s": [10.0]}
    data["evaluation"] = {"interval_steps": step, "iters": 1, "tokens": batch_tokens, "time_s": 10.0,
                          "points": points, "split": {"megatron_split": "95,5,0", "documents": 30,
                                                      "fingerprint": "0123abcd", "percent": 5}}
    data["time_to_train"] = time_to_target(points, 3.3, stopped_at_target=True, how="the trainer stopped")
    return data


def test_a_run_that_stopped_at_its_target_loss_ran_every_step_it_needed():
    assert checks(stopped_at_target(result("megatron"), 12)) == set()
    unstopped = stopped_at_target(result("megatron"), 12)
    unstopped["time_to_train"]["stopped_at_target"] = False  # read from the series: the steps ran out early
    assert checks(unstopped) == {("steps", True)}
