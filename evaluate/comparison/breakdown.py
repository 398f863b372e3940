"""Where each run's step time goes: forward, backward, optimizer and the rest (performance.breakdown, means over
the steady window), as stacked bars in compare.png and a table in report.md. A run without a breakdown is shown
as one, never left out: NeMo and Primus logs do not split the step."""

from __future__ import annotations

from typing import Sequence

from evaluate.collect import Loaded
from evaluate.comparison.repeats import FRAMEWORK_NAMES, device_label
from utils.spec.metrics import figure_text
from utils.spec.result_types import Section

TITLE = "Step time breakdown (% of the step; the step's ms above each bar)"
# The breakdown's parts (fields of performance.breakdown), in the order they stack from the bottom, with their label
# and colour.
PARTS = (("forward_s", "forward", "#4C72B0"), ("backward_s", "backward", "#DD8452"),
         ("optimizer_s", "optimizer", "#55A868"), ("other_s", "other", "#8C8C8C"))
NONE = "no breakdown"


def labels(items: Sequence[Loaded]) -> list[str]:
    """One label per run: framework, model and layout (with the device when the runs have several); runs alike in
    these (repeats, other torch-native settings) add their run id."""
    several = len({device_label(i) for i in items}) > 1
    out = []
    for item in items:
        r, p = item.typed, item.typed.parallelism
        layout = f"TP{p.tp} PP{p.pp} DP{p.dp} GA{p.ga}"
        out.append((f"{device_label(item)}\n" if several else "") +
                   f"{FRAMEWORK_NAMES[r.framework]}\n{r.model.display_name}\n{layout}")
    return [label + ("" if out.count(label) == 1 else f"\n{item.typed.run.id}")
            for label, item in zip(out, items)]


def breakdown(item: Loaded) -> Section | None:
    return item.typed.performance.breakdown


def share(found: Section, part: str) -> float:
    """A part of the breakdown in % of its step."""
    return 100 * getattr(found, part) / found.step_time_s


def table(items: Sequence[Loaded]) -> list[str]:
    """report.md's breakdown section: ms and % of the step per part, per run."""
    out = ["## Step time breakdown", "",
           "Mean forward, backward, optimizer and other time per step over the steady-state steps (means, so the four "
           "add up to the mean step time, which can differ from the median the throughput uses); the time of each "
           "part in ms with its share of the step.", "",
           "| Run | Framework | Model | TP/PP/DP/GA | Forward | Backward | Optimizer | Other | Step (ms) | Steps |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    methods = {}
    for item in items:
        r, p, found = item.typed, item.typed.parallelism, breakdown(item)
        head = (f"| {item.name} | {FRAMEWORK_NAMES[r.framework]} | {r.model.display_name} | "
                f"{p.tp}/{p.pp}/{p.dp}/{p.ga} | ")
        if found is None:
            out.append(head + " | ".join([NONE] + ["-"] * 5) + " |")
            continue
        methods.setdefault(found.method, []).append(item.name)
        parts = [f"{figure_text(1000 * getattr(found, key))} ({share(found, key):.1f}%)" for key, _, _ in PARTS]
        out.append(head + " | ".join(parts + [figure_text(1000 * found.step_time_s), str(found.count)]) + " |")
    out += [""] + [f"- measured by {method}: {', '.join(names)}" for method, names in methods.items()]
    return out + ([""] if methods else [])


def panel(ax, items: Sequence[Loaded]) -> int:
    """Stacked bars of each run's breakdown in % of its step, "no breakdown" where it has none; returns the number
    of runs drawn with one."""
    runs = [(x, breakdown(item)) for x, item in enumerate(items)]
    drawn = [(x, found) for x, found in runs if found is not None]
    bottom = [0.0] * len(drawn)
    for key, name, colour in PARTS:
        shares = [share(found, key) for _, found in drawn]
        ax.bar([x for x, _ in drawn], shares, bottom=bottom, color=colour, edgecolor="black", linewidth=0.5,
               label=name)
        bottom = [b + s for b, s in zip(bottom, shares)]
    for (x, found), top in zip(drawn, bottom):
        ax.annotate(f"{figure_text(1000 * found.step_time_s)} ms", (x, top), textcoords="offset points",
                    xytext=(0, 3), ha="center", fontsize=8)
    for x, found in runs:
        if found is None:
            ax.text(x, 2, NONE, ha="center", va="bottom", fontsize=9, rotation=90, color="dimgray")
    ax.set_title(TITLE, fontsize=12)
    ax.set_ylabel("% of step time")
    ax.set_ylim(0, 115)
    ax.set_xlim(-0.6, len(items) - 0.4)
    ax.set_xticks(range(len(items)), labels(items))  # sized and wrapped to fit by evaluate/comparison/plot_labels.py
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1, 1), ncol=4, frameon=False)  # above: hides no bar
    return len(drawn)
