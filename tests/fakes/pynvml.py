"""Fake `pynvml` (nvidia-ml-py) for tests: the NVML calls TPrimat makes, answered from the scenario in
TPRIMAT_FAKE_GPUS (format: tests/fakes/fake_gpus.py). Names, constants, units (mW, mJ, bytes) and
error classes are nvidia-ml-py 12.575's; a query the scenario marks unsupported raises
NVMLError_NotSupported, a lost GPU NVMLError_GpuIsLost, a missing driver NVMLError_DriverNotLoaded."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import fake_gpus

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_GPU_IS_LOST = 15

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0
NVML_NVLINK_MAX_LINKS = 18
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_FI_DEV_MEMORY_TEMP = 82

nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksEventReasonHwThermalSlowdown = 0x40
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksEventReasonDisplayClockSetting = 0x100

_REASON_BITS = {
    "gpu_idle": nvmlClocksEventReasonGpuIdle, "applications_clocks": nvmlClocksEventReasonApplicationsClocksSetting,
    "sw_power_cap": nvmlClocksEventReasonSwPowerCap, "hw_slowdown": nvmlClocksEventReasonHwSlowdown,
    "sync_boost": nvmlClocksEventReasonSyncBoost, "sw_thermal": nvmlClocksEventReasonSwThermalSlowdown,
    "hw_thermal": nvmlClocksEventReasonHwThermalSlowdown, "hw_power_brake": nvmlClocksEventReasonHwPowerBrakeSlowdown,
    "display_clock": nvmlClocksEventReasonDisplayClockSetting,
}


class NVMLError(Exception):
    """nvidia-ml-py's base error: `value` is the NVML return code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class NVMLError_Uninitialized(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_UNINITIALIZED)


class NVMLError_NotSupported(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_NOT_SUPPORTED)


class NVMLError_DriverNotLoaded(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_DRIVER_NOT_LOADED)


class NVMLError_GpuIsLost(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_GPU_IS_LOST)


_scenario: fake_gpus.Scenario | None = None


@dataclass(frozen=True)
class _Handle:
    index: int


def _gpu(handle: _Handle) -> fake_gpus.FakeGpu:
    if _scenario is None:
        raise NVMLError_Uninitialized()
    return _scenario.gpus[handle.index]


def _ask(handle: _Handle, key: str, query: str | None = None) -> Any:
    try:
        return _gpu(handle).value(key, query)
    except fake_gpus.NotSupported:
        raise NVMLError_NotSupported() from None
    except fake_gpus.GpuLost:
        raise NVMLError_GpuIsLost() from None


def nvmlInit() -> None:
    global _scenario
    try:
        _scenario = fake_gpus.load()
    except RuntimeError:
        raise NVMLError_DriverNotLoaded() from None


def nvmlShutdown() -> None:
    global _scenario
    _scenario = None


def nvmlSystemGetDriverVersion() -> str:
    if _scenario is None:
        raise NVMLError_Uninitialized()
    return _scenario.driver_version


def nvmlDeviceGetCount() -> int:
    if _scenario is None:
        raise NVMLError_Uninitialized()
    return len(_scenario.gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    _gpu(_Handle(index))
    return _Handle(index)


def nvmlDeviceGetName(handle: _Handle) -> str:
    return _ask(handle, "name")


def nvmlDeviceGetUUID(handle: _Handle) -> str:
    return _ask(handle, "uuid")


def nvmlDeviceGetIndex(handle: _Handle) -> int:
    return handle.index


def nvmlDeviceGetPciInfo(handle: _Handle) -> SimpleNamespace:
    """busId as bytes, as nvidia-ml-py's ctypes structure gives it."""
    return SimpleNamespace(busId=_ask(handle, "bus_id").encode())


def nvmlDeviceGetPowerUsage(handle: _Handle) -> int:
    return int(round(_ask(handle, "power_w", "power") * 1000))


def nvmlDeviceGetTotalEnergyConsumption(handle: _Handle) -> int:
    try:
        return int(_gpu(handle).energy_j() * 1000)
    except fake_gpus.NotSupported:
        raise NVMLError_NotSupported() from None
    except fake_gpus.GpuLost:
        raise NVMLError_GpuIsLost() from None


_CLOCK_KEYS = {NVML_CLOCK_SM: "sm_clock", NVML_CLOCK_GRAPHICS: "sm_clock", NVML_CLOCK_MEM: "mem_clock"}


def nvmlDeviceGetClockInfo(handle: _Handle, clock_type: int) -> int:
    key = _CLOCK_KEYS[clock_type]
    return int(_ask(handle, f"{key}_mhz", key))


def nvmlDeviceGetMaxClockInfo(handle: _Handle, clock_type: int) -> int:
    key = _CLOCK_KEYS[clock_type]
    return int(_ask(handle, f"{key}_max_mhz", f"{key}_max"))


def nvmlDeviceGetTemperature(handle: _Handle, sensor: int) -> int:
    return int(_ask(handle, "temp_gpu_c", "temp_gpu"))


def nvmlDeviceGetFieldValues(handle: _Handle, field_ids: list[int]) -> list[SimpleNamespace]:
    """Only NVML_FI_DEV_MEMORY_TEMP; an unsupported field comes back with its own nvmlReturn, as in NVML."""
    out = []
    for field_id in field_ids:
        if field_id != NVML_FI_DEV_MEMORY_TEMP:
            raise ValueError(f"fake pynvml: field {field_id} not modelled")
        try:
            value, ret = int(_ask(handle, "temp_mem_c", "temp_mem")), NVML_SUCCESS
        except NVMLError_NotSupported:
            value, ret = 0, NVML_ERROR_NOT_SUPPORTED
        out.append(SimpleNamespace(fieldId=field_id, nvmlReturn=ret, valueType=NVML_VALUE_TYPE_UNSIGNED_INT,
                                   value=SimpleNamespace(uiVal=value)))
    return out


def nvmlDeviceGetUtilizationRates(handle: _Handle) -> SimpleNamespace:
    return SimpleNamespace(gpu=int(_ask(handle, "util_gpu_pct", "util")),
                           memory=int(_ask(handle, "util_mem_pct", "util")))


def nvmlDeviceGetMemoryInfo(handle: _Handle) -> SimpleNamespace:
    total = int(_ask(handle, "memory_total_mib", "memory")) << 20
    used = int(_ask(handle, "memory_used_mib", "memory")) << 20
    return SimpleNamespace(total=total, used=used, free=total - used)


def nvmlDeviceGetCurrentClocksEventReasons(handle: _Handle) -> int:
    mask = 0
    for name in _ask(handle, "throttle"):
        mask |= _REASON_BITS[name]
    return mask


nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons


def nvmlDeviceGetTotalEccErrors(handle: _Handle, error_type: int, counter_type: int) -> int:
    kind = "uncorrected" if error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected"
    scope = "volatile" if counter_type == NVML_VOLATILE_ECC else "aggregate"
    return int(_ask(handle, f"ecc_{kind}_{scope}", "ecc"))


def nvmlDeviceGetRemappedRows(handle: _Handle) -> tuple[int, int, int, int]:
    rows = _ask(handle, "remapped_rows")
    return (int(rows.get("corrected", 0)), int(rows.get("uncorrected", 0)),
            int(bool(rows.get("pending", False))), int(bool(rows.get("failure", False))))


def nvmlDeviceGetPowerManagementLimit(handle: _Handle) -> int:
    return int(_ask(handle, "power_limit_w", "power_limit") * 1000)


def nvmlDeviceGetPowerManagementDefaultLimit(handle: _Handle) -> int:
    return int(_ask(handle, "power_default_limit_w", "power_limit") * 1000)


def nvmlDeviceGetCurrPcieLinkGeneration(handle: _Handle) -> int:
    return int(_ask(handle, "pcie_gen", "pcie"))


def nvmlDeviceGetMaxPcieLinkGeneration(handle: _Handle) -> int:
    return int(_ask(handle, "pcie_gen_max", "pcie"))


def nvmlDeviceGetCurrPcieLinkWidth(handle: _Handle) -> int:
    return int(_ask(handle, "pcie_width", "pcie"))


def nvmlDeviceGetMaxPcieLinkWidth(handle: _Handle) -> int:
    return int(_ask(handle, "pcie_width_max", "pcie"))


def nvmlDeviceGetNvLinkState(handle: _Handle, link: int) -> int:
    """A link past the scenario's nvlink_links raises NotSupported, as NVML does for absent links."""
    if link >= int(_ask(handle, "nvlink_links", "nvlink")):
        raise NVMLError_NotSupported()
    return NVML_FEATURE_DISABLED if link in _ask(handle, "nvlink_down", "nvlink") else NVML_FEATURE_ENABLED


def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[SimpleNamespace]:
    return [SimpleNamespace(pid=int(p["pid"]), usedGpuMemory=int(p.get("used_mib", 0)) << 20)
            for p in _ask(handle, "processes")]
