"""The telemetry sampler's fallbacks where the vendor's library is missing: the vendors' command-line tools.

  nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits --loop-ms=N (-lms): one line per GPU
      per interval, read as it streams ([N/A] and [Not Supported] leave the field out);
  amd-smi metric --json, once per interval (ROCm 6.x: {"value", "unit"} per figure, "N/A" where unsupported).
The tools are run, and their CSV and JSON values read, by utils/machine/vendor_tools.py (the one reader of the
vendors' tools; nvidia-smi's streaming run is this module's own); what is here is which fields the sampler asks for
and how they become a sample. nvidia-smi's throttle mask is NVML's (utils/machine/gpu_libraries.py decodes it).
"""

from __future__ import annotations

import subprocess
from typing import Any

from utils.machine.gpu_libraries import nvml_reasons
from utils.machine.telemetry_backends import Backend, SamplerError, kept
from utils.machine.vendor_tools import Unavailable, amd_smi_gpus, amd_smi_value, smi_number, smi_rows, tool_output

NVIDIA_SMI_FIELDS = ("index", "power.draw", "clocks.sm", "clocks.mem", "temperature.gpu", "temperature.memory",
                     "utilization.gpu", "utilization.memory", "memory.used", "clocks_throttle_reasons.active")
NVIDIA_SMI_KEYS = (None, "power_w", "sm_clock_mhz", "mem_clock_mhz", "temp_gpu_c", "temp_mem_c", "util_gpu_pct",
                   "util_mem_pct", "memory_used_mib", "throttle")


def parse_nvidia_smi_line(line: str) -> dict[str, Any] | None:
    """One line of `nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits`; None if it is not one."""
    parts = [part.strip() for part in line.split(",")]
    if len(parts) != len(NVIDIA_SMI_FIELDS) or smi_number(parts[0]) is None:
        return None
    sample: dict[str, Any] = {"index": int(float(parts[0]))}
    for key, text in zip(NVIDIA_SMI_KEYS[1:], parts[1:]):
        if key == "throttle":
            try:
                mask = int(text, 16)
            except ValueError:
                continue
            sample[key] = nvml_reasons(mask)
        elif (value := smi_number(text)) is not None:
            sample[key] = value
    return sample


def nvidia_smi(interval_ms: int) -> Backend:
    query = ["nvidia-smi", "--format=csv,noheader,nounits"]
    listing = tool_output(*query, "--query-gpu=index,name,pci.bus_id,clocks.max.sm,clocks.max.mem", timeout=20)
    devices = [kept({"index": int(float(parts[0])), "name": parts[1], "bus_id": parts[2],
                     "sm_clock_max_mhz": smi_number(parts[3]), "mem_clock_max_mhz": smi_number(parts[4])})
               for parts in smi_rows(listing) if len(parts) == 5 and smi_number(parts[0]) is not None]
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


def parse_amd_smi_metric(text: str) -> list[dict[str, Any]]:
    """`amd-smi metric --json`'s GPUs as samples (ROCm 6.x: a list, one object per GPU; or {"gpu_data": [...]})."""
    out = []
    for gpu in amd_smi_gpus(text):
        clock = gpu.get("clock") or {}
        fields = {
            "index": int(gpu["gpu"]),
            "power_w": amd_smi_value((gpu.get("power") or {}).get("socket_power")),
            "energy_j": amd_smi_value((gpu.get("energy") or {}).get("total_energy_consumption")),
            "sm_clock_mhz": amd_smi_value((clock.get("gfx_0") or {}).get("clk")),
            "mem_clock_mhz": amd_smi_value((clock.get("mem_0") or {}).get("clk")),
            "temp_gpu_c": amd_smi_value((gpu.get("temperature") or {}).get("hotspot")),
            "temp_mem_c": amd_smi_value((gpu.get("temperature") or {}).get("mem")),
            "util_gpu_pct": amd_smi_value((gpu.get("usage") or {}).get("gfx_activity")),
            "util_mem_pct": amd_smi_value((gpu.get("usage") or {}).get("umc_activity")),
            "memory_used_mib": amd_smi_value((gpu.get("mem_usage") or {}).get("used_vram")),
        }
        maxima = {"sm_clock_max_mhz": amd_smi_value((clock.get("gfx_0") or {}).get("max_clk")),
                  "mem_clock_max_mhz": amd_smi_value((clock.get("mem_0") or {}).get("max_clk"))}
        out.append({**kept(fields), "_maxima": kept(maxima)})
    return out


def amd_smi() -> Backend:
    def metric() -> list[dict[str, Any]]:
        try:
            text = tool_output("amd-smi", "metric", "--json", timeout=30, name="amd-smi metric")
        except Unavailable as err:  # it answered before: a tool that stops answering mid-run stops the sampler
            raise SamplerError(str(err)) from None
        try:
            return parse_amd_smi_metric(text)
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
