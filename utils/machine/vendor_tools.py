"""The one reader of the GPU vendors' tools (nvidia-smi, rocm-smi, amd-smi): which GPUs a machine has,
what they are, and how much of their memory is in use.

Detection (the configuration, shell/platform.sh), the system description (utils.machine.probe), the settling
between runs (train.launch.settle), node health's and telemetry's fallbacks where the vendor's library is missing
(utils/machine/health_readers.py, utils/machine/telemetry_tools.py) all ask here, so that a tool is run and its
output parsed in one place: `run_tool` (nothing when the tool is missing, fails or hangs: no GPU of that vendor,
never a guess) or `tool_output` (Unavailable naming why), `smi_rows`/`smi_number` (nvidia-smi's CSV),
`amd_smi_gpus`/`amd_smi_value` (amd-smi's JSON). `Unavailable` is every way of reading the GPUs' "not on this node":
a tool here, a library in utils/machine/gpu_libraries.py; the caller tries its next way.
Standard library only: the configuration detects the platform before any environment exists.

    python3 -m utils.machine.vendor_tools platform           # nvd, amd or cpu: what this machine has
    python3 -m utils.machine.vendor_tools count [PLATFORM]   # its GPUs (default: the detected platform's)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

from utils.cli import Parser

PLATFORMS = ("amd", "nvd", "cpu")  # AMD (ROCm), NVIDIA (CUDA), no GPU

TIMEOUT_S = 20  # a driver that hangs must not hang the caller
KFD = "/dev/kfd"  # AMD's kernel driver node: present when the driver is loaded, whatever the tools say
NVIDIA_FIELDS = ("name", "memory.total", "driver_version", "clocks.sm", "clocks.max.sm", "power.limit")
ROCM_VERSION_FILE = "/opt/rocm/.info/version"


class Unavailable(Exception):
    """A way of reading the GPUs that cannot read them on this node (no tool, no binding, no driver, no answer): the
    caller tries its next way."""


def tool_output(*command: str, timeout: float = TIMEOUT_S, name: str | None = None) -> str:
    """stdout of a tool; Unavailable naming why ("NAME exited 9: <its stderr>") when it is missing, fails or hangs.
    NAME (default the tool) is how the reason names the command."""
    name = name or command[0]
    if shutil.which(command[0]) is None:
        raise Unavailable(f"{name}: {command[0]} is not on PATH")
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise Unavailable(f"{name}: {err}") from None
    if out.returncode != 0:
        raise Unavailable(f"{name} exited {out.returncode}: {out.stderr.strip()[:200]}")
    return out.stdout


def run_tool(*command: str, timeout: float = TIMEOUT_S) -> str | None:
    """stdout of a tool, or None when it is missing, fails or hangs."""
    try:
        return tool_output(*command, timeout=timeout)
    except Unavailable:
        return None


def number_in(text: str | None) -> float | None:
    """The first number in a tool's field or a /sys file ("81559 MiB", "(2100Mhz)", "25000"), or None."""
    match = re.search(r"[-+]?\d+(?:\.\d+)?", text or "")
    return float(match.group()) if match else None


def read_text(path: str) -> str | None:
    """A file's text, or None when it cannot be read (a fact the machine does not show)."""
    try:
        return Path(path).read_text()
    except OSError:
        return None


def smi_rows(text: str) -> list[list[str]]:
    """nvidia-smi's CSV answer (--format=csv,noheader[,nounits]): each non-blank line's fields, stripped."""
    return [[item.strip() for item in line.split(",")] for line in text.splitlines() if line.strip()]


def smi_number(text: str) -> float | None:
    """A number in nvidia-smi's CSV (nounits); None for [N/A], [Not Supported] and anything else."""
    try:
        return float(text.strip())
    except ValueError:
        return None


def amd_smi_gpus(text: str) -> list:
    """`amd-smi static|metric --json`'s GPUs (ROCm 6.x: a list, one object per GPU; or {"gpu_data": [...]});
    ValueError when the text is not JSON."""
    data = json.loads(text)
    return data.get("gpu_data", []) if isinstance(data, dict) else data


def amd_smi_value(entry: Any) -> float | None:
    """A figure in amd-smi's JSON: {"value": v, "unit": u}, a bare number, or "N/A" (None)."""
    if isinstance(entry, dict):
        entry = entry.get("value")
    if isinstance(entry, bool) or entry is None:
        return None
    try:
        return float(entry)
    except (TypeError, ValueError):
        return None


def _rocm_json(text: str | None) -> dict:
    """rocm-smi --json's answer as a dict ({} when it gave none or no JSON object)."""
    try:
        data = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _rocm_cards(data: dict) -> list[dict]:
    """The cards (card0, card1, ...) of rocm-smi's JSON, leaving out its "system" entry."""
    return [card for name, card in data.items() if name.startswith("card") and isinstance(card, dict)]


def _amd_smi_count(listing: str) -> int:
    """GPUs in `amd-smi list`: one "GPU: N" block each."""
    return len(re.findall(r"^GPU:\s*\d+", listing, re.MULTILINE))


# --- How many, and which vendor --------------------------------------------------------------------

def nvidia_count() -> int:
    """GPUs `nvidia-smi -L` lists (0 when the tool is absent or fails)."""
    listing = run_tool("nvidia-smi", "-L") or ""
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def amd_count() -> int:
    """GPUs amd-smi lists, else rocm-smi (0 when neither answers)."""
    listing = run_tool("amd-smi", "list")
    if listing is not None:
        return _amd_smi_count(listing)
    return len(_rocm_cards(_rocm_json(run_tool("rocm-smi", "--showproductname", "--json"))))


def detect_platform(env: Mapping[str, str] | None = None) -> str:
    """The vendor of this machine's GPUs: nvd, amd (a tool lists GPUs, or the kernel driver is there) or cpu.

    TPRIMAT_KFD names another driver node than /dev/kfd (tests)."""
    env = os.environ if env is None else env
    if nvidia_count() > 0:
        return "nvd"
    if amd_count() > 0 or Path(env.get("TPRIMAT_KFD") or KFD).exists():
        return "amd"
    return "cpu"


def gpu_count(platform: str) -> int:
    """GPUs of the given platform on this machine (0 on the CPU)."""
    return {"nvd": nvidia_count, "amd": amd_count}.get(platform, lambda: 0)()


# --- What they are (system.json's "gpu" section) ---------------------------------------------------

def empty_gpu() -> dict:
    """system.json's "gpu" section of a machine without GPUs: every field empty, never invented."""
    return {"vendor": None, "name": None, "count": 0, "memory_gib": None, "driver": None, "cuda": None,
            "rocm": None, "devices": []}


def nvidia_gpus() -> dict | None:
    """nvidia-smi's view: names, memory, driver, clocks and power cap per GPU; None without one."""
    out = run_tool("nvidia-smi", "--query-gpu=" + ",".join(NVIDIA_FIELDS), "--format=csv,noheader,nounits")
    if not out or not out.strip():
        return None
    devices, drivers = [], []
    for index, values in enumerate(smi_rows(out)):
        row = dict(zip(NVIDIA_FIELDS, values + [""] * (len(NVIDIA_FIELDS) - len(values))))
        memory = number_in(row["memory.total"])
        drivers.append(row["driver_version"] or None)
        devices.append({"index": index, "name": row["name"] or None,
                        "memory_gib": round(memory / 1024, 2) if memory else None,
                        "clock_sm_mhz": number_in(row["clocks.sm"]),
                        "clock_sm_max_mhz": number_in(row["clocks.max.sm"]),
                        "power_cap_w": number_in(row["power.limit"])})
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", run_tool("nvidia-smi") or "")
    return {**empty_gpu(), "vendor": "nvidia", "name": devices[0]["name"], "count": len(devices),
            "memory_gib": devices[0]["memory_gib"], "driver": drivers[0],
            "cuda": cuda.group(1) if cuda else None, "devices": devices}


def _key(card: dict, *needles: str) -> str | None:
    """The value of the first key containing any needle (rocm-smi's key spellings vary by version)."""
    for needle in needles:
        for key, value in card.items():
            if needle in key.lower():
                return str(value)
    return None


def amd_gpus() -> dict | None:
    """rocm-smi's view (JSON), else amd-smi's; the ROCm version from /opt/rocm; None without a GPU."""
    rocm = (read_text(ROCM_VERSION_FILE) or "").strip() or None
    data = _rocm_json(run_tool("rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showdriverversion",
                               "--showmaxpower", "--showclocks", "--json"))
    system = data.get("system")
    driver = _key(system, "driver version") if isinstance(system, dict) else None
    devices = []
    for card in _rocm_cards(data):
        memory = number_in(_key(card, "vram total memory (b)"))
        devices.append({"index": len(devices), "name": _key(card, "card series", "market", "card sku"),
                        "memory_gib": round(memory / 2 ** 30, 2) if memory else None,
                        "gfx": _key(card, "gfx version"), "clock_sm_mhz": number_in(_key(card, "sclk")),
                        "clock_sm_max_mhz": None, "power_cap_w": number_in(_key(card, "max graphics package power"))})
    if not devices:
        count = _amd_smi_count(run_tool("amd-smi", "list") or "")
        if not count:
            return None
        names = [name.strip() for name in re.findall(r"MARKET_NAME:\s*(.+)", run_tool("amd-smi", "static") or "")]
        devices = [{"index": i, "name": names[i] if i < len(names) else names[0] if names else None}
                   for i in range(count)]
    return {**empty_gpu(), "vendor": "amd", "name": devices[0]["name"], "count": len(devices),
            "memory_gib": devices[0].get("memory_gib"), "driver": driver, "rocm": rocm, "devices": devices}


# --- How busy they are (between runs) --------------------------------------------------------------

def memory_used_mib(platform: str) -> list[float] | None:
    """Memory in use on each GPU (MiB), or None when the vendor tool does not answer."""
    if platform == "nvd":
        out = run_tool("nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", timeout=30)
        try:
            return [float(line) for line in out.split()] if out else None
        except ValueError:
            return None
    if platform == "amd":
        cards = _rocm_cards(_rocm_json(run_tool("rocm-smi", "--showmeminfo", "vram", "--json", timeout=30)))
        try:
            return [int(card["VRAM Total Used Memory (B)"]) / 2**20 for card in cards] or None
        except (ValueError, KeyError, TypeError):
            return None
    return None


def gpu_processes(platform: str) -> list[str]:
    """Processes holding GPU memory, one line each as the vendor tool names them (for a warning)."""
    command = {"nvd": ("nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"),
               "amd": ("rocm-smi", "--showpids")}.get(platform)
    out = run_tool(*command, timeout=30) if command else None
    return [line.strip() for line in (out or "").splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m utils.machine.vendor_tools", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("question", choices=("platform", "count"))
    parser.add_argument("platform", nargs="?", choices=PLATFORMS, help="with count: whose GPUs (default: detected)")
    args = parser.parse_args(argv)
    if args.question == "platform":
        if args.platform:
            parser.error("platform takes no PLATFORM")
        print(detect_platform())
    else:
        print(gpu_count(args.platform or detect_platform()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
