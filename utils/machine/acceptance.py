"""Node acceptance before the matrix: what each GPU and the node measured (utils/machine/acceptance_worker.py),
turned into figures beside the device table's specification, and the verdicts.

Figures, each made from the evidence kept beside it (so evaluate.gate can make it again):
- GEMM TFLOP/s per GPU and precision = the shapes' FLOPs (2*M*K*N each) / their median seconds, summed over the
  planned models' projections (QKV, attention output, MLP gate+up, MLP down) at MBS x SL tokens, against the dense
  peak of the device table (utils/machine/hardware.py).
- Memory GB/s per GPU = bytes moved / median seconds: a copy (reads and writes its buffer: 2 x its bytes) and a
  triad a = b + s*c (3 x); the copy is judged (Primus's measure), against the device's rated bandwidth.
- Collective bus bandwidth, as nccl-tests defines it (NVIDIA/nccl-tests doc/PERFORMANCE.md at a0b82b2, lines 20,
  81, 99 and 134-143): algbw = S / t, with S the whole buffer (all-reduce), the gathered output (all-gather), the
  reduced input (reduce-scatter), each rank's send buffer (all-to-all); busbw = algbw x 2(n-1)/n for all-reduce
  and x (n-1)/n for all-gather, reduce-scatter and all-to-all. The largest size is judged against the device's
  GPU-to-GPU bandwidth per direction (hardware.LINKS).

Verdicts, per GPU and for the node: fail below a floor (ACCEPT_GEMM_FLOOR, ACCEPT_MEMORY_FLOOR, ACCEPT_BUSBW_FLOOR:
fractions of the specification); warn for a GPU slower than its siblings' median by more than the straggler
check's threshold (utils/machine/stragglers.py, the same rule), named; pass otherwise. The floors' defaults are
Primus's preflight floors (AMD-AGI/Primus primus/tools/preflight/node_smoke/cli.py at fd1eeab, lines 578-597:
GEMM 600 TFLOP/s of an 8192^3 bf16 matmul, HBM 2000 GB/s of a device-to-device copy, a local RCCL all-reduce of
100 GB/s computed as 2*S*(n-1)/n / t, nccl-tests' busbw) as fractions of the MI300X they were set for (1307.4 TFLOP/s
BF16, 5300 GB/s, 448 GB/s per direction): 0.46, 0.38 and 0.22, the same fraction for every device. A device the
table lacks, and the CPU, are measured and recorded with the verdict "no specification": they never fail.
Standard library only: evaluate/ judges records without torch.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from utils.machine.hardware import NATIVE_BF16_FLAGS, DeviceSpec
from utils.machine.stragglers import THRESHOLD
from utils.spec.models import ModelSpec

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
NO_SPEC = "no specification"
VERDICTS = ("pass", "warn", "fail", NO_SPEC)
PRIMUS = ("AMD-AGI/Primus primus/tools/preflight/node_smoke/cli.py@fd1eeabbad15135e3702094087e96142b4b4eacb "
          "lines 578-597 (600 TFLOP/s, 2000 GB/s, 100 GB/s on an MI300X)")
CPU_FLAGS = NATIVE_BF16_FLAGS | {"avx2", "fma", "avx512f", "amx_tile"}  # what a CPU figure came from, recorded
NCCL_TESTS = "NVIDIA/nccl-tests doc/PERFORMANCE.md@a0b82b2260cf5152b9f8c061bbf7eaf0ba096432 lines 20, 81, 99, 134-143"


@dataclass(frozen=True)
class Floors:
    """Fractions of the specification below which a figure fails (the ACCEPT_*_FLOOR knobs)."""

    gemm: float
    memory: float
    busbw: float


def arguments(cfg) -> list[str]:
    """evaluate.acceptance's arguments from a loaded configuration (utils.config.Config): the planned models at
    MBS x SL, the node's workers, the floors, the platform and the nodes (the all-reduce across them)."""
    return ["--platform", cfg.platform, "--models", ",".join(spec.variant for spec in cfg.models),
            "--tokens", str(cfg["MBS"] * cfg["SL"]), "--workers", str(cfg["GPUS_PER_NODE"]),
            "--floors", f"{cfg['ACCEPT_GEMM_FLOOR']},{cfg['ACCEPT_MEMORY_FLOOR']},{cfg['ACCEPT_BUSBW_FLOOR']}",
            "--nnodes", str(cfg["NNODES"]), "--node-rank", str(cfg["NODE_RANK"]),
            "--master-addr", str(cfg["MASTER_ADDR"]), "--master-port", str(cfg["MASTER_PORT"])]


def gemm_shapes(specs: Iterable[ModelSpec], tokens: int) -> list[tuple[int, int, int]]:
    """(M, K, N) of each planned model's projections at `tokens` rows (MBS x SL), without repeats, at TP 1."""
    shapes: dict[tuple[int, int, int], None] = {}
    for spec in specs:
        h, d = spec.hidden_size, spec.head_dim
        q, kv = spec.num_attention_heads * d, spec.num_kv_heads * d
        for k, n in ((h, q + 2 * kv), (q, h), (h, 2 * spec.ffn_hidden_size), (spec.ffn_hidden_size, h)):
            shapes[(tokens, k, n)] = None
    return list(shapes)


def size_text(size_bytes: int) -> str:
    """A collective's size as the stage prints it: KiB below a MiB, else MiB."""
    return f"{size_bytes / 2**10:g} KiB" if size_bytes < 2**20 else f"{size_bytes / 2**20:g} MiB"


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests' correction of algbw into busbw for n ranks."""
    if op not in COLLECTIVES:
        raise ValueError(f"unknown collective {op!r}; one of {', '.join(COLLECTIVES)}")
    return (2 if op == "all_reduce" else 1) * (ranks - 1) / ranks


def bandwidths(op: str, size_bytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes/s) of one collective of S = size_bytes taking `seconds`."""
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * bus_factor(op, ranks)


def gemm_tflops(shapes: Sequence[dict]) -> float:
    """TFLOP/s over the shapes: their FLOPs over their seconds."""
    return sum(s["flops"] for s in shapes) / sum(s["seconds"] for s in shapes) / 1e12


def figures(rank: dict) -> dict:
    """One rank's record with its figures put in beside their evidence (TFLOP/s, GB/s)."""
    gemm = {}
    for precision, found in rank["gemm"].items():
        gemm[precision] = dict(found, tflops=round(gemm_tflops(found["shapes"]), 6)) if "shapes" in found else found
    memory = {name: dict(item, gb_s=round(item["bytes"] / item["seconds"] / 1e9, 6))
              for name, item in rank["memory"].items()}
    return {"index": rank["local_rank"], "rank": rank["rank"], "host": rank["host"], "device": rank["device"],
            "gemm": gemm, "memory": memory}


def collective_figures(rows: Sequence[dict]) -> list[dict]:
    out = []
    for row in rows:
        algbw, busbw = bandwidths(row["op"], row["bytes"], row["seconds"], row["ranks"])
        out.append({**row, "algbw_gb_s": round(algbw, 6), "busbw_gb_s": round(busbw, 6)})
    return out


def specification(spec: DeviceSpec | None) -> dict | None:
    """What the figures are held against: the device table's entry, or None (the CPU, an unknown device)."""
    if spec is None:
        return None
    return {"name": spec.name, "peak_tflops": spec.peaks(), "memory_gb_s": spec.memory_gb_s,
            "intra_gb_s": spec.intra_gb_s, "source": spec.peak_source}


def _straggler(gpus: list[dict], value, label: str) -> None:
    """Name each GPU slower than the median of its siblings by more than the straggler threshold (a warning)."""
    values = [(gpu, value(gpu)) for gpu in gpus]
    values = [(gpu, v) for gpu, v in values if v]
    if len(values) < 2:
        return
    median = statistics.median(v for _, v in values)
    for gpu, v in values:
        slower = 1 - v / median
        if slower > THRESHOLD:
            gpu["warnings"].append(f"GPU {gpu['index']} on {gpu['host']}: {label} {v:.4g} is {slower:.1%} below its "
                                   f"siblings' median {median:.4g} (straggler threshold {THRESHOLD:.0%})")


def judge(ranks: Sequence[dict], spec: DeviceSpec | dict | None, floors: Floors, not_measured: dict[str, str]) -> dict:
    """The acceptance section of system.json from every rank's record: figures, verdicts and the lines that say why."""
    gpus = [dict(figures(rank), problems=[], warnings=[]) for rank in sorted(ranks, key=lambda r: r["rank"])]
    collectives = collective_figures(ranks[0].get("collectives", [])) if ranks else []
    node_problems: list[str] = []
    judged = spec if isinstance(spec, dict) else specification(spec)  # a recorded section's, or the table's
    if judged:
        for gpu in gpus:
            where = f"GPU {gpu['index']} on {gpu['host']}"
            for precision, found in gpu["gemm"].items():
                peak = judged["peak_tflops"].get(precision)
                if "tflops" in found and peak and found["tflops"] < floors.gemm * peak:
                    gpu["problems"].append(f"{where}: {precision} GEMM {found['tflops']:.4g} TFLOP/s is below "
                                           f"{floors.gemm:g} x the {judged['name']}'s {peak:g} (ACCEPT_GEMM_FLOOR)")
            rated = judged["memory_gb_s"]
            if rated and gpu["memory"]["copy"]["gb_s"] < floors.memory * rated:
                gpu["problems"].append(f"{where}: memory copy {gpu['memory']['copy']['gb_s']:.4g} GB/s is below "
                                       f"{floors.memory:g} x the {judged['name']}'s rated {rated:g} GB/s "
                                       "(ACCEPT_MEMORY_FLOOR)")
        for precision in dict.fromkeys(p for gpu in gpus for p in gpu["gemm"]):
            _straggler(gpus, lambda g: g["gemm"][precision].get("tflops"), f"{precision} GEMM TFLOP/s")
        _straggler(gpus, lambda g: g["memory"]["copy"]["gb_s"], "memory copy GB/s")
        link = judged["intra_gb_s"]
        for op in COLLECTIVES:
            rows = [row for row in collectives if row["op"] == op]
            if link and rows:
                top = max(rows, key=lambda r: r["bytes"])
                if top["busbw_gb_s"] < floors.busbw * link:
                    node_problems.append(f"node {gpus[0]['host']}: {op} of {size_text(top['bytes'])} over "
                                         f"{top['ranks']} GPUs: bus bandwidth {top['busbw_gb_s']:.4g} GB/s is below "
                                         f"{floors.busbw:g} x the {judged['name']}'s {link:g} GB/s "
                                         "(ACCEPT_BUSBW_FLOOR)")
    for gpu in gpus:
        gpu["verdict"] = NO_SPEC if not judged else "fail" if gpu["problems"] else \
            "warn" if gpu["warnings"] else "pass"
    verdicts = {gpu["verdict"] for gpu in gpus}
    verdict = NO_SPEC if not judged else "fail" if node_problems or "fail" in verdicts else \
        "warn" if "warn" in verdicts else "pass"
    return {"verdict": verdict, "device": gpus[0]["device"] if gpus else None, "specification": judged,
            "floors": vars(floors), "floors_source": PRIMUS, "straggler_threshold": THRESHOLD,
            "bus_bandwidth_source": NCCL_TESTS, "not_measured": dict(not_measured), "gpus": gpus,
            "collectives": collectives, "problems": node_problems}


def largest_busbw(section: dict) -> dict[str, float]:
    """Each collective's bus bandwidth at its largest measured size, GB/s."""
    found: dict[str, tuple[int, float]] = {}
    for row in section.get("collectives", []):
        if row["bytes"] >= found.get(row["op"], (0, 0.0))[0]:
            found[row["op"]] = (row["bytes"], row["busbw_gb_s"])
    return {op: busbw for op, (_, busbw) in found.items()}


def bound_at_measured(bound: dict, intra_gb_s: float, busbw: dict[str, float]) -> float | None:
    """A one-node step-time bound (utils/predict/step_time.py's parts) with its communication over the node's measured
    bus bandwidth instead of the datasheet's GPU-to-GPU bandwidth: the TP term at the all-reduce's, the
    data-parallel one at the mean of reduce-scatter's and all-gather's (its units), the exposed part and the
    pipeline bubble made again as the bound makes them. None without the parts or the measurements."""
    needed = ("compute_s", "tp_s", "dp_s", "bubble_s", "dp_total_s")
    if any(bound.get(key) is None for key in needed) or not intra_gb_s:
        return None
    if not all(busbw.get(op) for op in ("all_reduce", "reduce_scatter", "all_gather")):
        return None
    compute, tp, dp_total = bound["compute_s"], bound["tp_s"], bound["dp_total_s"]
    ep = bound.get("ep_s") or 0.0  # the all-to-all: no bus bandwidth of its own is measured, kept at the datasheet's
    tp_again = tp * intra_gb_s / busbw["all_reduce"]
    dp_again = dp_total * intra_gb_s / statistics.fmean((busbw["reduce_scatter"], busbw["all_gather"]))
    overlapped = bound["dp_s"] < dp_total  # the bound hid part of it behind compute
    exposed = max(0.0, dp_again - compute) if overlapped else dp_again
    busy = compute + tp + ep
    bubble = bound["bubble_s"] * (compute + tp_again + ep) / busy if busy > 0 else 0.0
    return compute + tp_again + ep + bubble + exposed


def problems(section: dict) -> list[str]:
    """Every line that fails the node: the GPUs' and the node's."""
    return [line for gpu in section["gpus"] for line in gpu["problems"]] + section["problems"]


def warnings(section: dict) -> list[str]:
    return [line for gpu in section["gpus"] for line in gpu["warnings"]]


def summary(section: dict) -> list[str]:
    """The figures in a few lines, as the stage prints them."""
    lines = []
    for gpu in section["gpus"]:
        gemm = ", ".join(f"{p} {f['tflops']:.4g}" for p, f in gpu["gemm"].items() if "tflops" in f)
        memory = ", ".join(f"{name} {item['gb_s']:.4g}" for name, item in gpu["memory"].items())
        lines.append(f"{gpu['device']} {gpu['index']} on {gpu['host']}: GEMM TFLOP/s {gemm}; memory GB/s {memory}; "
                     f"{gpu['verdict']}")
    ops: dict[str, list[str]] = {}
    for row in section["collectives"]:
        ops.setdefault(row["op"], []).append(f"{size_text(row['bytes'])} {row['busbw_gb_s']:.4g}")
    lines += [f"{op} bus bandwidth GB/s over {section['collectives'][0]['ranks']} ranks: {', '.join(rows)}"
              for op, rows in ops.items()]
    across = section.get("across_nodes")
    if across:
        rows = ", ".join(f"{size_text(row['bytes'])} {row['busbw_gb_s']:.4g}" for row in across["collectives"])
        lines.append(f"all_reduce bus bandwidth GB/s across {across['nodes']} nodes "
                     f"({across['collectives'][0]['ranks']} ranks): {rows}; {across['verdict']} ({across['why']})")
    lines += [f"not measured: {what}: {why}" for what, why in section["not_measured"].items()]
    return lines


def recompute_problems(section: dict) -> list[str]:
    """Each figure of a recorded section that its evidence does not give again (evaluate's checks): one line each."""
    found = []

    def differs(shown: Any, made: float) -> bool:
        return not isinstance(shown, (int, float)) or abs(shown - made) > 1e-6 * max(1.0, abs(made))

    for gpu in section.get("gpus", []):
        for precision, item in gpu.get("gemm", {}).items():
            if "tflops" in item and differs(item["tflops"], gemm_tflops(item["shapes"])):
                found.append(f"acceptance: GPU {gpu.get('index')} {precision} GEMM {item['tflops']} TFLOP/s is not "
                             f"its shapes' FLOPs over their seconds ({gemm_tflops(item['shapes']):.6g})")
        for name, item in gpu.get("memory", {}).items():
            if differs(item.get("gb_s"), item["bytes"] / item["seconds"] / 1e9):
                found.append(f"acceptance: GPU {gpu.get('index')} memory {name} {item.get('gb_s')} GB/s is not its "
                             f"bytes over its seconds ({item['bytes'] / item['seconds'] / 1e9:.6g})")
    for row in section.get("collectives", []) + (section.get("across_nodes") or {}).get("collectives", []):
        algbw, busbw = bandwidths(row["op"], row["bytes"], row["seconds"], row["ranks"])
        if differs(row.get("algbw_gb_s"), algbw) or differs(row.get("busbw_gb_s"), busbw):
            found.append(f"acceptance: {row['op']} of {row['bytes']} bytes: algbw {row.get('algbw_gb_s')} / busbw "
                         f"{row.get('busbw_gb_s')} GB/s are not nccl-tests' ({algbw:.6g} / {busbw:.6g})")
    return found
