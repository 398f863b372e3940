"""Turn any set of results into one honest comparison: compare.png, report.md and a console summary.

    python3 -m evaluate.compare DIR_OR_ZIP... -o OUTDIR

Inputs are run directories, run-set directories, output.zip files or result JSON files, from one
machine or several. Runs of the same platform, device, framework, model, strategy, layout and node
count are repeats: their figures are shown as median [min-max]. Fairness problems (different
workload, data or tokenizer) and mock data are stated in the report, never hidden. Results of one
workload on several node counts also get a Scaling section (evaluate/scaling.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from evaluate import scaling, strategy_view
from evaluate.collect import CollectError, Loaded, load
from evaluate.validate import check_result, fairness
from utils.files import atomic_open
from utils.hardware import lookup_device
from utils.metrics import FLOPS_CONVENTION
from utils.models import by_variant

FRAMEWORK_NAMES = {"mega": "Megatron", "prim": "Primus", "nemo": "NeMo"}
PLATFORM_NAMES = {"amd": "AMD", "nvd": "NVIDIA", "cpu": "CPU"}
# AMD in reds and oranges, NVIDIA in greens and teals, CPU in blues: distinguishable at a glance.
PALETTES = {"amd": ("#C8102E", "#F28C28", "#8B1A1A", "#E8738A", "#B35900"),
            "nvd": ("#76B900", "#1B7F3B", "#00A3A3", "#A4D65E", "#0B5345"),
            "cpu": ("#1F77B4", "#6A5ACD", "#17BECF", "#7F7F7F", "#2C3E91")}
MODEL_STYLES = ("-", "--", ":", "-.")
MODEL_HATCHES = ("", "//", "..", "xx")


def device_label(item: Loaded) -> str:
    """Short device name: the peak table's canonical name, else what the probe reported."""
    if item.result["platform"] == "cpu":
        return "CPU"
    name = (item.system.get("gpu") or {}).get("name")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = lookup_device(name)
    return spec.name if spec else (name or f"unknown {PLATFORM_NAMES[item.result['platform']]} GPU")


@dataclass
class Row:
    """Repeats of one configuration: platform, device, framework, model, strategy, layout and nodes."""

    platform: str
    device: str
    framework: str
    variant: str
    strategy: str
    layout: tuple[int, int, int, int]
    nodes: int | None  # None: unknown (a result without a node count)
    items: list[Loaded] = field(default_factory=list)

    @property
    def ok(self) -> list[Loaded]:
        return [i for i in self.items if i.result["run"]["status"] == "ok"]

    @property
    def model_name(self) -> str:
        return by_variant(self.variant).display_name

    @property
    def short_model(self) -> str:
        spec = by_variant(self.variant)
        return spec.key.capitalize() + (" tiny" if spec.size == "tiny" else "")

    @property
    def label(self) -> str:
        strategy = "" if self.strategy == "custom" else f" [{self.strategy}]"
        nodes = f", {self.nodes} nodes" if self.nodes and self.nodes > 1 else ""
        return f"{self.device} + {FRAMEWORK_NAMES[self.framework]} - {self.model_name}{strategy}{nodes}"

    def figures(self, getter: Callable[[dict], float | None]) -> list[float]:
        """One figure per successful repeat (repeats without the figure are left out)."""
        return [v for v in (getter(i.result) for i in self.ok) if v is not None]

    def status(self) -> str:
        counts: dict[str, int] = {}
        for item in self.items:
            counts[item.result["run"]["status"]] = counts.get(item.result["run"]["status"], 0) + 1
        return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def tokens(r: dict) -> float | None:
    return r["performance"]["tokens_per_s_per_gpu"]


def tflops(r: dict) -> float | None:
    return r["performance"]["tflop_per_s_per_gpu"]


def mfu(r: dict) -> float | None:
    return r["performance"]["mfu"]


# The memory figure of a run, in order of preference, and its label: the allocator's peak reservation, device
# memory in use as the driver reports it (Primus), peak tensor allocation, and on the CPU (no device memory)
# the peak resident host memory of the largest worker process.
MEMORY_KINDS = (("peak_reserved_gib", "reserved"), ("peak_device_used_gib", "device"),
                ("peak_allocated_gib", "allocated"), ("peak_host_rss_gib", "host"))


def memory(r: dict) -> float | None:
    """Peak memory per GPU (per worker process on the CPU), the first kind of MEMORY_KINDS the run reports."""
    m = r["memory"]
    return next((m[key] for key, _ in MEMORY_KINDS if m.get(key) is not None), None)


def memory_kind(r: dict) -> str:
    m = r["memory"]
    return next((label for key, label in MEMORY_KINDS if m.get(key) is not None), "-")


def memory_title(items: Sequence[Loaded]) -> str:
    """The memory panel's title: per GPU, per worker process's host memory on the CPU, or both when mixed."""
    kinds = {memory_kind(i.result) for i in items} - {"-"}
    if kinds == {"host"}:
        return "Peak host memory per worker (resident, CPU)"
    return "Peak memory per GPU" + (" (CPU: host memory per worker)" if "host" in kinds else "")


def final_loss(r: dict) -> float | None:
    return next((v for v in reversed(r["series"]["loss"]) if v is not None), None)


def rows_of(items: Sequence[Loaded]) -> list[Row]:
    """Group repeats; rows ordered by model, platform, framework, strategy, layout, nodes."""
    rows: dict[tuple, Row] = {}
    for item in items:
        r, p = item.result, item.result["parallelism"]
        layout = (p["tp"], p["pp"], p["dp"], p["ga"])
        key = (r["model"]["variant"], r["platform"], device_label(item), r["framework"], p["strategy"], layout,
               item.nodes or 0)
        rows.setdefault(key, Row(r["platform"], key[2], r["framework"], key[0], p["strategy"], layout,
                                 item.nodes)).items.append(item)
    return [rows[k] for k in sorted(rows)]


def spread(values: list[float], fmt: str) -> str:
    """median [min-max] of repeats; a single value alone; "-" for none."""
    if not values:
        return "-"
    median = format(statistics.median(values), fmt)
    if len(values) == 1:
        return median
    return f"{median} [{format(min(values), fmt)}-{format(max(values), fmt)}]"


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# --- report --------------------------------------------------------------------------------------------


def workload(items: Sequence[Loaded]) -> dict[str, str]:
    """Each workload field with its value, or every distinct value when results disagree."""
    fields = {"Models": lambda r: r["model"]["display_name"], "Sequence length (tokens)": lambda r: r["training"]["seq_len"],
              "Global batch (sequences)": lambda r: r["training"]["gbs"], "Micro batch": lambda r: r["training"]["mbs"],
              "Precision": lambda r: r["training"]["precision"].upper(), "Steps": lambda r: r["training"]["steps"],
              "Steps left out as warm-up": lambda r: r["performance"]["warmup_skip"],
              "Dataset": lambda r: r["training"]["dataset"] or "MOCK DATA",
              "Seed": lambda r: r["training"]["seed"]}
    out = {}
    for label, getter in fields.items():
        values = list(dict.fromkeys(str(getter(i.result)) for i in items))
        out[label] = ", ".join(values)
    return out


def title(items: Sequence[Loaded]) -> str:
    w = workload(items)
    return (f"{w['Models']} | SL {w['Sequence length (tokens)']} | GBS {w['Global batch (sequences)']} | "
            f"{w['Precision']} | {w['Steps']} steps")


def systems_section(items: Sequence[Loaded]) -> list[str]:
    """One line per distinct system (platform, host and nodes)."""
    lines, seen = [], set()
    for item in items:
        s = item.system
        host, gpu, sw = s.get("host") or {}, s.get("gpu") or {}, s.get("software") or {}
        key = (item.result["platform"], host.get("hostname"), gpu.get("name"), tuple(s.get("node_names") or ()),
               item.nodes)
        if key in seen:
            continue
        seen.add(key)
        if not s:
            lines.append(f"- {PLATFORM_NAMES[item.result['platform']]}: no system.json (run python3 -m evaluate.probe)")
            continue
        accel = (f"{gpu.get('count')} x {gpu.get('name')} per node, {gpu.get('memory_gib')} GiB each" if gpu.get("count")
                 else "no GPU")
        stack = ", ".join(f"{label} {sw[key]}" for label, key in (
            ("CUDA", "torch_cuda"), ("ROCm", "torch_hip"), ("torch", "torch"),
            ("megatron-core", "megatron_core"), ("Transformer Engine", "transformer_engine"), ("NeMo", "nemo"),
            ("Primus", "primus"), ("NCCL", "nccl"), ("RCCL", "rccl")) if sw.get(key))
        driver = f"driver {gpu['driver']}, " if gpu.get("driver") else ""
        lines.append(f"- **{PLATFORM_NAMES[item.result['platform']]}** ({nodes_text(item.nodes, s, host)}): "
                     f"{accel}; {driver}{stack}; CPU {host.get('cpu_model')} "
                     f"({host.get('cpu_cores')} cores), {host.get('memory_gib')} GiB RAM; {host.get('os')}, "
                     f"kernel {host.get('kernel')}; interconnect: {interconnect_text(s.get('interconnect'))}")
    return lines


def nodes_text(nodes: int | None, system: dict, host: dict) -> str:
    """"2 nodes: gpu-01, gpu-02" (names from the probe), or the probing host's name with the count."""
    names = system.get("node_names") or []
    count = f"{nodes} node{'s' if nodes != 1 else ''}" if nodes else "nodes unknown"
    return f"{count}: {', '.join(names)}" if names else f"{host.get('hostname') or '?'}, {count}"


def interconnect_text(interconnect: dict | None) -> str:
    """The probe's adapters (InfiniBand, or RoCE where the link layer is Ethernet), else its interfaces."""
    if not interconnect:
        return "not recorded"
    adapters = interconnect.get("infiniband") or []
    if adapters:
        described = []
        for adapter in adapters:
            facts = [{"Ethernet": "RoCE"}.get(k, k) for k in adapter.get("link_layers") or []] + (adapter.get("rates") or [])
            described.append(adapter["device"] + (f" ({', '.join(facts)})" if facts else ""))
        return ", ".join(described)
    interfaces = interconnect.get("interfaces") or []
    if interfaces:
        return "no InfiniBand/RoCE adapter; " + ", ".join(
            f"{i['name']} ({i['speed_mbps'] / 1000:g} Gb/s)" if i.get("speed_mbps") else i["name"] for i in interfaces)
    return "no InfiniBand/RoCE adapter seen"


def results_table(rows: Sequence[Row]) -> list[str]:
    header = ("| Device | Framework | Strategy | Nodes | GPUs | TP/PP/DP/GA | tokens/s/GPU | TFLOP/s/GPU | MFU | "
              "Peak memory (GiB) | Final loss | Runs |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for row in rows:
        first = row.items[0].result
        kinds = sorted({memory_kind(i.result) for i in row.ok} - {"-"}) or ["-"]
        lines.append(
            f"| {row.device} | {FRAMEWORK_NAMES[row.framework]} | {row.strategy} | {row.nodes or '?'} | "
            f"{first['parallelism']['num_gpus']} | {'/'.join(map(str, row.layout))} | {spread(row.figures(tokens), ',.0f')} | "
            f"{spread(row.figures(tflops), '.1f')} | {spread([100 * v for v in row.figures(mfu)], '.1f')}"
            f"{'%' if row.figures(mfu) else ''} | {spread(row.figures(memory), '.1f')} ({'/'.join(kinds)}) | "
            f"{spread(row.figures(final_loss), '.3f')} | {row.status()} |")
    return lines


def speedups(rows: Sequence[Row]) -> list[str]:
    """AMD over NVIDIA in tokens/s/GPU, per model, framework pair and strategy (successful runs only)."""
    lines = []
    for amd in (r for r in rows if r.platform == "amd"):
        for nvd in (r for r in rows if r.platform == "nvd"):
            if (amd.variant, amd.strategy, amd.layout, amd.nodes) != (nvd.variant, nvd.strategy, nvd.layout, nvd.nodes):
                continue
            a, n = median_or_none(amd.figures(tokens)), median_or_none(nvd.figures(tokens))
            if a is None or n is None:
                continue
            lines.append(f"- {amd.device} + {FRAMEWORK_NAMES[amd.framework]} is **{a / n:.2f}x** {nvd.device} + "
                         f"{FRAMEWORK_NAMES[nvd.framework]} on {amd.model_name} ({a:,.0f} vs {n:,.0f} tokens/s/GPU"
                         f"{'' if amd.strategy == 'custom' else ', strategy ' + amd.strategy})")
    return lines


# What TPrimat can and cannot make equal between NeMo 2.3 and the Megatron-based frameworks (mega, prim).
NEMO_VS_MEGATRON = [
    "NeMo and Megatron (mega, prim): equal by construction are the model, layout, batch, optimizer, LR peak and "
    "decay, data and its sample order (Megatron's sequential sampler in all three), the padded vocabulary, "
    "EOD loss masking (off), the init std (0.02), the NaN check (off), the FP8 recipe and the fairness profile's "
    "DDP settings. They cannot be equal: NeMo 2.3's CosineAnnealing warm-up (step k at LR x k/(W+1), where "
    "Megatron runs step k at (k-1)/W), NeMo's own weight initialisation order and RNG use (mega draws each "
    "weight per logical parameter, Megatron/Primus per rank), and NeMo's training loop (Lightning, its own "
    "data-module wrapping). So throughput compares, and loss curves agree in trend but not step for step; only "
    "mega and prim (both Megatron-LM's loop) can be expected to start from close losses for the same seed and data.",
]


def mock_lines(items: Sequence[Loaded]) -> list[str]:
    lines = []
    for item in items:
        r = item.result
        if r["training"]["mock_data"] or r["effective"].get("mock_data"):
            asked = "as requested" if r["training"]["mock_data"] else "ALTHOUGH REAL DATA WAS REQUESTED"
            lines.append(f"- **MOCK DATA**: {item.name} ({r['framework']}, {r['model']['display_name']}) trained on "
                         f"synthetic tokens {asked}: its throughput stands, its losses mean nothing")
    return lines


def report(items: Sequence[Loaded], rows: Sequence[Row], png_name: str | None,
           strategies_png: str | None = None) -> str:
    out = ["# TPrimat comparison", "", f"{len(items)} run(s) of {title(items)}.", ""]
    mocks, found = mock_lines(items), fairness(items)
    unfair, noted = [f for f in found if f.fatal], [f for f in found if not f.fatal]
    if mocks:
        out += ["**MOCK DATA IN THIS COMPARISON** - see below.", ""]
    if unfair:
        out += ["**UNFAIR COMPARISON**: the runs did not all do the same work - see Fairness.", ""]
    scaled = scaling.groups(items, device_label)
    if scaled:
        out += [f"- {line}." for line in scaling.headlines(scaled, FRAMEWORK_NAMES)] + [""]
    out += ["## Workload", ""] + [f"- {k}: {v}" for k, v in workload(items).items()] + [""]
    out += ["## Systems", ""] + systems_section(items) + [""]
    out += ["## Results", "", "Figures are over the steady-state steps (after the warm-up steps) of each successful "
            "run; repeats show median [min-max]. tokens/s/GPU is the headline figure.", ""]
    for variant in dict.fromkeys(r.variant for r in rows):
        out += [f"### {by_variant(variant).display_name}", ""] + results_table([r for r in rows if r.variant == variant]) + [""]
    out += ["Peak memory per GPU: reserved = the allocator's peak reservation, device = device memory in use as the "
            "driver reports it (Primus), allocated = peak tensor allocation, host = peak resident host memory of the "
            "largest worker process (CPU runs, which have no device memory).", ""]
    ups = speedups(rows)
    out += ["## AMD vs NVIDIA", ""] + (ups or ["- no AMD and NVIDIA runs of the same model and layout to compare"]) + [""]
    entries = strategy_view.entries(rows, tokens, memory, FRAMEWORK_NAMES)
    if strategy_view.has_strategies(entries):
        out += strategy_view.section(entries, strategies_png)
    out += scaling.section(scaled, FRAMEWORK_NAMES)
    out += ["## Fairness", ""]
    out += ([f"- {f.message}" for f in unfair] + ["", "The comparison above is UNFAIR where these differ."]
            if unfair else ["- every compared run shares model, sequence length, precision, steps, dataset "
                            "fingerprint and tokenizer fingerprint, fairness profile and workload conventions (init "
                            "std, padded vocabulary, EOD loss masking, sampler, NaN check, FP8 recipe), and runs on "
                            "the same number of nodes share the global batch"])
    out += [f"- note: {f.message}" for f in noted] + [""]
    profiles = sorted({str(i.result["training"].get("fairness_profile")) for i in items})
    out += [f"Fairness profile(s): {', '.join(profiles)} (utils/fairness.py: spec = the original specification's "
            "table; tuned = the stacks' own DP overlap and fp32 gradient reduction).", ""]
    if {"nemo", "mega"} <= {i.result["framework"] for i in items} or \
            {"nemo", "prim"} <= {i.result["framework"] for i in items}:
        out += NEMO_VS_MEGATRON + [""]
    if mocks:
        out += ["## MOCK DATA", ""] + mocks + [""]
    checks = [f for item in items for f in check_result(item)]
    if checks:
        out += ["## Run checks", ""] + [f"- {'FAIL' if f.fatal else 'warn'} {f.subject}: {f.check}: {f.message}"
                                        for f in checks] + [""]
    flops = sorted({(i.result["model"]["display_name"], i.result["training"]["seq_len"],
                     i.result["performance"]["flops_per_token"]) for i in items})
    out += ["## FLOPs convention", "", f"TFLOP/s/GPU is computed by TPrimat for every framework with one formula: "
            f"{FLOPS_CONVENTION}.", ""]
    out += [f"- {name}, SL {sl}: {f / 1e9:.2f} GFLOP per token" for name, sl, f in flops]
    out += ["", "MFU divides it by the device's dense peak at the run's precision (utils/hardware.py); an unknown "
            "device has no MFU. The frameworks' own TFLOP/s figures use other conventions (NeMo counts attention "
            "without causal halving, +12.5% at SL 8192) and are kept only as raw fields in each result.", ""]
    if png_name:
        out += [f"![comparison]({png_name})", ""]
    return "\n".join(out)


# --- plot ------------------------------------------------------------------------------------------------


def colours(rows: Sequence[Row]) -> dict[int, str]:
    """A colour per row: the platform's palette, one shade per framework/strategy/device."""
    out, seen = {}, {}
    for index, row in enumerate(rows):
        key = (row.platform, row.device, row.framework, row.strategy, row.layout)
        palette = PALETTES[row.platform]
        shade = seen.setdefault(key, len({k for k in seen if k[0] == row.platform}) % len(palette))
        out[index] = palette[shade]
    return out


def plot(items: Sequence[Loaded], rows: Sequence[Row], path: Path) -> dict[str, int]:
    """Draw the six panels into path; returns each panel's title with its number of bars or lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.container import BarContainer
    from matplotlib.ticker import MaxNLocator

    colour = colours(rows)
    variants = list(dict.fromkeys(r.variant for r in rows))
    fig, axes = plt.subplots(2, 3, figsize=(19, 11), dpi=100)
    devices = " vs ".join(dict.fromkeys(r.device for r in rows))
    fig.suptitle(f"TPrimat: {devices}\n{title(items)}", fontsize=14, fontweight="bold")
    bar_panels = ((axes[0, 0], tokens, "tokens/s/GPU (higher is better; median, min-max bars)", "tokens/s per GPU", ",.0f"),
                  (axes[0, 1], tflops, "TFLOP/s/GPU (TPrimat's formula)", "TFLOP/s per GPU", ".3g"),
                  (axes[0, 2], memory, memory_title(items), "GiB", ".1f"))
    labels = [f"{r.device.removeprefix('AMD ').removeprefix('NVIDIA ')}\n{FRAMEWORK_NAMES[r.framework]}\n"
              f"{r.short_model}" + ("" if r.strategy == "custom" else f"\n{r.strategy}") for r in rows]
    for ax, getter, name, unit, fmt in bar_panels:
        for x, row in enumerate(rows):
            values = row.figures(getter)
            if not values:
                ax.text(x, 0, "not measured", ha="center", va="bottom", fontsize=8, rotation=90)
                continue
            mid = statistics.median(values)
            ax.bar(x, mid, color=colour[x], hatch=MODEL_HATCHES[variants.index(row.variant) % len(MODEL_HATCHES)],
                   edgecolor="black", linewidth=0.6, label=row.label,
                   yerr=[[mid - min(values)], [max(values) - mid]], capsize=4)
            ax.annotate(format(mid, fmt), (x, max(values)), textcoords="offset points", xytext=(0, 3),
                        ha="center", fontsize=8)
        ax.set_title(name, fontsize=12)
        ax.set_ylabel(unit)
        ax.set_xticks(range(len(rows)), labels, fontsize=8 if len(rows) <= 8 else 6.5)
        ax.margins(y=0.12)
        ax.grid(axis="y", alpha=0.3)
    line_panels = ((axes[1, 0], "loss", "Training loss", "loss"), (axes[1, 1], "lr", "Learning rate", "learning rate"),
                   (axes[1, 2], "step_time_s", "Step time", "seconds per step"))
    skip = max(i.result["performance"]["warmup_skip"] for i in items)
    for ax, key, name, unit in line_panels:
        for x, row in enumerate(rows):
            for n, item in enumerate(row.items):
                series = item.result["series"]
                ax.plot(series["step"], [v if v is not None else float("nan") for v in series[key]], color=colour[x],
                        linestyle=MODEL_STYLES[variants.index(row.variant) % len(MODEL_STYLES)], linewidth=1.4,
                        alpha=0.9 if n == 0 else 0.5)
        if skip:
            ax.axvspan(0.5, skip + 0.5, color="gray", alpha=0.12, lw=0)
        ax.set_title(name, fontsize=12)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
    axes[1, 2].text(0.99, 0.99, f"grey: first {skip} steps, left out of the figures", transform=axes[1, 2].transAxes,
                    ha="right", va="top", fontsize=8, color="dimgray")
    _clip_spikes(axes[1, 2], items)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=colour[x], edgecolor="black",
                             hatch=MODEL_HATCHES[variants.index(r.variant) % len(MODEL_HATCHES)]) for x, r in enumerate(rows)]
    fig.legend(handles, [r.label for r in rows], loc="lower center", ncol=min(4, len(rows)), fontsize=9,
               frameon=False, title="device + framework - model (AMD: reds/oranges, NVIDIA: greens, CPU: blues; "
               "hatch / line style: model)", title_fontsize=9)
    rows_of_legend = -(-len(rows) // min(4, len(rows)))
    fig.tight_layout(rect=(0, 0.04 + 0.025 * rows_of_legend, 1, 0.95))
    _save(fig, path)
    drawn = {ax.get_title(): sum(isinstance(c, BarContainer) for c in ax.containers) or len(ax.lines)
             for ax in axes.flat}
    plt.close(fig)
    return drawn


def _clip_spikes(ax, items: Sequence[Loaded]) -> None:
    """Keep a first-step spike (compilation) from flattening the steady-state step times."""
    times = sorted(v for i in items for v in i.result["series"]["step_time_s"] if v is not None)
    if times:
        p95 = times[int(0.95 * (len(times) - 1))]
        if times[-1] > 2 * p95:
            ax.set_ylim(0, 2 * p95)
            ax.text(0.01, 0.01, "y axis clipped at 2x p95", transform=ax.transAxes, fontsize=8, color="dimgray")


def _save(fig, path: Path) -> None:
    with atomic_open(path, "wb") as out:
        fig.savefig(out, format="png")


def write_text(path: Path, text: str) -> None:
    with atomic_open(path, encoding="utf-8") as out:
        out.write(text)


def compare(inputs: Sequence[str | Path], outdir: Path) -> str:
    """Write compare.png, report.md (and compare-strategies.png with several strategies); returns the report."""
    items = load(inputs)
    if not items:
        raise CollectError(f"no result.json under {', '.join(map(str, inputs))}; run a benchmark or extract first")
    rows = rows_of(items)
    outdir.mkdir(parents=True, exist_ok=True)
    plot(items, rows, outdir / "compare.png")
    entries = strategy_view.entries(rows, tokens, memory, FRAMEWORK_NAMES)
    strategies_png = None
    if strategy_view.has_strategies(entries):
        strategies_png = "compare-strategies.png"
        strategy_view.plot(entries, outdir / strategies_png, PALETTES, _save)
    text = report(items, rows, "compare.png", strategies_png)
    write_text(outdir / "report.md", text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m evaluate.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="DIR_OR_ZIP", help="run directories, run sets, output.zip files")
    parser.add_argument("-o", "--output", required=True, type=Path, metavar="OUTDIR", help="folder for compare.png and report.md")
    args = parser.parse_args(argv)
    try:
        text = compare(args.inputs, args.output)
    except CollectError as err:
        print(f"evaluate.compare: {err}", file=sys.stderr)
        return 2
    print(text)
    print(f"\nwrote {args.output / 'compare.png'} and {args.output / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
