"""Marks inside a training step that never wait for the device: the forward / backward / optimizer breakdown.

On a GPU a mark is a CUDA event with timing, recorded on the current stream: recording queues it and returns at
once, so the step runs as it would without it (no synchronisation is added); the times between marks are read
after the step's own closing torch.cuda.synchronize(), when every event has completed. On the CPU
(train/common/cpu_compat.py) the work runs synchronously as it is issued, so the host clock at a mark is the time the
work reached it. Either way the marks time the device's timeline, not the host's issuing of it.
"""

from __future__ import annotations

import time

import torch

FETCH = "fetch"  # before a microbatch's batch is taken from the data iterator
FORWARD_BEGIN = "forward_begin"  # the batch in hand, the model's forward begins
FORWARD_END = "forward_end"  # the model's forward returned, or (last pipeline stage) its loss function did
SCHEDULE = "schedule"  # around the whole forward-backward schedule call
OPTIMIZER = "optimizer"  # around the optimizer and learning-rate schedule steps


class StepMarks:
    """The marks of one step, by name, in the order they were made; own_s sums the host seconds spent making and
    reading them (an upper bound on the breakdown's own cost: it includes the clock reads that measure it)."""

    def __init__(self, on_device: bool):
        self.on_device = on_device
        self.own_s = 0.0
        self.made = 0  # marks made so far
        self.marks: dict[str, list] = {}

    def reset(self) -> None:
        """Forget the previous step's marks."""
        self.marks = {FETCH: [], FORWARD_BEGIN: [], FORWARD_END: [], SCHEDULE: [], OPTIMIZER: []}

    def mark(self, name: str, replace_last: bool = False) -> None:
        """A mark now under name (replace_last: instead of the last one, a later end of the same interval)."""
        started = time.perf_counter()
        if self.on_device:
            stamp = torch.cuda.Event(enable_timing=True)
            stamp.record()
        else:
            stamp = started
        if replace_last:
            self.marks[name][-1] = stamp
        else:
            self.marks[name].append(stamp)
        self.made += 1
        self.own_s += time.perf_counter() - started

    def _seconds(self, begin, end) -> float:
        return begin.elapsed_time(end) / 1000.0 if self.on_device else end - begin

    def parts(self) -> dict[str, float]:
        """forward_s, backward_s, optimizer_s of the step (the device must have finished it): forward is the sum
        of the microbatches' forward intervals (FORWARD_BEGIN..FORWARD_END), backward the forward-backward
        schedule (SCHEDULE..SCHEDULE) less those and less the batch fetches before them (FETCH..FORWARD_BEGIN,
        left to `other`), optimizer OPTIMIZER..OPTIMIZER."""
        started = time.perf_counter()
        m = self.marks
        counts = {len(m[FETCH]), len(m[FORWARD_BEGIN]), len(m[FORWARD_END])}
        if len(counts) != 1 or len(m[SCHEDULE]) != 2 or len(m[OPTIMIZER]) != 2:
            raise RuntimeError(f"unpaired step marks: { {name: len(stamps) for name, stamps in m.items()} }")
        forward = sum(self._seconds(b, e) for b, e in zip(m[FORWARD_BEGIN], m[FORWARD_END]))
        fetch = sum(self._seconds(b, e) for b, e in zip(m[FETCH], m[FORWARD_BEGIN]))
        found = {"forward_s": forward, "backward_s": self._seconds(*m[SCHEDULE]) - forward - fetch,
                 "optimizer_s": self._seconds(*m[OPTIMIZER])}
        self.own_s += time.perf_counter() - started
        return found
