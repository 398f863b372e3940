"""Fake `amdsmi` (ROCm's Python binding) for tests: the calls TPrimat makes, answered from the scenario
in TPRIMAT_FAKE_GPUS (format: tests/fakes/fake_gpus.py). Names, enums and return dictionaries follow
ROCm 6.x's amdsmi_interface.py: power in W, the energy counter as ticks times counter_resolution uJ,
VRAM in MB, power caps in uW. A query the scenario marks unsupported raises AmdSmiLibraryException
with AMDSMI_STATUS_NOT_SUPPORTED; a lost GPU, one with a different error code."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import fake_gpus

AMDSMI_STATUS_SUCCESS = 0
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_DRIVER_NOT_LOADED = 42
AMDSMI_STATUS_NO_HSMP_MSG_SUP = 47
_ENERGY_RESOLUTION_UJ = 15.259
_VIOLATIONS = ("prochot_thrm", "ppt_pwr", "socket_thrm", "vr_thrm", "hbm_thrm", "gfx_clk_below_host_limit")


class AmdSmiException(Exception):
    """amdsmi's base error."""


class AmdSmiLibraryException(AmdSmiException):
    """An error from the library: `err_code` is its status."""

    def __init__(self, err_code: int) -> None:
        super().__init__(err_code)
        self.err_code = abs(err_code)
        self.err_info = "AMDSMI_STATUS_NOT_SUPPORTED" if self.err_code == AMDSMI_STATUS_NOT_SUPPORTED else "error"


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_GPUS = 0x2


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    MEM = 4


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0


class AmdSmiXgmiStatus(IntEnum):
    NO_ERRORS = 0
    ERROR = 1
    MULTIPLE_ERRORS = 2


_scenario: fake_gpus.Scenario | None = None


@dataclass(frozen=True)
class _Handle:
    index: int


def _ask(handle: _Handle, key: str, query: str | None = None) -> Any:
    if _scenario is None:
        raise AmdSmiLibraryException(AMDSMI_STATUS_DRIVER_NOT_LOADED)
    try:
        return _scenario.gpus[handle.index].value(key, query)
    except fake_gpus.NotSupported:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED) from None
    except fake_gpus.GpuLost:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NO_HSMP_MSG_SUP) from None


def amdsmi_init(flags: int = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
    global _scenario
    try:
        _scenario = fake_gpus.load()
    except RuntimeError:
        raise AmdSmiLibraryException(AMDSMI_STATUS_DRIVER_NOT_LOADED) from None


def amdsmi_shut_down() -> None:
    global _scenario
    _scenario = None


def amdsmi_get_processor_handles() -> list[_Handle]:
    if _scenario is None:
        raise AmdSmiLibraryException(AMDSMI_STATUS_DRIVER_NOT_LOADED)
    return [_Handle(i) for i in range(len(_scenario.gpus))]


def amdsmi_get_gpu_device_bdf(handle: _Handle) -> str:
    return _ask(handle, "bus_id")[4:].lower()


def amdsmi_get_gpu_device_uuid(handle: _Handle) -> str:
    return _ask(handle, "uuid")


def amdsmi_get_gpu_asic_info(handle: _Handle) -> dict[str, Any]:
    return {"market_name": _ask(handle, "name")}


def amdsmi_get_power_info(handle: _Handle) -> dict[str, Any]:
    """MI300X reports current_socket_power; average_socket_power is N/A there."""
    power = int(round(_ask(handle, "power_w", "power")))
    return {"current_socket_power": power, "average_socket_power": "N/A",
            "power_limit": int(_ask(handle, "power_limit_w", "power_limit"))}


def amdsmi_get_energy_count(handle: _Handle) -> dict[str, Any]:
    if _scenario is None:
        raise AmdSmiLibraryException(AMDSMI_STATUS_DRIVER_NOT_LOADED)
    try:
        joules = _scenario.gpus[handle.index].energy_j()
    except fake_gpus.NotSupported:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED) from None
    except fake_gpus.GpuLost:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NO_HSMP_MSG_SUP) from None
    ticks = int(joules * 1e6 / _ENERGY_RESOLUTION_UJ)
    return {"power": ticks, "energy_accumulator": ticks, "counter_resolution": _ENERGY_RESOLUTION_UJ, "timestamp": 0}


def amdsmi_get_clock_info(handle: _Handle, clock_type: AmdSmiClkType) -> dict[str, Any]:
    key = "mem_clock" if clock_type == AmdSmiClkType.MEM else "sm_clock"
    return {"clk": int(_ask(handle, f"{key}_mhz", key)), "min_clk": 500,
            "max_clk": int(_ask(handle, f"{key}_max_mhz", f"{key}_max")), "clk_locked": False, "clk_deep_sleep": False}


def amdsmi_get_temp_metric(handle: _Handle, sensor: AmdSmiTemperatureType, metric: AmdSmiTemperatureMetric) -> int:
    if sensor == AmdSmiTemperatureType.VRAM:
        return int(_ask(handle, "temp_mem_c", "temp_mem"))
    return int(_ask(handle, "temp_gpu_c", "temp_gpu"))


def amdsmi_get_gpu_activity(handle: _Handle) -> dict[str, Any]:
    return {"gfx_activity": int(_ask(handle, "util_gpu_pct", "util")),
            "umc_activity": int(_ask(handle, "util_mem_pct", "util")), "mm_activity": "N/A"}


def amdsmi_get_gpu_vram_usage(handle: _Handle) -> dict[str, Any]:
    return {"vram_total": int(_ask(handle, "memory_total_mib", "memory")),
            "vram_used": int(_ask(handle, "memory_used_mib", "memory"))}


def amdsmi_get_violation_status(handle: _Handle) -> dict[str, Any]:
    """The MI300-series throttle report: active_<reason> flags (and per_ percentages, 100 when active)."""
    active = set(_ask(handle, "throttle"))
    unknown = active - set(_VIOLATIONS)
    if unknown:
        raise ValueError(f"fake amdsmi: unknown violation {sorted(unknown)}")
    out: dict[str, Any] = {}
    for reason in _VIOLATIONS:
        out[f"active_{reason}"] = reason in active
        out[f"per_{reason}"] = 100 if reason in active else 0
    return out


def amdsmi_get_gpu_total_ecc_count(handle: _Handle) -> dict[str, Any]:
    return {"correctable_count": int(_ask(handle, "ecc_corrected_aggregate", "ecc")),
            "uncorrectable_count": int(_ask(handle, "ecc_uncorrected_aggregate", "ecc")), "deferred_count": 0}


def amdsmi_get_gpu_bad_page_info(handle: _Handle) -> list[dict[str, Any]] | str:
    rows = _ask(handle, "remapped_rows", "remapped_rows")
    count = int(rows.get("corrected", 0)) + int(rows.get("uncorrected", 0))
    status = "PENDING" if rows.get("pending") else "RESERVED"
    pages = [{"value": i, "page_address": 0x1000 * i, "page_size": 4096, "status": status} for i in range(count)]
    return pages or "No bad pages found."


def amdsmi_get_power_cap_info(handle: _Handle) -> dict[str, Any]:
    cap = int(_ask(handle, "power_limit_w", "power_limit") * 1_000_000)
    default = int(_ask(handle, "power_default_limit_w", "power_limit") * 1_000_000)
    return {"power_cap": cap, "default_power_cap": default, "dpm_cap": 0, "min_power_cap": 0, "max_power_cap": default}


def amdsmi_get_pcie_info(handle: _Handle) -> dict[str, Any]:
    """Speeds in MT/s (32000 = Gen5), as amdsmi reports them."""
    speed = {1: 2500, 2: 5000, 3: 8000, 4: 16000, 5: 32000, 6: 64000}
    return {
        "pcie_static": {"max_pcie_width": int(_ask(handle, "pcie_width_max", "pcie")),
                        "max_pcie_speed": speed[int(_ask(handle, "pcie_gen_max", "pcie"))],
                        "pcie_interface_version": int(_ask(handle, "pcie_gen_max", "pcie")), "slot_type": "OAM"},
        "pcie_metric": {"pcie_width": int(_ask(handle, "pcie_width", "pcie")),
                        "pcie_speed": speed[int(_ask(handle, "pcie_gen", "pcie"))]},
    }


def amdsmi_gpu_xgmi_error_status(handle: _Handle) -> int:
    down = _ask(handle, "nvlink_down", "nvlink")
    return AmdSmiXgmiStatus.ERROR.value if down else AmdSmiXgmiStatus.NO_ERRORS.value


def amdsmi_get_gpu_process_list(handle: _Handle) -> list[dict[str, Any]]:
    return [{"name": p.get("name", "N/A"), "pid": int(p["pid"]), "mem": int(p.get("used_mib", 0)) << 20,
             "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": int(p.get("used_mib", 0)) << 20}}
            for p in _ask(handle, "processes")]
