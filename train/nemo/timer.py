"""TPrimat's own step timer and peak-memory reading for NeMo runs: a Lightning callback.

NeMo 2.3's TimingCallback (nemo/utils/exp_manager.py) logs `train_step_timing in s` from a
NamedTimer built with sync_cuda=False, started in on_train_batch_start and stopped in
on_train_batch_end: host time on rank 0 with no device synchronisation, so device work still queued
at the stop is not counted, nor what Lightning 2.4 runs after the callbacks' on_train_batch_end
(the module's hook, logger saving, the next batch's start). Its `memory_allocated`
(MegatronStrategy.training_step, NEMO_LOG_MEMORY_USAGE=1) is rank 0's current allocation, not a peak.

This callback times what Megatron's `elapsed time per iteration` times, as TPrimat defines a step for every
framework (train/common/step_timer.py's StepClock): at every batch end each rank synchronises its device and the step
time is the interval since the previous batch end (the first step: since its batch start), so the forward-backward,
the optimizer step (Lightning's automatic optimization runs both between the two hooks) and the overhead between
steps are all inside; then the ranks all-reduce (MAX) their peak allocated and reserved memory (a collective: the
next interval waits for the slowest rank). Global rank 0 prints one TPRIMAT_STEP line per step for evaluate.logs.parse
(train/common/step_timer.py), its step Lightning's global_step after the optimizer step. Imported only by
train/train_nemo.py's build_recipe, inside the NeMo image.

With EVAL_INTERVAL, Lightning validates between two batches (after on_train_batch_end): the callback times each
validation (synchronised at both ends), takes its seconds out of the next step's time (StepClock.exclude), and
rank 0 prints Megatron-LM's validation report with NeMo's own `val_loss` (its per-token mean over the validation
batches) and the seconds (train.common.evaluation.validation_line), which evaluate.extract reads. With TARGET_LOSS
it stops the run (Lightning's should_stop, agreed by every rank as EarlyStopping does) at the first validation at or
below the target.
"""

from __future__ import annotations

import math
import time

from lightning.pytorch.callbacks import Callback

from train.common.evaluation import EvalPoint, validation_line
from train.common.step_timer import MARKER, StepClock, peak_memory, step_line

__all__ = ["MARKER", "StepTimer"]


class StepTimer(Callback):
    """Device-synchronised step time (train/common/step_timer.py's StepClock) and every rank's peak memory, printed by
    rank 0 per step."""

    def __init__(self, target_loss: float | None = None, tokens_per_step: int = 0) -> None:
        self.clock = StepClock()
        self.target_loss = target_loss  # TARGET_LOSS: stop at the first validation at or below it
        self.tokens_per_step = tokens_per_step  # GBS x sequence length, for the report's tokens
        self.train_time_s = 0.0  # the step times so far: validations excluded
        self.validation_started: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.clock.start()

    def on_validation_start(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        self.clock.sync()
        self.validation_started = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or self.validation_started is None:
            return
        self.clock.sync()
        now = time.perf_counter()
        seconds, self.validation_started = now - self.validation_started, None
        self.clock.exclude(seconds)
        metric = trainer.callback_metrics.get("val_loss")
        loss = float(metric) if metric is not None else math.nan
        if trainer.is_global_zero:
            if metric is None:
                print("TPrimat: NeMo logged no val_loss on rank 0 for this validation: its loss is unknown",
                      flush=True)
            step = trainer.global_step
            first = now if self.clock.first is None else self.clock.first  # a perf_counter of 0.0 is a time
            point = EvalPoint(step=step, tokens=step * self.tokens_per_step, train_time_s=self.train_time_s,
                              wall_s=now - first, loss=loss if math.isfinite(loss) else None, eval_time_s=seconds)
            print(validation_line(point), flush=True)
        if self.target_loss is not None:
            reached = math.isfinite(loss) and loss <= self.target_loss
            trainer.should_stop = trainer.should_stop or trainer.strategy.reduce_boolean_decision(reached, all=False)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step_time = self.clock.lap()
        self.train_time_s += step_time
        peaks = peak_memory()  # a collective: in the next step's interval, as every trainer's per-step reductions
        if trainer.is_global_zero:
            print(step_line(trainer.global_step, trainer.max_steps, step_time, peaks), flush=True)
