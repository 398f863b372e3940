"""The GPUs a test describes, shared by the fake `pynvml` and `amdsmi` modules in this directory.

A test writes a JSON scenario and names it in TPRIMAT_FAKE_GPUS; putting tests/fakes first on
sys.path / PYTHONPATH then makes `import pynvml` and `import amdsmi` answer from it. Without the
variable both fakes fail to initialise, as on a machine without the driver.

Scenario format (every key optional unless stated; units are the ones a person reads, the fakes
convert to each library's own units):

    {
      "driver_version": "550.54.15",
      "init_error": false,             # true: nvmlInit / amdsmi_init fail (driver not loaded)
      "gpus": [                        # required: one object per GPU, index = position
        {
          "name": "NVIDIA H100 80GB HBM3",      # amdsmi: asic market_name
          "uuid": "GPU-fake-0",                 # default GPU-fake-<index>
          "bus_id": "00000000:18:00.0",         # default derived from the index
          "memory_total_mib": 81559,
          "memory_used_mib": 1024,
          "power_w": 650.0,                     # instantaneous power draw
          "energy_start_j": 1000.0,             # energy counter at init; it then advances at
                                                # power_w per second of wall time
          "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980,   # amdsmi: GFX clock
          "mem_clock_mhz": 2619, "mem_clock_max_mhz": 2619,
          "temp_gpu_c": 60, "temp_mem_c": 70,   # amdsmi: hotspot and VRAM (HBM)
          "util_gpu_pct": 100, "util_mem_pct": 40,
          "throttle": ["sw_power_cap"],         # active clock-event reasons, this fake's vendor
                                                # names: pynvml gpu_idle, applications_clocks,
                                                # sw_power_cap, hw_slowdown, sync_boost,
                                                # sw_thermal, hw_thermal, hw_power_brake,
                                                # display_clock; amdsmi (violation status)
                                                # prochot_thrm, ppt_pwr, socket_thrm, vr_thrm,
                                                # hbm_thrm, gfx_clk_below_host_limit
          "not_supported": ["energy", "temp_mem"],  # queries that raise the library's
                                                # NotSupported: power, energy, sm_clock,
                                                # sm_clock_max, mem_clock, mem_clock_max,
                                                # temp_gpu, temp_mem, util, memory, throttle,
                                                # ecc, remapped_rows, power_limit, pcie,
                                                # nvlink, processes
          "fail_after": 5,                      # after this many power queries every query of
                                                # this GPU raises GPU-is-lost (a sampler error
                                                # that is not NotSupported)
          # node health (evaluate.health)
          "ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 0,
          "ecc_corrected_volatile": 0, "ecc_corrected_aggregate": 0,   # amdsmi: total counts
          "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": false, "failure": false},
                                                # amdsmi: bad pages = corrected + uncorrected
          "power_limit_w": 700, "power_default_limit_w": 700,
          "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16,
          "nvlink_links": 18, "nvlink_down": [3],   # NVLink link count and the links down;
                                                # amdsmi: any link down = xGMI error status
          "processes": [{"pid": 4242, "used_mib": 2048, "name": "python3"}]
        }
      ]
    }

Any number above may also be a list: the n-th query of that field on that GPU answers item n
(the last item once the list runs out), so a test can script a GPU that throttles from its third
sample on ("throttle": [[], [], ["sw_thermal"]]).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

ENV = "TPRIMAT_FAKE_GPUS"

DEFAULTS: dict[str, Any] = {
    "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "memory_used_mib": 0,
    "power_w": 300.0, "energy_start_j": 0.0,
    "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "mem_clock_mhz": 2619, "mem_clock_max_mhz": 2619,
    "temp_gpu_c": 40, "temp_mem_c": 45, "util_gpu_pct": 0, "util_mem_pct": 0, "throttle": [],
    "ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 0,
    "ecc_corrected_volatile": 0, "ecc_corrected_aggregate": 0,
    "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False},
    "power_limit_w": 700, "power_default_limit_w": 700,
    "pcie_gen": 5, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16,
    "nvlink_links": 18, "nvlink_down": [], "processes": [],
}


class NotSupported(Exception):
    """Raised by a FakeGpu query the scenario marks unsupported; each fake maps it to its library's error."""


class GpuLost(Exception):
    """Raised by every query of a GPU past its fail_after power queries."""


@dataclass
class FakeGpu:
    """One scenario GPU: answers a field by name, counting queries for list values and fail_after."""

    index: int
    spec: dict[str, Any]
    started: float = field(default_factory=time.time)
    calls: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def value(self, key: str, query: str | None = None) -> Any:
        """The field's current answer; `query` is the not_supported name when it differs from key."""
        fail_after = self.spec.get("fail_after")
        with self.lock:
            if fail_after is not None and self.calls.get("power_w", 0) >= fail_after:
                raise GpuLost(f"fake GPU {self.index} is lost")
            if (query or key) in self.spec.get("not_supported", []):
                raise NotSupported(query or key)
            n = self.calls.get(key, 0)
            self.calls[key] = n + 1
        if key == "uuid":
            return self.spec.get("uuid", f"GPU-fake-{self.index}")
        if key == "bus_id":
            return self.spec.get("bus_id", f"00000000:{0x18 + self.index:02X}:00.0")
        raw = self.spec.get(key, DEFAULTS.get(key))
        if isinstance(raw, list) and key not in ("processes", "nvlink_down", "throttle"):
            return raw[min(n, len(raw) - 1)]
        if key == "throttle" and raw and isinstance(raw[0], list):
            return raw[min(n, len(raw) - 1)]
        return raw

    def energy_j(self) -> float:
        """The counter: energy_start_j plus power_w (its first value) for every second since init."""
        self.value("energy_start_j", "energy")
        power = self.spec.get("power_w", DEFAULTS["power_w"])
        power = power[0] if isinstance(power, list) else power
        return float(self.spec.get("energy_start_j", 0.0)) + float(power) * (time.time() - self.started)


@dataclass
class Scenario:
    """The whole scenario file, loaded at the fake library's init."""

    driver_version: str
    gpus: list[FakeGpu]


def load() -> Scenario:
    """Read TPRIMAT_FAKE_GPUS; raises RuntimeError where a real library would find no driver."""
    path = os.environ.get(ENV, "")
    if not path:
        raise RuntimeError(f"{ENV} is not set: no fake GPU")
    data = json.loads(open(path, encoding="utf-8").read())
    if data.get("init_error"):
        raise RuntimeError("fake driver not loaded")
    gpus = [FakeGpu(i, spec) for i, spec in enumerate(data["gpus"])]
    return Scenario(str(data.get("driver_version", "550.54.15")), gpus)
