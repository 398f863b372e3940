"""evaluate.validate's checks of the machine behind a result: its telemetry, stragglers and node health.

Power that no device of the kind can draw and energy below 0 fail: the sensor was misread or its energy counter went
backwards (reset or wrapped during the run), so no energy figure of the run stands. Throttling during the
steady-state steps, a flagged straggler and the node's health problems (evaluate.health's system.health) are
warnings: the figures are real, but were measured on a machine that was not at its best. The report's Fairness
section says the same of each side of a comparison (evaluate/comparison/energy.py).
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

from utils.machine.energy import throttle_warnings
from utils.machine.hardware import CPU_PACKAGE_MAX_W, CPU_PACKAGE_MIN_W, DEVICES, find_device
from utils.machine.stragglers import warning as straggler_warning
from utils.runset import node_sections
from utils.spec.result_types import Section, typed

# A power sample averages the draw over up to a second and a device's power limit holds over such windows; what
# rises above the board power is shorter. So a reading more than 10% above the data sheet's maximum is no reading of
# a working sensor. A device the table lacks is held to the highest board power of the table.
POWER_MARGIN = 1.1
HIGHEST_POWER_W = max(spec.max_power_w for _, spec in DEVICES if spec.max_power_w)
LOWEST_IDLE_W = min(spec.idle_power_w for _, spec in DEVICES if spec.idle_power_w)
POWER_FIGURES = ("mean_power_w", "max_power_w")
ENERGY_FIGURES = ("energy_per_step_j", "tokens_per_joule", "wh_per_million_tokens")


class Problem(NamedTuple):
    """One check's finding on a result (validate names the result)."""

    check: str
    message: str
    fatal: bool = True


def problems(result: Mapping | Section, system: dict) -> list[Problem]:
    """Every machine check of one result, with the system it ran on (its own, else its run set's system.json: a plain
    dict, as evaluate.collect.Loaded.system holds it)."""
    r = typed(result)
    return (power(r, system) + energy_backwards(r) + energy_moves(r, system) + throttling(r) + straggler(r)
            + node_health(system))


def _device_watts(platform: str, device_name: str | None, field: str, what: str, cpu: tuple[float, str],
                  unknown: tuple[float, str]) -> tuple[float, str]:
    """One power figure of the device table for this device (W) and whose figure that is: a CPU's, the device's,
    or, for a device the table lacks, the table's widest bound."""
    if platform == "cpu":
        return cpu
    spec = find_device(device_name)
    if spec is not None and getattr(spec, field):
        return getattr(spec, field), f"{spec.name}'s {what} (utils/machine/hardware.py)"
    return unknown


def idle_floor_w(platform: str, device_name: str | None) -> tuple[float, str]:
    """The least a working device of this name draws (W) and whose figure that is."""
    return _device_watts(platform, device_name, "idle_power_w", "idle floor",
                         (CPU_PACKAGE_MIN_W, "a CPU package's floor (utils/machine/hardware.py's CPU_PACKAGE_MIN_W)"),
                         (LOWEST_IDLE_W, "the lowest idle floor in utils/machine/hardware.py"))


def power_limit_w(platform: str, device_name: str | None) -> tuple[float, str]:
    """The most a device of this name can draw (W) and whose figure that is."""
    return _device_watts(platform, device_name, "max_power_w", "board power",
                         (CPU_PACKAGE_MAX_W, "a CPU package (utils/machine/hardware.py's CPU_PACKAGE_MAX_W)"),
                         (HIGHEST_POWER_W, "the highest board power in utils/machine/hardware.py"))


def power(result: Mapping | Section, system: dict) -> list[Problem]:
    """Every power figure of the telemetry (each device's, else the run's) against the most its device can draw."""
    r = typed(result)
    section = r.telemetry
    if section is None:
        return []
    system_device = (system.get("gpu") or {}).get("name")
    readings = [(f"GPU {gpu.index} on {gpu.host}", gpu.name or system_device, gpu)
                for gpu in section.per_gpu or ()] or [("the run", system_device, section)]
    found = []
    for where, device, figures in readings:
        limit, whose = power_limit_w(r.platform, device)
        for key in POWER_FIGURES:
            value = getattr(figures, key)
            if value is not None and value > limit * POWER_MARGIN:
                found.append(Problem("power", f"{where}: {key} {value:g} W is more than {whose}, {limit:g} W, allows "
                                     f"(+{POWER_MARGIN - 1:.0%} for a sample's averaging): no device of this kind "
                                     "draws it; a misread sensor or a wrong unit"))
        floor, which = idle_floor_w(r.platform, device)
        for key in POWER_FIGURES:
            value = getattr(figures, key)
            if value is not None and value < floor:
                found.append(Problem("power", f"{where}: {key} {value:g} W is below {which}, {floor:g} W: no working "
                                     "device of this kind draws so little; a misread sensor or a wrong unit"))
    return found


def energy_moves(result: Mapping | Section, system: dict) -> list[Problem]:
    """The energy over the steady state is what the devices' power can give in that time: per device and second
    between the idle floor and the board power (+10%). An energy counter that barely moved, or a figure edited
    alone (tokens per joule that its energy per step does not give), would invent an efficiency."""
    r = typed(result)
    section, performance = r.telemetry, r.performance
    if section is None:
        return []
    per_step, rate = section.energy_per_step_j, section.tokens_per_joule
    if per_step is None:
        return [Problem("energy", f"tokens_per_joule {rate:g} without an energy per step")] if rate is not None else []
    found = []
    tokens = performance.tokens_per_step if performance else None
    if tokens and per_step > 0 and (rate is None or abs(rate - tokens / per_step) > 1e-3 * tokens / per_step + 1e-4):
        found.append(Problem("energy", f"tokens_per_joule {rate} is not the {tokens / per_step:.4g} its energy per "
                             f"step {per_step:g} J gives"))
    wh = section.wh_per_million_tokens
    if tokens and wh is not None and abs(wh - per_step / 3600 / tokens * 1e6) > 1e-3 * abs(wh) + 1e-4:
        found.append(Problem("energy", f"wh_per_million_tokens {wh} is not what its energy per step {per_step:g} J "
                             "gives"))
    stats = performance.step_time_s if performance else None
    seconds = stats.mean if stats else None
    devices = len(section.per_gpu or ()) or (r.parallelism.num_gpus if r.parallelism else None) or 1
    if not seconds or seconds <= 0 or per_step < 0:
        return found
    device = (system.get("gpu") or {}).get("name") or next((gpu.name for gpu in section.per_gpu or ()), None)
    limit, _ = power_limit_w(r.platform, device)
    floor, which = idle_floor_w(r.platform, device)
    watts = per_step / seconds / devices
    if not floor <= watts <= limit * POWER_MARGIN:
        found.append(Problem("energy", f"{per_step:g} J per step of {seconds:g} s on {devices} device(s) is "
                             f"{watts:.3g} W each, outside {floor:g}-{limit * POWER_MARGIN:g} W ({which} to the board "
                             "power): the energy counter or power samples did not measure the run"))
    return found


def energy_backwards(result: Mapping | Section) -> list[Problem]:
    """Energy over the steady-state window is never below 0: below 0, the energy counter went backwards."""
    section = typed(result).telemetry
    if section is None:
        return []
    below = [f"GPU {gpu.index} on {gpu.host}: {gpu.energy_j:g} J" for gpu in section.per_gpu or ()
             if gpu.energy_j is not None and gpu.energy_j < 0]
    below += [f"{key} {value:g}" for key in ENERGY_FIGURES
              if (value := getattr(section, key)) is not None and value < 0]
    if not below:
        return []
    how = "the energy counter went backwards (reset or wrapped during the run)" \
        if section.energy_method == "counter" else "energy cannot be below 0"
    return [Problem("energy", f"{'; '.join(below)} over the steady-state steps: {how}")]


def throttling(result: Mapping | Section) -> list[Problem]:
    """A warning per throttle event during the steady-state steps, naming the GPU, reason and steps (utils.machine
    .energy's words, on the section as the plain JSON its writer made)."""
    section = typed(result).telemetry
    return [Problem("throttling", line, fatal=False)
            for line in throttle_warnings(section.as_dict() if section else {})]


def straggler(result: Mapping | Section) -> list[Problem]:
    """A warning when the result's stragglers section flagged a GPU or node slower than the median (utils.machine
    .stragglers' words, on the section as plain JSON)."""
    section = typed(result).stragglers
    line = straggler_warning(section.as_dict()) if section else None
    return [Problem("straggler", line.removeprefix("straggler: "), fatal=False)] if line else []


def node_health(system: dict) -> list[Problem]:
    """A warning per problem evaluate.health recorded on the run's nodes (system.health, node 0's; each other node's
    in system.other_nodes, named)."""
    return [Problem("node health", (f"node {rank}: " if rank else "") + (problem.get("line") or _health_line(problem)),
                    fatal=False)
            for rank, health in node_sections(system, "health") for problem in (health or {}).get("problems") or []]


def _health_line(problem: dict) -> str:
    """A problem recorded without its line, said from its fields."""
    gpu = "the node" if problem.get("index") is None else f"GPU {problem['index']}"
    bus = f" ({problem['bus_id']})" if problem.get("bus_id") else ""
    return (f"{gpu}{bus}: {problem.get('field')} is {problem.get('value')!r}, expected {problem.get('expected')!r}"
            + (f"; {problem['fix']}" if problem.get("fix") else ""))
