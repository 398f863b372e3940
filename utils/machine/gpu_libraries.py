"""The vendors' GPU libraries, opened in one place: NVML through nvidia-ml-py (`pynvml`), and ROCm's `amdsmi`.

Node health (utils/machine/health_readers.py) and telemetry (utils/machine/telemetry_backends.py) read the GPUs
through a session. `Nvml.open()` / `Amdsmi.open()` import the binding, initialise it and count or list the devices,
or raise Unavailable (utils/machine/vendor_tools.py) with one line naming why, and the caller tries its next way of
reading (the vendor's tool). `ask(query, *args)` calls the binding's function of that name: None where the device
(or this version of the binding) does not support it, or amdsmi answers "N/A"; any other error is a GpuError, or,
in a tolerant session (node health: it checks what it can read), None too, a lost GPU remembered in `lost`.
`close()` shuts the library down. The clock-event (throttle) reasons are decoded to the names results use:
NVML_REASONS (also nvidia-smi's mask, utils/machine/telemetry_tools.py) and AMD_VIOLATIONS.

The bindings are imported when a session opens, never when this module is: a node without them imports it.
"""

from __future__ import annotations

from typing import Any

from utils.machine.vendor_tools import Unavailable

# NVML's clock-event (throttle) reason bits, by the names results use; GPU idle (0x1) is not a throttle.
NVML_REASONS = {
    0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal",
    0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clock",
}
# amdsmi_get_violation_status's active_<reason> flags (MI300 series), by the names results use.
AMD_VIOLATIONS = {
    "ppt_pwr": "ppt_power_cap", "socket_thrm": "socket_thermal", "prochot_thrm": "prochot_thermal",
    "vr_thrm": "vr_thermal", "hbm_thrm": "hbm_thermal", "gfx_clk_below_host_limit": "clock_below_host_limit",
}
NVML_GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST, where the binding does not name it
AMDSMI_NOT_SUPPORTED = 2  # AMDSMI_STATUS_NOT_SUPPORTED, likewise


class GpuError(Exception):
    """A query that failed for another reason than "not supported" (a GPU lost, a driver error): the telemetry sampler
    stops on it. `lost`: NVML said the GPU is lost."""

    def __init__(self, message: str, lost: bool = False) -> None:
        super().__init__(message)
        self.lost = lost


def nvml_reasons(mask: int | None) -> list[str] | None:
    """NVML's clock-event reason mask as names (NVML_REASONS); None when it was not read."""
    return None if mask is None else [name for bit, name in NVML_REASONS.items() if mask & bit]


def amd_field(data: dict | None, key: str) -> Any:
    """One field of an amdsmi answer (a dict); None where it is absent or "N/A"."""
    value = (data or {}).get(key)
    return None if value in ("N/A", None) else value


class _Session:
    """What both libraries' sessions share: ask() by the binding's function name, tolerant or not."""

    lib: Any
    tolerant: bool
    lost: bool = False  # a tolerant session: whether a query since the caller last reset it found the GPU lost

    def ask(self, query: str, *args: Any) -> Any:
        """The binding's `query`(*args); None where the device or this binding does not support it (module
        docstring); GpuError on any other error, None in a tolerant session."""
        call = getattr(self.lib, query, None)
        if call is None:  # this version of the binding predates the call
            return None
        try:
            return self._call(query, call, *args)
        except GpuError as err:
            if not self.tolerant:
                raise
            self.lost = self.lost or err.lost
            return None

    def _call(self, query: str, call: Any, *args: Any) -> Any:
        raise NotImplementedError


class Nvml(_Session):
    """An NVML session (nvidia-ml-py): `count` GPUs, handles() or ask("nvmlDeviceGetHandleByIndex", i) for each."""

    def __init__(self, lib: Any, count: int, tolerant: bool = False) -> None:
        self.lib, self.count, self.tolerant = lib, count, tolerant

    @classmethod
    def open(cls, tolerant: bool = False) -> Nvml:
        try:
            import pynvml
        except ImportError:
            raise Unavailable("nvidia-ml-py (pynvml) is not installed") from None
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as err:
            raise Unavailable(f"NVML: {err}") from None
        return cls(pynvml, count, tolerant)

    def _call(self, query: str, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except self.lib.NVMLError as err:
            if isinstance(err, getattr(self.lib, "NVMLError_NotSupported", ())):
                return None
            lost = getattr(err, "value", None) == getattr(self.lib, "NVML_ERROR_GPU_IS_LOST", NVML_GPU_IS_LOST)
            raise GpuError(f"NVML: {type(err).__name__}: {err}", lost=lost) from None

    def handles(self) -> list[Any]:
        """Every GPU's handle; Unavailable (the session closed) when one cannot be opened."""
        try:
            return [self.lib.nvmlDeviceGetHandleByIndex(index) for index in range(self.count)]
        except self.lib.NVMLError as err:
            self.close()
            raise Unavailable(f"NVML: {err}") from None

    def bus_id(self, handle: Any) -> str | None:
        bus = getattr(self.ask("nvmlDeviceGetPciInfo", handle), "busId", None)
        return bus.decode() if isinstance(bus, bytes) else bus

    def temp_c(self, handle: Any) -> int | None:
        return self.ask("nvmlDeviceGetTemperature", handle, self.lib.NVML_TEMPERATURE_GPU)

    def memory_used_mib(self, handle: Any) -> float | None:
        memory = self.ask("nvmlDeviceGetMemoryInfo", handle)
        return None if memory is None else memory.used / 2**20

    def reasons(self, handle: Any) -> list[str] | None:
        """The active clock-event reasons by name; nvidia-ml-py before 12.535 calls them throttle reasons."""
        query = "nvmlDeviceGetCurrentClocksEventReasons"
        if not hasattr(self.lib, query):
            query = "nvmlDeviceGetCurrentClocksThrottleReasons"
        return nvml_reasons(self.ask(query, handle))

    def close(self) -> None:
        try:
            self.lib.nvmlShutdown()
        except self.lib.NVMLError:  # not initialised, or already shut down
            pass


class Amdsmi(_Session):
    """An amdsmi session (ROCm's Python binding): `handles`, one per GPU."""

    def __init__(self, lib: Any, handles: list[Any], tolerant: bool = False) -> None:
        self.lib, self.handles, self.tolerant = lib, handles, tolerant
        self.not_supported = getattr(lib, "AMDSMI_STATUS_NOT_SUPPORTED", AMDSMI_NOT_SUPPORTED)

    @classmethod
    def open(cls, tolerant: bool = False) -> Amdsmi:
        try:
            import amdsmi
        except ImportError:
            raise Unavailable("amdsmi (ROCm's Python binding, /opt/rocm/share/amd_smi) is not importable") from None
        try:
            amdsmi.amdsmi_init()
            handles = amdsmi.amdsmi_get_processor_handles()
        except amdsmi.AmdSmiException as err:
            raise Unavailable(f"amdsmi: {err}") from None
        return cls(amdsmi, handles, tolerant)

    def _call(self, query: str, call: Any, *args: Any) -> Any:
        try:
            value = call(*args)
        except self.lib.AmdSmiException as err:
            code = getattr(err, "err_code", None)
            if code == self.not_supported:
                return None
            raise GpuError(f"amdsmi: {query}: " + (f"error code {code}" if code is not None else str(err))) from None
        return None if isinstance(value, str) and value == "N/A" else value

    def bus_id(self, handle: Any) -> str | None:
        return self.ask("amdsmi_get_gpu_device_bdf", handle)

    def temp_c(self, handle: Any, sensor: str = "HOTSPOT") -> int | None:
        """A temperature sensor's current reading (AmdSmiTemperatureType: HOTSPOT, VRAM, ...)."""
        return self.ask("amdsmi_get_temp_metric", handle, getattr(self.lib.AmdSmiTemperatureType, sensor),
                        self.lib.AmdSmiTemperatureMetric.CURRENT)

    def memory_used_mib(self, handle: Any) -> float | None:
        return amd_field(self.ask("amdsmi_get_gpu_vram_usage", handle), "vram_used")

    def close(self) -> None:
        try:
            self.lib.amdsmi_shut_down()
        except self.lib.AmdSmiException:
            pass
