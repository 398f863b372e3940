"""Frameworks side by side on the same model and layout: Megatron vs the torch-native frameworks (fsdp, autotp),
and NeMo / Primus on their vendors' machines, with each run's torch-native settings and the ratio to Megatron.

Runs belong together when they trained the same variant with the same TP, PP, DP, GA, micro-batch, sequence
length, precision and GPU count; within such a group a row is one device, framework, node count and set of
torch-native settings (its repeats folded to median [min-max]), so compile on and off stay two rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from evaluate import native_settings
from evaluate.collect import Loaded
from evaluate.comparison.repeats import (FRAMEWORK_NAMES, device_label, figures, median_or_none, spread, statuses,
                                         tflops, tokens)
from utils.frameworks import BASELINE
from utils.spec.models import by_variant
from utils.spec.result_types import Section


def step_time(r: Section) -> float | None:
    stats = r.performance.step_time_s
    return stats.median if stats else None


@dataclass
class Row:
    """One device + framework + node count + torch-native settings within a group; its repeats."""

    device: str
    framework: str
    nodes: int | None
    settings: str  # native_settings.described
    items: list[Loaded] = field(default_factory=list)

    def figures(self, getter) -> list[float]:
        return figures(self.items, getter)


def group_key(r: Section) -> tuple:
    """(variant, tp, pp, dp, ga, mbs, seq_len, precision, num_gpus): what makes two runs the same workload on the
    same layout."""
    p, t = r.parallelism, r.training
    return (r.model.variant, p.tp, p.pp, p.dp, p.ga, t.mbs, t.seq_len, t.precision, p.num_gpus)


def groups(items: Sequence[Loaded]) -> dict[tuple, list[Row]]:
    """group_key -> its rows (Megatron's first) in first-seen order of the groups."""
    out: dict[tuple, dict[tuple, Row]] = {}
    for item in items:
        row = (device_label(item), item.typed.framework, item.nodes, native_settings.described(item.typed))
        out.setdefault(group_key(item.typed), {}).setdefault(row, Row(*row)).items.append(item)
    return {key: sorted(rows.values(), key=lambda row: (row.framework != BASELINE, row.device, row.framework,
                                                        row.settings)) for key, rows in out.items()}


def compared(found: dict[tuple, list[Row]]) -> dict[tuple, list[Row]]:
    """The groups that more than one framework ran."""
    return {key: rows for key, rows in found.items() if len({row.framework for row in rows}) > 1}


def ratio(row: Row, rows: Sequence[Row]) -> float | None:
    """The row's median tokens/s/GPU over Megatron's on the same device and node count; None without both."""
    mine = median_or_none(row.figures(tokens))
    base = next((r for r in rows if r.framework == BASELINE and (r.device, r.nodes) == (row.device, row.nodes)), None)
    theirs = median_or_none(base.figures(tokens)) if base else None
    return mine / theirs if mine is not None and theirs else None


def heading(key: tuple) -> str:
    variant, tp, pp, dp, ga, mbs, seq_len, precision, num_gpus = key
    return (f"### {by_variant(variant).display_name}: TP {tp}, PP {pp}, DP {dp}, GA {ga}, MBS {mbs}, SL {seq_len}, "
            f"{precision.upper()}, {num_gpus} GPU{'s' if num_gpus != 1 else ''}")


def section(items: Sequence[Loaded]) -> list[str]:
    """report.md's side-by-side section (markdown lines)."""
    out = ["## Frameworks on the same layout", "",
           "Runs of the same model, TP/PP/DP/GA, micro-batch, sequence length, precision and GPU count; figures are "
           f"median [min-max] over successful repeats, the ratio is tokens/s/GPU over {FRAMEWORK_NAMES[BASELINE]}'s "
           "on the same device and node count. Settings: the torch-native frameworks' DP implementation, "
           "torch.compile (and its mode), selective activation checkpointing (SAC 1/N: every N-th layer), attention "
           "and ZeRO stage, as the framework read them back; a Megatron path's megatron-core local layers where it "
           "ran without Transformer Engine.", ""]
    found = compared(groups(items))
    if not found:
        return out + ["- no model and layout was run by more than one framework", ""]
    for key, rows in found.items():
        out += [heading(key), "",
                "| Device | Framework | Nodes | Settings | tokens/s/GPU | TFLOP/s/GPU | Step time (s) | "
                f"vs {FRAMEWORK_NAMES[BASELINE]} | Runs |",
                "|---|---|---|---|---|---|---|---|---|"]
        for row in rows:
            r = ratio(row, rows)
            out.append(f"| {row.device} | {FRAMEWORK_NAMES[row.framework]} | {row.nodes or '?'} | {row.settings} | "
                       f"{spread(row.figures(tokens))} | {spread(row.figures(tflops))} | "
                       f"{spread(row.figures(step_time))} | {'-' if r is None else f'{r:.2f}x'} | "
                       f"{statuses(row.items)} |")
        out.append("")
    return out
