"""evaluate.validate's checks that a result's series hold together and its physical figures are possible.

A figure is recomputed from the series (validate's figures check), so the series themselves must be one run's:
steps unique and increasing, every per-step array as long as the steps (zip() would silently pair a short one
with the wrong steps), the steady-state window the one its steps give, within the steps requested. A number a
device cannot hold is no reading: memory per device above the device's capacity (utils/machine/hardware.py's table,
its largest entry for a device it lacks), host memory above the host's (its system.json, else the most any machine
holds). Not-finite numbers never get this far: the readers refuse them (utils.files.parse_json).
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

from evaluate.effective_settings import held
from evaluate.logs.parse import step_ranges
from utils.machine.hardware import DEVICES, HOST_MEMORY_MAX_GIB, find_device
from utils.spec import metrics
from utils.spec.result_types import Section, typed

HIGHEST_DEVICE_GIB = max(spec.memory_gib for _, spec in DEVICES if spec.memory_gib)
DEVICE_MEMORY = ("peak_allocated_gib", "peak_reserved_gib", "peak_device_used_gib")
DEVICE_SERIES = ("mem_allocated_gib", "mem_reserved_gib")
HOST_MEMORY = ("peak_host_rss_gib",)
HOST_SERIES = ("mem_host_rss_gib",)
NON_NEGATIVE = ("loss", "lr", "grad_norm")
# A loss that high has diverged long before (the first step's is about ln(vocabulary), 11-12), a learning rate
# or gradient norm that high is a misread: beyond this a value is no reading of a run.
LARGEST_SERIES_VALUE = 1e9
MEMORY_MARGIN = 1.02  # a reading rounded up, or GB read as GiB, stays within 2%


class Problem(NamedTuple):
    check: str
    message: str


def problems(result: Mapping | Section, system: dict) -> list[Problem]:
    """Every integrity check of one schema-valid result, with the system it ran on (a system.json's dict: the
    result's own system section, else its run set's, as evaluate.collect.Loaded.system holds it)."""
    r = typed(result)
    return series(r) + window(r) + memory(r, system)


def series(result: Section) -> list[Problem]:
    """Steps unique and increasing; every per-step array as long as the steps."""
    found = []
    values = result.series
    steps = values.step
    repeated = sorted({b for a, b in zip(steps, steps[1:]) if b == a})
    backwards = [b for a, b in zip(steps, steps[1:]) if b < a]
    if repeated:
        found.append(Problem("series", f"step(s) {step_ranges(repeated)} recorded more than once: a step is one "
                             "record, so the series is not one run's"))
    if backwards:
        found.append(Problem("series", f"steps go backwards ({', '.join(map(str, backwards[:5]))} after a later "
                             "step): the series is not in the order the run made it"))
    negative = [key for key in NON_NEGATIVE
                if any(isinstance(v, (int, float)) and v < 0 for v in getattr(values, key) or ())]
    if negative:
        found.append(Problem("series", f"{', '.join(negative)} below 0: a cross-entropy loss, a learning rate and a "
                             "gradient norm never are"))
    huge = [key for key in NON_NEGATIVE if any(isinstance(v, (int, float)) and v > LARGEST_SERIES_VALUE
                                                for v in getattr(values, key) or ())]
    if huge:
        found.append(Problem("series", f"{', '.join(huge)} above {LARGEST_SERIES_VALUE:g}: no training run reports "
                             "such a value (a misread or made-up series)"))
    uneven = [f"{key} has {len(array)}" for key, array in held(values).items()
              if isinstance(array, tuple) and key != "step" and len(array) != len(steps)]
    if uneven:
        found.append(Problem("series", f"{len(steps)} step(s) but {', '.join(uneven)} value(s): each per-step array "
                             "must have one value per step"))
    return found


def window(result: Section) -> list[Problem]:
    """The recorded steady-state window is the one the step times give, and lies within the steps requested."""
    performance, values = result.performance, result.series
    recorded, requested = performance.window, result.training.steps
    found = []
    steps, times = values.step, values.step_time_s
    expected = metrics.steady_window(steps, times, performance.warmup_skip) if len(steps) == len(times) else None
    if recorded:
        first, last, count = recorded.first_step, recorded.last_step, recorded.count
        if not 1 <= first <= last <= requested or count > last - first + 1:
            found.append(Problem("window", f"steps {first}-{last} ({count} counted) is no window of the {requested} "
                                 "steps requested"))
        elif expected is not None and (first, last, count) != (expected.first_step, expected.last_step,
                                                               len(expected.steps)):
            found.append(Problem("window", f"steps {first}-{last} ({count} counted) in the result, "
                                 f"{expected.first_step}-{expected.last_step} ({len(expected.steps)}) from its step "
                                 "times"))
    counted = performance.step_time_s.count if performance.step_time_s else None
    if counted is not None and counted > requested:
        found.append(Problem("window", f"{counted} step times counted, more than the {requested} steps requested"))
    return found


def below_zero(result: Section) -> list[Problem]:
    """Memory is never below 0: no figure, no worker's peak, no step of a memory series (validate's memory check)."""
    memory, values = result.memory, result.series
    below = [key for key, value in held(memory).items() if isinstance(value, (int, float)) and value < 0]
    if any(value < 0 for value in memory.host_rss_gib_per_worker or ()):
        below.append("host_rss_gib_per_worker")
    for key in DEVICE_SERIES + HOST_SERIES:
        steps = [step for step, value in zip(values.step, getattr(values, key) or ())
                 if value is not None and value < 0]
        if steps:
            below.append(f"{key} at step(s) {step_ranges(steps)}")
    return [Problem("memory", f"below 0: {'; '.join(below)}")] if below else []


def capacity_gib(result: Section, system: dict) -> tuple[float, str]:
    """The memory of one device the run used (GiB) and whose figure that is."""
    name = (system.get("gpu") or {}).get("name")
    spec = find_device(name)
    if spec is not None and spec.memory_gib:
        return spec.memory_gib, f"{spec.name}'s {spec.memory_gib:g} GiB (utils/machine/hardware.py)"
    reported = (system.get("gpu") or {}).get("memory_gib")
    if isinstance(reported, (int, float)) and 0 < reported <= HIGHEST_DEVICE_GIB:
        return float(reported), f"the {reported:g} GiB its system.json reports"
    return HIGHEST_DEVICE_GIB, f"the largest device's {HIGHEST_DEVICE_GIB:g} GiB (utils/machine/hardware.py)"


def host_gib(system: dict) -> tuple[float, str]:
    reported = (system.get("host") or {}).get("memory_gib")
    if isinstance(reported, (int, float)) and 0 < reported <= HOST_MEMORY_MAX_GIB:
        return float(reported), f"the host's {reported:g} GiB (system.json)"
    return HOST_MEMORY_MAX_GIB, f"{HOST_MEMORY_MAX_GIB:g} GiB, more than any machine holds"


def memory(result: Section, system: dict) -> list[Problem]:
    """No memory figure above what its device (or host) holds."""
    mem, values, steps = result.memory, result.series, result.series.step
    on_cpu = result.platform == "cpu"  # no device memory: every figure is the host's
    found = []
    for keys, series_keys, (limit, whose) in (
            (DEVICE_MEMORY, DEVICE_SERIES, host_gib(system) if on_cpu else capacity_gib(result, system)),
            (HOST_MEMORY, HOST_SERIES, host_gib(system))):
        above = [f"{key} {value:g}" for key in keys if isinstance(value := getattr(mem, key), (int, float))
                 and value > limit * MEMORY_MARGIN]
        if keys is HOST_MEMORY:
            above += [f"host_rss_gib_per_worker {v:g}" for v in mem.host_rss_gib_per_worker or ()
                      if v > limit * MEMORY_MARGIN][:1]
        for key in series_keys:
            high = [s for s, v in zip(steps, getattr(values, key) or ()) if v is not None and v > limit * MEMORY_MARGIN]
            if high:
                above.append(f"{key} at step(s) {step_ranges(high)}")
        if above:
            found.append(Problem("memory", f"above {whose}: {'; '.join(above)}: no reading of a real device"))
    return found
