"""The state of a log read line by line: the run it is in, and each line's step record or settings.

Only the current run is kept: a run appended to the same file, or resumed from a checkpoint, starts a
new one where the iteration counter goes back or a step is printed again with other values
(`Stream._step`); settings printed before a run's first iteration belong to that run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from evaluate.logs.records import (GIB, MEGATRON_ITERATION, MEMORY_REPORT, MEMORY_UNIT_GIB, NEMO_ITERATION,
                                  PRIMUS_PREFIX, STEP_LINE, STEP_MARKER, TITAN_STEP, VALIDATION, megatron_record,
                                  memory_kind, nemo_record, new_record, record_fields, titan_record,
                                  validation_point)
from evaluate.logs.settings import (ARGUMENT, COLLECTIVE_NETWORK, CONFIG_ITEM, CONFIG_REPR, DEVICE_LINE,
                                   EFFECTIVE_MARKER, GPU_STACKS, GROUP_FIELDS, HIP_MEMORY, MICROBATCHES, MOCK_CLASSES,
                                   PADDED_VOCAB, PARALLEL_GROUP, PARAMETERS, PRIMUS_REDUCE_AMAX,
                                   TITAN_TRAINER, TITAN_TRAINER_FIELDS,
                                   argument_value, setting_name)


@dataclass
class Run:
    """State of one run inside the log stream."""

    start_line: int
    records: dict[int, dict] = field(default_factory=dict)
    last_step: dict[str, int] = field(default_factory=dict)  # the last step each kind of record line printed
    printed_lines: dict[tuple[int, str], str] = field(default_factory=dict)  # (step, kind) -> the text it printed
    total: int | None = None
    framework: str | None = None
    memory: dict[int, tuple[float, float]] = field(default_factory=dict)
    arguments: dict = field(default_factory=dict)
    declared: dict = field(default_factory=dict)
    printed: dict = field(default_factory=dict)  # settings from lines other than the argument dump
    line_gbs: int | None = None
    mock_evidence: str | None = None
    device_name: str | None = None
    gpu_vendor: str | None = None
    vendor_evidence: str | None = None
    networks: set[str] = field(default_factory=set)  # the collective library's networks, every rank's
    timed: bool = False  # a TPRIMAT_STEP line was seen: step time and memory come from TPrimat's own timer
    validations: dict[int, dict] = field(default_factory=dict)  # step -> its evaluation (records.validation_point)


class Stream:
    """Feeds cleaned lines in order and keeps only the current run."""

    def __init__(self) -> None:
        self.run = Run(start_line=1)
        self.runs_found = 0
        # The next run: settings printed before a run's first iteration belong to it.
        self.pending = Run(start_line=1)
        self.error_seen = False
        self.notes: list[str] = []

    def line(self, number: int, text: str, complete: bool) -> None:
        timer = STEP_LINE.match(text) if STEP_MARKER in text else None
        if timer:
            self._timer(number, timer.group(1))
            return
        if "iteration" in text:
            validation = VALIDATION.match(text) if "validation loss at" in text else None
            if validation:
                self._validation(int(validation.group(1)), text[validation.end():])
                return
            nemo = NEMO_ITERATION.match(text) if "Training epoch" in text else None
            if nemo:
                rest = text[nemo.end():]
                record, gbs = nemo_record(int(nemo.group(2)), rest, complete)
                self._step(number, record, int(nemo.group(3)) + 1, gbs, "nemo", complete, rest)
                return
            megatron = MEGATRON_ITERATION.match(text)
            if megatron:
                self._megatron(number, megatron, text, complete)
                return
            memory = MEMORY_REPORT.match(text)
            if memory:
                self._memory(int(memory.group(1)), text[memory.end():], complete, MEMORY_UNIT_GIB[memory.group(2)])
                return
        if "[titan]" in text:
            titan = TITAN_STEP.match(text)
            if titan:
                rest = text[titan.end():]
                total = self.run.total if self.run.records else self.pending.printed.get("steps")
                self._step(number, titan_record(int(titan.group(1)), rest, complete), total, None, "torchtitan",
                           complete, rest)
                return
        if EFFECTIVE_MARKER in text:
            self._declared(text)
        if " ..." in text:
            argument = ARGUMENT.search(text)
            if argument:
                self.pending.arguments[argument.group(1)] = argument_value(argument.group(2))
                if argument.group(1) == "mock_data" and argument.group(2) == "True":
                    self._mock(text)
        if any(name in text for name in MOCK_CLASSES):
            self._mock(text)
        if "Traceback" in text or "out of memory" in text or "OutOfMemoryError" in text:
            self.error_seen = True
        self._printed(text)

    def _megatron(self, number: int, match: re.Match, text: str, complete: bool) -> None:
        rest = text[match.end():]
        record, gbs, primus_fields = megatron_record(int(match.group(1)), rest, complete)
        primus = primus_fields or bool(PRIMUS_PREFIX.search(match.group(0)))
        self._step(number, record, int(match.group(2)), gbs, "prim" if primus else "mega", complete, rest)
        usage = HIP_MEMORY.search(text) if primus_fields else None
        if usage:
            self._vendor(self.run, "amd", usage.group(0))

    def _printed(self, text: str) -> None:
        """Settings and hardware printed outside the argument dump (most of what a NeMo log says)."""
        target = self.pending
        found = PARALLEL_GROUP.search(text)
        if found:
            target.printed[GROUP_FIELDS[found.group(1)]] = len(found.group(2).split(","))
        found = MICROBATCHES.search(text)
        if found:
            target.printed["ga"] = int(found.group(1))
        found = PARAMETERS.search(text)
        if found:
            target.printed["parameters"] = int(found.group(1))
        found = CONFIG_REPR.search(text)
        if found:
            for name, raw in CONFIG_ITEM.findall(found.group(1)):
                value = argument_value(raw.strip().strip("'"))
                key = setting_name(name)
                if key and value is not None:
                    target.printed[key] = value
        found = TITAN_TRAINER.search(text)
        if found:
            target.printed.update(zip(TITAN_TRAINER_FIELDS, map(int, found.groups())))
        found = PRIMUS_REDUCE_AMAX.search(text)
        if found:
            target.printed["fp8_reduce_amax"] = found.group(1) == "True"
        found = PADDED_VOCAB.search(text)
        if found:
            target.printed["padded_vocab_size"] = int(found.group(1) or found.group(2))
        found = DEVICE_LINE.search(text)
        if found and target.device_name is None:
            target.device_name = next(name for name in found.groups() if name)
        for pattern, vendor in GPU_STACKS:
            if pattern.search(text):
                self._vendor(target, vendor, text)
        found = COLLECTIVE_NETWORK.search(text)
        if found:  # communicators are also created once training runs (lazily, at a group's first use)
            for run in (target, self.run) if self.run.records else (target,):
                run.networks.add(found.group(1))

    @staticmethod
    def _vendor(run: Run, vendor: str, text: str) -> None:
        if run.gpu_vendor is None:
            run.gpu_vendor, run.vendor_evidence = vendor, text.strip()[:160]

    def _mock(self, text: str) -> None:
        target = self.pending
        if target.mock_evidence is None:
            target.mock_evidence = text.strip()[:300]

    def _declared(self, text: str) -> None:
        payload = text.split(EFFECTIVE_MARKER, 1)[1].strip()
        try:
            values = json.loads(payload)
        except json.JSONDecodeError:
            return
        if isinstance(values, dict):
            self.pending.declared.update(values)

    def _timer(self, number: int, payload: str) -> None:
        """TPrimat's TPRIMAT_STEP line (train/nemo/timer.py); a line cut or broken by other output is skipped."""
        try:
            values = json.loads(payload)
            step, steps, seconds = int(values["step"]), int(values["steps"]), float(values["step_time_s"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            return
        record = new_record(step)
        record["step_time_s"] = seconds
        for key, name in (("peak_allocated_bytes", "mem_allocated_gib"), ("peak_reserved_bytes", "mem_reserved_gib")):
            if isinstance(values.get(key), (int, float)):
                record[name] = values[key] / GIB
        self._step(number, record, steps, None, "timer", True, payload)
        self.run.timed = True

    def _validation(self, step: int, rest: str) -> None:
        """An evaluation of the current run; the one after training at a step already evaluated is the same model
        on (in Megatron-LM) the next validation samples: the first report of a step is kept. One before the first
        step (Megatron-LM's --skip-train, "iteration 0") evaluates no training."""
        if step >= 1:
            self.run.validations.setdefault(step, validation_point(step, rest))

    def _memory(self, step: int, rest: str, complete: bool, gib_per_unit: float) -> None:
        values = dict(record_fields(rest, complete, memory_kind))
        allocated, reserved = values.get("allocated"), values.get("reserved")
        if allocated and reserved:
            self.run.memory[step] = (allocated[0] * gib_per_unit, reserved[0] * gib_per_unit)

    def _step(self, number: int, record: dict, total: int, gbs: int | None, kind: str, complete: bool,
              printed: str) -> None:
        """Keep a step of the current run, or start the next run where the step counter restarts.

        kind: the line that printed it (mega, prim, nemo, torchtitan or timer: TPrimat's TPRIMAT_STEP); printed: its
        text after the iteration number (the values, without the timestamp). The counter restarts
        (runs appended, a run resumed from a checkpoint) where a kind of line goes back to an earlier step, or
        prints the same step again with other values; NeMo's progress line may be redrawn, so only going back
        counts there. The same line printed twice is one step; a cut-off line is completed by a later one.
        """
        step, run = record["step"], self.run
        if step < 1:
            self.notes.append(f"line {number}: a step numbered {step} is no step (steps count from 1): ignored")
            return
        again, last = run.printed_lines.get((step, kind)), run.last_step.get(kind, 0)
        if again == printed and step == last:
            return
        restart = bool(run.records) and (step < last or (again is not None and kind != "nemo"))
        if not run.records or restart:
            if restart:
                self.runs_found += 1
            self.run = run = self._start(number)
        if complete:
            run.printed_lines[(step, kind)] = printed
        else:
            record["truncated"] = True
        existing = run.records.get(step)
        if existing is None:
            run.records[step] = record
        else:  # printed by another kind of line (NeMo's and TPrimat's), or completing a cut-off line
            for key, value in record.items():
                if existing.get(key) is None:
                    existing[key] = value
        run.last_step[kind] = max(run.last_step.get(kind, 0), step)
        run.total = total if total is not None else run.total
        if kind != "timer":
            run.framework = kind
        elif run.framework is None:  # TPrimat's timer line before a step's own line: NeMo's, unless one says else
            run.framework = "nemo"
        if gbs is not None:
            run.line_gbs = gbs

    def _start(self, number: int) -> Run:
        run = self.pending
        run.start_line = number
        self.pending = Run(start_line=number)
        return run
