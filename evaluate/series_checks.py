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


# performance.expert_load's fields, each recomputed from series.expert_load_max and expert_load_assigned
EXPERT_LOAD_FIELDS = ("experts", "layers", "steps", "max_over_mean", "max_over_mean_by_layer", "dropped_assignments")


def expert_load(r: Section) -> list[Problem]:
    """performance.expert_load is utils.spec.metrics.expert_load of the series' router counts over the steady window,
    with the model's experts and top-k and the request's tokens per step; absent exactly where the series has none."""
    series, performance, moe = r.series, r.performance, r.model.moe
    columns = {key: getattr(series, key) for key in metrics.EXPERT_LOAD_KEYS}
    recorded = performance.expert_load
    if moe is None or not any(columns.values()):
        return [] if recorded is None else [("expert load", "performance.expert_load is in the result, but its "
                                             "series carries no router counts (or the model has no experts)")]
    records = [{"step": step, **{key: list(column[i]) if i < len(column) and column[i] is not None else None
                                 for key, column in columns.items() if column}} for i, step in enumerate(series.step)]
    window = metrics.steady_window(series.step, series.step_time_s, performance.warmup_skip)
    again = metrics.expert_load(records, window, moe.num_experts, moe.top_k, performance.tokens_per_step)
    if recorded is None or again is None:
        return [] if recorded is again else [("expert load", f"performance.expert_load is {_shown_load(recorded)} in "
                                              f"the result, {_shown_load(again)} from its router counts")]
    return [("expert load", f"performance.expert_load.{key} is {getattr(recorded, key)!r} in the result, "
             f"{again[key]!r} from its router counts")
            for key in EXPERT_LOAD_FIELDS if not _same_load(getattr(recorded, key), again[key])]


def _shown_load(load) -> str:
    return "absent" if load is None else "present"


def _same_load(recorded, again) -> bool:
    if isinstance(again, list):
        return recorded is not None and len(recorded) == len(again) and all(map(same, recorded, again))
    return same(recorded, again)


def problems(result: Mapping | Section) -> list[Problem]:
    """Every check of a schema-valid result's breakdown, memory peaks and experts' load against its series."""
    r = typed(result)
    return breakdown(r) + peaks(r) + expert_load(r)
