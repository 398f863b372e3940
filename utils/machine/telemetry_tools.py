"""The telemetry sampler's fallbacks where the vendor's library is missing: the vendors' command-line tools.

  nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits --loop-ms=N (-lms): one line per GPU
      per interval, read as it streams ([N/A] and [Not Supported] leave the field out);
  amd-smi metric --json, once per interval (ROCm 6.x: {"value", "unit"} per figure, "N/A" where unsupported).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from utils.machine.telemetry_backends import NVML_REASONS, Backend, SamplerError, Unavailable, kept

NVIDIA_SMI_FIELDS = ("index", "power.draw", "clocks.sm", "clocks.mem", "temperature.gpu", "temperature.memory",
                     "utilization.gpu", "utilization.memory", "memory.used", "clocks_throttle_reasons.active")
NVIDIA_SMI_KEYS = (None, "power_w", "sm_clock_mhz", "mem_clock_mhz", "temp_gpu_c", "temp_mem_c", "util_gpu_pct",
                   "util_mem_pct", "memory_used_mib", "throttle")


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


def nvidia_smi(interval_ms: int) -> Backend:
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
            devices.append(kept({"index": int(float(parts[0])), "name": parts[1], "bus_id": parts[2],
                                  "sm_clock_max_mhz": _csv_value(parts[3]), "mem_clock_max_mhz": _csv_value(parts[4])}))
    stream = subprocess.Popen([*query, f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}", f"--loop-ms={interval_ms}"],
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
        out.append({**kept(fields), "_maxima": kept(maxima)})
    return out


def amd_smi() -> Backend:
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
