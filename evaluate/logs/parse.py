"""Streaming reader of training logs in the formats the frameworks register (utils.frameworks.log_format; Megatron-LM's,
Primus's, NeMo's and torchtitan's: ../shared/reference/log-formats.md).

Lines are read one at a time, and only the current run's steps are kept, so memory does not grow
with the size of the log. A step is a line the framework printed: its record at the start of the
line, after nothing but a launcher's rank label and the framework's own prefix; the same text quoted
by a traceback is no step. Fields are found by name, never by position, and every field but the
iteration number is optional. What the parsers survive: ANSI colour codes, carriage returns and
CRLF line ends, other ranks' output interleaved or glued into a line (a value is taken only when
the whole field is a number, and a Megatron field only when its closing "|" follows), a last line
cut off (flagged as truncated), nan/inf and step times of 0 or below (kept as float nan: utils.spec.result
turns them into flagged nulls), settings that are no number where one belongs (left out, named), and
several runs appended to one file or a run resumed from a checkpoint (split where the iteration
counter goes back or a step is printed again with other values; the last run is returned).

Besides the steps, the parsers read the settings a log prints, so that a log from elsewhere needs
no run request: Megatron-LM's and Primus's argument dump (layout, batch, steps, precision, LR
schedule, seed, architecture), the global batch size of every iteration line, the lines NeMo's and
megatron-core's own logging prints (parallel groups, micro-batch count, parameter count, the
OptimizerConfig and GPTDatasetConfig reprs), torchtitan's "Trainer is initialized with" line, TPrimat's
TPRIMAT_EFFECTIVE lines (and, in NeMo and torchtitan runs, its TPRIMAT_STEP lines: the step time and peak memory),
and the hardware a
log may name: a device line (nvidia-smi -L, rocm-smi, amd-smi) or the collective library's
version (NCCL +cuda, RCCL), and Primus's HIP memory fields. With NCCL_DEBUG=INFO, NCCL and RCCL
name the network each communicator uses: "IB" (RDMA, over InfiniBand or RoCE) or "Socket" (TCP).

The reading is split by job: evaluate/logs/files.py reads the files (block by block, the tail kept),
evaluate/logs/stream.py follows the runs line by line, asking the registered formats (evaluate/logs/formats.py) for
their step lines and settings, evaluate/logs/records.py reads the lines common to every format and
evaluate/logs/settings.py the settings, in TPrimat's names.

Public: parse_logs, missing_steps, step_ranges, collective_network (and evaluate.logs.settings.complete_batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterable, Sequence

from evaluate.logs.files import clean_tail, read_lines
from evaluate.logs.formats import by_name, compatible
from evaluate.logs.settings import effective
from evaluate.logs.stream import Stream


@dataclass
class ParsedLog:
    """What the logs say about the last run they hold."""

    framework: str | None  # detected from the line format: the framework it is registered under (None: no step line)
    records: list[dict]  # per-step records of the last run, by step (utils.spec.result's shape, plus fw_* raw figures)
    total_steps: int | None  # the run's planned steps, from "iteration n/total"
    truncated: bool  # a line was cut off (a file did not end with a line end)
    runs_found: int  # runs appended in the logs (restarts of the iteration counter + 1)
    effective: dict  # settings read back: argument dump, TPRIMAT_EFFECTIVE lines, iteration lines
    mock_evidence: str | None  # the first line showing synthetic data, if any
    error_seen: bool  # a traceback or out-of-memory message appeared
    tail: list[str]  # the last lines of the last log (for error excerpts)
    device_name: str | None  # the accelerator a device line names (nvidia-smi -L, rocm-smi, amd-smi)
    gpu_vendor: str | None  # "nvidia" | "amd" as the GPU stack shows it (NCCL +cuda, RCCL, HIP memory fields)
    vendor_evidence: str | None  # the line that showed gpu_vendor
    warnings: list[str] = field(default_factory=list)
    lines_read: int = 0
    validations: list[dict] = field(default_factory=list)  # the last run's evaluations by step: step, loss, eval_time_s


def parse_logs(paths: Sequence[str | Path | BinaryIO], framework: str | None = None) -> ParsedLog:
    """Parse logs (in order, as one stream) into the last run's per-step records and settings.

    framework: what the caller knows the log to be (a framework whose entry names a log format); a different
    detected format is reported in warnings. Never raises on content: a log with no iteration line returns
    no records, and the caller decides.
    """
    if framework is not None and framework not in by_name():
        raise ValueError(f"no log format for framework {framework!r}; expected one of {', '.join(by_name())}")
    stream = Stream()
    lines, truncated, tail = read_lines([Path(p) if isinstance(p, str) else p for p in paths], stream)
    run = stream.run if stream.run.records else stream.pending
    records = [run.records[step] for step in sorted(run.records)]
    notes = stream.notes
    untimed = by_name()[run.framework].untimed if run.framework else None
    if untimed and records and not run.timed:
        notes.append(untimed(records))
    for record in records:  # a step time of 0 or below is no duration: flagged with the nan/inf values
        seconds = record["step_time_s"]
        if seconds is not None and seconds <= 0:
            notes.append(f"step {record['step']}: step time {seconds:g} s is no duration (flagged like nan)")
            record["step_time_s"] = math.nan
    for step, (allocated, reserved) in run.memory.items():
        target = next((r for r in reversed(records) if r["step"] <= step), None)
        if target is not None:
            target["mem_allocated_gib"], target["mem_reserved_gib"] = allocated, reserved
    if stream.runs_found:
        notes.append(f"the log holds {stream.runs_found + 1} runs (the iteration counter restarts); "
                     f"the last one, from line {run.start_line}, is used")
    present = {k for k in ("step_time_s", "loss", "lr", "grad_norm") if any(r[k] is not None for r in records)}
    for record in records:
        lacking = sorted(k for k in present if record[k] is None)
        if lacking:
            notes.append(f"step {record['step']} lacks {', '.join(lacking)} (its line was broken by other output "
                         "or cut off): null there")
    if truncated:
        notes.append("the log ends in the middle of a line (the run was cut off)")
    if framework and run.framework and not compatible(framework, run.framework):
        notes.append(f"the log looks like {run.framework}, not {framework} as given")
    settings = effective(run, notes)
    return ParsedLog(framework=run.framework, records=records, total_steps=run.total, truncated=truncated,
                     runs_found=stream.runs_found + (1 if records else 0), effective=settings,
                     mock_evidence=run.mock_evidence, error_seen=stream.error_seen, tail=clean_tail(tail),
                     device_name=run.device_name, gpu_vendor=run.gpu_vendor, vendor_evidence=run.vendor_evidence,
                     warnings=notes, lines_read=lines,
                     validations=[run.validations[step] for step in sorted(run.validations)])


def missing_steps(parsed: ParsedLog) -> list[int]:
    """The steps up to the last one recorded that the framework should have printed and did not.

    Megatron prints every log_interval-th iteration (the argument dump's, else every one), so a gap is a
    line lost (cut, broken beyond recognition, or never printed); steps after the last one recorded are
    the run's end, which steps_completed and the status already say.
    """
    interval = parsed.effective.get("log_interval") or 1
    seen = {record["step"] for record in parsed.records}
    last = max(seen, default=0)
    return [step for step in range(interval, last + 1, interval) if step not in seen]


def step_ranges(steps: Iterable[int]) -> str:
    """Steps in a few words: [4, 5, 6, 9] -> "4-6, 9"."""
    spans: list[list[int]] = []
    for step in sorted(set(steps)):
        if spans and step == spans[-1][1] + 1:
            spans[-1][1] = step
        else:
            spans.append([step, step])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def collective_network(paths: Sequence[str | Path]) -> dict:
    """The network the collective library used, as the logs name it: collective_transport and, where known,
    collective_rdma (for a result whose trainer wrote its own effective settings)."""
    return {key: value for key, value in parse_logs(paths).effective.items() if key.startswith("collective_")}
