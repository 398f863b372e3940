"""Will a planned run fit, and how fast could it be: the plan's prediction per run and the result's record of it.

    python3 -m train.plan        # each run's predicted peak memory and step-time bound on the target device

The device a plan is made for: TARGET_DEVICE (h100 | h200 | b200 | mi300x | mi325x | mi355x: the device table of
utils/machine/hardware.py), else the detected GPUs (nvidia-smi, rocm-smi / amd-smi through utils.machine.vendor_tools), else, on the
CPU platform, the host's memory shared by its worker processes (no time bound: a CPU has no dense peak in the table).
Memory per part: utils/predict/memory.py; the time bound: utils/predict/step_time.py. After a run the judge records the
prediction with the measured step time's efficiency against the bound and the measured peak memory beside the
predicted one (result_section).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from utils.machine import vendor_tools
from utils.machine.hardware import TARGET_DEVICES, DeviceSpec, find_device
from utils.spec.metrics import figure_text
from utils.predict.memory import GIB, Layout, Memory, memory
from utils.predict.step_time import TimeBound, bound, links
from utils.spec.request import Request

MEMINFO = Path("/proc/meminfo")
NO_DEVICE = "no device to plan for: set TARGET_DEVICE (h100|h200|b200|mi300x|mi325x|mi355x)"
WARN_MEMORY_ERROR = 0.15  # a measured peak further than this from the prediction is a warning naming both


@dataclass(frozen=True)
class Target:
    """The device a plan is made for: its name as it reports itself, table entry and memory per GPU (worker)."""

    name: str | None
    spec: DeviceSpec | None
    memory_bytes: int | None
    source: str  # "TARGET_DEVICE=h100", "detected", "host" or "none"

    @property
    def label(self) -> str:
        return f"{self.name} ({self.source})" if self.name else self.source


def host_target(workers: int, meminfo: Path = MEMINFO) -> Target:
    """The CPU platform's 'device': the host's memory (MemTotal) shared by its worker processes."""
    try:
        found = re.search(r"^MemTotal:\s*(\d+)\s*kB", meminfo.read_text(), re.MULTILINE)
    except OSError:
        found = None
    if found is None:
        return Target(None, None, None, "none")
    total = int(found.group(1)) * 1024
    return Target(f"host memory per worker ({workers} worker(s) share {figure_text(total / GIB)} GiB)", None,
                  total // max(1, workers), "host")


def gpu_target(name: str | None, reported_gib: float | None, source: str) -> Target:
    """A GPU by the name it reports (the table's entry, quietly: an unknown device simply has no peak) and its
    memory as reported, else as the table has it."""
    spec = find_device(name)
    gib = reported_gib if reported_gib else spec.memory_gib if spec else None
    return Target(name, spec, int(gib * GIB) if gib else None, source)


DETECT: dict[str, Callable[[], dict | None]] = {"nvd": vendor_tools.nvidia_gpus, "amd": vendor_tools.amd_gpus}


def plan_target(platform: str, target_device: str, workers_per_node: int) -> Target:
    """TARGET_DEVICE, else the detected GPUs, else (CPU platform) the host; Target(source="none") when a GPU
    platform shows none."""
    if target_device:
        return gpu_target(TARGET_DEVICES[target_device], None, f"TARGET_DEVICE={target_device}")
    if platform == "cpu":
        return host_target(workers_per_node)
    gpus = DETECT[platform]()
    if gpus and gpus.get("name"):
        return gpu_target(gpus["name"], gpus.get("memory_gib"), "detected")
    return Target(None, None, None, "none")


def layout(req: Request, on_gpu: bool, fused_optimizer: bool = True) -> Layout:
    """The memory and time model's view of a request: the framework's memory model from its registry entry
    (utils.frameworks); on a GPU Megatron's fused SwiGLU where the profile asks for it (train/mega/model.py's
    choose_fusions: the CPU has none), and its fused Adam unless the run said it had none (fused_optimizer)."""
    lay, t, table, native = req.parallelism, req.training, req.fairness.table, req.native
    return Layout(framework=req.identity.framework, tp=lay.tp, pp=lay.pp, dp=lay.dp, ga=lay.ga, ep=lay.ep, mbs=t.mbs,
                  seq_len=t.seq_len, precision=t.precision, fp8_recipe=str(table["fp8_recipe"]),
                  grad_fp32=bool(table["grad_reduce_in_fp32"]) or t.precision == "fp32",
                  distributed_optimizer=bool(table["use_distributed_optimizer"]),
                  overlap_grad_reduce=bool(table["overlap_grad_reduce"]), data_parallel=native.data_parallel,
                  sac_every=native.sac_every, zero_stage=native.zero_stage,
                  fused_swiglu=on_gpu and bool(table["bias_swiglu_fusion"]), on_gpu=on_gpu,
                  fused_optimizer=fused_optimizer)


@dataclass(frozen=True)
class Prediction:
    """One run's predicted memory on its target and step-time bound (None without a device peak)."""

    target: Target
    memory: Memory
    time: TimeBound | None

    @property
    def fits(self) -> bool | None:
        if self.target.memory_bytes is None:
            return None
        return self.memory.peak <= self.target.memory_bytes

    def memory_line(self) -> str:
        """"predicted peak X GiB of Y GiB: fits (Z GiB free)", or "... will not fit (Z GiB over)", then what the
        prediction is made of: "[megatron model: weights, gradients, ...; + 1.5 GiB workspace allowance]"."""
        peak = self.memory.peak / GIB
        said = f"predicted peak {figure_text(peak)} GiB"
        made_of = f" [{self.memory.describe()}]"
        if self.target.memory_bytes is None:
            return said + made_of
        size = self.target.memory_bytes / GIB
        if self.fits:
            return f"{said} of {figure_text(size)} GiB: fits ({figure_text(size - peak)} GiB free){made_of}"
        return f"{said} of {figure_text(size)} GiB: will not fit ({figure_text(peak - size)} GiB over){made_of}"

    def time_line(self) -> str:
        """"step >= 1.23 s (compute 1.1, TP 0.05, DP 0.0841, bubble 0)", or why there is no bound."""
        if self.time is None:
            return "no step-time bound (no dense peak for this device)"
        b = self.time
        hidden = f" exposed of {figure_text(b.dp_s)}" if b.dp_exposed_s != b.dp_s else ""
        ep = f", EP all-to-all {figure_text(b.ep_s)}" if b.ep_s else ""
        return (f"step >= {figure_text(b.step_s)} s (compute {figure_text(b.compute_s)}, TP {figure_text(b.tp_s)}{ep}, "
                f"DP {figure_text(b.dp_exposed_s)}{hidden}, bubble {figure_text(b.bubble_s)})")


def predict(req: Request, target: Target, link_gbps: float | None = None,
            fused_optimizer: bool = True) -> Prediction:
    """The request's prediction on a target device (link_gbps: NET_LINK_GBPS, the inter-node link per GPU;
    fused_optimizer: False where the run read back megatron-core's fallback to torch's AdamW)."""
    spec = req.model
    lay = layout(req, on_gpu=target.spec is not None, fused_optimizer=fused_optimizer)
    time = None
    if target.spec is not None:
        net = links(target.spec, req.parallelism.gpus_per_node, req.parallelism.nnodes, link_gbps)
        time = bound(spec, lay, target.spec, net)
    return Prediction(target, memory(spec, lay), time)


def measured_peak_gib(result: dict) -> tuple[float | None, str]:
    """A GPU run's measured peak per GPU (the allocator's reservation, else the driver's view, else allocated
    tensors) and which; a CPU run has none comparable (host RSS also holds the interpreter and its libraries)."""
    found = result.get("memory") or {}
    for key in ("peak_reserved_gib", "peak_device_used_gib", "peak_allocated_gib"):
        if found.get(key) is not None:
            return float(found[key]), key
    return None, ""


def result_section(request: Request, result: dict) -> dict:
    """The result's prediction section: the device the run had (else TARGET_DEVICE, else the host), the memory by
    part and the time bound, and against them the measured median step time and peak memory."""
    gpu = (result.get("system") or {}).get("gpu") or {}
    if request.identity.platform == "cpu":
        target = host_target(request.parallelism.gpus_per_node)
    elif gpu.get("name"):
        target = gpu_target(gpu["name"], gpu.get("memory_gib"), "detected")
    elif request.environment.target_device:
        key = request.environment.target_device
        target = gpu_target(TARGET_DEVICES[key], None, f"TARGET_DEVICE={key}")
    else:
        target = Target(None, None, None, "none")
    fused = (result.get("features") or {}).get("optimizer_fusion") is not False  # unsaid: the GPU stack's fused Adam
    found = predict(request, target, request.network.link_gbps, fused_optimizer=fused)
    mem = found.memory
    step = ((result.get("performance") or {}).get("step_time_s") or {}).get("median")
    bound_s = found.time.step_s if found.time else None
    measured, kind = measured_peak_gib(result) if request.identity.platform != "cpu" else (None, "")
    predicted = mem.peak / GIB
    return {
        "device": target.name, "device_source": target.source,
        "memory": {**{f"{part}_gib": value / GIB for part, value in mem.parts().items()}, "peak_gib": predicted,
                   "phase": mem.phase,
                   "device_gib": target.memory_bytes / GIB if target.memory_bytes else None, "fits": found.fits,
                   "memory_model": mem.memory_model, "modelled": list(mem.modelled),
                   "allowance": "workspace" if mem.workspace else None, "not_modelled": list(mem.not_modelled)},
        "time_bound": {"step_s": bound_s, **({key: value for key, value in found.time.parts().items()}
                                             if found.time else {}),
                       "dp_total_s": found.time.dp_s if found.time else None,
                       "note": None if found.time else "no dense peak for this device: no bound"},
        "efficiency": step / bound_s if step and bound_s else None,
        "measured_peak_gib": measured, "measured_kind": kind or None,
        "memory_error": (measured - predicted) / predicted if measured is not None else None,
    }


def memory_warning(section: dict) -> str | None:
    """A measured peak more than 15% from the prediction: one line naming both figures."""
    error = section.get("memory_error")
    if error is None or abs(error) <= WARN_MEMORY_ERROR:
        return None
    return (f"measured peak memory {figure_text(section['measured_peak_gib'])} GiB ({section['measured_kind']}) is "
            f"{100 * error:+.0f}% from the predicted {figure_text(section['memory']['peak_gib'])} GiB per GPU")
