"""TPrimat's one definition of a step's time, for every framework: from the end of one step to the end of the next,
each end taken after a device synchronisation (StepClock), so that everything the loop does between two optimizer
steps is inside, TPrimat's own per-step work too (reductions, .item(), the steps.jsonl write, the console line), as
in Primus's interval timer and Megatron-LM's `elapsed time per iteration`. The first step runs from its start.
docs/results.md says it; bench.instrumentation measures what TPrimat's own work adds.

TPrimat's trainers (mega, fsdp, autotp) time with StepClock. For frameworks whose loop is not TPrimat's (NeMo's
Lightning callback, train/nemo/timer.py; torchtitan's trainer, train/torchtitan/trainer.py) this module also gives
every rank's peak memory and the line evaluate.logs reads (MARKER, evaluate.logs.records.STEP_MARKER):

    TPRIMAT_STEP {"step": 3, "steps": 50, "step_time_s": 9.31, "peak_allocated_bytes": ..., "peak_reserved_bytes": ...}

step is 1-based. Without a GPU (tests) nothing is synchronised and the peaks are null.
"""

from __future__ import annotations

import json
import time
from typing import Callable

import torch
import torch.distributed as dist

MARKER = "TPRIMAT_STEP"


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def peak_memory() -> list[int] | None:
    """Peak allocated and reserved bytes since the start, the maximum over every rank (a collective: call it on
    every rank)."""
    if not torch.cuda.is_available():
        return None
    peaks = [torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()]
    if dist.is_available() and dist.is_initialized():
        # NCCL reduces device tensors only; gloo (the tests' stand-in) host tensors only
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
        reduced = torch.tensor(peaks, dtype=torch.int64, device=device)
        dist.all_reduce(reduced, op=dist.ReduceOp.MAX)
        peaks = reduced.tolist()
    return [int(value) for value in peaks]


def step_line(step: int, steps: int, seconds: float, peaks: list[int] | None) -> str:
    """The TPRIMAT_STEP line of one step."""
    line = {"step": step, "steps": steps, "step_time_s": seconds,
            "peak_allocated_bytes": peaks[0] if peaks else None, "peak_reserved_bytes": peaks[1] if peaks else None}
    return f"{MARKER} {json.dumps(line)}"


class StepClock:
    """Step times as TPrimat defines them: end of one step to end of the next, each end after sync()."""

    def __init__(self, sync: Callable[[], None] = synchronize):
        self.sync = sync
        self.last: float | None = None  # perf_counter at the previous step's end (the first step: its start)
        self.first: float | None = None  # perf_counter at the first step's start

    def start(self) -> None:
        """Before a step: only the first one starts the clock (later steps start where the previous one ended)."""
        if self.last is None:
            self.sync()
            self.last = time.perf_counter()
            if self.first is None:
                self.first = self.last

    def exclude(self, seconds: float) -> None:
        """Leave out seconds spent between two steps on what is no step (an evaluation): the next step's time
        does not hold them."""
        if self.last is not None:
            self.last += seconds

    def lap(self) -> float:
        """At a step's end: its seconds since the previous end."""
        self.sync()
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        return seconds
