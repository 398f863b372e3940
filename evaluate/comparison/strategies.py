"""The cross-strategy view: which TP/PP/DP split is fastest on each platform, and how vendors compare
at their best and at identical layouts. Used by evaluate.compare when results hold several strategies, or when it
is asked for the projection to many nodes (a third panel per model: evaluate/comparison/projection.py).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from evaluate.comparison import projection
from evaluate.comparison.plot import PALETTES, plain_text_figures, save_png
from evaluate.comparison.repeats import Repeats, memory, tokens
from utils.spec.metrics import figure_text
from utils.spec.strategies import IDENTICAL


@dataclass(frozen=True)
class Entry:
    """One strategy of one framework on one platform for one model (repeats folded)."""

    model: str  # display name
    platform: str
    device: str
    framework: str  # display name, with its torch-native settings (Repeats.framework_text)
    strategy: str
    layout: tuple[int, int, int, int]
    tokens: float | None  # median tokens/s/GPU over successful repeats
    memory: float | None  # median peak memory per GPU (GiB)
    status: str
    result: dict | None = field(default=None, compare=False, repr=False)  # the ok repeat nearest the median tokens,
    # as read (evaluate.project projects it)

    @property
    def config(self) -> str:
        return f"{self.device} + {self.framework}"


def entries(rows: Sequence[Repeats]) -> list[Entry]:
    """Fold the repeats of each configuration into entries."""
    out = []
    for row in rows:
        t, m = row.figures(tokens), row.figures(memory)
        median = statistics.median(t) if t else None
        measured = [i for i in row.ok if tokens(i.typed) is not None]
        nearest = min(measured, key=lambda i: abs(tokens(i.typed) - median)) if measured else None
        out.append(Entry(row.model_name, row.platform, row.device, row.framework_text, row.strategy,
                         row.layout, median, statistics.median(m) if m else None, row.status(),
                         nearest.result if nearest else None))
    return out


def has_strategies(items: Sequence[Entry]) -> bool:
    return len({e.strategy for e in items}) > 1


def best(items: Sequence[Entry]) -> Entry | None:
    measured = [e for e in items if e.tokens is not None]
    return max(measured, key=lambda e: e.tokens) if measured else None


def groups(items: Sequence[Entry]) -> dict[tuple[str, str], list[Entry]]:
    """(model, platform) -> its entries, strategies in first-seen order."""
    out: dict[tuple[str, str], list[Entry]] = {}
    for entry in items:
        out.setdefault((entry.model, entry.platform), []).append(entry)
    return out


def vendor_speedups(items: Sequence[Entry]) -> list[str]:
    """Per model: AMD's best over NVIDIA's best, and the same under the truly_identical layout."""
    lines = []
    for model in dict.fromkeys(e.model for e in items):
        amd = [e for e in items if e.model == model and e.platform == "amd"]
        nvd = [e for e in items if e.model == model and e.platform == "nvd"]
        for label, pick in (("best vs best", lambda group: group),
                            ("identical vs identical", lambda group: [e for e in group if e.strategy == IDENTICAL])):
            a, n = best(pick(amd)), best(pick(nvd))
            if a is None or n is None:
                continue
            lines.append(f"- {model}, {label}: {a.config} ({a.strategy}, {figure_text(a.tokens)}) is "
                         f"**{a.tokens / n.tokens:.2f}x** {n.config} ({n.strategy}, {figure_text(n.tokens)} "
                         "tokens/s/GPU)")
    return lines


def section(items: Sequence[Entry], png_name: str | None) -> list[str]:
    """The report's cross-strategy section (markdown lines)."""
    out = ["## Strategies", "", "tokens/s/GPU and peak memory per strategy; the fastest of each model and platform "
           "is marked **best**.", ""]
    for (model, platform), group in groups(items).items():
        top = best(group)
        out += [f"### {model} on {group[0].device}", "",
                "| Strategy | Framework | TP/PP/DP/GA | tokens/s/GPU | Peak memory (GiB) | Runs |",
                "|---|---|---|---|---|---|"]
        for e in group:
            mark = " **best**" if e is top else ""
            out.append(f"| {e.strategy}{mark} | {e.framework} | {'/'.join(map(str, e.layout))} | "
                       f"{'-' if e.tokens is None else figure_text(e.tokens)} | "
                       f"{'-' if e.memory is None else figure_text(e.memory)} | {e.status} |")
        out.append("")
    speedups = vendor_speedups(items)
    out += ["### AMD vs NVIDIA across strategies", ""] + (speedups or ["- needs AMD and NVIDIA runs of the same model"])
    out += [""] + ([f"![strategies]({png_name})", ""] if png_name else [])
    return out


def plot(items: Sequence[Entry], path: Path, ask: projection.Ask | None = None) -> dict[str, int]:
    """compare-strategies.png: per model, tokens/s/GPU and peak memory per strategy, grouped bars per
    platform + framework, the best of each model and platform starred; when asked, a third panel projects each
    configuration to many nodes. Returns panel title -> bars (lines for the projection)."""
    plain_text_figures()
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(e.model for e in items))
    columns = 3 if ask else 2
    fig, axes = plt.subplots(len(models), columns, figsize=(8.5 * columns, 5.2 * len(models) + 1), dpi=100,
                             squeeze=False)
    fig.suptitle("TPrimat: parallelism strategies (star: fastest per model and platform)", fontsize=14,
                 fontweight="bold")
    drawn = {}
    for row_axes, model in zip(axes, models):
        group = [e for e in items if e.model == model]
        strategies = list(dict.fromkeys(e.strategy for e in group))
        configs = list(dict.fromkeys((e.platform, e.config) for e in group))
        width = 0.8 / len(configs)
        shade = {config: sum(1 for p, _ in configs[:k] if p == platform) for k, (platform, config) in enumerate(configs)}
        colours = {config: PALETTES[platform][shade[config] % len(PALETTES[platform])] for platform, config in configs}
        stars = {id(best([e for e in group if e.platform == p])) for p in {e.platform for e in group}}
        for ax, attr, title, unit in ((row_axes[0], "tokens", f"{model}: tokens/s/GPU", "tokens/s per GPU"),
                                      (row_axes[1], "memory", f"{model}: peak memory per GPU", "GiB")):
            bars, labelled = 0, set()
            for k, (platform, config) in enumerate(configs):
                colour = colours[config]
                for x, strategy in enumerate(strategies):
                    entry = next((e for e in group if e.config == config and e.strategy == strategy), None)
                    value = getattr(entry, attr) if entry else None
                    if value is None:
                        continue
                    position = x - 0.4 + width * (k + 0.5)
                    ax.bar(position, value, width * 0.95, color=colour, edgecolor="black", linewidth=0.5,
                           label=None if config in labelled else config)
                    labelled.add(config)
                    bars += 1
                    if attr == "tokens" and id(entry) in stars:
                        ax.annotate("★", (position, value), textcoords="offset points", xytext=(0, 2), ha="center",
                                    fontsize=14, color="goldenrod")
            ax.set_xticks(range(len(strategies)), [s.replace("_", "\n") for s in strategies], fontsize=9)
            ax.set_title(title, fontsize=12)
            ax.set_ylabel(unit)
            ax.margins(y=0.15)
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=8, loc="upper right")
            drawn[title] = bars
        if ask:
            drawn[f"{model}: {projection.LABEL}"] = projection.draw(row_axes[2], model, group, ask, colours)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    save_png(fig, path)
    plt.close(fig)
    return drawn
