"""The comparison's report.md: workload, systems, results per model, frameworks side by side on the same layout,
each run's step time breakdown, the validation loss, each low precision against its BF16 twin and the time to train
(evaluate/comparison/quality.py, time_to_train.py), AMD vs NVIDIA, energy and cost with the decision per model and a projection
(evaluate/comparison/energy.py), strategies, scaling, fairness (the machine's too: throttling, node health, stragglers),
mock data, each run's checks and the FLOPs convention, stated rather than hidden."""

from __future__ import annotations

from typing import Sequence

from evaluate.comparison import acceptance as acceptance_view
from evaluate.comparison import breakdown as breakdown_view
from evaluate.comparison import energy as energy_view
from evaluate.comparison import experts as experts_view
from evaluate.comparison import frameworks as framework_view
from evaluate.comparison import prediction as prediction_view
from evaluate.comparison import quality as quality_view
from evaluate.comparison import time_to_train
from evaluate.comparison import scaling
from evaluate.comparison import projection
from evaluate.comparison import strategies as strategy_view
from evaluate.collect import Loaded
from evaluate.comparison.repeats import (FRAMEWORK_NAMES, PLATFORM_NAMES, Repeats, device_label, final_loss,
                                         median_or_none, memory, memory_kind, mfu, repeats_of, spread, title, tokens,
                                         tflops, workload)
from evaluate.validate import check_result, fairness
from utils.cli import markdown_text
from utils.machine.energy_cost import CostSettings
from utils.frameworks import NATIVE, TABLE
from utils.spec.metrics import FLOPS_CONVENTION, figure_text
from utils.spec.models import by_variant

LOSS = "{:.3f}".format  # losses near 11 part in the third decimal: not a figure's three significant digits


def systems_section(items: Sequence[Loaded]) -> list[str]:
    """One line per distinct system (platform, host and nodes); from Loaded.system, a plain dict (the result's own
    system section, else its run set's system.json)."""
    lines, seen = [], set()
    for item in items:
        s, platform = item.system, item.typed.platform
        host, gpu, sw = s.get("host") or {}, s.get("gpu") or {}, s.get("software") or {}
        key = (platform, host.get("hostname"), gpu.get("name"), tuple(s.get("node_names") or ()),
               item.nodes)
        if key in seen:
            continue
        seen.add(key)
        if not s:
            lines.append(f"- {PLATFORM_NAMES[platform]}: no system.json (run python3 -m evaluate.probe)")
            continue
        accel = (f"{gpu.get('count')} x {gpu.get('name')} per node, {gpu.get('memory_gib')} GiB each" if gpu.get("count")
                 else "no GPU")
        stack = ", ".join(f"{label} {sw[key]}" for label, key in (
            ("CUDA", "torch_cuda"), ("ROCm", "torch_hip"), ("torch", "torch"),
            ("megatron-core", "megatron_core"), ("Transformer Engine", "transformer_engine"), ("NeMo", "nemo"),
            ("Primus", "primus"), ("NCCL", "nccl"), ("RCCL", "rccl")) if sw.get(key))
        driver = f"driver {gpu['driver']}, " if gpu.get("driver") else ""
        lines.append(f"- **{PLATFORM_NAMES[platform]}** ({nodes_text(item.nodes, s, host)}): "
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


def results_table(rows: Sequence[Repeats]) -> list[str]:
    header = ("| Device | Stack | Framework | Strategy | Nodes | GPUs | TP/PP/DP/GA | tokens/s/GPU | TFLOP/s/GPU | "
              "MFU | Peak memory (GiB) | Final loss | Runs |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for row in rows:
        first = row.items[0].typed
        kinds = sorted({memory_kind(i.typed) for i in row.ok} - {"-"}) or ["-"]
        lines.append(
            f"| {row.device} | {row.stack} | {row.framework_text} | {row.strategy} | {row.nodes or '?'} | "
            f"{first.parallelism.num_gpus} | {'/'.join(map(str, row.layout))} | {spread(row.figures(tokens))} | "
            f"{spread(row.figures(tflops))} | {spread([100 * v for v in row.figures(mfu)])}"
            f"{'%' if row.figures(mfu) else ''} | {spread(row.figures(memory))} ({'/'.join(kinds)}) | "
            f"{spread(row.figures(final_loss), LOSS)} | {row.status()} |")
    return lines


def speedups(rows: Sequence[Repeats]) -> list[str]:
    """AMD over NVIDIA in tokens/s/GPU, per model, framework pair and strategy (successful runs only)."""
    lines = []
    for amd in (r for r in rows if r.platform == "amd"):
        for nvd in (r for r in rows if r.platform == "nvd"):
            if (amd.variant, amd.strategy, amd.layout, amd.nodes, amd.precision) != \
                    (nvd.variant, nvd.strategy, nvd.layout, nvd.nodes, nvd.precision):
                continue
            a, n = median_or_none(amd.figures(tokens)), median_or_none(nvd.figures(tokens))
            if a is None or n is None:
                continue
            lines.append(f"- {amd.device} + {amd.framework_text} is **{a / n:.2f}x** {nvd.device} + "
                         f"{nvd.framework_text} on {amd.model_name} ({figure_text(a)} vs {figure_text(n)} tokens/s/GPU"
                         f"{'' if amd.strategy == 'custom' else ', strategy ' + amd.strategy})")
    return lines


# The frameworks whose training loop is Megatron-LM's (megatron-core's layers and Megatron's LR warm-up): another
# framework's entry says what it cannot make equal to them (beside_megatron).
MEGATRON_LOOPS = {name for name, entry in TABLE.items()
                  if entry.warmup_convention == "megatron" and entry.memory_model == "megatron"}


# What the torch-native frameworks share with Megatron and what they cannot.
NATIVE_VS_MEGATRON = [
    f"Torch-native ({', '.join(NATIVE)}) and Megatron: equal by construction are the model's architecture (utils/spec/models.py), "
    "layout, batch, data and its sample order (megatron-core's dataset, train/common/megatron_data.py), seed and "
    "Megatron-LM's LR schedule and warm-up convention. They cannot be equal: the model is Hugging Face's "
    "implementation, without Megatron's fused kernels, and the torch-native settings (DP implementation, "
    "torch.compile, SAC, attention, ZeRO stage; see Frameworks on the same layout) trade memory, time and rounding "
    "their own way. So throughput compares as two ways to train the same workload, not as one kernel set against "
    "another.",
]


def mock_lines(items: Sequence[Loaded]) -> list[str]:
    lines = []
    for item in items:
        r = item.typed
        if r.training.mock_data or r.effective.extra.get("mock_data"):  # effective's read-back setting
            asked = "as requested" if r.training.mock_data else "ALTHOUGH REAL DATA WAS REQUESTED"
            lines.append(f"- **MOCK DATA**: {item.name} ({r.framework}, {r.model.display_name}) trained on "
                         f"synthetic tokens {asked}: its throughput stands, its losses mean nothing")
    return lines


def _escaped(value):
    """A JSON value with every string safe inside Markdown (utils.cli.markdown_text), the keys too (a section keyed
    by what it names, as acceptance's not_measured is, shows its keys); a key that is a name is left as it is, so
    the readers' lookups still find it. Depth is bounded by the readers (utils.files.parse_json)."""
    if isinstance(value, str):
        return markdown_text(value, 2000)
    if isinstance(value, dict):
        return {markdown_text(key, 2000) if isinstance(key, str) else key: _escaped(v) for key, v in value.items()}
    if isinstance(value, list) and any(isinstance(v, (str, dict, list)) for v in value):
        return [_escaped(v) for v in value]
    return value


def displayed(item: Loaded) -> Loaded:
    """The result as the report shows it: every text that came from a file (run ids, excerpts, device, host and
    framework strings) escaped for Markdown, its verdict (evaluate.gate) kept."""
    return Loaded(markdown_text(item.where, 1000), _escaped(item.result), _escaped(item.system),
                  [markdown_text(f, 1000) for f in item.failures])


def failed_lines(items: Sequence[Loaded]) -> list[str]:
    """Each result that says ok but fails validate (evaluate.gate), with its first reason: it is in no figure."""
    return [f"- **FAILED** {item.name}: {item.failures[0]} (counted failed: in no figure, ranking or decision)"
            for item in items if item.overturned]


def report(items: Sequence[Loaded], png_name: str | None, strategies_png: str | None = None,
           costs: CostSettings = CostSettings(), ask: projection.Ask | None = None,
           history: Sequence[str] = (),
           quality: quality_view.QualitySettings = quality_view.QualitySettings()) -> str:
    """report.md of results judged by evaluate.gate; checks on the results as read, everything shown from their
    Markdown-safe copies. history: the History section's lines (evaluate/history/section.py), when a store is
    given."""
    checks = [f for item in items for f in check_result(item)]
    items = [displayed(item) for item in items]
    found = fairness(items, quality.precision_comparison)
    rows = repeats_of(items)
    twins = quality_view.twins(rows)
    out = ["# TPrimat comparison", "", f"{len(items)} run(s) of {title(items)}.", ""] + quality_view.banner(quality, items)
    mocks = mock_lines(items)
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
    failed = failed_lines(items)
    if failed:
        out += ["Results that fail evaluate.validate's checks:", ""] + failed + [""]
    out += ["Peak memory per GPU: reserved = the allocator's peak reservation, device = device memory in use as the "
            "driver reports it (Primus), allocated = peak tensor allocation, host = peak resident host memory of the "
            "largest worker process (CPU runs, which have no device memory).", ""]
    out += acceptance_view.section(items)
    out += framework_view.section(items)
    out += breakdown_view.table([item for row in rows for item in row.ok])
    out += experts_view.section([item for row in rows for item in row.ok])
    out += prediction_view.section([item for row in rows for item in row.ok])
    out += quality_view.validation_section(rows) + quality_view.twin_section(
        twins, quality, lambda row: median_or_none(row.figures(tokens))) + time_to_train.section(rows)
    ups = speedups(rows)
    out += ["## AMD vs NVIDIA", ""] + (ups or ["- no AMD and NVIDIA runs of the same model and layout to compare"])
    out += acceptance_view.vendor_lines(items) + [""]
    orphans = [f"- no BF16 twin, quality unchecked, ranked nowhere as a win: {row.label}"
               for row in quality_view.orphans(rows, twins)]
    out += orphans + ([""] if orphans else [])
    out += energy_view.section(rows, costs, quality_view.unranked_rows(rows, twins, quality))
    entries = strategy_view.entries(rows)
    several = strategy_view.has_strategies(entries)
    if several:
        out += strategy_view.section(entries, strategies_png)
    if ask:
        out += projection.section(entries, ask, costs.project_tokens, None if several else strategies_png)
    out += scaling.section(scaled, FRAMEWORK_NAMES)
    out += list(history)
    out += ["## Fairness", ""]
    out += ([f"- {f.message}" for f in unfair] + ["", "The comparison above is UNFAIR where these differ."]
            if unfair else ["- every compared run shares model, sequence length, "
                            f"{'' if quality.precision_comparison else 'precision, '}steps, dataset "
                            "fingerprint and tokenizer fingerprint, fairness profile and workload conventions (init "
                            "std, padded vocabulary, EOD loss masking, sampler, NaN check, FP8 recipe), and runs on "
                            "the same number of nodes share the global batch"])
    out += [f"- note: {f.message}" for f in noted] + energy_view.fairness_lines(items) + [""]
    profiles = sorted({str(i.typed.training.fairness_profile) for i in items})
    out += [f"Fairness profile(s): {', '.join(profiles)} (utils/spec/fairness.py: spec = the original specification's "
            "table; tuned = the stacks' own DP overlap and fp32 gradient reduction).", ""]
    present = {i.typed.framework for i in items}
    if present & MEGATRON_LOOPS:  # each framework's own word on what it cannot make equal to them (its entry's)
        out += [line for name, entry in TABLE.items() if name in present and entry.beside_megatron
                for line in (entry.beside_megatron, "")]
    if present & set(NATIVE):
        out += NATIVE_VS_MEGATRON + [""]
    if mocks:
        out += ["## MOCK DATA", ""] + mocks + [""]
    if checks:
        out += ["## Run checks", ""] + [f"- {'FAIL' if f.fatal else 'warn'} {markdown_text(f.subject, 1000)}: "
                                        f"{f.check}: {markdown_text(f.message, 4000)}" for f in checks] + [""]
    flops = sorted({(i.typed.model.display_name, i.typed.training.seq_len, i.typed.performance.flops_per_token)
                    for i in items})
    out += ["## FLOPs convention", "", f"TFLOP/s/GPU is computed by TPrimat for every framework with one formula: "
            f"{FLOPS_CONVENTION}.", ""]
    out += [f"- {name}, SL {sl}: {f / 1e9:.2f} GFLOP per token" for name, sl, f in flops]
    out += ["", "MFU divides it by the device's dense peak at the run's precision (utils/machine/hardware.py); an unknown "
            "device has no MFU. The frameworks' own TFLOP/s figures use other conventions (NeMo counts attention "
            "without causal halving, +12.5% at SL 8192) and are kept only as raw fields in each result.", ""]
    if png_name:
        out += [f"![comparison]({png_name})", ""]
    return "\n".join(out)

