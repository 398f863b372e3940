"""How the telemetry sampler (utils/machine/telemetry.py) reads a node: one backend per way of reading, tried in order.

  nvd: NVML through nvidia-ml-py (`pynvml`), else `nvidia-smi` (utils/machine/telemetry_tools.py);
  amd: `amdsmi` (ROCm's binding), else `amd-smi` (utils/machine/telemetry_tools.py);
  cpu: RAPL package energy (POWERCAP_ROOT, default /sys/class/powercap; unwrapped at max_energy_range_uj) where
       readable, and psutil's CPU frequency and utilization.
A query the device does not support (NVMLError_NotSupported, amdsmi's AMDSMI_STATUS_NOT_SUPPORTED, the tools'
[N/A]) leaves that field out of the sample, never a zero; any other error stops the sampler (SamplerError).
Throttle reasons are decoded to names (NVML_REASONS, AMD_VIOLATIONS); a GPU idling is not a throttle.
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

POWERCAP_ENV = "POWERCAP_ROOT"  # tests point it at a fake sysfs tree
POWERCAP_ROOT = "/sys/class/powercap"
NO_POWER_SENSOR = ("no power sensor readable: {root} has no readable RAPL energy_uj (absent, or root-only, as in most "
                   "VMs and containers); CPU frequency and utilization only")

# NVML's clock-event (throttle) reason bits, by the names results use; GPU idle is not a throttle.
NVML_REASONS = {
    0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal",
    0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clock",
}
# amdsmi_get_violation_status's active_<reason> flags (MI300 series), by the names results use.
AMD_VIOLATIONS = {
    "ppt_pwr": "ppt_power_cap", "socket_thrm": "socket_thermal", "prochot_thrm": "prochot_thermal",
    "vr_thrm": "vr_thermal", "hbm_thrm": "hbm_thermal", "gfx_clk_below_host_limit": "clock_below_host_limit",
}


class Unavailable(Exception):
    """A backend that cannot sample on this node (no library, no driver, no tool): the next one is tried."""


class SamplerError(Exception):
    """An error the sampler cannot sample past (a GPU lost mid-run): it records it and stops."""


def kept(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields a device answered (None = not supported there, left out)."""
    return {key: value for key, value in fields.items() if value is not None}


@dataclass
class Backend:
    """One way of reading the node: devices() once, then sample() per interval (one dict per device)."""

    method: str
    devices: list[dict[str, Any]]
    read: Callable[[], list[dict[str, Any]]]
    close: Callable[[], None] = lambda: None
    power_sensor: bool = True
    note: str | None = None
    paced: bool = False  # the tool itself waits for the next interval (nvidia-smi -lms)


# --- NVML -------------------------------------------------------------------------------------------------

def nvml() -> Backend:
    try:
        import pynvml
    except ImportError:
        raise Unavailable("nvidia-ml-py (pynvml) is not installed") from None
    try:
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError as err:
        raise Unavailable(f"NVML: {err}") from None

    def ask(query: Callable, *args: Any) -> Any:
        try:
            return query(*args)
        except pynvml.NVMLError_NotSupported:
            return None
        except pynvml.NVMLError as err:
            raise SamplerError(f"NVML: {type(err).__name__}: {err}") from None

    def memory_temp(handle: Any) -> int | None:
        values = ask(pynvml.nvmlDeviceGetFieldValues, handle, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
        if not values or values[0].nvmlReturn != pynvml.NVML_SUCCESS:
            return None
        return int(values[0].value.uiVal)

    def reasons(mask: int | None) -> list[str] | None:
        return None if mask is None else [name for bit, name in NVML_REASONS.items() if mask & bit]

    # nvidia-ml-py before 12.535 (an image's own) names the clock-event reasons throttle reasons.
    event_reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    devices = []
    for index, handle in enumerate(handles):
        pci = ask(pynvml.nvmlDeviceGetPciInfo, handle)
        bus = getattr(pci, "busId", None)
        devices.append(kept({
            "index": index, "name": ask(pynvml.nvmlDeviceGetName, handle),
            "bus_id": bus.decode() if isinstance(bus, bytes) else bus,
            "sm_clock_max_mhz": ask(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
            "mem_clock_max_mhz": ask(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_MEM)}))

    def read() -> list[dict[str, Any]]:
        out = []
        for index, handle in enumerate(handles):
            power, energy = ask(pynvml.nvmlDeviceGetPowerUsage, handle), \
                ask(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
            util = ask(pynvml.nvmlDeviceGetUtilizationRates, handle)
            memory = ask(pynvml.nvmlDeviceGetMemoryInfo, handle)
            out.append(kept({
                "index": index, "power_w": None if power is None else power / 1000.0,
                "energy_j": None if energy is None else energy / 1000.0,
                "sm_clock_mhz": ask(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
                "mem_clock_mhz": ask(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM),
                "temp_gpu_c": ask(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
                "temp_mem_c": memory_temp(handle),
                "util_gpu_pct": None if util is None else util.gpu,
                "util_mem_pct": None if util is None else util.memory,
                "memory_used_mib": None if memory is None else round(memory.used / (1 << 20), 1),
                "throttle": reasons(ask(event_reasons, handle))}))
        return out

    return Backend("nvml", devices, read, close=pynvml.nvmlShutdown)


# --- amdsmi -----------------------------------------------------------------------------------------------

def amdsmi_lib() -> Backend:
    try:
        import amdsmi
    except ImportError:
        raise Unavailable("amdsmi is not importable (ROCm's /opt/rocm/share/amd_smi binding)") from None
    try:
        amdsmi.amdsmi_init()
        handles = amdsmi.amdsmi_get_processor_handles()
    except amdsmi.AmdSmiException as err:
        raise Unavailable(f"amdsmi: {err}") from None
    not_supported = getattr(amdsmi, "AMDSMI_STATUS_NOT_SUPPORTED", 2)

    def ask(query: Callable, *args: Any) -> Any:
        try:
            value = query(*args)
        except amdsmi.AmdSmiLibraryException as err:
            if err.err_code == not_supported:
                return None
            raise SamplerError(f"amdsmi: {query.__name__}: error code {err.err_code}") from None
        return None if value == "N/A" else value

    def item(data: dict | None, key: str) -> Any:
        value = (data or {}).get(key)
        return None if value in ("N/A", None) else value

    def energy_j(handle: Any) -> float | None:
        data = ask(amdsmi.amdsmi_get_energy_count, handle)
        ticks = item(data, "energy_accumulator")
        ticks = item(data, "power") if ticks is None else ticks  # ROCm before 6.4 named it power
        resolution = item(data, "counter_resolution")
        return None if ticks is None or resolution is None else ticks * resolution / 1e6

    def violations(handle: Any) -> list[str] | None:
        if not hasattr(amdsmi, "amdsmi_get_violation_status"):  # before ROCm 6.3: throttled or not, no reason
            metrics = ask(amdsmi.amdsmi_get_gpu_metrics_info, handle)
            flag = item(metrics, "throttle_status")
            return None if flag is None else (["throttled"] if flag else [])
        status = ask(amdsmi.amdsmi_get_violation_status, handle)
        if status is None:
            return None
        return [name for key, name in AMD_VIOLATIONS.items() if item(status, f"active_{key}") not in (None, False, 0)]

    gfx, mem = amdsmi.AmdSmiClkType.GFX, amdsmi.AmdSmiClkType.MEM
    current = amdsmi.AmdSmiTemperatureMetric.CURRENT
    devices = []
    for index, handle in enumerate(handles):
        asic = ask(amdsmi.amdsmi_get_gpu_asic_info, handle)
        devices.append(kept({
            "index": index, "name": item(asic, "market_name"), "bus_id": ask(amdsmi.amdsmi_get_gpu_device_bdf, handle),
            "sm_clock_max_mhz": item(ask(amdsmi.amdsmi_get_clock_info, handle, gfx), "max_clk"),
            "mem_clock_max_mhz": item(ask(amdsmi.amdsmi_get_clock_info, handle, mem), "max_clk")}))

    def read() -> list[dict[str, Any]]:
        out = []
        for index, handle in enumerate(handles):
            power = ask(amdsmi.amdsmi_get_power_info, handle)
            activity = ask(amdsmi.amdsmi_get_gpu_activity, handle)
            vram = ask(amdsmi.amdsmi_get_gpu_vram_usage, handle)
            watts = item(power, "current_socket_power")
            out.append(kept({
                "index": index, "power_w": item(power, "average_socket_power") if watts is None else watts,
                "energy_j": energy_j(handle),
                "sm_clock_mhz": item(ask(amdsmi.amdsmi_get_clock_info, handle, gfx), "clk"),
                "mem_clock_mhz": item(ask(amdsmi.amdsmi_get_clock_info, handle, mem), "clk"),
                "temp_gpu_c": ask(amdsmi.amdsmi_get_temp_metric, handle, amdsmi.AmdSmiTemperatureType.HOTSPOT, current),
                "temp_mem_c": ask(amdsmi.amdsmi_get_temp_metric, handle, amdsmi.AmdSmiTemperatureType.VRAM, current),
                "util_gpu_pct": item(activity, "gfx_activity"), "util_mem_pct": item(activity, "umc_activity"),
                "memory_used_mib": item(vram, "vram_used"), "throttle": violations(handle)}))
        return out

    return Backend("amdsmi", devices, read, close=amdsmi.amdsmi_shut_down)


# --- the CPU ----------------------------------------------------------------------------------------------

@dataclass
class RaplDomain:
    """One RAPL package counter, unwrapped across max_energy_range_uj."""

    path: Path
    name: str
    range_uj: int
    last_uj: int
    total_j: float = 0.0

    def read_j(self) -> float:
        now = int(self.path.joinpath("energy_uj").read_text())
        delta = now - self.last_uj
        if delta < 0:  # the counter wrapped
            delta += self.range_uj
        self.total_j += delta / 1e6
        self.last_uj = now
        return self.total_j


def rapl_packages(root: str) -> list[RaplDomain]:
    """The readable package-level RAPL domains (intel-rapl:N; AMD Zen uses the same interface)."""
    found = []
    for directory in sorted(glob.glob(os.path.join(root, "intel-rapl:*"))):
        path = Path(directory)
        if path.name.count(":") != 1:  # a sub-domain (core, uncore, dram) of a package
            continue
        try:
            found.append(RaplDomain(path, path.joinpath("name").read_text().strip(),
                                    int(path.joinpath("max_energy_range_uj").read_text()),
                                    int(path.joinpath("energy_uj").read_text())))
        except (OSError, ValueError):
            continue
    return found


def cpu() -> Backend:
    import psutil

    root = os.environ.get(POWERCAP_ENV, POWERCAP_ROOT)
    packages = rapl_packages(root)
    psutil.cpu_percent()  # the first call only starts psutil's interval
    freq = psutil.cpu_freq()
    max_mhz = freq.max if freq is not None and freq.max else None
    names = [package.name for package in packages] or ["cpu"]
    devices = [kept({"index": i, "name": name, "sm_clock_max_mhz": max_mhz}) for i, name in enumerate(names)]
    previous: dict[int, tuple[float, float]] = {}

    def read() -> list[dict[str, Any]]:
        now = time.time()
        freq = psutil.cpu_freq()
        shared = kept({"sm_clock_mhz": None if freq is None else round(freq.current, 1),
                        "util_gpu_pct": psutil.cpu_percent(), "memory_used_mib": psutil.virtual_memory().used >> 20})
        if not packages:
            return [{"index": 0, **shared}]
        out = []
        for index, package in enumerate(packages):
            try:
                energy = package.read_j()
            except (OSError, ValueError) as err:
                raise SamplerError(f"RAPL {package.path}: {err}") from None
            sample = {"index": index, **shared, "energy_j": round(energy, 3)}
            if index in previous and now > previous[index][0]:
                sample["power_w"] = round((energy - previous[index][1]) / (now - previous[index][0]), 2)
            previous[index] = (now, energy)
            out.append(sample)
        return out

    note = None if packages else NO_POWER_SENSOR.format(root=root)
    return Backend("rapl+psutil" if packages else "psutil", devices, read, power_sensor=bool(packages), note=note)
