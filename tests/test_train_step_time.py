"""One definition of a step's time for every framework (train/common/step_timer.py's StepClock): from the end of one
step to the end of the next, so TPrimat's own per-step work (reductions, .item(), steps.jsonl, the console line)
counts, as Primus's interval timer and NeMo's batch-end timer count theirs. mega and the torch-native trainers timed
sync -> step -> sync and left that work out (issue 32, item 7)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from train.common import step_timer
from train.common.step_log import StepRecord
from train.native.trainer import NativeTrainer


class Clock:
    """perf_counter stand-in: moved on by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def step_times(trainer, clock: Clock, monkeypatch, outputs: tuple) -> list[float]:
    """Three steps of a trainer whose steps compute for 2 s and whose recording takes 0.5 s: the times it records."""
    times = []

    def run_step(step):
        clock.now += 2.0
        return outputs

    def record(step, elapsed, *_):
        clock.now += 0.5  # TPrimat's own per-step work
        times.append(elapsed)
        return StepRecord(step, elapsed, 1.0, 0.0, None, 0, 0, 1, None, None)

    monkeypatch.setattr(trainer, "run_step", run_step)
    monkeypatch.setattr(trainer, "reduce_step_record", record)
    for step in (1, 2, 3):
        trainer.step(step)
    return times


def test_a_lap_runs_from_the_previous_end_and_the_first_from_its_start(monkeypatch):
    clock, syncs = Clock(), []
    monkeypatch.setattr(step_timer.time, "perf_counter", clock)
    timer = step_timer.StepClock(lambda: syncs.append(clock.now))
    timer.start()
    clock.now += 2.0
    assert timer.lap() == 2.0
    clock.now += 0.5  # work between the steps
    timer.start()  # no restart after the first step
    clock.now += 2.0
    assert timer.lap() == 2.5
    assert syncs == [100.0, 102.0, 104.5]  # the device is synchronised before each reading


def test_the_torch_native_trainers_step_time_holds_the_previous_steps_recording(monkeypatch, tmp_path):
    """Each step computes for 2 s and records for 0.5 s: step 1 is 2 s, every later step 2.5 s."""
    clock = Clock()
    monkeypatch.setattr(step_timer.time, "perf_counter", clock)
    request = SimpleNamespace(model=None, parallelism=SimpleNamespace(num_gpus=1), training=None)
    trainer = NativeTrainer(request, None, Path(tmp_path), None, torch.device("cpu"), breakdown=False)
    assert step_times(trainer, clock, monkeypatch, ([], None, 0.0)) == [2.0, 2.5, 2.5]


def test_megas_step_time_holds_the_previous_steps_recording(monkeypatch, tmp_path):
    from train.mega import readback as mega_readback
    from train.mega.trainer import Trainer

    clock = Clock()
    monkeypatch.setattr(step_timer.time, "perf_counter", clock)
    monkeypatch.setattr(mega_readback, "read_back_batch", lambda *_: None)
    trainer = Trainer(SimpleNamespace(model=None), None, Path(tmp_path), clock=step_timer.StepClock(lambda: None))
    monkeypatch.setattr(trainer.marks, "parts", dict)
    trainer.effective, trainer.forward_step = {}, None
    assert step_times(trainer, clock, monkeypatch, ([], None, True, 0.0)) == [2.0, 2.5, 2.5]
