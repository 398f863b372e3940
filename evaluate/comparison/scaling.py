"""Scaling across nodes: how much of one node's per-GPU throughput a workload keeps on N nodes.

Used by evaluate.compare when results of the same workload ran on 1 node and on more. Efficiency is
tokens/s/GPU on N nodes over tokens/s/GPU on 1 node; the speed-up is total tokens/s on N nodes over
1 node, next to the ideal (the ratio of GPUs). A workload here is everything that fixes the work of
one GPU in one step: platform, device, framework (with its torch-native settings), model, strategy, TP and
PP, GPUs per node, sequence length, micro batch and precision. Data parallelism (and with it the global
batch) may grow with the nodes: that is weak scaling, said so in the report, not a fairness problem.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from evaluate import native_settings
from evaluate.collect import Loaded
from utils.spec.metrics import figure_text
from utils.spec.models import by_variant


@dataclass(frozen=True)
class Point:
    """One node count of a workload, its successful repeats folded into medians."""

    nodes: int
    gpus: int
    gbs: tuple[int, ...]  # every global batch the repeats used
    runs: int  # successful repeats
    tokens_per_gpu: float | None
    tokens: float | None


@dataclass(frozen=True)
class Group:
    """One workload measured on 1 node and on more."""

    model: str  # display name
    device: str
    framework: str
    strategy: str
    tp: int
    pp: int
    seq_len: int
    mbs: int
    precision: str
    points: tuple[Point, ...]  # by node count; the first is the 1-node baseline
    settings: str = "-"  # the torch-native settings (evaluate/native_settings.py); "-" for the other frameworks

    def framework_text(self, framework_names: Mapping[str, str]) -> str:
        return framework_names[self.framework] + ("" if self.settings == "-" else f" ({self.settings})")

    def efficiency(self, point: Point) -> float | None:
        base = self.points[0].tokens_per_gpu
        return point.tokens_per_gpu / base if base and point.tokens_per_gpu is not None else None

    def speedup(self, point: Point) -> float | None:
        base = self.points[0].tokens
        return point.tokens / base if base and point.tokens is not None else None

    def ideal(self, point: Point) -> float:
        return point.gpus / self.points[0].gpus


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _point(nodes: int, gpus: int, items: Sequence[Loaded]) -> Point:
    ok = [i.typed.performance for i in items if i.ok]
    return Point(nodes, gpus, tuple(sorted({i.typed.training.gbs for i in items})), len(ok),
                 _median([p.tokens_per_s_per_gpu for p in ok if p.tokens_per_s_per_gpu is not None]),
                 _median([p.tokens_per_s for p in ok if p.tokens_per_s is not None]))


def groups(items: Sequence[Loaded], device_label: Callable[[Loaded], str]) -> list[Group]:
    """Workloads with a measured 1-node baseline and at least one larger node count (results whose
    node count is unknown are left out)."""
    cells: dict[tuple, dict[int, list[Loaded]]] = {}
    for item in items:
        r = item.typed
        p, t = r.parallelism, r.training
        nodes = item.nodes
        if not nodes or p.num_gpus % nodes:
            continue
        key = (r.model.variant, r.platform, device_label(item), r.framework, p.strategy, p.tp, p.pp,
               p.num_gpus // nodes, t.seq_len, t.mbs, t.precision, native_settings.described(item.typed))
        cells.setdefault(key, {}).setdefault(nodes, []).append(item)
    out = []
    for key in sorted(cells):
        variant, _, device, framework, strategy, tp, pp, per_node, seq_len, mbs, precision, settings = key
        points = tuple(_point(n, n * per_node, cells[key][n]) for n in sorted(cells[key]))
        if points[0].nodes == 1 and points[0].tokens_per_gpu is not None and len(points) > 1:
            out.append(Group(by_variant(variant).display_name, device, framework, strategy, tp, pp, seq_len, mbs,
                             precision, points, settings))
    return out


def _figure(value: float | None, fmt: str = "") -> str:
    """"-" for none; a ratio in fmt; a throughput (no fmt) as utils.spec.metrics writes every figure."""
    if value is None:
        return "-"
    return format(value, fmt) if fmt else figure_text(value)


def section(found: Sequence[Group], framework_names: Mapping[str, str]) -> list[str]:
    """The report's Scaling section (nothing when no workload ran on several node counts)."""
    if not found:
        return []
    out = ["## Scaling", "",
           "Efficiency = tokens/s/GPU on N nodes / tokens/s/GPU on 1 node (1.00: every added GPU as fast as on one "
           "node). Speed-up = total tokens/s on N nodes / on 1 node, against the ideal ratio of GPUs. The extra nodes "
           "add data-parallel ranks, so the global batch grows with them (GBS = MBS x DP x GA, listed per node "
           "count): this is weak scaling, the same work per GPU and step, so per-GPU throughput compares across "
           "node counts and losses do not.", ""]
    for group in found:
        strategy = "" if group.strategy == "custom" else f"{group.strategy}, "
        out += [f"**{group.model}** on {group.device} + {group.framework_text(framework_names)} ({strategy}"
                f"TP {group.tp}, PP {group.pp}, SL {group.seq_len}, MBS {group.mbs}, {group.precision.upper()}, "
                f"{group.points[0].gpus} GPUs per node)", "",
                "| Nodes | GPUs | GBS | tokens/s/GPU | tokens/s | Efficiency | Speed-up | Runs ok |",
                "|---|---|---|---|---|---|---|---|"]
        for point in group.points:
            speedup = group.speedup(point)
            out.append(f"| {point.nodes} | {point.gpus} | {', '.join(map(str, point.gbs))} | "
                       f"{_figure(point.tokens_per_gpu)} | {_figure(point.tokens)} | "
                       f"{_figure(group.efficiency(point), '.2f')} | "
                       f"{_figure(speedup, '.2f')}{'x' if speedup is not None else ''} "
                       f"(ideal {group.ideal(point):g}x) | {point.runs} |")
        out.append("")
    return out


def headlines(found: Sequence[Group], framework_names: Mapping[str, str]) -> list[str]:
    """One line per workload and larger node count, for the top of the report (and so the console)."""
    return [f"**Scaling**: {g.model} on {g.device} + {g.framework_text(framework_names)} keeps "
            f"{_figure(g.efficiency(p), '.0%')} of its 1-node tokens/s/GPU on {p.nodes} nodes "
            f"({_figure(g.speedup(p), '.2f')}x the total tokens/s, ideal {g.ideal(p):g}x)"
            for g in found for p in g.points[1:]]
