"""report.md's energy and cost: energy per token and cost per million tokens per configuration, the AMD vs NVIDIA
decision per model, a linear projection to PROJECT_TOKENS, and the fairness lines on the machine (steady-state
throttling, node health, stragglers).

Every formula is utils/machine/energy_cost.py's; a configuration's figures are medians over its successful repeats (those
that measured energy, for the energy figures). A figure that was not measured reads "not measured", with why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from evaluate.collect import Loaded
from evaluate.comparison.repeats import PLATFORM_NAMES, Repeats, median_or_none, tokens
from evaluate.machine_checks import node_health, straggler, throttling
from utils.machine.energy_cost import (FLAGS, PRICE_KNOBS, PROJECT_KNOB, CostSettings, Energy, Projection,
                                       cost_per_million_tokens, duration_text, energy_of, project, ratio)
from utils.spec.metrics import figure_text
from utils.spec.models import by_variant
from utils.spec.result_types import Section

NOT_MEASURED = "not measured"
VENDORS = ("amd", "nvd")


def energy(r: Section) -> Energy:
    """The result's energy figures, by utils.machine.energy_cost's one formula; that reads a result's plain telemetry
    section, the only part of the result it reads, so only that section is made plain again."""
    return energy_of({"telemetry": r.telemetry.as_dict() if r.telemetry else None})


def tokens_per_joule(r: Section) -> float | None:
    return energy(r).tokens_per_joule


def wh_per_million_tokens(r: Section) -> float | None:
    return energy(r).wh_per_million_tokens


def mean_power_w(r: Section) -> float | None:
    return energy(r).mean_power_w


def total_tokens_per_s(r: Section) -> float | None:
    return r.performance.tokens_per_s


def cost_getter(costs: CostSettings) -> Callable[[Section], float | None]:
    """A result's cost per million tokens at its platform's price; None without a price (or a throughput)."""
    def cost(r: Section) -> float | None:
        price, rate = costs.price(r.platform), r.performance.tokens_per_s
        return None if price is None or not rate else cost_per_million_tokens(price, r.parallelism.num_gpus, rate)
    return cost


def money(value: float) -> str:
    return f"{value:,.2f}" if value >= 0.01 else f"{value:.2g}"


@dataclass(frozen=True)
class Figures:
    """One configuration's figures for the energy and cost sections: medians over its successful repeats."""

    row: Repeats
    num_gpus: int
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tokens_per_joule: float | None
    wh_per_million_tokens: float | None
    price: float | None  # per GPU-hour, the user's for this platform
    why: str | None  # why no energy figure (set exactly when tokens_per_joule is None)
    measured: int  # successful repeats with an energy figure
    methods: tuple[str, ...]  # how their energy was measured (counter, power_integral)

    @property
    def cost_per_million_tokens(self) -> float | None:
        return None if self.price is None else cost_per_million_tokens(self.price, self.num_gpus, self.tokens_per_s)

    def projection(self, tokens_count: float) -> Projection:
        return project(tokens_count, self.tokens_per_s, self.num_gpus, self.wh_per_million_tokens, self.price)


def figures_of(row: Repeats, costs: CostSettings) -> Figures | None:
    """The row's figures; None when no successful repeat has a throughput."""
    rate, per_gpu = median_or_none(row.figures(total_tokens_per_s)), median_or_none(row.figures(tokens))
    if rate is None or per_gpu is None:
        return None
    energies = [energy(item.typed) for item in row.ok]
    measured = [e for e in energies if e.tokens_per_joule is not None]
    whys = list(dict.fromkeys(e.why for e in energies if e.why))
    return Figures(row, row.ok[0].typed.parallelism.num_gpus, rate, per_gpu,
                   median_or_none([e.tokens_per_joule for e in measured]),  # type: ignore[misc]
                   median_or_none([e.wh_per_million_tokens for e in measured]),  # type: ignore[misc]
                   costs.price(row.platform), None if measured else "; ".join(whys), len(measured),
                   tuple(sorted({e.method for e in measured if e.method})))


def cost_text(fig: Figures) -> str:
    """The cost per million tokens, or why there is none."""
    if fig.row.platform not in PRICE_KNOBS:
        return "- (no price for the CPU)"
    value = fig.cost_per_million_tokens
    return f"no price ({PRICE_KNOBS[fig.row.platform]})" if value is None else money(value)


def energy_cell(value: float | None) -> str:
    return NOT_MEASURED if value is None else figure_text(value)


def energy_table(found: Sequence[Figures], costs: CostSettings) -> list[str]:
    header = ("| Device | Framework | Strategy | Nodes | GPUs | tokens/s/GPU | Mean power per device (W) | tokens per "
              "joule | Wh per million tokens | Energy from |")
    header += " Cost per million tokens |" if costs.any_price else ""
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for fig in found:
        row = fig.row
        power = median_or_none(row.figures(mean_power_w))
        source = (", ".join(fig.methods).replace("power_integral", "power integral") +
                  ("" if fig.measured == len(row.ok) else f" ({fig.measured} of {len(row.ok)} runs)")) \
            if fig.measured else "-"
        lines.append(f"| {row.device} | {row.framework_text} | {row.strategy} | {row.nodes or '?'} | {fig.num_gpus} | "
                     f"{figure_text(fig.tokens_per_s_per_gpu)} | {energy_cell(power)} | "
                     f"{energy_cell(fig.tokens_per_joule)} | {energy_cell(fig.wh_per_million_tokens)} | {source} |"
                     + (f" {cost_text(fig)} |" if costs.any_price else ""))
    return lines


def energy_section(rows: Sequence[Repeats], costs: CostSettings) -> list[str]:
    """Energy per token (and, with prices, cost per million tokens) per configuration, model by model."""
    out = ["## Energy and cost", "",
           "Energy is what the run's devices drew over the steady-state steps (GPU boards as NVML / amdsmi read them; "
           "on the CPU the RAPL package), from each device's energy counter or else its sampled power integrated "
           "over time; it leaves out the host, the network and cooling. Figures are medians over the successful "
           "repeats that measured them."]
    if costs.any_price:
        out += ["Cost per million tokens = price per GPU-hour x GPUs x (1e6 / tokens/s) / 3600, at the prices "
                f"given: AMD {_price(costs.price_amd)}, NVIDIA {_price(costs.price_nvd)}."]
    else:
        out += [f"No cost: no price given ({PRICE_KNOBS['amd']} / {PRICE_KNOBS['nvd']} in config.env, or "
                f"{FLAGS[PRICE_KNOBS['amd']]} / {FLAGS[PRICE_KNOBS['nvd']]})."]
    out.append("")
    found = [f for f in (figures_of(row, costs) for row in rows) if f is not None]
    if not found:
        return out + ["- no successful run to show", ""]
    for variant in dict.fromkeys(f.row.variant for f in found):
        out += [f"### {by_variant(variant).display_name}", ""]
        out += energy_table([f for f in found if f.row.variant == variant], costs) + [""]
    unmeasured = [f"- {NOT_MEASURED}: {f.row.label}: {f.why}" for f in found if f.why]
    return out + (unmeasured + [""] if unmeasured else [])


def _price(value: float | None) -> str:
    return "not given" if value is None else f"{value:g} per GPU-hour"


def best(rows: Sequence[Repeats], costs: CostSettings, platform: str, unranked: Sequence[Repeats] = ()
         ) -> Figures | None:
    """The platform's configuration with the highest median tokens/s/GPU among rows, none of `unranked` (a low
    precision flagged against its BF16 twin: evaluate/comparison/quality.py)."""
    found = [f for f in (figures_of(row, costs) for row in rows if row.platform == platform
                         and not any(row is skipped for skipped in unranked)) if f is not None]
    return max(found, key=lambda f: f.tokens_per_s_per_gpu, default=None)


def decision_table(amd: Figures, nvd: Figures) -> list[str]:
    """tokens/s/GPU, tokens per joule, Wh per million tokens and cost, AMD and NVIDIA side by side, with AMD/NVIDIA."""
    rows = (("tokens/s/GPU (higher is better)", amd.tokens_per_s_per_gpu, nvd.tokens_per_s_per_gpu, figure_text),
            ("tokens per joule (higher is better)", amd.tokens_per_joule, nvd.tokens_per_joule, figure_text),
            ("Wh per million tokens (lower is better)", amd.wh_per_million_tokens, nvd.wh_per_million_tokens,
             figure_text),
            ("cost per million tokens (lower is better)", amd.cost_per_million_tokens, nvd.cost_per_million_tokens,
             money))
    lines = ["| Figure | AMD | NVIDIA | AMD / NVIDIA |", "|---|---|---|---|"]
    for label, a, n, fmt in rows:
        missing = cost_text if label.startswith("cost") else (lambda fig: f"{NOT_MEASURED} ({fig.why})")
        shown = [fmt(v) if v is not None else missing(fig) for v, fig in ((a, amd), (n, nvd))]
        r = ratio(a, n)
        lines.append(f"| {label} | {shown[0]} | {shown[1]} | {'-' if r is None else f'{r:.2f}x'} |")
    return lines


def which(fig: Figures) -> str:
    row = fig.row
    tp, pp, dp, ga = row.layout
    nodes = f"{row.nodes} node{'s' if row.nodes != 1 else ''}" if row.nodes else "nodes unknown"
    strategy = "" if row.strategy == "custom" else f", strategy {row.strategy}"
    return (f"{row.device} + {row.framework_text}, TP {tp} / PP {pp} / DP {dp} / GA {ga}, {fig.num_gpus} GPUs, "
            f"{nodes}{strategy} ({row.status()})")


def decision_section(rows: Sequence[Repeats], costs: CostSettings, unranked: Sequence[Repeats] = ()) -> list[str]:
    """Per model, the best run of each vendor side by side."""
    out = ["## Decision: AMD vs NVIDIA", "",
           "For each model, the best configuration of each vendor (highest median tokens/s/GPU) side by side; the "
           "ratio is AMD / NVIDIA: above 1 AMD is higher, which is better for tokens/s/GPU and tokens per joule and "
           "worse for Wh and cost per million tokens.", ""]
    decided = False
    for variant in dict.fromkeys(r.variant for r in rows):
        mine = [r for r in rows if r.variant == variant]
        amd, nvd = best(mine, costs, "amd", unranked), best(mine, costs, "nvd", unranked)
        if amd is None or nvd is None:
            continue
        decided = True
        out += [f"### {by_variant(variant).display_name}", "", f"- AMD: {which(amd)}", f"- NVIDIA: {which(nvd)}", ""]
        out += decision_table(amd, nvd) + [""]
    return out if decided else out + ["- no model has a successful AMD and a successful NVIDIA run to decide between",
                                      ""]


def projection_section(rows: Sequence[Repeats], costs: CostSettings) -> list[str]:
    """Time, GPU-hours, energy and cost of PROJECT_TOKENS tokens at each configuration's measured rate."""
    if costs.project_tokens is None:
        return [f"No projection: set {PROJECT_KNOB} (e.g. 1e12) or {FLAGS[PROJECT_KNOB]} to project time, "
                "GPU-hours, energy and cost to a training run of that many tokens.", ""]
    count = costs.project_tokens
    shown = re.sub(r"e\+?0*(?=\d)", "e", f"{count:.3g}")  # 1e+09 -> 1e9, as PROJECT_TOKENS is written
    out = [f"## Projection: {shown} tokens (linear, from the measured runs)", "",
           f"A linear projection from each measured run: {shown} tokens at its median steady-state tokens/s on its "
           "own GPU count, energy at its measured Wh per million tokens, cost at the price per GPU-hour. It leaves out "
           "what a long run adds (checkpoints, evaluation, restarts, data loading at scale) and energy beyond the "
           "devices sampled (host, network, cooling).", "",
           "| Device | Framework | Model | Strategy | GPUs | Time | GPU-hours | Energy (MWh) | Cost |",
           "|---|---|---|---|---|---|---|---|---|"]
    for fig in (f for f in (figures_of(row, costs) for row in rows) if f is not None):
        p = fig.projection(count)
        energy = NOT_MEASURED if p.energy_mwh is None else figure_text(p.energy_mwh)
        money_text = cost_text(fig) if p.cost is None else money(p.cost)
        out.append(f"| {fig.row.device} | {fig.row.framework_text} | {fig.row.model_name} | {fig.row.strategy} | "
                   f"{fig.num_gpus} | {duration_text(p.seconds)} | {figure_text(p.gpu_hours)} | {energy} | "
                   f"{money_text} |")
    return out + [""]


def section(rows: Sequence[Repeats], costs: CostSettings, unranked: Sequence[Repeats] = ()) -> list[str]:
    """report.md's energy, decision (never won by an `unranked` configuration) and projection sections."""
    return energy_section(rows, costs) + decision_section(rows, costs, unranked) + projection_section(rows, costs)


def fairness_lines(items: Sequence[Loaded]) -> list[str]:
    """The Fairness section's lines on the machine: each run that throttled during its steady state, ran on a node
    with health problems, or had a straggler, naming its side."""
    out = []
    for item in items:
        side = f"the {PLATFORM_NAMES.get(item.typed.platform, '?')} side ({item.name})"
        said = (("throttled during its steady state, so its figures were measured throttled", throttling(item.typed)),
                ("ran on a node with {} health problem(s)", node_health(item.system)),
                ("had a straggler", straggler(item.typed)))
        out += [f"- {side} {what.format(len(found))}: " + "; ".join(p.message for p in found)
                for what, found in said if found]
    return out
