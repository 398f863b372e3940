"""Is this node fit to benchmark? The checks `python3 -m evaluate.health` runs before the first run.

A number from an unhealthy node is not the hardware's: a GPU with uncorrectable ECC errors or pending row
remaps, a power limit below the default, a PCIe link trained below its generation or width, an NVLink/xGMI link
down, memory held by a stale process, a GPU hot at idle, an InfiniBand port down, or a CPU governor that is not
"performance" each skew it. The checks follow NVIDIA's DGX prescreen and AMD's node checks
(../shared/reference/machine.md). GPUs are read through NVML (nvidia-ml-py) or amdsmi, else `nvidia-smi`; a query
a device does not support is skipped (never a crash, never a false problem). The InfiniBand ports and the CPU
governor are read from sysfs (TPRIMAT_SYSFS_ROOT, default /sys; tests point it at a fake tree).

The record (system.json's "health" key, hence every result's system.health):
  {"method": "nvml" | "amdsmi" | "nvidia-smi" | "none", "checked_at": ISO time, "ok": bool,
   "gpus": number checked, "notes": [what could not be checked],
   "problems": [{"index": int | None, "bus_id": str | None, "field": str, "value": ..., "expected": ...,
                 "fix": str, "line": str}]}
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from utils.cli import now_iso
from utils.telemetry_backends import NVML_REASONS
from utils.vendor_tools import run_tool

SYSFS_ENV = "TPRIMAT_SYSFS_ROOT"
IDLE_MEMORY_MIB = 1024  # more than this in use before the first run: another job or a stale process holds the GPU
IDLE_TEMP_C = 60  # an idle data-centre GPU sits at 30-45 C; above this its cooling is suspect before any load
NVLINK_MAX_LINKS = 18  # H100 SXM has 18 NVLink 4 links; a GPU with fewer answers NotSupported past its last
PCIE_GEN_OF_MTS = {2500: 1, 5000: 2, 8000: 3, 16000: 4, 32000: 5, 64000: 6}  # amdsmi reports link speed in MT/s


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
class Gpu:
    """What one GPU reports; None: the device does not support the query (nothing is checked then)."""

    index: int
    vendor: str  # nvd | amd: whose tool the fixes name
    bus_id: str | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    rows_pending: bool | None = None  # remapped rows (NVIDIA) / retired pages (AMD) waiting for a reset
    rows_failed: bool | None = None
    power_limit_w: float | None = None
    power_default_w: float | None = None
    pcie: tuple[int, int, int, int] | None = None  # generation, its maximum, width, its maximum
    links_down: list[int] | None = None  # NVLink link numbers down; AMD: [-1] when the xGMI error status is set
    memory_used_mib: float | None = None
    processes: list[str] | None = None
    temp_c: float | None = None
    reasons: list[str] | None = None  # active clock-event reasons at idle


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

    tool = "nvidia-smi -i" if gpu.vendor == "nvd" else "amd-smi reset -g"
    reset = f"drain the node and reset the GPU ({tool} {gpu.index}{' -r' if gpu.vendor == 'nvd' else ''}, or a " \
        "reboot), then rerun"
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


# --- reading the GPUs ---------------------------------------------------------------------------------------

class NoLibrary(Exception):
    """The binding or its driver is missing: the next way of reading is tried."""


def read_nvml() -> list[Gpu]:
    try:
        import pynvml
    except ImportError:
        raise NoLibrary("nvidia-ml-py (pynvml) is not installed") from None
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as err:
        raise NoLibrary(f"NVML: {err}") from None

    def ask(query: Callable, *args: Any) -> Any:
        try:
            return query(*args)
        except pynvml.NVMLError:  # NotSupported, or a field this driver lacks: nothing to check
            return None

    gpus = []
    try:
        for index in range(count):
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            pci = ask(pynvml.nvmlDeviceGetPciInfo, h)
            bus = getattr(pci, "busId", None)
            rows = ask(pynvml.nvmlDeviceGetRemappedRows, h)  # (corrected, uncorrected, pending, failure)
            limits = [ask(q, h) for q in (pynvml.nvmlDeviceGetPowerManagementLimit,
                                          pynvml.nvmlDeviceGetPowerManagementDefaultLimit)]
            pcie = [ask(q, h) for q in (pynvml.nvmlDeviceGetCurrPcieLinkGeneration,
                                        pynvml.nvmlDeviceGetMaxPcieLinkGeneration,
                                        pynvml.nvmlDeviceGetCurrPcieLinkWidth, pynvml.nvmlDeviceGetMaxPcieLinkWidth)]
            links = [ask(pynvml.nvmlDeviceGetNvLinkState, h, link) for link in range(NVLINK_MAX_LINKS)]
            memory = ask(pynvml.nvmlDeviceGetMemoryInfo, h)
            processes = ask(pynvml.nvmlDeviceGetComputeRunningProcesses, h)
            mask = ask(pynvml.nvmlDeviceGetCurrentClocksEventReasons, h)
            gpus.append(Gpu(
                index=index, vendor="nvd", bus_id=bus.decode() if isinstance(bus, bytes) else bus,
                ecc_uncorrected_volatile=ask(pynvml.nvmlDeviceGetTotalEccErrors, h,
                                             pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
                ecc_uncorrected_aggregate=ask(pynvml.nvmlDeviceGetTotalEccErrors, h,
                                              pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC),
                rows_pending=bool(rows[2]) if rows else None, rows_failed=bool(rows[3]) if rows else None,
                power_limit_w=limits[0] / 1000 if limits[0] is not None else None,
                power_default_w=limits[1] / 1000 if limits[1] is not None else None,
                pcie=tuple(pcie) if None not in pcie else None,
                links_down=[n for n, state in enumerate(links) if state == 0] if any(s is not None for s in links)
                else None,
                memory_used_mib=memory.used / 2**20 if memory is not None else None,
                processes=[f"pid {p.pid} ({(p.usedGpuMemory or 0) / 2**20:.0f} MiB)" for p in processes]
                if processes is not None else None,
                temp_c=ask(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU),
                reasons=[name for bit, name in NVML_REASONS.items() if mask & bit] if mask is not None else None))
    finally:
        ask(pynvml.nvmlShutdown)
    return gpus


def read_amdsmi() -> list[Gpu]:
    try:
        import amdsmi
    except ImportError:
        raise NoLibrary("amdsmi (ROCm's Python binding) is not importable") from None
    try:
        amdsmi.amdsmi_init()
        handles = amdsmi.amdsmi_get_processor_handles()
    except amdsmi.AmdSmiException as err:
        raise NoLibrary(f"amdsmi: {err}") from None

    def ask(query: Callable, *args: Any) -> Any:
        try:
            return query(*args)
        except amdsmi.AmdSmiException:
            return None

    gpus = []
    try:
        for index, h in enumerate(handles):
            ecc = ask(amdsmi.amdsmi_get_gpu_total_ecc_count, h) or {}
            pages = ask(amdsmi.amdsmi_get_gpu_bad_page_info, h)
            cap = ask(amdsmi.amdsmi_get_power_cap_info, h) or {}
            pcie = (ask(amdsmi.amdsmi_get_pcie_info, h) or {})
            metric, static = pcie.get("pcie_metric") or {}, pcie.get("pcie_static") or {}
            link = [PCIE_GEN_OF_MTS.get(metric.get("pcie_speed")), PCIE_GEN_OF_MTS.get(static.get("max_pcie_speed")),
                    metric.get("pcie_width"), static.get("max_pcie_width")]
            xgmi = ask(amdsmi.amdsmi_gpu_xgmi_error_status, h)
            vram = ask(amdsmi.amdsmi_get_gpu_vram_usage, h)
            processes = ask(amdsmi.amdsmi_get_gpu_process_list, h)
            gpus.append(Gpu(
                index=index, vendor="amd", bus_id=ask(amdsmi.amdsmi_get_gpu_device_bdf, h),
                ecc_uncorrected_aggregate=ecc.get("uncorrectable_count"),
                rows_pending=any(p.get("status") == "PENDING" for p in pages) if isinstance(pages, list) else None,
                power_limit_w=_watts(cap.get("power_cap")), power_default_w=_watts(cap.get("default_power_cap")),
                pcie=tuple(int(v) for v in link) if None not in link else None,
                links_down=[-1] if xgmi else ([] if xgmi is not None else None),
                memory_used_mib=vram.get("vram_used") if vram else None,
                processes=[f"pid {p.get('pid')} ({p.get('name', '?')})" for p in processes]
                if processes is not None else None,
                temp_c=ask(amdsmi.amdsmi_get_temp_metric, h, amdsmi.AmdSmiTemperatureType.HOTSPOT,
                           amdsmi.AmdSmiTemperatureMetric.CURRENT)))
    finally:
        ask(amdsmi.amdsmi_shut_down)
    return gpus


def _watts(microwatts: Any) -> float | None:
    """amdsmi's power caps are in microwatts."""
    return float(microwatts) / 1e6 if isinstance(microwatts, (int, float)) and microwatts > 0 else None


SMI_FIELDS = ("index", "pci.bus_id", "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total",
              "power.limit", "power.default_limit", "pcie.link.gen.current", "pcie.link.gen.max",
              "pcie.link.width.current", "pcie.link.width.max", "memory.used", "temperature.gpu")


def read_nvidia_smi() -> list[Gpu]:
    """nvidia-smi's CSV, where NVML's binding is missing; [N/A] fields are not checked."""
    out = run_tool("nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits", timeout=30)
    if not out:
        raise NoLibrary("nvidia-smi did not answer")
    gpus = []
    for line in out.splitlines():
        raw = [item.strip() for item in line.split(",")]
        if len(raw) != len(SMI_FIELDS):
            continue
        v = {name: _number(item) for name, item in zip(SMI_FIELDS, raw)}
        link = [v["pcie.link.gen.current"], v["pcie.link.gen.max"], v["pcie.link.width.current"],
                v["pcie.link.width.max"]]
        gpus.append(Gpu(index=int(v["index"] or 0), vendor="nvd", bus_id=raw[1],
                        ecc_uncorrected_volatile=_int(v["ecc.errors.uncorrected.volatile.total"]),
                        ecc_uncorrected_aggregate=_int(v["ecc.errors.uncorrected.aggregate.total"]),
                        power_limit_w=v["power.limit"], power_default_w=v["power.default_limit"],
                        pcie=tuple(int(x) for x in link) if None not in link else None,
                        memory_used_mib=v["memory.used"], temp_c=v["temperature.gpu"]))
    return gpus


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # [N/A], [Not Supported]
        return None


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


READERS: dict[str, tuple[tuple[str, Callable[[], list[Gpu]]], ...]] = {
    "nvd": (("nvml", read_nvml), ("nvidia-smi", read_nvidia_smi)),
    "amd": (("amdsmi", read_amdsmi),),
}


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
            break
        except NoLibrary as err:
            notes.append(f"{name}: {err}")
    else:
        if platform in READERS:
            notes.append(f"no way to read the {platform} GPUs worked: their health was not checked")
    problems = [p for gpu in gpus for p in gpu_problems(gpu)]
    root = sysfs(env)
    problems += infiniband_problems(root, notes) + governor_problems(root, notes)
    return Health(method, len(gpus), problems, notes)
