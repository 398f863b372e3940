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
"""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback

from train.common.step_timer import MARKER, StepClock, peak_memory, step_line

__all__ = ["MARKER", "StepTimer"]


class StepTimer(Callback):
    """Device-synchronised step time (train/common/step_timer.py's StepClock) and every rank's peak memory, printed by
    rank 0 per step."""

    def __init__(self) -> None:
        self.clock = StepClock()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.clock.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step_time = self.clock.lap()
        peaks = peak_memory()  # a collective: in the next step's interval, as every trainer's per-step reductions
        if trainer.is_global_zero:
            print(step_line(trainer.global_step, trainer.max_steps, step_time, peaks), flush=True)
