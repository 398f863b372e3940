"""NeMo 2's log: Lightning's progress line ("Training epoch 0, iteration 4/29 | lr: ... | reduced_train_loss: ..."),
counted from zero and redrawn, TPrimat's TPRIMAT_STEP line from its timer (train/nemo/timer.py: the step time and
peaks it lacks), and megatron_init's parallel groups."""

from __future__ import annotations

import math
import re

from utils.frameworks.log_format import GIB, RECORD_START, LogFormat, Step, batch, field_key, new_record, record_fields

ITERATION = re.compile(RECORD_START + r"Training epoch (\d+), iteration (\d+)/(\d+)")
# NeMo's own timing and memory are raw figures (fw_*): TimingCallback's host time without a device sync,
# rank 0's peak reserved memory, and "memory_allocated", rank 0's current allocation (not a peak).
_kind = field_key({"global_step": "global_step", "lr": "lr", "reduced_train_loss": "loss", "train_loss": "loss",
                   "train_step_timing in s": "fw_step_time_s", "grad_norm": "grad_norm", "grad norm": "grad_norm",
                   "global_batch_size": "gbs", "peak_memory_usage": "fw_mem_reserved_gib",
                   "max_memory_reserved": "fw_mem_reserved_gib", "memory_allocated": "fw_mem_allocated_now_gib",
                   "max_memory_allocated": "fw_mem_allocated_gib", "tflops_per_gpu": "fw_tflops"})
# megatron_init: "Rank 0 has tensor model parallel group: [0, 1]"; the group's length is the size.
PARALLEL_GROUP = re.compile(r"\bRank \d+ has (data|tensor model|pipeline model|context) parallel group\s*:"
                            r"\s*\[([\d,\s]*)\]")
GROUP_FIELDS = {"data": "dp", "tensor model": "tp", "pipeline model": "pp", "context": "cp"}


def step(text: str, complete: bool) -> Step | None:
    """One progress line -> its step; NeMo counts from zero."""
    match = ITERATION.match(text) if "Training epoch" in text else None
    if match is None:
        return None
    rest = text[match.end():]
    record, gbs = new_record(int(match.group(2)) + 1), None
    for kind, numbers in record_fields(rest, complete, _kind):
        first = numbers[0]
        if kind == "global_step" and math.isfinite(first):
            record["step"] = int(first) + 1
        elif kind in ("lr", "loss", "grad_norm", "fw_step_time_s"):
            record[kind] = first
        elif kind == "gbs":
            gbs = batch(first)
        elif kind.startswith("fw_mem_"):  # bytes
            record[kind] = first / GIB
        elif kind == "fw_tflops":  # NeMo's FLOPs callback: its own (non-causal) convention
            record["fw_tflop_per_s_per_gpu"] = first
    return Step(record, int(match.group(3)) + 1, gbs, match.group(0), rest)


def printed(text: str, settings: dict) -> None:
    found = PARALLEL_GROUP.search(text)
    if found:
        settings[GROUP_FIELDS[found.group(1)]] = len(found.group(2).split(","))


def untimed(records: list[dict]) -> str:
    """A log without TPrimat's timer (from elsewhere, or older): NeMo's own step time and peaks, where it reports
    them; its "memory_allocated" is a current allocation and never stands for a peak."""
    for record in records:
        record["step_time_s"] = record.get("fw_step_time_s")
        record["mem_reserved_gib"] = record.get("fw_mem_reserved_gib")
        record["mem_allocated_gib"] = record.get("fw_mem_allocated_gib")
    return ("no TPRIMAT_STEP line: step times are NeMo's TimingCallback host times on rank 0 (no device "
            "synchronisation; logging and callbacks between steps outside) and memory is rank 0's: not comparable "
            "with other frameworks")


FORMAT = LogFormat(markers=("iteration", "parallel group"), step=step, printed=printed, untimed=untimed, redrawn=True,
                   timer_first=True)
