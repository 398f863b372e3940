"""compare.png: throughput, TFLOP/s and memory per configuration (bars), loss, learning rate and step time per
run (lines), each run's step time breakdown (stacked bars, evaluate/comparison/breakdown.py), where any run measured
energy, a row of tokens per joule, mean power per device and cost per million tokens (evaluate/comparison/energy.py),
and where any run evaluated held-out validation, its loss against tokens (evaluate/comparison/quality.py);
AMD in reds, NVIDIA in greens, CPU in blues, one hatch or line style per model."""

from __future__ import annotations

import statistics
import textwrap
from pathlib import Path
from typing import Sequence

from evaluate.comparison import breakdown as breakdown_view
from evaluate.comparison import energy as energy_view
from evaluate.comparison import plot_labels
from evaluate.comparison import quality as quality_view
from evaluate.collect import Loaded
from evaluate.comparison.energy import NOT_MEASURED
from evaluate.comparison.repeats import FRAMEWORK_NAMES, Repeats, memory, memory_title, tflops, title, tokens
from utils.machine.energy_cost import FLAGS, PRICE_KNOBS, CostSettings
from utils.files import atomic_open
from utils.spec.metrics import figure_text

# AMD in reds and oranges, NVIDIA in greens and teals, CPU in blues: distinguishable at a glance.
PALETTES = {"amd": ("#C8102E", "#F28C28", "#8B1A1A", "#E8738A", "#B35900"),
            "nvd": ("#76B900", "#1B7F3B", "#00A3A3", "#A4D65E", "#0B5345"),
            "cpu": ("#1F77B4", "#6A5ACD", "#17BECF", "#7F7F7F", "#2C3E91")}
MODEL_STYLES = ("-", "--", ":", "-.")
MODEL_HATCHES = ("", "//", "..", "xx")


def colours(rows: Sequence[Repeats]) -> dict[int, str]:
    """A colour per row: the platform's palette, one shade per framework/strategy/device/torch-native settings/precision."""
    out, seen = {}, {}
    for index, row in enumerate(rows):
        key = (row.platform, row.device, row.framework, row.strategy, row.layout, row.settings, row.precision)
        palette = PALETTES[row.platform]
        shade = seen.setdefault(key, len({k for k in seen if k[0] == row.platform}) % len(palette))
        out[index] = palette[shade]
    return out


def tick_labels(rows: Sequence[Repeats]) -> list[str]:
    """Device, framework, model and strategy per bar; rows alike but for their torch-native settings (compile on
    and off) are told apart by them."""
    labels = [f"{r.device.removeprefix('AMD ').removeprefix('NVIDIA ')}\n{FRAMEWORK_NAMES[r.framework]}{r.low_text}\n"
              f"{r.short_model}" + ("" if r.strategy == "custom" else f"\n{r.strategy}") for r in rows]
    return [label + ("" if labels.count(label) == 1 else "\n" + "\n".join(textwrap.wrap(r.settings, 24)))
            for label, r in zip(labels, rows)]


def plain_text_figures() -> None:
    """matplotlib without a display, and every text drawn as written: a name from a result (a STRATEGIES_FILE
    strategy such as "cheap$x^{$") is no TeX, which matplotlib would otherwise parse and fail to draw."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False


def plot(items: Sequence[Loaded], rows: Sequence[Repeats], path: Path, costs: CostSettings = CostSettings()
         ) -> dict[str, int]:
    """Draw the seven panels (ten where a run measured energy) into path; returns each panel's title with its number
    of bars, lines or (breakdown) runs with a breakdown."""
    plain_text_figures()
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.container import BarContainer
    from matplotlib.ticker import MaxNLocator

    colour = colours(rows)
    variants = list(dict.fromkeys(r.variant for r in rows))
    energy = any(row.figures(energy_view.tokens_per_joule) for row in rows)
    validation = bool(quality_view.evaluated(items))  # a row for held-out validation loss
    fig = plt.figure(figsize=(19, (22 if energy else 16.5) + 5.5 * validation), dpi=100)
    grid = fig.add_gridspec((4 if energy else 3) + validation, 3)
    axes = np.array([[fig.add_subplot(grid[r, c]) for c in range(3)] for r in (0, 1, 3) if r < 3 or energy])
    devices = " vs ".join(dict.fromkeys(r.device for r in rows))
    fig.suptitle(f"TPrimat: {devices}\n{title(items)}", fontsize=14, fontweight="bold")
    bar_panels = ((axes[0, 0], tokens, "tokens/s/GPU (higher is better; median, min-max bars)", "tokens/s per GPU",
                   NOT_MEASURED),
                  (axes[0, 1], tflops, "TFLOP/s/GPU (TPrimat's formula)", "TFLOP/s per GPU", NOT_MEASURED),
                  (axes[0, 2], memory, memory_title(items), "GiB", NOT_MEASURED))
    if energy:
        bar_panels += ((axes[2, 0], energy_view.tokens_per_joule, "Tokens per joule (higher is better; the devices' "
                        "energy)", "tokens per joule", NOT_MEASURED),
                       (axes[2, 1], energy_view.mean_power_w, "Mean power per device (W)", "W", NOT_MEASURED),
                       (axes[2, 2], energy_view.cost_getter(costs), "Cost per million tokens (at the prices given)",
                        "price per million tokens", "no price"))
    labels = tick_labels(rows)
    for ax, getter, name, unit, missing in bar_panels:
        _bars(ax, rows, getter, missing, colour, [variants.index(r.variant) for r in rows])
        ax.set_title(name, fontsize=12)
        ax.set_ylabel(unit)
        ax.margins(y=0.12)
        ax.grid(axis="y", alpha=0.3)
    if energy and not costs.any_price:
        axes[2, 2].text(0.5, 0.5, f"no price given:\n{PRICE_KNOBS['amd']} / {PRICE_KNOBS['nvd']}\n"
                        f"or {FLAGS[PRICE_KNOBS['amd']]} / {FLAGS[PRICE_KNOBS['nvd']]}", transform=axes[2, 2].transAxes,
                        ha="center", va="center", fontsize=10, color="dimgray")
    line_panels = ((axes[1, 0], "loss", "Training loss", "loss"), (axes[1, 1], "lr", "Learning rate", "learning rate"),
                   (axes[1, 2], "step_time_s", "Step time", "seconds per step"))  # fields of the result's series
    skip = max(i.typed.performance.warmup_skip for i in items)
    for ax, key, name, unit in line_panels:
        for x, row in enumerate(rows):
            for n, item in enumerate(row.ok):  # a result validate fails is drawn nowhere (evaluate.gate)
                series = item.typed.series
                ax.plot(series.step, [v if v is not None else float("nan") for v in getattr(series, key)],
                        color=colour[x], linestyle=MODEL_STYLES[variants.index(row.variant) % len(MODEL_STYLES)],
                        linewidth=1.4, alpha=0.9 if n == 0 else 0.5)
        if skip:
            ax.axvspan(0.5, skip + 0.5, color="gray", alpha=0.12, lw=0)
        ax.set_title(name, fontsize=12)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
    axes[1, 2].text(0.99, 0.99, f"grey: first {skip} steps, left out of the figures", transform=axes[1, 2].transAxes,
                    ha="right", va="top", fontsize=8, color="dimgray")
    _clip_spikes(axes[1, 2], [item for item in items if item.ok])
    split = fig.add_subplot(grid[2, :])
    run_items = [item for row in rows for item in row.ok]
    runs = breakdown_view.panel(split, run_items)
    if validation:
        validated = quality_view.panel(fig.add_subplot(grid[-1, :]), rows, colour, MODEL_STYLES, variants)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=colour[x], edgecolor="black",
                             hatch=MODEL_HATCHES[variants.index(r.variant) % len(MODEL_HATCHES)])
               for x, r in enumerate(rows)]
    rows_of_legend = _legend(fig, handles, [r.label for r in rows])
    labelled = [(ax, labels) for ax, *_ in bar_panels] + [(split, breakdown_view.labels(run_items))]
    for _ in range(2):  # the layout makes room for the labels, which are then fitted to the slots it leaves
        fig.tight_layout(rect=(0, 0.027 + 0.017 * rows_of_legend, 1, 0.965))
        for ax, texts in labelled:
            plot_labels.fit(ax, texts)
    save_png(fig, path)
    drawn = {ax.get_title(): sum(isinstance(c, BarContainer) for c in ax.containers) or len(ax.lines)
             for ax in axes.flat}
    drawn[split.get_title()] = runs
    if validation:
        drawn[quality_view.PANEL_TITLE] = validated
    plt.close(fig)
    return drawn


def _legend(fig, handles: list, labels: list[str]) -> int:
    """The runs' legend below the panels, in the most columns (up to four, at 9 or 8 points) that fit the picture's
    width, else one; its rows."""
    renderer = fig.canvas.get_renderer()
    for columns, size in [(n, size) for n in range(min(4, len(labels)), 1, -1) for size in (9, 8)] + [(1, 9)]:
        legend = fig.legend(handles, labels, loc="lower center", ncol=columns, fontsize=size, frameon=False,
                            title="device + framework - model (AMD: reds/oranges, NVIDIA: greens, CPU: blues; "
                            "hatch / line style: model)", title_fontsize=9)
        if columns == 1 or legend.get_window_extent(renderer).width <= fig.bbox.width:
            return -(-len(labels) // columns)
        legend.remove()


def _bars(ax, rows: Sequence[Repeats], getter, missing: str, colour: dict[int, str], models: list[int]) -> None:
    """One bar per row at its median (utils.spec.metrics.figure_text above it) with min-max whiskers; a row without the
    figure says why (`missing`)."""
    for x, row in enumerate(rows):
        values = row.figures(getter)
        if not values:
            ax.text(x, 0, missing, ha="center", va="bottom", fontsize=8, rotation=90)
            continue
        mid = statistics.median(values)
        ax.bar(x, mid, color=colour[x], hatch=MODEL_HATCHES[models[x] % len(MODEL_HATCHES)], edgecolor="black",
               linewidth=0.6, label=row.label, yerr=[[mid - min(values)], [max(values) - mid]], capsize=4)
        ax.annotate(figure_text(mid), (x, max(values)), textcoords="offset points", xytext=(0, 3), ha="center",
                    fontsize=8)


def _clip_spikes(ax, items: Sequence[Loaded]) -> None:
    """Keep a first-step spike (compilation) from flattening the steady-state step times."""
    times = sorted(v for i in items for v in i.typed.series.step_time_s if v is not None)
    if times:
        p95 = times[int(0.95 * (len(times) - 1))]
        if times[-1] > 2 * p95:
            ax.set_ylim(0, 2 * p95)
            ax.text(0.01, 0.01, "y axis clipped at 2x p95", transform=ax.transAxes, fontsize=8, color="dimgray")


def save_png(fig, path: Path) -> None:
    with atomic_open(path, "wb") as out:
        fig.savefig(out, format="png")
