"""Is this node fit to benchmark? The checks `python3 -m evaluate.health` runs before the first run.

A number from an unhealthy node is not the hardware's: a GPU with uncorrectable ECC errors or pending row
remaps, a power limit below the default, a PCIe link trained below its generation or width, an NVLink/xGMI link
down, memory held by a stale process, a GPU hot at idle, an InfiniBand port down, or a CPU governor that is not
"performance" each skew it. The checks follow NVIDIA's DGX prescreen and AMD's node checks
(../shared/reference/machine.md). GPUs are read through NVML (nvidia-ml-py) or amdsmi, else `nvidia-smi` or
`amd-smi` (utils/machine/health_readers.py); a query a device does not support is skipped (never a crash, never a false
problem). The InfiniBand ports and the CPU governor are read from sysfs (TPRIMAT_SYSFS_ROOT, default /sys; tests
point it at a fake tree).

The record (system.json's "health" key, hence every result's system.health):
  {"method": "nvml" | "amdsmi" | "nvidia-smi" | "amd-smi" | "none", "checked_at": ISO time, "ok": bool,
   "gpus": number checked, "notes": [what could not be checked],
   "problems": [{"index": int | None, "bus_id": str | None, "field": str, "value": ..., "expected": ...,
                 "fix": str, "line": str}]}
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from utils.cli import now_iso
from utils.machine.health_readers import NOT_SHOWN, READERS, Gpu
from utils.machine.vendor_tools import Unavailable

SYSFS_ENV = "TPRIMAT_SYSFS_ROOT"
IDLE_MEMORY_MIB = 1024  # more than this in use before the first run: another job or a stale process holds the GPU
IDLE_TEMP_C = 60  # an idle data-centre GPU sits at 30-45 C; above this its cooling is suspect before any load


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the node: what, where, what it should be and how to fix it."""

    index: int | None  # GPU index; None for the node (a port, the CPU)
    bus_id: str | None
    field: str
    value: Any
    expected: Any
    fix: str

    @property
    def line(self) -> str:
        where = "node" if self.index is None else f"GPU {self.index}" + (f" ({self.bus_id})" if self.bus_id else "")
        return f"{where}: {self.field} is {self.value}, should be {self.expected}: {self.fix}"


@dataclass
class Health:
    method: str
    gpus: int
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def record(self) -> dict:
        """The system.json record (module docstring)."""
        return {"method": self.method, "checked_at": now_iso(), "ok": self.ok, "gpus": self.gpus, "notes": self.notes,
                "problems": [{**asdict(p), "line": p.line} for p in self.problems]}


def gpu_problems(gpu: Gpu) -> list[Problem]:
    """Every problem one GPU's readings show."""
    found: list[Problem] = []

    def add(name: str, value: Any, expected: Any, fix: str) -> None:
        found.append(Problem(gpu.index, gpu.bus_id, name, value, expected, fix))

    tool = f"nvidia-smi -i {gpu.index} -r" if gpu.vendor == "nvd" else f"amd-smi reset -g {gpu.index} -G"
    reset = f"drain the node and reset the GPU ({tool}, or a reboot), then rerun"
    if gpu.lost:
        add("the GPU", "lost (the driver cannot reach it)", "reachable", reset)
        return found
    for name, count in (("uncorrectable ECC errors (volatile)", gpu.ecc_uncorrected_volatile),
                        ("uncorrectable ECC errors (aggregate)", gpu.ecc_uncorrected_aggregate)):
        if count:
            add(name, count, 0, "the GPU's memory is failing: " + reset + "; replace it if they persist")
    if gpu.rows_pending:
        add("memory rows pending remap/retirement", "pending", "none", reset)
    if gpu.rows_failed:
        add("memory row remapping", "failed", "none", "the GPU has run out of spare rows: replace it")
    if gpu.power_limit_w is not None and gpu.power_default_w and gpu.power_limit_w < gpu.power_default_w:
        add("power limit", f"{gpu.power_limit_w:g} W", f"the default {gpu.power_default_w:g} W",
            f"nvidia-smi -i {gpu.index} -pl {gpu.power_default_w:g}" if gpu.vendor == "nvd" else
            f"amd-smi set -g {gpu.index} --power-cap {gpu.power_default_w:g}")
    if gpu.pcie is not None:
        gen, gen_max, width, width_max = gpu.pcie
        if gen < gen_max or width < width_max:
            add("PCIe link", f"Gen{gen} x{width}", f"Gen{gen_max} x{width_max}",
                "reseat the GPU or its riser, check the BIOS slot settings (an idle GPU may downshift the "
                "generation: check under load with nvidia-smi -q -d PCIE)")
    if gpu.links_down:
        links = "xGMI error status set" if gpu.links_down == [-1] else "links " + ", ".join(map(str, gpu.links_down))
        add("NVLink/xGMI", f"down ({links})", "every link up",
            "check the fabric (nvidia-smi nvlink -s; systemctl status nvidia-fabricmanager / amd-smi xgmi -e)")
    if gpu.processes:
        add("processes on the GPU", "; ".join(gpu.processes), "none", "end them (or wait for the other job) first")
    elif gpu.memory_used_mib is not None and gpu.memory_used_mib > IDLE_MEMORY_MIB:
        add("memory in use before the first run", f"{gpu.memory_used_mib:.0f} MiB", f"<= {IDLE_MEMORY_MIB} MiB",
            "a stale process holds it: find it with nvidia-smi / amd-smi process and end it")
    if gpu.temp_c is not None and gpu.temp_c > IDLE_TEMP_C:
        add("temperature at idle", f"{gpu.temp_c:g} C", f"<= {IDLE_TEMP_C} C", "check the node's cooling and fans")
    if gpu.reasons and "applications_clocks" in gpu.reasons:
        add("application clocks", "set below the maximum", "the maximum", f"nvidia-smi -i {gpu.index} -rac")
    return found


# --- the node -----------------------------------------------------------------------------------------------

def sysfs(env: dict[str, str] | None = None) -> Path:
    return Path((env if env is not None else os.environ).get(SYSFS_ENV) or "/sys")


def governor_problems(root: Path, notes: list[str]) -> list[Problem]:
    """CPU frequency governors other than "performance" (the benchmark's clocks would wander with load)."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.glob("devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor")):
        try:
            found.setdefault(path.read_text().strip(), []).append(path.parent.parent.name)
        except OSError:
            continue
    if not found:
        notes.append(f"CPU frequency governor: not readable ({root}/devices/system/cpu/*/cpufreq absent, as in most "
                     "VMs): not checked")
    return [Problem(None, None, "CPU frequency governor", f"{governor} on {len(cpus)} CPU(s)", "performance",
                    "sudo cpupower frequency-set -g performance")
            for governor, cpus in found.items() if governor != "performance"]


def infiniband_problems(root: Path, notes: list[str]) -> list[Problem]:
    """InfiniBand / RoCE ports that are not ACTIVE (a multi-node run would fall back or fail)."""
    found = []
    ports = sorted(root.glob("class/infiniband/*/ports/*"))
    for port in ports:
        try:
            state = (port / "state").read_text().strip()
            rate = (port / "rate").read_text().strip()
        except OSError:
            continue
        if "ACTIVE" not in state:
            name = f"{port.parent.parent.name} port {port.name}"
            found.append(Problem(None, None, f"InfiniBand/RoCE {name}", f"{state} ({rate})", "4: ACTIVE",
                                 f"check its cable and switch port (ibstat {port.parent.parent.name}); leave it out of "
                                 "NET_IB_HCA if it is not used"))
    if not ports:
        notes.append("InfiniBand/RoCE: no port under /sys/class/infiniband: not checked")
    return found


def check(platform: str, env: dict[str, str] | None = None) -> Health:
    """Every check that applies to this platform's node."""
    notes: list[str] = []
    method, gpus = "none", []
    if platform == "cpu":
        notes.append("CPU platform: no GPU to check")
    for name, reader in READERS.get(platform, ()):
        try:
            method, gpus = name, reader()
            if name in NOT_SHOWN:
                notes.append(NOT_SHOWN[name])
            break
        except Unavailable as err:
            notes.append(f"{name}: {err}")
    else:
        if platform in READERS:
            notes.append(f"no way to read the {platform} GPUs worked: their health was not checked")
    problems = [p for gpu in gpus for p in gpu_problems(gpu)]
    root = sysfs(env)
    problems += infiniband_problems(root, notes) + governor_problems(root, notes)
    return Health(method, len(gpus), problems, notes)
