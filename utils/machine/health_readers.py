"""What each GPU reports for the node-health checks (utils/machine/node_health.py), read four ways.

NVIDIA through NVML (nvidia-ml-py), else `nvidia-smi`'s queries; AMD through amdsmi (ROCm's binding), else
`amd-smi static --json` and `amd-smi metric --json`. The libraries are opened by utils/machine/gpu_libraries.py (in
a tolerant session: a query that fails is not checked, a GPU the driver has lost is a problem), the tools run and
their output parsed by utils/machine/vendor_tools.py; what is here is which queries node health asks and how their
answers become a Gpu. Each reader answers a Gpu per device, with None for every query the device or the way of
reading does not support (nothing is checked then), or raises Unavailable so that the next way is tried.
`NOT_SHOWN` names what a way of reading cannot see, so the record can say so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from utils.machine.gpu_libraries import Amdsmi, Nvml, amd_field
from utils.machine.vendor_tools import Unavailable, amd_smi_gpus, amd_smi_value, run_tool, smi_number, smi_rows, \
    tool_output

NVLINK_MAX_LINKS = 18  # H100 SXM has 18 NVLink 4 links; a GPU with fewer answers NotSupported past its last
PCIE_GEN_OF_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}  # amdsmi: MT/s (32000), amd-smi: GT/s (32)
TOOL_TIMEOUT_S = 30
XGMI_FINE = "AMDSMI_XGMI_STATUS_NO_ERRORS"  # amd-smi metric's xgmi_err when the links are clean


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
    lost: bool = False  # the driver has lost the GPU or cannot open it (its other fields are then unread)


def _pcie_gen(rate: Any, scale: float) -> int | None:
    """A link's generation from its transfer rate (amdsmi in MT/s: scale 1000; amd-smi in GT/s: scale 1)."""
    return PCIE_GEN_OF_GTS.get(rate / scale) if isinstance(rate, (int, float)) and not isinstance(rate, bool) else None


def _link(values: list[Any]) -> tuple[int, int, int, int] | None:
    """(generation, maximum, width, maximum) when every part was read."""
    return tuple(int(v) for v in values) if None not in values else None  # type: ignore[return-value]


def read_nvml() -> list[Gpu]:
    nv = Nvml.open(tolerant=True)  # an error is a query not checked, a lost GPU a problem (nv.lost)
    gpus = []
    try:
        ecc = [(nv.lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter)
               for counter in (nv.lib.NVML_VOLATILE_ECC, nv.lib.NVML_AGGREGATE_ECC)]
        for index in range(nv.count):
            nv.lost = False
            h = nv.ask("nvmlDeviceGetHandleByIndex", index)
            if h is None:
                gpus.append(Gpu(index=index, vendor="nvd", lost=True))
                continue
            rows = nv.ask("nvmlDeviceGetRemappedRows", h)  # (corrected, uncorrected, pending, failure)
            limit, default = (nv.ask(q, h) for q in ("nvmlDeviceGetPowerManagementLimit",
                                                     "nvmlDeviceGetPowerManagementDefaultLimit"))
            pcie = [nv.ask(q, h) for q in ("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkGeneration",
                                           "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth")]
            links = [nv.ask("nvmlDeviceGetNvLinkState", h, link) for link in range(NVLINK_MAX_LINKS)]
            processes = nv.ask("nvmlDeviceGetComputeRunningProcesses", h)
            errors = [nv.ask("nvmlDeviceGetTotalEccErrors", h, *kind) for kind in ecc]
            gpus.append(Gpu(
                index=index, vendor="nvd", bus_id=nv.bus_id(h),
                ecc_uncorrected_volatile=errors[0], ecc_uncorrected_aggregate=errors[1],
                rows_pending=bool(rows[2]) if rows else None, rows_failed=bool(rows[3]) if rows else None,
                power_limit_w=limit / 1000 if limit is not None else None,
                power_default_w=default / 1000 if default is not None else None,
                pcie=_link(pcie),
                links_down=[n for n, state in enumerate(links) if state == nv.lib.NVML_FEATURE_DISABLED]
                if any(s is not None for s in links) else None,
                memory_used_mib=nv.memory_used_mib(h),
                processes=[f"pid {p.pid} ({(p.usedGpuMemory or 0) / 2**20:.0f} MiB)" for p in processes]
                if processes is not None else None,
                temp_c=nv.temp_c(h), reasons=nv.reasons(h), lost=nv.lost))
    finally:
        nv.close()
    return gpus


def read_amdsmi() -> list[Gpu]:
    amd = Amdsmi.open(tolerant=True)  # an error is a query not checked
    gpus = []
    try:
        for index, h in enumerate(amd.handles):
            ecc = amd.ask("amdsmi_get_gpu_total_ecc_count", h)
            pages = amd.ask("amdsmi_get_gpu_bad_page_info", h)  # a list, or "No bad pages found."
            cap = amd.ask("amdsmi_get_power_cap_info", h)
            pcie = amd.ask("amdsmi_get_pcie_info", h) or {}
            metric, static = pcie.get("pcie_metric"), pcie.get("pcie_static")
            xgmi = amd.ask("amdsmi_gpu_xgmi_error_status", h)
            processes = amd.ask("amdsmi_get_gpu_process_list", h)
            gpus.append(Gpu(
                index=index, vendor="amd", bus_id=amd.bus_id(h),
                ecc_uncorrected_aggregate=amd_field(ecc, "uncorrectable_count"),
                rows_pending=any(p.get("status") == "PENDING" for p in pages) if isinstance(pages, list)
                else (False if isinstance(pages, str) else None),
                power_limit_w=_watts(amd_field(cap, "power_cap")),
                power_default_w=_watts(amd_field(cap, "default_power_cap")),
                pcie=_link([_pcie_gen(amd_field(metric, "pcie_speed"), 1000),
                            _pcie_gen(amd_field(static, "max_pcie_speed"), 1000),
                            amd_field(metric, "pcie_width"), amd_field(static, "max_pcie_width")]),
                links_down=None if xgmi is None else ([-1] if xgmi else []),
                memory_used_mib=amd.memory_used_mib(h),
                processes=[f"pid {p.get('pid')} ({p.get('name', '?')})" for p in processes]
                if processes is not None else None,
                temp_c=amd.temp_c(h)))
    finally:
        amd.close()
    return gpus


def _watts(microwatts: Any) -> float | None:
    """amdsmi's power caps are in microwatts."""
    return float(microwatts) / 1e6 if isinstance(microwatts, (int, float)) and microwatts > 0 else None


SMI_FIELDS = ("index", "pci.bus_id", "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total",
              "power.limit", "power.default_limit", "pcie.link.gen.current", "pcie.link.gen.max",
              "pcie.link.width.current", "pcie.link.width.max", "memory.used", "temperature.gpu",
              "clocks_throttle_reasons.applications_clocks_setting")


def _smi_rows(*query: str) -> list[list[str]]:
    """nvidia-smi's CSV rows (no header, no units), each split into its fields."""
    return smi_rows(run_tool("nvidia-smi", *query, "--format=csv,noheader,nounits", timeout=TOOL_TIMEOUT_S) or "")


def read_nvidia_smi() -> list[Gpu]:
    """nvidia-smi's queries, where NVML's binding is missing; [N/A] / [Not Supported] fields are not checked."""
    rows = [raw for raw in _smi_rows(f"--query-gpu={','.join(SMI_FIELDS)}") if len(raw) == len(SMI_FIELDS)]
    if not rows:
        raise Unavailable("nvidia-smi did not answer")
    remapped = {raw[0].upper(): raw[1:] for raw in _smi_rows(
        "--query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure") if len(raw) == 3}
    apps: dict[str, list[str]] = {}
    for bus, pid, used in (raw for raw in _smi_rows("--query-compute-apps=gpu_bus_id,pid,used_memory")
                           if len(raw) == 3):
        apps.setdefault(bus.upper(), []).append(f"pid {pid} ({used} MiB)")
    links = _nvlinks_down(run_tool("nvidia-smi", "nvlink", "-s", timeout=TOOL_TIMEOUT_S) or "")
    gpus = []
    for raw in rows:
        v = {name: smi_number(item) for name, item in zip(SMI_FIELDS, raw)}
        index, bus = int(v["index"] or 0), raw[1]
        rows_state = [_yes(item) for item in remapped.get(bus.upper(), [None, None])]
        app_clocks = raw[-1].strip().lower()
        gpus.append(Gpu(index=index, vendor="nvd", bus_id=bus,
                        ecc_uncorrected_volatile=_int(v["ecc.errors.uncorrected.volatile.total"]),
                        ecc_uncorrected_aggregate=_int(v["ecc.errors.uncorrected.aggregate.total"]),
                        rows_pending=rows_state[0], rows_failed=rows_state[1],
                        power_limit_w=v["power.limit"], power_default_w=v["power.default_limit"],
                        pcie=_link([v[f"pcie.link.{part}"] for part in ("gen.current", "gen.max", "width.current",
                                                                          "width.max")]),
                        links_down=links.get(index), memory_used_mib=v["memory.used"],
                        processes=apps.get(bus.upper(), []), temp_c=v["temperature.gpu"],
                        reasons=(["applications_clocks"] if app_clocks == "active" else [])
                        if app_clocks in ("active", "not active") else None))
    return gpus


def _nvlinks_down(text: str) -> dict[int, list[int]]:
    """`nvidia-smi nvlink -s`: per GPU ("GPU 0: ..."), the links shown "<inactive>"; a GPU without links is absent."""
    found: dict[int, list[int]] = {}
    gpu = None
    for line in text.splitlines():
        if header := re.match(r"GPU (\d+):", line):
            gpu = int(header.group(1))
        elif (link := re.match(r"\s*Link (\d+): (.*)", line)) and gpu is not None:
            found.setdefault(gpu, [])
            if "inactive" in link.group(2).lower():
                found[gpu].append(int(link.group(1)))
    return found


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _yes(text: str | None) -> bool | None:
    """nvidia-smi's remapped-rows flags: "Yes"/"No" (or 1/0 on some drivers); anything else was not read."""
    answer = (text or "").strip().lower()
    return True if answer in ("yes", "1") else False if answer in ("no", "0") else None


def _amd_smi_json(command: str) -> dict[int, dict]:
    """`amd-smi COMMAND --json` by GPU index; Unavailable naming why it did not answer."""
    out = tool_output("amd-smi", command, "--json", timeout=TOOL_TIMEOUT_S, name=f"amd-smi {command}")
    try:
        gpus = amd_smi_gpus(out)
    except ValueError:
        raise Unavailable(f"amd-smi {command} --json: unreadable output") from None
    return {int(gpu["gpu"]): gpu for gpu in gpus if isinstance(gpu, dict) and "gpu" in gpu}


def read_amd_smi() -> list[Gpu]:
    """amd-smi's static and metric JSON, where amdsmi is not importable (NOT_SHOWN: what it cannot see)."""
    static, metric = _amd_smi_json("static"), _amd_smi_json("metric")
    gpus = []
    for index in sorted(metric):
        bus, now = static.get(index, {}).get("bus") or {}, metric[index]
        pcie, xgmi = now.get("pcie") or {}, now.get("xgmi_err")
        ecc = amd_smi_value((now.get("ecc") or {}).get("total_uncorrectable_count"))
        gpus.append(Gpu(
            index=index, vendor="amd", bus_id=bus.get("bdf") if bus.get("bdf") != "N/A" else None,
            ecc_uncorrected_aggregate=_int(ecc),
            pcie=_link([_pcie_gen(amd_smi_value(pcie.get("speed")), 1),
                        _pcie_gen(amd_smi_value(bus.get("max_pcie_speed")), 1),
                        amd_smi_value(pcie.get("width")), amd_smi_value(bus.get("max_pcie_width"))]),
            links_down=None if not isinstance(xgmi, str) or xgmi == "N/A" else ([] if xgmi == XGMI_FINE else [-1]),
            memory_used_mib=amd_smi_value((now.get("mem_usage") or {}).get("used_vram")),
            temp_c=amd_smi_value((now.get("temperature") or {}).get("hotspot"))))
    return gpus


READERS: dict[str, tuple[tuple[str, Callable[[], list[Gpu]]], ...]] = {
    "nvd": (("nvml", read_nvml), ("nvidia-smi", read_nvidia_smi)),
    "amd": (("amdsmi", read_amdsmi), ("amd-smi", read_amd_smi)),
}
NOT_SHOWN = {  # what a way of reading cannot see: the record says it was not checked
    "amd-smi": "amd-smi shows neither the default power cap, pending bad pages nor the processes: not checked "
               "(install ROCm's amdsmi Python binding to check them)",
}
