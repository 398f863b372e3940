"""The result's telemetry section: what the node's devices drew, clocked and throttled over the steady steps.

Input: each node's telemetry record (utils/machine/telemetry.py) and the steps on the same clock (each step's end,
time.time() seconds, and its duration). Energy comes from the device's cumulative counter where every
device of the run has one (interpolated at the window's edges), else from the sampled power integrated over
time (trapezoids), and the section says which. A figure no device reported is absent, never zero.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from utils.machine.telemetry import Record

# clock-event reasons that are not a slowdown of the run: the GPU idled, or the user set its clocks.
NOT_THROTTLE = frozenset({"applications_clocks", "display_clock"})
OFF_NOTE = "telemetry off (TELEMETRY=0): nothing was sampled"


@dataclass(frozen=True)
class Step:
    """One step on the telemetry's clock: [end_s - step_time_s, end_s]."""

    step: int
    end_s: float
    step_time_s: float

    @property
    def start_s(self) -> float:
        return self.end_s - self.step_time_s


def off_section() -> dict[str, Any]:
    return {"enabled": False, "method": None, "interval_ms": None, "complete": True, "note": OFF_NOTE}


def _interpolate(points: Sequence[tuple[float, float]], at: float) -> float | None:
    """The value of a sampled curve at `at`, linear between samples; None outside them."""
    if not points or at < points[0][0] or at > points[-1][0]:
        return None
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t0 <= at <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (at - t0) / (t1 - t0)
    return points[-1][1]


def counter_energy(points: Sequence[tuple[float, float]], begin: float, end: float) -> float | None:
    """Joules between begin and end from a cumulative counter (samples (time, J)); None when the samples do not
    span the window."""
    first, last = _interpolate(points, begin), _interpolate(points, end)
    return None if first is None or last is None else last - first


def power_integral(points: Sequence[tuple[float, float]], begin: float, end: float) -> float | None:
    """Joules between begin and end from sampled power (time, W), trapezoids; None when the samples do not span
    the window."""
    edge_begin, edge_end = _interpolate(points, begin), _interpolate(points, end)
    if edge_begin is None or edge_end is None:
        return None
    inner = [(begin, edge_begin), *[(t, w) for t, w in points if begin < t < end], (end, edge_end)]
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(inner, inner[1:]))


def throttle_events(samples: Sequence[dict[str, Any]], interval_s: float, steps: Sequence[Step],
                    window: tuple[float, float] | None) -> list[dict[str, Any]]:
    """Each run of consecutive samples with a reason active: from its first sample to the first sample without it
    (or one interval after its last), the steps it overlapped and whether it touched the steady window."""
    events: list[dict[str, Any]] = []
    open_since: dict[str, float] = {}
    last_seen: dict[str, float] = {}

    def close(reason: str, until: float) -> None:
        begin = open_since.pop(reason)
        hit = [s.step for s in steps if s.start_s < until and s.end_s > begin]
        events.append({"reason": reason, "start_s": round(begin, 3), "duration_s": round(until - begin, 3),
                       "first_step": min(hit) if hit else None, "last_step": max(hit) if hit else None,
                       "steady": window is not None and begin < window[1] and until > window[0]})

    for sample in samples:
        if "throttle" not in sample:
            continue
        now, active = sample["time_s"], set(sample["throttle"]) - NOT_THROTTLE
        for reason in [r for r in open_since if r not in active]:
            close(reason, now)
        for reason in active:
            open_since.setdefault(reason, now)
            last_seen[reason] = now
    for reason in list(open_since):
        close(reason, last_seen[reason] + interval_s)
    return sorted(events, key=lambda e: e["start_s"])


def _stats(values: Iterable[float]) -> list[float]:
    return [float(v) for v in values if v is not None]


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _own(record: Record, index: int) -> list[dict[str, Any]]:
    return [s for s in record.samples if s.get("index") == index]


def has_counter(record: Record, index: int) -> bool:
    return sum(1 for s in _own(record, index) if s.get("energy_j") is not None) >= 2


def device_summary(record: Record, device: dict[str, Any], window: tuple[float, float] | None,
                   use_counter: bool) -> tuple[dict[str, Any], float | None]:
    """One device's figures over the window and its window energy (J): from its counter with use_counter, else from
    its sampled power."""
    index = device["index"]
    own = _own(record, index)
    inside = [s for s in own if window is not None and window[0] <= s["time_s"] <= window[1]]
    entry: dict[str, Any] = {"host": record.host or "unknown", "index": index, "samples": len(own)}
    for key in ("name", "bus_id"):
        if key in device:
            entry[key] = device[key]
    power = _stats(s.get("power_w") for s in inside)
    if power:
        entry["mean_power_w"], entry["max_power_w"] = round(statistics.fmean(power), 2), round(max(power), 2)
    clocks = _stats(s.get("sm_clock_mhz") for s in inside)
    if clocks:
        entry["median_sm_clock_mhz"], entry["min_sm_clock_mhz"] = statistics.median(clocks), min(clocks)
        if device.get("sm_clock_max_mhz"):
            entry["sm_clock_max_mhz"] = device["sm_clock_max_mhz"]
            entry["median_sm_clock_ratio"] = round(entry["median_sm_clock_mhz"] / device["sm_clock_max_mhz"], 4)
    for key, out in (("temp_gpu_c", "max_temp_gpu_c"), ("temp_mem_c", "max_temp_mem_c")):
        values = _stats(s.get(key) for s in inside)
        if values:
            entry[out] = max(values)
    util = _stats(s.get("util_gpu_pct") for s in inside)
    if util:
        entry["mean_util_pct"] = round(statistics.fmean(util), 1)
    energy = None
    if window is not None and use_counter:
        energy = counter_energy([(s["time_s"], float(s["energy_j"])) for s in own if s.get("energy_j") is not None],
                                *window)
    elif window is not None:
        energy = power_integral([(s["time_s"], float(s["power_w"])) for s in own if s.get("power_w") is not None],
                                *window)
    if energy is not None:
        entry["energy_j"] = round(energy, 3)
    return entry, energy


def summarise(records: Sequence[Record], steps: Sequence[Step], window_steps: tuple[int, int] | None,
              tokens_per_step: int, interval_ms: int, clock_source: str, devices_per_node: int | None,
              ) -> dict[str, Any]:
    """The telemetry section (schema: telemetry) from every node's record and the run's steps."""
    kept = [s for s in steps if window_steps and window_steps[0] <= s.step <= window_steps[1]]
    window = (min(s.start_s for s in kept), max(s.end_s for s in kept)) if kept else None
    notes: list[str] = []
    methods = sorted({r.method for r in records if r.method})
    for record in records:
        if record.note:
            notes.append(f"{record.host or record.path.parent.name}: {record.note}")
        if record.error:
            notes.append(f"{record.host or record.path.parent.name}: the sampler stopped: {record.error}")
        elif not record.ended:
            notes.append(f"{record.host or record.path.parent.name}: the sampler's record ends without its end "
                         "line (killed or died during the run)")
    used = [(record, device) for record in records
            for device in (record.devices if devices_per_node is None else record.devices[:devices_per_node])]
    # One method for every device, so that their energies add up alike: the counter only where all have one.
    use_counter = bool(used) and all(has_counter(record, device["index"]) for record, device in used)
    per_gpu, energies = [], []
    for record, device in used:
        entry, energy = device_summary(record, device, window, use_counter)
        entry["throttle_events"] = throttle_events(_own(record, device["index"]),
                                                   (record.interval_ms or interval_ms) / 1000.0, steps, window)
        per_gpu.append(entry)
        energies.append(energy)
    complete = bool(records) and all(r.complete for r in records)
    if window is None:
        notes.append("no steady-state step on the telemetry's clock: no figure over the window")
    section: dict[str, Any] = {
        "enabled": True, "method": "+".join(methods) if methods else None, "interval_ms": interval_ms,
        "complete": complete, "note": "; ".join(notes) or None,
        "power_sensor": any(r.power_sensor for r in records),
        "samples": sum(len(r.samples) for r in records), "step_clock": clock_source,
    }
    whole = bool(energies) and all(e is not None for e in energies)
    section["energy_method"] = ("counter" if use_counter else "power_integral") if whole else None
    means = [g["mean_power_w"] for g in per_gpu if "mean_power_w" in g]
    maxima = [g["max_power_w"] for g in per_gpu if "max_power_w" in g]
    section["mean_power_w"] = _round(statistics.fmean(means)) if means else None
    section["max_power_w"] = _round(max(maxima)) if maxima else None
    energy_per_step = sum(energies) / len(kept) if whole and kept else None  # type: ignore[arg-type]
    section["energy_per_step_j"] = _round(energy_per_step, 3)
    section["tokens_per_joule"] = _round(tokens_per_step / energy_per_step, 4) if energy_per_step else None
    section["wh_per_million_tokens"] = \
        _round(energy_per_step / 3600.0 / tokens_per_step * 1e6, 4) if energy_per_step else None
    ratios = [g["median_sm_clock_ratio"] for g in per_gpu if "median_sm_clock_ratio" in g]
    if ratios:
        section["min_median_sm_clock_ratio"] = min(ratios)
    for key in ("max_temp_gpu_c", "max_temp_mem_c"):
        values = [g[key] for g in per_gpu if key in g]
        if values:
            section[key] = max(values)
    section["per_gpu"] = [{k: v for k, v in g.items() if k != "throttle_events"} for g in per_gpu]
    section["throttle_events"] = [{"host": g["host"], "index": g["index"], **event}
                                  for g in per_gpu for event in g["throttle_events"]]
    return section


def throttle_warnings(section: dict[str, Any]) -> list[str]:
    """One warning per steady-state throttle event (reason, GPU, steps): the figures were measured throttled."""
    out = []
    for event in section.get("throttle_events", []):
        if event["steady"]:
            out.append(f"GPU {event['index']} on {event['host']} throttled ({event['reason']}) for "
                       f"{event['duration_s']:.1f} s during steady-state steps "
                       f"{event['first_step']}-{event['last_step']}")
    return out
