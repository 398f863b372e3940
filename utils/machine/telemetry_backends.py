"""How the telemetry sampler (utils/machine/telemetry.py) reads a node: one backend per way of reading, tried in order.

  nvd: NVML through nvidia-ml-py (`pynvml`), else `nvidia-smi` (utils/machine/telemetry_tools.py);
  amd: `amdsmi` (ROCm's binding), else `amd-smi` (utils/machine/telemetry_tools.py);
  cpu: RAPL package energy (POWERCAP_ROOT, default /sys/class/powercap; unwrapped at max_energy_range_uj) where
       readable, and psutil's CPU frequency and utilization.
The libraries are opened, and their errors sorted, by utils/machine/gpu_libraries.py; what is here is which queries
the sampler asks and how their answers become a sample. A backend that cannot read this node raises Unavailable
(utils/machine/vendor_tools.py). A query the device does not support (NVMLError_NotSupported, amdsmi's
AMDSMI_STATUS_NOT_SUPPORTED, the tools' [N/A]) leaves that field out of the sample, never a zero; any other error
stops the sampler (GpuError, SamplerError). Throttle reasons are decoded to names (gpu_libraries' NVML_REASONS,
AMD_VIOLATIONS); a GPU idling is not a throttle.
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from utils.machine.gpu_libraries import AMD_VIOLATIONS, Amdsmi, Nvml, amd_field

POWERCAP_ENV = "POWERCAP_ROOT"  # tests point it at a fake sysfs tree
POWERCAP_ROOT = "/sys/class/powercap"
NO_POWER_SENSOR = ("no power sensor readable: {root} has no readable RAPL energy_uj (absent, or root-only, as in most "
                   "VMs and containers); CPU frequency and utilization only")


class SamplerError(Exception):
    """An error the sampler cannot sample past (a tool that stopped, a RAPL counter gone unreadable; a GPU library's
    own is a GpuError): it records it and stops."""


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
    nv = Nvml.open()
    handles, lib = nv.handles(), nv.lib

    def memory_temp(handle: Any) -> int | None:
        values = nv.ask("nvmlDeviceGetFieldValues", handle, [lib.NVML_FI_DEV_MEMORY_TEMP])
        if not values or values[0].nvmlReturn != lib.NVML_SUCCESS:
            return None
        return int(values[0].value.uiVal)

    def watts(milli: int | None) -> float | None:  # NVML's power in mW, its energy in mJ
        return None if milli is None else milli / 1000.0

    devices = [kept({"index": index, "name": nv.ask("nvmlDeviceGetName", handle), "bus_id": nv.bus_id(handle),
                     "sm_clock_max_mhz": nv.ask("nvmlDeviceGetMaxClockInfo", handle, lib.NVML_CLOCK_SM),
                     "mem_clock_max_mhz": nv.ask("nvmlDeviceGetMaxClockInfo", handle, lib.NVML_CLOCK_MEM)})
               for index, handle in enumerate(handles)]

    def read() -> list[dict[str, Any]]:
        out = []
        for index, handle in enumerate(handles):
            util = nv.ask("nvmlDeviceGetUtilizationRates", handle)
            memory = nv.memory_used_mib(handle)
            out.append(kept({
                "index": index, "power_w": watts(nv.ask("nvmlDeviceGetPowerUsage", handle)),
                "energy_j": watts(nv.ask("nvmlDeviceGetTotalEnergyConsumption", handle)),
                "sm_clock_mhz": nv.ask("nvmlDeviceGetClockInfo", handle, lib.NVML_CLOCK_SM),
                "mem_clock_mhz": nv.ask("nvmlDeviceGetClockInfo", handle, lib.NVML_CLOCK_MEM),
                "temp_gpu_c": nv.temp_c(handle), "temp_mem_c": memory_temp(handle),
                "util_gpu_pct": None if util is None else util.gpu,
                "util_mem_pct": None if util is None else util.memory,
                "memory_used_mib": None if memory is None else round(memory, 1),
                "throttle": nv.reasons(handle)}))
        return out

    return Backend("nvml", devices, read, close=nv.close)


# --- amdsmi -----------------------------------------------------------------------------------------------

def amdsmi_lib() -> Backend:
    amd = Amdsmi.open()
    lib = amd.lib

    def energy_j(handle: Any) -> float | None:
        data = amd.ask("amdsmi_get_energy_count", handle)
        ticks = amd_field(data, "energy_accumulator")
        ticks = amd_field(data, "power") if ticks is None else ticks  # ROCm before 6.4 named it power
        resolution = amd_field(data, "counter_resolution")
        return None if ticks is None or resolution is None else ticks * resolution / 1e6

    def violations(handle: Any) -> list[str] | None:
        if not hasattr(lib, "amdsmi_get_violation_status"):  # before ROCm 6.3: throttled or not, no reason
            flag = amd_field(amd.ask("amdsmi_get_gpu_metrics_info", handle), "throttle_status")
            return None if flag is None else (["throttled"] if flag else [])
        status = amd.ask("amdsmi_get_violation_status", handle)
        if status is None:
            return None
        return [name for key, name in AMD_VIOLATIONS.items()
                if amd_field(status, f"active_{key}") not in (None, False, 0)]

    def clock(handle: Any, kind: Any, key: str) -> Any:
        return amd_field(amd.ask("amdsmi_get_clock_info", handle, kind), key)

    gfx, mem = lib.AmdSmiClkType.GFX, lib.AmdSmiClkType.MEM
    devices = [kept({"index": index, "name": amd_field(amd.ask("amdsmi_get_gpu_asic_info", handle), "market_name"),
                     "bus_id": amd.bus_id(handle), "sm_clock_max_mhz": clock(handle, gfx, "max_clk"),
                     "mem_clock_max_mhz": clock(handle, mem, "max_clk")})
               for index, handle in enumerate(amd.handles)]

    def read() -> list[dict[str, Any]]:
        out = []
        for index, handle in enumerate(amd.handles):
            power = amd.ask("amdsmi_get_power_info", handle)
            activity = amd.ask("amdsmi_get_gpu_activity", handle)
            watts = amd_field(power, "current_socket_power")
            out.append(kept({
                "index": index, "power_w": amd_field(power, "average_socket_power") if watts is None else watts,
                "energy_j": energy_j(handle),
                "sm_clock_mhz": clock(handle, gfx, "clk"), "mem_clock_mhz": clock(handle, mem, "clk"),
                "temp_gpu_c": amd.temp_c(handle, "HOTSPOT"), "temp_mem_c": amd.temp_c(handle, "VRAM"),
                "util_gpu_pct": amd_field(activity, "gfx_activity"),
                "util_mem_pct": amd_field(activity, "umc_activity"),
                "memory_used_mib": amd.memory_used_mib(handle), "throttle": violations(handle)}))
        return out

    return Backend("amdsmi", devices, read, close=amd.close)


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
