"""The report's node acceptance: what each node measured before its runs (system.acceptance, made by
evaluate.acceptance and made again from its evidence by evaluate.acceptance_checks before a result is counted), and
each run's TFLOP/s beside the GEMM throughput its node really reached as well as beside the datasheet's peak.

Only results that passed the gate are read (evaluate.gate): an edited acceptance figure fails its result, which then
enters no table here.
"""

from __future__ import annotations

import statistics
from typing import Sequence

from evaluate.collect import Loaded
from evaluate.comparison.repeats import PLATFORM_NAMES
from utils.machine.acceptance import bound_at_measured, largest_busbw, size_text
from utils.runset import node_sections
from utils.spec.metrics import figure_text


def _node(item: Loaded) -> tuple[str, dict] | None:
    """Node 0's name and its acceptance section (the one its runs' TFLOP/s are set beside), or None without one."""
    nodes = _nodes(item)
    return nodes[0][:2] if nodes and nodes[0][2] == 0 else None


def _nodes(item: Loaded) -> list[tuple[str, dict, int]]:
    """Every node's name, acceptance section and rank: node 0's (system.acceptance), then the other nodes' of a
    multi-node run set (system.other_nodes)."""
    found = []
    for rank, section in node_sections(item.system, "acceptance"):
        if not isinstance(section, dict) or not section.get("gpus"):
            continue
        host = ((item.system.get("host") or {}).get("hostname") if rank == 0 else None) \
            or section["gpus"][0].get("host") or "?"
        found.append((f"{PLATFORM_NAMES[item.typed.platform]} {host} ({section.get('checked_at', '?')})", section,
                      rank))
    return found


def _every_node(items: Sequence[Loaded]) -> dict[str, dict]:
    """Each node of the counted results once (by name), with its acceptance section."""
    return {name: section for item in items if item.ok for name, section, _rank in _nodes(item)}


def measured_tflops(section: dict, precision: str) -> float | None:
    """The median over the node's GPUs of the GEMM TFLOP/s measured at a precision; None where not measured."""
    values = [gpu["gemm"][precision]["tflops"] for gpu in section["gpus"]
              if "tflops" in gpu["gemm"].get(precision, {})]
    return statistics.median(values) if values else None


def _shown(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{figure_text(value)}{unit}"


def node_lines(name: str, section: dict) -> list[str]:
    """One node: its GPUs' GEMM and memory beside the specification, its collectives' bus bandwidth, its verdict."""
    spec = section.get("specification") or {}
    peaks = spec.get("peak_tflops") or {}
    precisions = list(dict.fromkeys(p for gpu in section["gpus"] for p in gpu["gemm"]))
    flags = f"; CPU flags {', '.join(section['cpu_flags'])}" if section.get("cpu_flags") else ""
    out = [f"**{name}**: {section['gpus'][0]['device']}, {len(section['gpus'])} worker(s){flags}; verdict "
           f"**{section['verdict']}**", ""]
    out += ["| GPU (worker) | " + " | ".join(f"{p} GEMM TFLOP/s (peak)" for p in precisions)
            + " | memory copy GB/s | triad GB/s | rated GB/s | verdict |",
            "|---|" + "---|" * (len(precisions) + 4)]
    for gpu in section["gpus"]:
        gemm = [f"{_shown(gpu['gemm'][p].get('tflops'))} ({_shown(peaks.get(p))})" if p in gpu["gemm"] else "-"
                for p in precisions]
        out.append(f"| {gpu['index']} | " + " | ".join(gemm) + f" | {_shown(gpu['memory']['copy']['gb_s'])} | "
                   f"{_shown(gpu['memory']['triad']['gb_s'])} | {_shown(spec.get('memory_gb_s'))} | "
                   f"{gpu['verdict']} |")
    out.append("")
    if section["collectives"]:
        sizes = list(dict.fromkeys(row["bytes"] for row in section["collectives"]))
        out += ["| bus bandwidth GB/s | " + " | ".join(size_text(size) for size in sizes)
                + " | GPU-to-GPU GB/s |", "|---|" + "---|" * (len(sizes) + 1)]
        for op in dict.fromkeys(row["op"] for row in section["collectives"]):
            rows = {row["bytes"]: row["busbw_gb_s"] for row in section["collectives"] if row["op"] == op}
            out.append(f"| {op} ({section['collectives'][0]['ranks']} ranks) | "
                       + " | ".join(_shown(rows.get(size)) for size in sizes) + f" | {_shown(spec.get('intra_gb_s'))} |")
        out.append("")
    across = section.get("across_nodes")
    if across:
        out += [f"- all_reduce across {across['nodes']} nodes ({across['collectives'][0]['ranks']} ranks), bus "
                "bandwidth GB/s: " + ", ".join(f"{size_text(row['bytes'])} {_shown(row['busbw_gb_s'])}"
                                                for row in across["collectives"]) + f"; {across['verdict']}"]
    out += [f"- {line}" for gpu in section["gpus"] for line in gpu["problems"] + gpu["warnings"]]
    out += [f"- {line}" for line in section.get("problems", [])]
    out += [f"- not measured: {what}: {why}" for what, why in section.get("not_measured", {}).items()]
    return out + [""]


def ceiling_rows(items: Sequence[Loaded]) -> list[str]:
    """Each run's TFLOP/s/GPU against its node's measured GEMM throughput at its precision and the dense peak."""
    rows = []
    for item in items:
        found = _node(item)
        r = item.typed
        tflops = r.performance.tflop_per_s_per_gpu
        if found is None or tflops is None:
            continue
        measured = measured_tflops(found[1], r.training.precision)
        peak = r.performance.peak_tflop_per_s_per_gpu
        rows.append(f"| {item.name} | {r.training.precision} | {figure_text(tflops)} | {_shown(measured)} | "
                    f"{_shown(tflops / measured * 100 if measured else None, '%')} | {_shown(peak)} | "
                    f"{_shown(tflops / peak * 100 if peak else None, '%')} |")
    return rows


def bound_rows(items: Sequence[Loaded]) -> list[str]:
    """Each one-node run's step-time bound with the datasheet's links and with its node's measured bus bandwidth,
    beside its measured median step (times in ms)."""
    rows = []
    for item in items:
        found, r = _node(item), item.typed
        prediction = r.prediction
        spec = (found[1].get("specification") or {}) if found else {}
        if not found or not prediction or prediction.time_bound.step_s is None or (item.nodes or 1) > 1:
            continue
        bound = prediction.time_bound.as_dict()
        again = bound_at_measured(bound, spec.get("intra_gb_s") or 0.0, largest_busbw(found[1]))
        step = r.performance.step_time_s.median if r.performance.step_time_s else None
        if again is None or not step:
            continue
        rows.append(f"| {item.name} | {figure_text(1000 * bound['step_s'])} | {figure_text(1000 * again)} | "
                    f"{figure_text(1000 * step)} | {step / bound['step_s']:.2f}x | {step / again:.2f}x |")
    return rows


def vendor_lines(items: Sequence[Loaded]) -> list[str]:
    """For the AMD vs NVIDIA decision: what each vendor's nodes measured (the GPUs' median), beside the datasheet."""
    lines = []
    for name, found in _every_node(items).items():
        spec = found.get("specification") or {}
        if not spec:
            continue
        copy = statistics.median(gpu["memory"]["copy"]["gb_s"] for gpu in found["gpus"])
        busbw = largest_busbw(found).get("all_reduce")
        lines.append(f"- {name}, measured before its runs: bf16 GEMM {_shown(measured_tflops(found, 'bf16'))} TFLOP/s "
                     f"per GPU (peak {_shown(spec['peak_tflops'].get('bf16'))}), memory copy {_shown(copy)} GB/s "
                     f"(rated {_shown(spec.get('memory_gb_s'))}), all-reduce bus bandwidth {_shown(busbw)} GB/s "
                     f"(GPU-to-GPU {_shown(spec.get('intra_gb_s'))}); verdict {found['verdict']}")
    return lines


def section(items: Sequence[Loaded]) -> list[str]:
    """The report's Node acceptance section; empty when no counted result carries one."""
    nodes = _every_node(items)
    if not nodes:
        return []
    out = ["## Node acceptance", "", "Measured on each node before its first run (python3 -m evaluate.acceptance: "
           "torch.matmul at the planned models' GEMM shapes, a copy and a triad, collectives with nccl-tests' bus "
           "bandwidth; docs/results.md); each figure made again from its evidence before it is shown.", ""]
    for name, found in nodes.items():
        out += node_lines(name, found)
    rows = ceiling_rows([item for item in items if item.ok])
    if rows:
        out += ["Each run's TFLOP/s/GPU beside what its node's GPUs measured at the same precision (the GPUs' median) "
                "and beside the datasheet's dense peak:", "",
                "| run | precision | TFLOP/s/GPU | measured GEMM TFLOP/s | of measured | dense peak | of peak (MFU) |",
                "|---|---|---|---|---|---|---|", *rows, ""]
    bounds = bound_rows([item for item in items if item.ok])
    if bounds:
        out += ["The step-time bound (utils/predict/step_time.py) with the datasheet's GPU-to-GPU bandwidth and with the "
                "node's measured bus bandwidth (all-reduce for TP, reduce-scatter and all-gather for DP), one-node runs; "
                "ms:", "", "| run | bound, datasheet | bound, measured | measured step | efficiency, datasheet | "
                "efficiency, measured |", "|---|---|---|---|---|---|", *bounds, ""]
    return out
