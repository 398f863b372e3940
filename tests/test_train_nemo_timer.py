"""train.nemo.timer: NeMo runs' device-synchronised step time and every rank's peak memory, without NeMo.

Lightning is stood in for by a module with an empty Callback base (the callback uses no Lightning API but
the hook names: on_train_batch_start(trainer, pl_module, batch, batch_idx) and
on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)), the trainer by an object with the
attributes Lightning's Trainer has, and the GPU by counting stand-ins for torch.cuda's calls.
"""

from __future__ import annotations

import importlib
import json
import socket
import sys
import types
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from evaluate.logs import records as log_records
from evaluate.logs import parse as logs
from train.common import step_timer

GIB = 2 ** 30


def import_timer():
    """train.nemo.timer over a stand-in lightning.pytorch.callbacks (this environment has no Lightning)."""
    callbacks = types.ModuleType("lightning.pytorch.callbacks")
    callbacks.Callback = type("Callback", (), {})
    for name in ("lightning", "lightning.pytorch"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["lightning.pytorch.callbacks"] = callbacks
    sys.modules.pop("train.nemo.timer", None)
    return importlib.import_module("train.nemo.timer")


@pytest.fixture
def timer(monkeypatch):
    saved = {name: sys.modules.get(name) for name in ("lightning", "lightning.pytorch", "lightning.pytorch.callbacks")}
    module = import_timer()
    yield module
    for name, value in saved.items():
        if value is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = value
    sys.modules.pop("train.nemo.timer", None)


class Clock:
    """perf_counter stand-in: returns the given instants in order."""

    def __init__(self, *instants: float) -> None:
        self.instants = list(instants)

    def __call__(self) -> float:
        return self.instants.pop(0)


class FakeGPU:
    """torch.cuda's calls the timer makes, counted; peaks in bytes."""

    def __init__(self, monkeypatch, allocated: int, reserved: int) -> None:
        self.synchronized = 0
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "synchronize", self._synchronize)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: allocated)
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: reserved)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    def _synchronize(self) -> None:
        self.synchronized += 1


def trainer(step: int, rank_zero: bool = True) -> SimpleNamespace:
    return SimpleNamespace(global_step=step, max_steps=3, is_global_zero=rank_zero)


def train(callback, steps: int) -> None:
    """Lightning's order per step: on_train_batch_start, the optimizer step (global_step += 1), on_train_batch_end."""
    for index in range(steps):
        callback.on_train_batch_start(trainer(index), None, None, index)
        callback.on_train_batch_end(trainer(index + 1), None, None, None, index)


def printed(capsys) -> list[dict]:
    lines = capsys.readouterr().out.splitlines()
    return [json.loads(line.split(" ", 1)[1]) for line in lines]


def test_a_step_is_the_interval_between_batch_ends_so_the_optimizer_step_and_the_gaps_are_inside(
        timer, monkeypatch, capsys):
    # batch starts at 10 (then 99 and 99: ignored), batch ends at 25, 35 and 44.5
    monkeypatch.setattr(step_timer.time, "perf_counter", Clock(10.0, 25.0, 35.0, 44.5))
    train(timer.StepTimer(), 3)
    assert [(line["step"], line["steps"], line["step_time_s"]) for line in printed(capsys)] == \
        [(1, 3, 15.0), (2, 3, 10.0), (3, 3, 9.5)]


def test_the_device_is_synchronised_at_every_step_boundary_and_the_peaks_are_printed(timer, monkeypatch, capsys):
    gpu = FakeGPU(monkeypatch, allocated=61 * GIB, reserved=70 * GIB)
    train(timer.StepTimer(), 3)
    assert gpu.synchronized == 4  # the first batch start, then every batch end
    lines = printed(capsys)
    assert [(line["peak_allocated_bytes"], line["peak_reserved_bytes"]) for line in lines] == [(61 * GIB, 70 * GIB)] * 3


def test_only_global_rank_zero_prints(timer, capsys):
    callback = timer.StepTimer()
    callback.on_train_batch_start(trainer(0, rank_zero=False), None, None, 0)
    callback.on_train_batch_end(trainer(1, rank_zero=False), None, None, None, 0)
    assert capsys.readouterr().out == ""


def test_without_a_gpu_the_peaks_are_null_and_nothing_is_synchronised(timer, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: pytest.fail("synchronised without a GPU"))
    train(timer.StepTimer(), 1)
    line = printed(capsys)[0]
    assert line["peak_allocated_bytes"] is None and line["peak_reserved_bytes"] is None


def test_the_line_is_what_evaluate_logs_reads(timer, monkeypatch, capsys, tmp_path):
    assert timer.MARKER == log_records.STEP_MARKER
    FakeGPU(monkeypatch, allocated=61 * GIB, reserved=70 * GIB)
    monkeypatch.setattr(step_timer.time, "perf_counter", Clock(0.0, 12.0, 21.0))
    train(timer.StepTimer(), 2)
    log = tmp_path / "nemo.log"
    log.write_text(capsys.readouterr().out)
    parsed = logs.parse_logs([log])
    assert parsed.framework == "nemo" and parsed.total_steps == 3
    assert [(r["step"], r["step_time_s"], r["mem_allocated_gib"], r["mem_reserved_gib"]) for r in parsed.records] == \
        [(1, 12.0, 61.0, 70.0), (2, 9.0, 61.0, 70.0)]


def _rank(rank: int, port: int, queue) -> None:
    """One of two gloo ranks, each with its own peaks; rank 0 prints what the ranks agreed on."""
    import_timer()
    from train.nemo import timer as nemo_timer

    torch.cuda.is_available = lambda: True
    torch.cuda.synchronize = lambda: None
    torch.cuda.max_memory_allocated = lambda: (40, 60)[rank] * GIB
    torch.cuda.max_memory_reserved = lambda: (75, 65)[rank] * GIB
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        callback = nemo_timer.StepTimer()
        callback.on_train_batch_start(trainer(0, rank == 0), None, None, 0)
        lines = []
        nemo_timer.print = lambda text, flush: lines.append(text)
        callback.on_train_batch_end(trainer(1, rank == 0), None, None, None, 0)
        queue.put((rank, lines))
    finally:
        dist.destroy_process_group()


def test_the_peaks_are_the_maximum_over_every_rank():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_rank, args=(rank, port, queue)) for rank in (0, 1)]
    for worker in workers:
        worker.start()
    out = dict(queue.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
    assert out[1] == []
    line = json.loads(out[0][0].split(" ", 1)[1])
    assert (line["peak_allocated_bytes"], line["peak_reserved_bytes"]) == (60 * GIB, 75 * GIB)


def validating_trainer(step: int, val_loss: float | None) -> SimpleNamespace:
    """Lightning's trainer as a validation ends: NeMo's val_loss among the callback metrics."""
    return SimpleNamespace(global_step=step, max_steps=3, is_global_zero=True, sanity_checking=False,
                           should_stop=False, callback_metrics={} if val_loss is None else {"val_loss": val_loss},
                           strategy=SimpleNamespace(reduce_boolean_decision=lambda decision, all: decision))


def train_with_a_validation_after_step_2(callback, val_loss: float | None) -> SimpleNamespace:
    """Three steps with Lightning's validation between the second's batch end and the third's batch start."""
    validating = validating_trainer(2, val_loss)
    for index in range(3):
        callback.on_train_batch_start(trainer(index), None, None, index)
        callback.on_train_batch_end(trainer(index + 1), None, None, None, index)
        if index == 1:
            callback.on_validation_start(validating, None)
            callback.on_validation_end(validating, None)
    return validating


def test_a_validation_is_reported_with_its_seconds_and_left_out_of_the_next_step(timer, monkeypatch, capsys,
                                                                                 tmp_path):
    # batch ends at 10 and 20, validation from 20.5 to 23.5 (3 s), the third batch ends at 33.5: 10.5 s of step
    monkeypatch.setattr(step_timer.time, "perf_counter", Clock(0.0, 10.0, 20.0, 20.5, 23.5, 33.5))
    train_with_a_validation_after_step_2(timer.StepTimer(tokens_per_step=1024), 5.0)
    log = tmp_path / "nemo.log"
    log.write_text(capsys.readouterr().out)
    parsed = logs.parse_logs([log])
    assert [r["step_time_s"] for r in parsed.records] == [10.0, 10.0, 10.5]
    # MLPerf's clock from the start of step 1 (0.0) to the end of the validation
    assert parsed.validations == [{"step": 2, "loss": 5.0, "eval_time_s": 3.0, "wall_s": 23.5}]


@pytest.mark.parametrize("target, stops", [(5.5, True), (5.0, True), (4.0, False), (None, False)])
def test_the_run_stops_at_the_first_validation_at_or_below_the_target(timer, capsys, target, stops):
    assert train_with_a_validation_after_step_2(timer.StepTimer(target_loss=target), 5.0).should_stop is stops


def test_a_validation_without_nemo_s_val_loss_says_so_and_never_stops_the_run(timer, capsys):
    assert train_with_a_validation_after_step_2(timer.StepTimer(target_loss=9.0), None).should_stop is False
    out = capsys.readouterr().out
    assert "NeMo logged no val_loss on rank 0" in out and "lm loss value: nan" in out
