"""The state of a log read line by line: the run it is in, and each line's step record or settings.

Only the current run is kept: a run appended to the same file, or resumed from a checkpoint, starts a
new one where the iteration counter goes back or a step is printed again with other values
(`Stream._step`); settings printed before a run's first iteration belong to that run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from evaluate.logs.formats import Reader, readers, settings_readers, timer_first
from evaluate.logs.records import STEP_LINE, STEP_MARKER, VALIDATION, validation_point
from evaluate.logs.settings import (ARGUMENT, COLLECTIVE_NETWORK, CONFIG_ITEM, CONFIG_REPR, DEVICE_LINE,
                                   EFFECTIVE_MARKER, GPU_STACKS, MICROBATCHES, MOCK_CLASSES, PADDED_VOCAB, PARAMETERS,
                                   argument_value, setting_name)
from utils.frameworks.log_format import GIB, Step, new_record


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
        validation = VALIDATION.match(text) if "validation loss at" in text else None
        if validation:
            self._validation(int(validation.group(1)), text[validation.end():])
            return
        for reader in readers():
            fmt = reader.format
            for marker in fmt.markers:
                if marker in text:
                    break
            else:
                continue
            step = fmt.step(text, complete)
            if step is not None:
                self._format_step(number, reader, step, text, complete)
                return
            memory = fmt.memory(text, complete) if fmt.memory else None
            if memory is not None:
                self.run.memory[memory[0]] = memory[1:]
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

    def _format_step(self, number: int, reader: Reader, step: Step, text: str, complete: bool) -> None:
        """A step line of a registered format, credited to the first refining format that claims it, else to the
        framework the format is registered under."""
        name, fmt = next(((other, refining) for other, refining in reader.claimers if refining.claims(step)),
                         (reader.name, reader.format))
        total = step.total
        if total is None:  # the line names no total: the run's, else the settings printed before its first step
            total = self.run.total if self.run.records else self.pending.printed.get("steps")
        self._step(number, step.record, total, step.gbs, name, complete, step.rest, fmt.redrawn)
        shown = fmt.vendor(step, text) if fmt.vendor else None
        if shown:
            self._vendor(self.run, *shown)

    def _printed(self, text: str) -> None:
        """Settings and hardware printed outside the argument dump (each format's own lines, megatron-core's)."""
        target = self.pending
        for printed in settings_readers():
            printed(text, target.printed)
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
        self._step(number, record, steps, None, "timer", True, payload, False)
        self.run.timed = True

    def _validation(self, step: int, rest: str) -> None:
        """An evaluation of the current run; the one after training at a step already evaluated is the same model
        on (in Megatron-LM) the next validation samples: the first report of a step is kept. One before the first
        step (Megatron-LM's --skip-train, "iteration 0") evaluates no training."""
        if step >= 1:
            self.run.validations.setdefault(step, validation_point(step, rest))

    def _step(self, number: int, record: dict, total: int | None, gbs: int | None, kind: str, complete: bool,
              printed: str, redrawn: bool) -> None:
        """Keep a step of the current run, or start the next run where the step counter restarts.

        kind: the line that printed it (the framework its format is registered under, or timer: TPrimat's
        TPRIMAT_STEP); printed: its text after the iteration number (the values, without the timestamp). The
        counter restarts (runs appended, a run resumed from a checkpoint) where a kind of line goes back to an
        earlier step, or prints the same step again with other values; a line that may be redrawn (a progress
        bar's) restarts only by going back. The same line printed twice is one step; a cut-off line is completed by a later one.
        """
        step, run = record["step"], self.run
        if step < 1:
            self.notes.append(f"line {number}: a step numbered {step} is no step (steps count from 1): ignored")
            return
        again, last = run.printed_lines.get((step, kind)), run.last_step.get(kind, 0)
        if again == printed and step == last:
            return
        restart = bool(run.records) and (step < last or (again is not None and not redrawn))
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
        elif run.framework is None:  # TPrimat's timer line before a step's own line: whose format says it may be
            run.framework = timer_first()
        if gbs is not None:
            run.line_gbs = gbs

    def _start(self, number: int) -> Run:
        run = self.pending
        run.start_line = number
        self.pending = Run(start_line=number)
        return run
