"""The step records of Megatron-LM, Primus and NeMo iteration lines, torchtitan's metrics lines, and of TPrimat's
TPRIMAT_STEP lines.

A record counts only where the framework printed it (RECORD_START, TITAN_STEP); its fields are found by name
(between "|" separators; torchtitan's "name: value" pairs), never by position, and a value is taken only when the whole field is a number (a field cut
off or glued to another rank's output is refused). evaluate.logs.stream feeds the lines; evaluate.logs.parse
assembles the run.
"""

from __future__ import annotations

import math
import re
import time
from functools import lru_cache
from typing import Iterable

# Primus v26.5's compute field, "X (avg Y)" (utils/upstream/table.py: primus-v26.5 "compute segment").
WITH_AVERAGE = re.compile(r"^\s*(\S+) \(avg (\S+)\)\s*$")
NUMBER = re.compile(r"^([-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf(?:inity)?))\s*(GiB|GB|MiB|MB|%)?$",
                    re.IGNORECASE)
# A record counts only where the framework printed it: at the start of a line, after nothing but a launcher's
# rank label (srun --label "7: ", torchrun --tee "[rank7]:" or "[default7]:") and the framework's own prefix
# (Megatron's timestamp, Primus's logger prefix, NeMo's logging prefix). The same text quoted by a traceback
# (an indented source line, a string, an exception message) is not a record.
# Primus v26.5 logs the last rank's Megatron-LM line, timestamp included, under its own prefix on rank 0's console
# (utils/upstream/table.py: primus-v26.5 "console prefix", "forwarded to rank 0").
MEGATRON_STAMP = r" ?\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\]"
RECORD_START = (r"^(?:\d+: )?(?:\[(?:rank|default)\d+\]: ?)?"
                r"(?:" + MEGATRON_STAMP +
                r"|\[\d{8} \d\d:\d\d:\d\d\]\[rank-\d+/\d+\]\[(?:INFO|WARNING|DEBUG|ERROR)\s*\]\s*\[[^\]]*\]\s*:"
                r"(?:" + MEGATRON_STAMP + r")?"
                r"|\[NeMo [IWDEC] [^\]]*\])? {0,2}")
NEMO_ITERATION = re.compile(RECORD_START + r"Training epoch (\d+), iteration (\d+)/(\d+)")
MEGATRON_ITERATION = re.compile(RECORD_START + r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
# Megatron-LM reports MiB ("memory (MB)"); Megatron-Bridge (v0.6.0, training/utils/train_utils.py, report_memory)
# reports 10^9 bytes ("memory (GB)") under torch's memory_stats names.
MEMORY_REPORT = re.compile(RECORD_START + r"\[Rank \d+\] \(after (\d+) iterations\) memory \((MB|GB)\)")
MEMORY_UNIT_GIB = {"MB": 1 / 1024.0, "GB": 1e9 / 2.0 ** 30}
PRIMUS_PREFIX = re.compile(r"\[rank-\d+/\d+\]\s*\[(?:INFO|WARNING|DEBUG|ERROR)\s*\]")
# torchtitan 0.3.0 (components/metrics.py, MetricsProcessor.log, through tools/logging.py's "[titan] %(asctime)s -
# %(name)s - %(levelname)s - " format): "step:  1  loss: 12.25000  grad_norm:  3.1416  memory: 10.50GiB(13.27%)
# tps: 6,123  tflops: 300.12  mfu: 30.35%", fields two spaces apart. Its validation line ("validate step:") is no step.
TITAN_STEP = re.compile(r"^(?:\d+: )?(?:\[(?:rank|default)\d+\]: ?)?\[titan\] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - \S+ - "
                        r"INFO - step:\s*(\d+)\b")
TITAN_FIELD = re.compile(r"(\w+): +(\S+)")
# torchtitan's field -> the record's key: its loss and grad norm, and as raw figures its tokens/s per device, TFLOP/s
# (its own FLOPs convention), MFU and rank 0's peak reserved memory since the previous line.
TITAN_FIELDS = {"loss": "loss", "grad_norm": "grad_norm", "tps": "fw_tokens_per_s_per_gpu",
                "tflops": "fw_tflop_per_s_per_gpu", "mfu": "fw_mfu_pct", "memory": "fw_mem_reserved_gib"}
TITAN_NUMBER = re.compile(r"^([-+]?(?:[\d,]+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)(?:GiB\([\d.]+%\)|%)?$",
                          re.IGNORECASE)
# Megatron-LM's and Megatron-Bridge's evaluation report (training.py / eval.py, evaluate_and_print_results; printed
# by the last rank with no timestamp), also printed by TPrimat's trainers and NeMo timer with the evaluation's
# seconds: " validation loss at iteration 50 | lm loss value: 6.1E+00 | lm loss PPL: 4.5E+02 |", the one after
# training "... at iteration 100 on validation set | ...". Another set's ("validation-0 loss at") is not read.
VALIDATION = re.compile(RECORD_START + r"\s*validation loss at iteration (\d+)(?: on validation set)?\s*\|")
VALIDATION_FIELDS = {"lm loss value": "loss", "evaluation time (s)": "eval_time_s",
                     "wall time since step 1 (s)": "wall_s"}  # the last two: TPrimat's line (train.common.evaluation)
STEP_MARKER = "TPRIMAT_STEP"  # train/common/step_timer.py: NeMo's and torchtitan's device-synchronised step time
# and every rank's peak memory
STEP_LINE = re.compile(RECORD_START + STEP_MARKER + r" (.*)$")
GIB = 2.0 ** 30

# Field names (lower case, single spaces) -> what they are; names not listed are not parsed at all.
MEGATRON_FIELDS = {"elapsed time per iteration (ms)": "step_time_ms", "learning rate": "lr", "lm loss": "loss",
                   "grad norm": "grad_norm", "number of skipped iterations": "skipped",
                   "number of nan iterations": "nan", "global batch size": "gbs"}
MEMORY_FIELDS = {"max allocated": "allocated", "max reserved": "reserved", "peak_allocated_mem": "allocated",
                 "peak_reserved_mem": "reserved"}
# NeMo's own timing and memory are raw figures (fw_*): TimingCallback's host time without a device sync,
# rank 0's peak reserved memory, and "memory_allocated", rank 0's current allocation (not a peak).
NEMO_FIELDS = {"global_step": "global_step", "lr": "lr", "reduced_train_loss": "loss", "train_loss": "loss",
               "train_step_timing in s": "fw_step_time_s", "grad_norm": "grad_norm", "grad norm": "grad_norm",
               "global_batch_size": "gbs", "peak_memory_usage": "fw_mem_reserved_gib",
               "max_memory_reserved": "fw_mem_reserved_gib", "memory_allocated": "fw_mem_allocated_now_gib",
               "max_memory_allocated": "fw_mem_allocated_gib", "tflops_per_gpu": "fw_tflops"}


@lru_cache(maxsize=512)
def _megatron_kind(raw_name: str) -> str | None:
    name = " ".join(raw_name.lower().split())
    if name in MEGATRON_FIELDS:
        return MEGATRON_FIELDS[name]
    if "tflop" in name:  # "throughput per GPU (TFLOP/s/GPU)", later "compute per GPU (TFLOP/s/GPU)"
        return "fw_tflops"
    if "tokens" in name and "gpu" in name:  # "tokens per GPU (tokens/s/GPU)", "tokens/s/GPU inst/harmonic mean"
        return "fw_tokens"
    if name.startswith(("hip mem usage", "rocm mem usage")):  # Primus: GiB (older builds spell it "GB")
        return "device_mem"
    return None


@lru_cache(maxsize=64)
def memory_kind(raw_name: str) -> str | None:
    return MEMORY_FIELDS.get(" ".join(raw_name.lower().split()))


@lru_cache(maxsize=512)
def _nemo_kind(raw_name: str) -> str | None:
    return NEMO_FIELDS.get(" ".join(raw_name.lower().split()))


def _value(text: str) -> list[float] | None:
    """A field's numbers: "9.1E+00" -> [9.1]; "9004.1/9010.7" and "9004.1 (avg 9010.7)" -> [9004.1, 9010.7]; units
    dropped.

    None unless every piece is a whole number, so a value cut or glued to other output is refused.
    """
    try:
        return [float(text)]
    except ValueError:
        pass
    paired = WITH_AVERAGE.match(text)
    numbers = []
    for piece in paired.groups() if paired else text.split("/"):
        match = NUMBER.match(piece.strip())
        if not match:
            return None
        numbers.append(float(match.group(1)))
    return numbers


def _count(value: float) -> int:
    """A count of NaN or skipped iterations; one that is no whole number >= 0 counts as one (flagged, not lost)."""
    return int(value) if math.isfinite(value) and value >= 0 and value.is_integer() else 1


def _batch(value: float) -> int | None:
    """A global batch size: a whole number above 0, else none (a damaged field)."""
    return int(value) if math.isfinite(value) and value >= 1 and value.is_integer() else None


def record_fields(rest: str, complete: bool, kind_of) -> Iterable[tuple[str, list[float]]]:
    """(kind, numbers) for each known `name: value` between | separators.

    A line that was cut off (complete=False) loses its last field: its value may be partial.
    """
    segments = rest.split("|")
    if not complete:
        segments = segments[:-1]
    yield from _fields(segments, kind_of)


def _fields(segments: Iterable[str], kind_of) -> Iterable[tuple[str, list[float]]]:
    for segment in segments:
        name, sep, value = segment.rpartition(":")
        if not sep:
            continue
        kind = kind_of(name)
        if kind is None:
            continue
        numbers = _value(value)
        if numbers is not None:
            yield kind, numbers


def new_record(step: int) -> dict:
    return {"step": step, "step_time_s": None, "loss": None, "lr": None, "grad_norm": None, "skipped": 0, "nan": 0,
            "mem_allocated_gib": None, "mem_reserved_gib": None}


def _whole_memory_field(segment: str) -> bool:
    """Primus's memory field with a value for each of its names and the last one a percentage ("hip mem
    usage/free/total/usage_ratio: 150.21GB/41.79GB/192.00GB/78.23%"): none of its shorter pieces is."""
    name, _, value = segment.rpartition(":")
    pieces = value.strip().split("/")
    return _megatron_kind(name) == "device_mem" and len(pieces) == name.count("/") + 1 and pieces[-1].endswith("%")


def megatron_record(step: int, rest: str, complete: bool = False) -> tuple[dict, int | None, bool]:
    """One Megatron/Primus iteration line -> (record, global batch size, shows Primus fields).

    Megatron-LM ends every field with " |", so text after the last "|" is no field: a line cut off, or cut short by
    another rank's output ("elapsed time per iteration (ms): 9" and a line end is a piece of 9295.0). Primus v26.5
    re-renders the line without that "|" and with its memory field last (utils/upstream/table.py: primus-v26.5 "rendered
    line"), which counts only in a whole line (complete) and in its whole form.
    """
    record, gbs, primus = new_record(step), None, False
    segments = rest.split("|")
    last = segments.pop()
    fields = _fields(segments + ([last] if complete and _whole_memory_field(last) else []), _megatron_kind)
    for kind, numbers in fields:
        first = numbers[0]
        average = numbers[1] if len(numbers) > 1 else None
        if kind == "step_time_ms":
            record["step_time_s"] = first / 1000.0
            if average is not None:
                record["fw_step_time_avg_s"] = average / 1000.0
        elif kind in ("lr", "loss", "grad_norm"):
            record[kind] = first
        elif kind in ("skipped", "nan"):
            record[kind] = _count(first)
        elif kind == "gbs":
            gbs = _batch(first)
        elif kind in ("fw_tflops", "fw_tokens"):
            key = "fw_tflop_per_s_per_gpu" if kind == "fw_tflops" else "fw_tokens_per_s_per_gpu"
            record[key] = first
            if average is not None:
                record[key + "_avg"] = average
        elif kind == "device_mem":
            record.setdefault("mem_device_used_gib", first)
            primus = True
    return record, gbs, primus


def nemo_record(iteration: int, rest: str, complete: bool) -> tuple[dict, int | None]:
    """One NeMo progress line -> (record, global batch size); NeMo counts from zero."""
    record, gbs = new_record(iteration + 1), None
    for kind, numbers in record_fields(rest, complete, _nemo_kind):
        first = numbers[0]
        if kind == "global_step" and math.isfinite(first):
            record["step"] = int(first) + 1
        elif kind in ("lr", "loss", "grad_norm", "fw_step_time_s"):
            record[kind] = first
        elif kind == "gbs":
            gbs = _batch(first)
        elif kind.startswith("fw_mem_"):  # bytes
            record[kind] = first / GIB
        elif kind == "fw_tflops":  # NeMo's FLOPs callback: its own (non-causal) convention
            record["fw_tflop_per_s_per_gpu"] = first
    return record, gbs


def validation_point(step: int, rest: str) -> dict:
    """One validation report -> {step, loss, eval_time_s, wall_s} (None where the line does not say)."""
    point = {"step": step, "loss": None, "eval_time_s": None, "wall_s": None}
    for kind, numbers in record_fields(rest, False, lambda name: VALIDATION_FIELDS.get(" ".join(name.split()))):
        point[kind] = numbers[0]
    return point


def titan_record(step: int, rest: str, complete: bool) -> dict:
    """One torchtitan metrics line -> its record; a value that is no whole number (cut, glued, "N/A") is left out,
    and so is the last field of a line cut off."""
    record = new_record(step)
    fields = TITAN_FIELD.findall(rest)
    if not complete:
        fields = fields[:-1]
    for name, text in fields:
        key, match = TITAN_FIELDS.get(name), TITAN_NUMBER.match(text)
        if key and match:
            record[key] = float(match.group(1).replace(",", ""))
    return record


# The timestamp a record's prefix carries (Megatron's "[2025-01-31 12:00:00]", Primus's "[20250131 12:00:00]",
# NeMo's "[NeMo I 2025-01-31 12:00:00 ...]"), in the node's local time, to the second.
STAMP = re.compile(r"\[(?:NeMo [IWDEC] )?(\d{4})-?(\d\d)-?(\d\d) (\d\d):(\d\d):(\d\d)")


def stamped_step(line: str) -> tuple[int, float] | None:
    """(step, its end in time.time() seconds, to the second) from an iteration line whose prefix has a timestamp: a
    step's line is printed as it ends. NeMo's progress lines count from zero."""
    megatron = MEGATRON_ITERATION.match(line)
    nemo = None if megatron else NEMO_ITERATION.match(line)
    match = megatron or nemo
    stamp = STAMP.search(line[:match.end()]) if match else None
    if match is None or stamp is None:
        return None
    step = int(match.group(1)) if megatron else int(match.group(2)) + 1
    return step, time.mktime((*map(int, stamp.groups()), 0, 0, -1))  # type: ignore[arg-type]
