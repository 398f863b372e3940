"""evaluate.validate's check that a result's step breakdown and memory peaks are its own series' (issue 45).

performance.breakdown and the memory peaks are written from the per-step series the result carries
(utils.spec.result.build_result), so they are recomputed from those series here with the writer's own functions:
a breakdown or a peak edited in result.json, lowered to flatter a run or raised to sink one, is named with the
value its series give. What holds is equality, not a bound: the writer's peak is the series' maximum (each step's
mem_* value is already the framework's peak since the start, e.g. torch's max_memory_allocated), and the host's peak
the largest of its series and of host_rss_gib_per_worker (a worker's peak can exceed the sampled largest worker's).
memory.peak_device_used_gib has no series in a result (the driver's per-step readings are not kept), so it stays
bounded only (evaluate.integrity.memory).
"""

from __future__ import annotations

from typing import Mapping

from evaluate.effective_settings import same
from utils.spec import metrics
from utils.spec.result_types import Section, typed

Problem = tuple[str, str]  # (check, message), as evaluate.integrity's
BREAKDOWN_FIELDS = ("forward_s", "backward_s", "optimizer_s", "other_s", "step_time_s", "count")
# memory field -> the per-step series whose maximum its writer takes
PEAK_SERIES = {"peak_allocated_gib": "mem_allocated_gib", "peak_reserved_gib": "mem_reserved_gib",
               "peak_host_rss_gib": "mem_host_rss_gib"}


def _records(series: Section) -> list[dict]:
    """The step records the writer had, as far as the breakdown reads them (a short column reads as unmeasured:
    evaluate.integrity.series names it)."""
    columns = {key: getattr(series, key) or () for key in ("step_time_s",) + metrics.BREAKDOWN_KEYS}
    return [{"step": step, **{key: column[i] if i < len(column) else None for key, column in columns.items()}}
            for i, step in enumerate(series.step)]


def _shown(value: float | int | None) -> str:
    return "none" if value is None else f"{value:.6g}"


def breakdown(r: Section) -> list[Problem]:
    """performance.breakdown is utils.spec.metrics.window_breakdown of the series' forward/backward/optimizer and
    step times over the steady window the step times give; absent exactly where no window step carries all three."""
    series, performance = r.series, r.performance
    recorded = performance.breakdown
    window = metrics.steady_window(series.step, series.step_time_s, performance.warmup_skip)
    again = metrics.window_breakdown(_records(series), window.first_step, window.last_step) if window else None
    if recorded is None and again is None:
        return []
    if again is None:
        return [("breakdown", "performance.breakdown is in the result, but no steady-state step of its series carries "
                 "forward_s, backward_s and optimizer_s to give it")]
    if recorded is None:
        return [("breakdown", f"performance.breakdown is missing, its series give one over {again['count']} step(s) "
                 f"(forward_s {_shown(again['forward_s'])})")]
    return [("breakdown", f"performance.breakdown.{key} is {_shown(getattr(recorded, key))} in the result, "
             f"{_shown(again[key])} from its per-step series")
            for key in BREAKDOWN_FIELDS if not same(getattr(recorded, key), again[key])]


def peaks(r: Section) -> list[Problem]:
    """Each peak of PEAK_SERIES is the most its series reached (the host's: or a worker's peak), none without one."""
    memory, series = r.memory, r.series
    found = []
    for key, column in PEAK_SERIES.items():
        values = [v for v in getattr(series, column) or () if v is not None]
        workers = list(memory.host_rss_gib_per_worker or ()) if key == "peak_host_rss_gib" else []
        again = max(values + workers) if values or workers else None
        recorded = getattr(memory, key)
        if not (recorded is None and again is None) and not same(recorded, again):
            whose = f"the most of series.{column}" + (" and host_rss_gib_per_worker" if workers else "")
            found.append(("memory peak", f"memory.{key} is {_shown(recorded)} in the result, {_shown(again)} {whose}"))
    return found


def problems(result: Mapping | Section) -> list[Problem]:
    """Every check of a schema-valid result's breakdown and memory peaks against its series."""
    r = typed(result)
    return breakdown(r) + peaks(r)
