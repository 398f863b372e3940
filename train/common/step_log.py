"""The per-step record of a TPrimat trainer (mega, fsdp, autotp): one JSON line in steps.jsonl and one
Megatron-LM log line.

steps.jsonl is appended and flushed at every step, so a killed run keeps every step it finished.
The console line copies Megatron-LM's training_log format (../shared/reference/log-formats.md),
so evaluate.extract's Megatron parser and a Megatron user read it alike.
"""

from __future__ import annotations

import json
import math
import os
import resource
import socket
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, TextIO

import torch

from utils.spec import metrics
from utils.files import DiskError, writing
from utils.spec.models import ModelSpec
from utils.spec.request import Training
from utils.machine.stragglers import RANK_STEPS_DIR

GIB = float(1 << 30)
MIB = float(1 << 20)


@dataclass(frozen=True)
class StepRecord:
    """One optimizer step, in the shared per-step shape (utils/spec/result.py's steps)."""

    step: int  # 1-based
    step_time_s: float
    loss: float | None  # mean over microbatches and data-parallel ranks
    lr: float | None  # the learning rate this step applied
    grad_norm: float | None
    skipped: int
    nan: int
    tokens: int  # GBS x SL
    mem_allocated_gib: float | None  # peak since start, the largest over all ranks
    mem_reserved_gib: float | None
    mem_host_rss_gib: float | None = None  # peak resident host memory of a worker process, the largest over all ranks
    forward_s: float | None = None  # the step's breakdown (utils.spec.metrics.BREAKDOWN_KEYS); None where not measured
    backward_s: float | None = None
    optimizer_s: float | None = None
    time_s: float | None = None  # the step's end, time.time() seconds: telemetry.jsonl's clock (utils/machine/telemetry.py)
    # a MoE model's router counts per layer (train/common/expert_load.py): the busiest expert's, and all assignments
    expert_load_max: list[int] | None = None
    expert_load_assigned: list[int] | None = None

    def as_json(self) -> str:
        """One line; nan/inf become null (JSON has no nan) and the nan count says so."""
        values = {key: (None if isinstance(value, float) and not math.isfinite(value) else value)
                  for key, value in asdict(self).items()}
        return json.dumps(values, allow_nan=False)


def is_last_rank() -> bool:
    """The rank that prints the steps and writes the result (it holds the last pipeline stage's loss)."""
    return int(os.environ.get("RANK", "0")) == int(os.environ.get("WORLD_SIZE", "1")) - 1


def peak_host_rss_gib() -> float:
    """This process's peak resident memory so far (Linux reports ru_maxrss in KiB): the CPU's device memory."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB


def _number(value: float | None, spec: str) -> str:
    if value is None:
        return "nan"
    return format(value, spec)


def megatron_line(record: StepRecord, total_steps: int, gbs: int, tflops_per_gpu: float | None) -> str:
    """Megatron-LM's iteration line (printed by the last rank), with a timestamp prefix."""
    fields = [
        f" [{time.strftime('%Y-%m-%d %H:%M:%S')}] iteration {record.step:8d}/{total_steps:8d}",
        f" consumed samples: {record.step * gbs:12d}",
        f" elapsed time per iteration (ms): {record.step_time_s * 1000.0:.1f}",
    ]
    if tflops_per_gpu is not None:
        # Megatron-LM's one decimal, but significant digits below 100: a CPU's 0.0472, not 0.0 (no thousands
        # separator, so that the line still reads as Megatron's)
        fields.append(f" throughput per GPU (TFLOP/s/GPU): {tflops_per_gpu:{'.3g' if tflops_per_gpu < 100 else '.1f'}}")
    fields += [
        f" learning rate: {_number(record.lr, '.6E')}",
        f" global batch size: {gbs:5d}",
    ]
    if record.loss is None or not math.isfinite(record.loss) or record.loss > 0:
        fields.append(f" lm loss: {_number(record.loss, '.6E')}")
    fields += [
        " loss scale: 1.0",
        f" grad norm: {_number(record.grad_norm, '.3f')}",
        f" number of skipped iterations: {record.skipped:3d}",
        f" number of nan iterations: {record.nan:3d}",
    ]
    return " |".join(fields) + " |"


def memory_line(rank: int, step: int, allocated_gib: float, max_allocated_gib: float, reserved_gib: float,
                max_reserved_gib: float) -> str:
    """Megatron-LM's memory report (MB), printed once after the first step."""
    return (f"[Rank {rank}] (after {step} iterations) memory (MB) | allocated: {allocated_gib * GIB / MIB:.1f} | "
            f"max allocated: {max_allocated_gib * GIB / MIB:.1f} | reserved: {reserved_gib * GIB / MIB:.1f} | "
            f"max reserved: {max_reserved_gib * GIB / MIB:.1f}")


class StepLog:
    """Appends records to steps.jsonl (flushed per step) and keeps them for the result; any record with as_json()
    (train/common/evaluation.py's points in evals.jsonl too)."""

    def __init__(self, path: Path):
        self.path = path
        self.records: list[StepRecord] = []
        with writing(path):
            self._file: TextIO = open(path, "a", encoding="utf-8")

    def write(self, record: StepRecord) -> None:
        """Append the record; a write the disk refuses (DiskError: the run fails, train/common/outcome.py) leaves the
        file as it was before it, whole records only."""
        end = self._file.tell()
        try:
            with writing(self.path):
                self._file.write(record.as_json() + "\n")
                self._file.flush()
        except DiskError:
            self._cut(end)
            raise
        self.records.append(record)

    def _cut(self, end: int) -> None:
        """Close the file, then cut what a refused write left of its record (closing may append more of it)."""
        try:
            self._file.close()
        except OSError:
            pass
        try:
            os.truncate(self.path, end)
        except OSError:
            pass

    def report(self, record: StepRecord, spec: ModelSpec, training: Training, num_gpus: int) -> None:
        """The record into steps.jsonl and as Megatron-LM's line on the console (its memory line after step 1)."""
        self.write(record)
        tflops = None
        if record.step_time_s > 0:
            per_gpu = metrics.per_gpu(metrics.tokens_per_second(record.tokens, record.step_time_s), num_gpus)
            tflops = metrics.tflops_per_gpu(spec, training.seq_len, per_gpu)
        print(megatron_line(record, training.steps, training.gbs, tflops), flush=True)
        if record.step == 1 and record.mem_allocated_gib is not None:
            print(memory_line(torch.distributed.get_rank(), 1, torch.cuda.memory_allocated() / GIB,
                              record.mem_allocated_gib, torch.cuda.memory_reserved() / GIB,
                              record.mem_reserved_gib), flush=True)

    def close(self) -> None:
        if not self._file.closed:
            with writing(self.path):
                self._file.close()


class RankSteps:
    """This rank's own step times, in RUN_DIR/rank_steps/rank<R>.jsonl (flushed per step), for the straggler check
    (utils/machine/stragglers.py): the step records carry one rank's time only."""

    def __init__(self, run_dir: Path, rank: int, local_rank: int):
        folder = run_dir / RANK_STEPS_DIR
        self.path = folder / f"rank{rank}.jsonl"
        with writing(self.path):
            folder.mkdir(exist_ok=True)
            self._file: TextIO = open(self.path, "a", encoding="utf-8")
        self._line({"rank": rank, "local_rank": local_rank, "host": socket.gethostname()})

    def _line(self, values: dict) -> None:
        with writing(self.path):
            self._file.write(json.dumps(values) + "\n")
            self._file.flush()

    def timed(self, reduce: Callable[..., StepRecord]) -> Callable[..., StepRecord]:
        """A trainer's reduce_step_record(step, elapsed, ...), called by every rank as its step has ended, that also
        writes this rank's time and stamps the record with the step's end on the telemetry's clock."""
        def reduce_and_record(step: int, elapsed: float, *args, **kwargs) -> StepRecord:
            end = time.time()
            self._line({"step": step, "step_time_s": elapsed, "time_s": end})
            return replace(reduce(step, elapsed, *args, **kwargs), time_s=end)
        return reduce_and_record

    def close(self) -> None:
        self._file.close()
