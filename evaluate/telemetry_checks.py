"""The telemetry section again, from the run's own samples: a result's power, energy, clocks, temperatures and throttle
events are not taken on faith (issue 45).

The evidence is every node's telemetry.jsonl beside result.json (node N's under nodeN/, as the launcher leaves
them) and the steps on their clock (steps.jsonl, else train.log's timestamps, else rebuilt from the run's end):
evaluate.collect hands them over as Loaded.beside, from a directory or a zip. The section is summarised again by
the writer's own function, utils.machine.energy.summarise, on the clock step_clock rebuilds as the judge rebuilt it
(the judge calls step_clock too), so a figure edited in result.json differs from its recomputation and is named with
both values.

A result with power or energy figures whose samples are not beside it fails: its energy per token would enter the
energy and cost rankings (evaluate.comparison.energy ranks every result validate passes) on the writer's word alone.
A result read without its run directory (the judge's own check, the history store) has no Loaded.beside and is not
checked here.
"""

from __future__ import annotations

import json
import zipfile
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any, BinaryIO, Callable, Mapping

from utils import run_files
from evaluate.effective_settings import same
from evaluate.logs.files import stamped_ends
from utils.files import MAX_JSON_BYTES
from utils.machine import energy, telemetry
from utils.spec.result_types import Section, typed

Problem = tuple[str, str]  # (check, message), as evaluate.integrity's
STEPS_FILE = run_files.STEPS
LOG_FILE = run_files.LOG
# The section's figures the recomputation must give again (the rest are notes and names, or inputs of the summary).
FIGURES = ("samples", "mean_power_w", "max_power_w", "energy_per_step_j", "tokens_per_joule", "wh_per_million_tokens",
           "min_median_sm_clock_ratio", "max_temp_gpu_c", "max_temp_mem_c")
EVENT_FIGURES = ("index", "start_s", "duration_s", "first_step", "last_step")
GPU_FIGURES = ("index", "samples", "mean_power_w", "max_power_w", "energy_j", "median_sm_clock_mhz",
               "min_sm_clock_mhz", "sm_clock_max_mhz", "median_sm_clock_ratio", "max_temp_gpu_c", "max_temp_mem_c",
               "mean_util_pct")
SHOWN = 6  # differing fields named in the one line


def step_clock(result: Mapping | Section, steps_text: Callable[[], str], log_ends: Callable[[], dict[int, float]],
               ended_at: str | None) -> tuple[list[energy.Step], str]:
    """Each step's end on telemetry.jsonl's clock and where it came from: the trainer's steps.jsonl (mega, fsdp,
    autotp), else the timestamps of the log's iteration lines (to the second), else reconstructed backwards from
    the run's end with the step times (the end includes the run's teardown: an upper bound). The readers raise
    OSError where their file is absent."""
    series = typed(result).series
    steps, times = (series.step or (), series.step_time_s or ()) if series else ((), ())
    durations = {step: t for step, t in zip(steps, times) if t is not None}
    ends: dict[int, float] = {}
    try:
        for line in steps_text().splitlines():
            item = json.loads(line)
            if item.get("time_s") is not None:
                ends[int(item["step"])] = float(item["time_s"])
    except (OSError, ValueError, KeyError, TypeError):
        ends = {}
    source = run_files.STEPS
    if not ends:
        try:
            ends, source = log_ends(), "log_timestamps"
        except OSError:
            ends = {}
    if not ends and durations and ended_at:
        source, clock = "reconstructed_from_run_end", datetime.fromisoformat(ended_at).timestamp()
        for step in sorted(durations, reverse=True):
            ends[step] = clock
            clock -= durations[step]
    return [energy.Step(step, ends[step], durations[step]) for step in sorted(ends) if step in durations], source


def _absent(name: str) -> Callable[[], Any]:
    def read() -> Any:
        raise OSError(f"no {name} beside the result")
    return read


def side_text(opened: Callable[[], BinaryIO]) -> str:
    """A side file's text, refused (ValueError) beyond what any TPrimat file holds (a zip member may unpack to more)."""
    with opened() as handle:
        data = handle.read(MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise ValueError(f"unpacks to more than {MAX_JSON_BYTES >> 20} MiB, far more than any TPrimat file")
    return data.decode("utf-8", "replace")


def _stamped(opened: Callable[[], BinaryIO]) -> dict[int, float]:
    with opened() as handle:
        return stamped_ends(handle)


def steady_steps(r: Section) -> tuple[int, int] | None:
    """The steps a result's figures are measured over, its performance.window (utils.machine.stragglers.steady_window,
    which the judge calls on the plain result it writes, read on the typed one)."""
    window = r.performance.window if r.performance else None
    return (window.first_step, window.last_step) if window else None


def recomputed(r: Section, beside: dict[str, Callable[[], BinaryIO]]) -> dict[str, Any]:
    """The section utils.machine.energy.summarise gives from the samples and steps beside the result."""
    nnodes = r.parallelism.nnodes or 1
    names = [telemetry.FILE] + [f"node{n}/{telemetry.FILE}" for n in range(1, nnodes)]
    records = [telemetry.read(PurePosixPath(name), side_text(beside[name]).splitlines())
               for name in names if name in beside]
    steps_file, log = beside.get(STEPS_FILE), beside.get(LOG_FILE)
    steps, clock = step_clock(r, (lambda: side_text(steps_file)) if steps_file else _absent(STEPS_FILE),
                              (lambda: _stamped(log)) if log else _absent(LOG_FILE), r.run.ended_at)
    per_node = None if r.platform == "cpu" else max(1, r.parallelism.num_gpus // nnodes)
    # no interval of the request's: each record's own (its start line)
    again = energy.summarise(records, steps, steady_steps(r), r.training.gbs * r.training.seq_len,
                             r.telemetry.interval_ms or 0, clock, per_node)
    bad = next((line for record in records for line in record.bad_lines), None)
    return {**again, "bad_line": bad}


def _differences(ours: Section, theirs: dict, keys: tuple[str, ...], where: str) -> list[str]:
    """Each of keys on which the result's entry (typed) and the recomputed one (summarise's dict) differ."""
    pairs = {key: (getattr(ours, key), theirs.get(key)) for key in keys}
    return [f"{where}.{key} is {mine} in the result, {again} from the samples" for key, (mine, again) in pairs.items()
            if not (mine is again is None or (mine is not None and again is not None
                                              and same(float(mine), float(again))))]


def problems(result: Mapping | Section, beside: dict[str, Callable[[], BinaryIO]] | None) -> list[Problem]:
    """The telemetry section's figures against their recomputation from the samples; none for a section without
    figures (telemetry off, or left out by the judge: whatever its flags say, a figure is checked) or a result read
    without its run directory (beside None)."""
    r = typed(result)
    section = r.telemetry
    if beside is None or not section or not (any(getattr(section, key) is not None for key in FIGURES)
                                             or section.per_gpu or section.throttle_events):
        return []
    if telemetry.FILE not in beside:
        figured = [key for key in ("mean_power_w", "tokens_per_joule") if getattr(section, key) is not None]
        return [("telemetry evidence", f"no {telemetry.FILE} beside the result: its {' and '.join(figured)} cannot be "
                 "recomputed, and an energy figure without its samples does not rank")] if figured else []
    try:
        again = recomputed(r, beside)
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        return [("telemetry evidence", f"the samples beside the result cannot be read: {err}")]
    if again["bad_line"]:
        return [("telemetry evidence", f"{again['bad_line']}: the judge leaves out a section from such samples")]
    found = _differences(section, again, FIGURES, "telemetry")
    gpus, their_gpus = section.per_gpu or (), again["per_gpu"]  # again: summarise's dict, not the result
    events, their_events = section.throttle_events or (), again["throttle_events"]
    if len(gpus) != len(their_gpus):
        found.append(f"telemetry.per_gpu has {len(gpus)} device(s) in the result, {len(their_gpus)} from the samples")
    for n, (ours, theirs) in enumerate(zip(gpus, their_gpus)):
        found += _differences(ours, theirs, GPU_FIGURES, f"telemetry.per_gpu[{n}]")
    if len(events) != len(their_events):
        found.append(f"telemetry.throttle_events has {len(events)} event(s) in the result, {len(their_events)} from "
                     "the samples")
    for n, (ours, theirs) in enumerate(zip(events, their_events)):
        found += _differences(ours, theirs, EVENT_FIGURES, f"telemetry.throttle_events[{n}]")
        if (ours.reason, ours.steady) != (theirs["reason"], theirs["steady"]):
            found.append(f"telemetry.throttle_events[{n}] is {ours.reason} (steady {ours.steady}) in "
                         f"the result, {theirs['reason']} (steady {theirs['steady']}) from the samples")
    return [("telemetry evidence", named(found))] if found else []


def named(found: list[str]) -> str:
    """The differences in one line: the first SHOWN, and how many more there are."""
    more = f" (and {len(found) - SHOWN} more)" if len(found) > SHOWN else ""
    return "; ".join(found[:SHOWN]) + more
