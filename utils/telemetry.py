"""The node's telemetry during a run: one sampler per node, started by the launcher around the trainer.

    python3 -m utils.telemetry --out RUN_DIR/telemetry.jsonl --platform nvd [--interval-ms 1000]

Why a process of its own (not a thread in the launcher): the vendors' libraries are native code, and a
crash or a hang inside one must not take the launcher down, which would end the run (the run dies with its
launcher). The sampler is started outside the run's session, so it samples until the launcher stops it
(SIGTERM), also after a failed or interrupted run; it dies with the launcher (PR_SET_PDEATHSIG).

Backends, first that works (the file's first line names it):
  nvd: NVML through nvidia-ml-py (`pynvml`), else `nvidia-smi --query-gpu=... -lms N`;
  amd: `amdsmi` (ROCm's binding), else `amd-smi metric --json` once per interval;
  cpu: RAPL package energy (POWERCAP_ROOT, default /sys/class/powercap) where readable, and psutil's CPU
       frequency and utilization. Without a readable power sensor the header says so and no power is recorded.
A query the device does not support leaves that field out of the sample (never a zero).

telemetry.jsonl, one JSON object a line, flushed as written, time_s on time.time()'s clock (steps.jsonl's):
  {"kind": "start", "time_s", "host", "method", "interval_ms", "power_sensor", "note",
   "devices": [{"index", "name", "bus_id", "sm_clock_max_mhz", "mem_clock_max_mhz"}]}
  {"kind": "sample", "time_s", "index", "power_w", "energy_j", "sm_clock_mhz", "mem_clock_mhz", "temp_gpu_c",
   "temp_mem_c", "util_gpu_pct", "util_mem_pct", "memory_used_mib", "throttle": [reason, ...]}
  {"kind": "error", "time_s", "message"}   the sampler stopped on an error it cannot sample past
  {"kind": "end", "time_s", "samples"}     a clean stop
A file without an "end" line is an incomplete record (the sampler died or was killed).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

from utils.cli import Parser, SignalFlag, run

FILE = "telemetry.jsonl"
POWERCAP_ENV = "POWERCAP_ROOT"  # tests point it at a fake sysfs tree
POWERCAP_ROOT = "/sys/class/powercap"
STOP_WAIT_S = 10.0  # the launcher waits this long for the sampler's clean stop, then kills it
PR_SET_PDEATHSIG = 1
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
NVIDIA_SMI_FIELDS = ("index", "power.draw", "clocks.sm", "clocks.mem", "temperature.gpu", "temperature.memory",
                     "utilization.gpu", "utilization.memory", "memory.used", "clocks_throttle_reasons.active")
NVIDIA_SMI_KEYS = (None, "power_w", "sm_clock_mhz", "mem_clock_mhz", "temp_gpu_c", "temp_mem_c", "util_gpu_pct",
                   "util_mem_pct", "memory_used_mib", "throttle")


class Unavailable(Exception):
    """A backend that cannot sample on this node (no library, no driver, no tool): the next one is tried."""


class SamplerError(Exception):
    """An error the sampler cannot sample past (a GPU lost mid-run): it records it and stops."""


def _kept(fields: dict[str, Any]) -> dict[str, Any]:
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

def _nvml(platform: str) -> Backend:
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

    devices = []
    for index, handle in enumerate(handles):
        pci = ask(pynvml.nvmlDeviceGetPciInfo, handle)
        bus = getattr(pci, "busId", None)
        devices.append(_kept({
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
            out.append(_kept({
                "index": index, "power_w": None if power is None else power / 1000.0,
                "energy_j": None if energy is None else energy / 1000.0,
                "sm_clock_mhz": ask(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
                "mem_clock_mhz": ask(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM),
                "temp_gpu_c": ask(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
                "temp_mem_c": memory_temp(handle),
                "util_gpu_pct": None if util is None else util.gpu, "util_mem_pct": None if util is None else util.memory,
                "memory_used_mib": None if memory is None else round(memory.used / (1 << 20), 1),
                "throttle": reasons(ask(pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle))}))
        return out

    return Backend("nvml", devices, read, close=pynvml.nvmlShutdown)


# --- amdsmi -----------------------------------------------------------------------------------------------

def _amdsmi(platform: str) -> Backend:
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
        devices.append(_kept({
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
            out.append(_kept({
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


# --- the vendors' command-line tools ----------------------------------------------------------------------

def _csv_value(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None  # [N/A], [Not Supported]


def parse_nvidia_smi_line(line: str) -> dict[str, Any] | None:
    """One line of `nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits`; None if it is not one."""
    parts = [part.strip() for part in line.split(",")]
    if len(parts) != len(NVIDIA_SMI_FIELDS) or _csv_value(parts[0]) is None:
        return None
    sample: dict[str, Any] = {"index": int(float(parts[0]))}
    for key, text in zip(NVIDIA_SMI_KEYS[1:], parts[1:]):
        if key == "throttle":
            try:
                mask = int(text, 16)
            except ValueError:
                continue
            sample[key] = [name for bit, name in NVML_REASONS.items() if mask & bit]
        elif (value := _csv_value(text)) is not None:
            sample[key] = value
    return sample


def _nvidia_smi(platform: str, interval_ms: int) -> Backend:
    query = ["nvidia-smi", "--format=csv,noheader,nounits"]
    try:
        listing = subprocess.run([*query, "--query-gpu=index,name,pci.bus_id,clocks.max.sm,clocks.max.mem"],
                                 capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise Unavailable(f"nvidia-smi: {err}") from None
    if listing.returncode != 0:
        raise Unavailable(f"nvidia-smi exited {listing.returncode}: {listing.stderr.strip()[:200]}")
    devices = []
    for line in listing.stdout.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 5 and _csv_value(parts[0]) is not None:
            devices.append(_kept({"index": int(float(parts[0])), "name": parts[1], "bus_id": parts[2],
                                  "sm_clock_max_mhz": _csv_value(parts[3]), "mem_clock_max_mhz": _csv_value(parts[4])}))
    stream = subprocess.Popen([*query, f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}", f"-lms={interval_ms}"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = iter(stream.stdout.readline, "")  # type: ignore[union-attr]

    def read() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while len(out) < len(devices):
            line = next(lines, None)
            if line is None:
                raise SamplerError(f"nvidia-smi -lms stopped (exit code {stream.wait()})")
            if (sample := parse_nvidia_smi_line(line)) is not None:
                out.append(sample)
        return out

    def close() -> None:
        stream.terminate()
        stream.wait(timeout=5)

    return Backend("nvidia-smi", devices, read, close=close, paced=True)


def _amd_value(entry: Any) -> float | None:
    """amd-smi's JSON value: {"value": v, "unit": u}, a bare number, or "N/A"."""
    if isinstance(entry, dict):
        entry = entry.get("value")
    if isinstance(entry, bool) or entry is None:
        return None
    try:
        return float(entry)
    except (TypeError, ValueError):
        return None


def parse_amd_smi_metric(text: str) -> list[dict[str, Any]]:
    """`amd-smi metric --json`'s GPUs as samples (ROCm 6.x: a list, one object per GPU; or {"gpu_data": [...]})."""
    data = json.loads(text)
    gpus = data.get("gpu_data", []) if isinstance(data, dict) else data
    out = []
    for gpu in gpus:
        clock = gpu.get("clock") or {}
        fields = {
            "index": int(gpu["gpu"]),
            "power_w": _amd_value((gpu.get("power") or {}).get("socket_power")),
            "energy_j": _amd_value((gpu.get("energy") or {}).get("total_energy_consumption")),
            "sm_clock_mhz": _amd_value((clock.get("gfx_0") or {}).get("clk")),
            "mem_clock_mhz": _amd_value((clock.get("mem_0") or {}).get("clk")),
            "temp_gpu_c": _amd_value((gpu.get("temperature") or {}).get("hotspot")),
            "temp_mem_c": _amd_value((gpu.get("temperature") or {}).get("mem")),
            "util_gpu_pct": _amd_value((gpu.get("usage") or {}).get("gfx_activity")),
            "util_mem_pct": _amd_value((gpu.get("usage") or {}).get("umc_activity")),
            "memory_used_mib": _amd_value((gpu.get("mem_usage") or {}).get("used_vram")),
        }
        maxima = {"sm_clock_max_mhz": _amd_value((clock.get("gfx_0") or {}).get("max_clk")),
                  "mem_clock_max_mhz": _amd_value((clock.get("mem_0") or {}).get("max_clk"))}
        out.append({**_kept(fields), "_maxima": _kept(maxima)})
    return out


def _amd_smi_cli(platform: str, interval_ms: int) -> Backend:
    def metric() -> list[dict[str, Any]]:
        try:
            done = subprocess.run(["amd-smi", "metric", "--json"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise SamplerError(f"amd-smi metric: {err}") from None
        if done.returncode != 0:
            raise SamplerError(f"amd-smi metric exited {done.returncode}: {done.stderr.strip()[:200]}")
        try:
            return parse_amd_smi_metric(done.stdout)
        except (ValueError, KeyError, TypeError) as err:
            raise SamplerError(f"amd-smi metric --json: unreadable output ({err})") from None

    try:
        first = metric()
    except SamplerError as err:
        raise Unavailable(str(err)) from None
    devices = [{"index": gpu["index"], **gpu["_maxima"]} for gpu in first]

    def read() -> list[dict[str, Any]]:
        return [{key: value for key, value in gpu.items() if key != "_maxima"} for gpu in metric()]

    return Backend("amd-smi", devices, read)


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


def _cpu(platform: str) -> Backend:
    import psutil

    root = os.environ.get(POWERCAP_ENV, POWERCAP_ROOT)
    packages = rapl_packages(root)
    psutil.cpu_percent()  # the first call only starts psutil's interval
    freq = psutil.cpu_freq()
    max_mhz = freq.max if freq is not None and freq.max else None
    names = [package.name for package in packages] or ["cpu"]
    devices = [_kept({"index": i, "name": name, "sm_clock_max_mhz": max_mhz}) for i, name in enumerate(names)]
    previous: dict[int, tuple[float, float]] = {}

    def read() -> list[dict[str, Any]]:
        now = time.time()
        freq = psutil.cpu_freq()
        shared = _kept({"sm_clock_mhz": None if freq is None else round(freq.current, 1),
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


def open_backend(platform: str, interval_ms: int) -> Backend:
    """The first backend that can read this node; Unavailable naming why none could."""
    if platform == "cpu":
        return _cpu(platform)
    tries: list[Callable[[], Backend]] = \
        [lambda: _nvml(platform), lambda: _nvidia_smi(platform, interval_ms)] if platform == "nvd" else \
        [lambda: _amdsmi(platform), lambda: _amd_smi_cli(platform, interval_ms)]
    reasons = []
    for attempt in tries:
        try:
            return attempt()
        except Unavailable as err:
            reasons.append(str(err))
    raise Unavailable("; ".join(reasons))


# --- the sampler process ----------------------------------------------------------------------------------

def _write(out: TextIO, record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def sample(out_path: Path, platform: str, interval_ms: int) -> int:
    """Sample until SIGTERM/SIGINT/SIGHUP (exit 0 with an end line) or an error it cannot sample past (exit 1, an
    error line and no end line: the record is incomplete). A stop only sets a flag, so no line is cut short."""
    stopping = SignalFlag()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stopping.set)
    head = {"kind": "start", "host": socket.gethostname(), "interval_ms": interval_ms}
    count = 0
    with open(out_path, "a", encoding="utf-8") as out:
        try:
            backend = open_backend(platform, interval_ms)
        except Unavailable as err:
            _write(out, {**head, "time_s": time.time(), "method": None, "power_sensor": False, "devices": [],
                         "note": f"no telemetry backend on this {platform} node: {err}"})
            _write(out, {"kind": "end", "time_s": time.time(), "samples": 0})
            return 0
        _write(out, {**head, "time_s": time.time(), "method": backend.method, "power_sensor": backend.power_sensor,
                     "note": backend.note, "devices": backend.devices})
        due = time.monotonic()
        try:
            while not stopping.is_set():
                taken = time.time()
                for reading in backend.read():
                    _write(out, {"kind": "sample", "time_s": round(taken, 3), **reading})
                    count += 1
                if not backend.paced:
                    due += interval_ms / 1000.0
                    stopping.wait(due - time.monotonic())
            _write(out, {"kind": "end", "time_s": time.time(), "samples": count})
            return 0
        except SamplerError as err:
            _write(out, {"kind": "error", "time_s": time.time(), "message": str(err)})
            return 1
        except Exception as err:  # noqa: BLE001 - whatever broke, the record says so and the run goes on
            _write(out, {"kind": "error", "time_s": time.time(), "message": f"{type(err).__name__}: {err}"})
            return 1
        finally:
            try:
                backend.close()
            except Exception:  # noqa: BLE001 - closing a library that failed is best effort
                pass


# --- the launcher's side ----------------------------------------------------------------------------------

def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def start(out_path: Path, platform: str, interval_ms: int, env: dict[str, str]) -> subprocess.Popen | None:
    """Start the node's sampler (its own session, so a stop of the run's session leaves it sampling the stop);
    None, with the reason written as the record, when it cannot start."""
    try:
        return subprocess.Popen([sys.executable, "-m", "utils.telemetry", "--out", str(out_path), "--platform",
                                 platform, "--interval-ms", str(interval_ms)], cwd=Path(__file__).resolve().parents[1],
                                env=env, stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_parent)
    except OSError as err:
        with open(out_path, "a", encoding="utf-8") as out:
            _write(out, {"kind": "error", "time_s": time.time(), "message": f"sampler not started: {err.strerror}"})
        return None


def stop(process: subprocess.Popen | None) -> str | None:
    """Stop the sampler cleanly (SIGTERM, then SIGKILL after STOP_WAIT_S); what went wrong, if anything."""
    if process is None:
        return "the telemetry sampler did not start"
    if process.poll() is not None:
        return f"the telemetry sampler had stopped during the run (exit code {process.returncode})"
    process.terminate()
    try:
        process.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return f"the telemetry sampler did not stop within {STOP_WAIT_S:.0f} s and was killed"
    return None


# --- reading it back --------------------------------------------------------------------------------------

@dataclass
class Record:
    """One node's telemetry.jsonl, read back."""

    path: Path
    host: str | None = None
    method: str | None = None
    interval_ms: int | None = None
    power_sensor: bool = False
    note: str | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    ended: bool = False
    unreadable_lines: int = 0

    @property
    def complete(self) -> bool:
        return self.ended and self.error is None and self.unreadable_lines == 0


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8", errors="replace") as source:
        yield from source


def read(path: Path) -> Record:
    """A node's record; a line cut short by a kill is counted, never fatal."""
    record = Record(path)
    for line in _lines(path):
        try:
            item = json.loads(line)
            kind = item["kind"]
        except (ValueError, KeyError, TypeError):
            record.unreadable_lines += 1
            continue
        if kind == "start":
            record.host, record.method, record.interval_ms = item.get("host"), item.get("method"), item.get("interval_ms")
            record.power_sensor, record.note = bool(item.get("power_sensor")), item.get("note")
            record.devices = list(item.get("devices") or [])
        elif kind == "sample":
            record.samples.append(item)
        elif kind == "error":
            record.error = item.get("message")
        elif kind == "end":
            record.ended = True
    return record


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m utils.telemetry", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the JSON-lines file to append to")
    parser.add_argument("--platform", required=True, choices=("amd", "nvd", "cpu"))
    parser.add_argument("--interval-ms", type=int, default=1000, help="milliseconds between samples (>= 100)")
    args = parser.parse_args(argv)
    if args.interval_ms < 100:
        parser.error(f"--interval-ms {args.interval_ms}: give 100 or more")
    return sample(args.out, args.platform, args.interval_ms)


if __name__ == "__main__":
    run(main, "utils.telemetry")
