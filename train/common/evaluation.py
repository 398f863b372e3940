"""Held-out validation in TPrimat's own trainers (mega, fsdp, autotp) and its torchtitan trainer: when to evaluate,
its clock, its points and TARGET_LOSS (utils/spec/evaluation.py is the definition every framework follows).

After every EVAL_INTERVAL-th step and after the last, every rank evaluates the mean per-token cross-entropy over the
same validation samples (train.common.megatron_data.ValidationSplit), with the model in eval mode and no gradients;
the trainer gives the loss's sum and token count already reduced over all ranks, so every rank holds the same loss
and stops at the same evaluation when TARGET_LOSS is reached. The evaluation's seconds are taken out of the StepClock
(train/common/step_timer.py), so no step time holds an evaluation; the result's points carry them apart
(eval_time_s, and wall_s, MLPerf's clock, which includes them).

The last rank appends each point to RUN_DIR/evals.jsonl (flushed, beside steps.jsonl), so that a killed run keeps
the evaluations it finished, and prints Megatron-LM's validation line. The judge makes the result's `evaluation` and
`time_to_train` sections from evals.jsonl and the split the trainer's account names (Evaluator.account).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from utils import run_files
from train.common.megatron_data import ValidationSplit
from train.common.step_log import StepLog
from train.common.step_timer import StepClock
from utils.spec.request import Request

EVALS_FILE = run_files.EVALS


@dataclass(frozen=True)
class EvalPoint:
    """One evaluation: the result's evaluation.points columns."""

    step: int
    tokens: int  # training tokens consumed by the end of the step
    train_time_s: float  # step times up to the step: evaluations excluded
    wall_s: float  # from the start of step 1 to the end of this evaluation, evaluations included
    loss: float | None  # mean per-token validation cross-entropy, nats; None when not finite
    eval_time_s: float

    def as_json(self) -> str:
        return json.dumps(asdict(self), allow_nan=False)


def validation_line(point: EvalPoint) -> str:
    """Megatron-LM's validation report, with the evaluation's seconds and MLPerf's clock (for a log's reader)."""
    loss = "nan" if point.loss is None else f"{point.loss:.6E}"
    ppl = "nan" if point.loss is None else f"{math.exp(min(point.loss, 700.0)):.6E}"
    return (f" validation loss at iteration {point.step} on validation set | lm loss value: {loss} | "
            f"lm loss PPL: {ppl} | evaluation time (s): {point.eval_time_s:.3f} | "
            f"wall time since step 1 (s): {point.wall_s:.3f} |")


@dataclass
class Evaluator:
    """A run's evaluations: which steps, their clock, their points, and whether the target is reached."""

    request: Request
    split: ValidationSplit
    clock: StepClock  # the trainer's: the evaluation's seconds are taken out of it
    log: StepLog | None = None  # evals.jsonl, on the last rank
    points: list[EvalPoint] = field(default_factory=list)
    train_time_s: float = 0.0  # this rank's step times so far

    def due(self, step: int) -> bool:
        return step % self.request.evaluation.interval_steps == 0 or step == self.request.training.steps

    def after_step(self, step: int, elapsed: float, evaluate: Callable[[], tuple[float, float]]) -> bool:
        """Called by every rank after each step's record with its step time; evaluates when due (evaluate: the
        validation loss's sum and token count, reduced over every rank). True: the target is reached, stop."""
        self.train_time_s += elapsed
        if not self.due(step):
            return False
        self.clock.sync()
        begin = time.perf_counter()
        total, count = evaluate()
        self.clock.sync()
        end = time.perf_counter()
        self.clock.exclude(end - begin)
        loss = total / count if count else math.nan
        t = self.request.training
        point = EvalPoint(step=step, tokens=step * t.gbs * t.seq_len, train_time_s=self.train_time_s,
                          wall_s=end - self.clock.first, loss=loss if math.isfinite(loss) else None,
                          eval_time_s=end - begin)
        self.points.append(point)
        if self.log is not None:
            self.log.write(point)
            print(validation_line(point), flush=True)
        target = self.request.evaluation.target_loss
        return target is not None and point.loss is not None and point.loss <= target

    def account(self) -> dict:
        """What the judge needs beside evals.jsonl to make the result's evaluation section: the split evaluated on
        and the size of one evaluation (train/common/outcome.py's trainer.json)."""
        return {"iters": self.split.iters, "tokens": self.split.samples * self.request.training.seq_len,
                "split": self.split.result_split()}
