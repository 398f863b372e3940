"""Results grouped into repeats of one configuration, and the figures evaluate.compare shows of them.

Runs of the same platform, device, stack, framework, model, strategy, layout, node count and torch-native settings
are repeats: their figures are shown as median [min-max] (`spread`) over the successful ones. `workload` and
`title` say what the compared runs did, for the report and the plot alike.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Sequence

from evaluate import native_settings
from evaluate.collect import Loaded
from utils.frameworks import TABLE
from utils.machine.hardware import find_device
from utils.spec import precision as precisions
from utils.spec.metrics import figure_text
from utils.spec.models import by_variant
from utils.spec.result_types import Section, typed

FRAMEWORK_NAMES = {name: entry.display_name for name, entry in TABLE.items()}
PLATFORM_NAMES = {"amd": "AMD", "nvd": "NVIDIA", "cpu": "CPU"}


def device_label(item: Loaded) -> str:
    """Short device name: the peak table's canonical name, else what the probe reported."""
    platform = item.typed.platform
    if platform == "cpu":
        return "CPU"
    name = (item.system.get("gpu") or {}).get("name")  # Loaded.system: the result's own, else its run set's system.json
    spec = find_device(name)
    return spec.name if spec else (name or f"unknown {PLATFORM_NAMES[platform]} GPU")


@dataclass
class Repeats:
    """Repeats of one configuration: platform, device, framework, model, strategy, layout and nodes."""

    platform: str
    device: str
    framework: str
    variant: str
    strategy: str
    layout: tuple[int, int, int, int]
    nodes: int | None  # None: unknown (a result without a node count)
    settings: str = "-"  # the torch-native settings (evaluate/native_settings.py); "-" for the other frameworks
    stack: str = "-"  # the stack's name (Loaded.stack); two stacks of one vendor are two configurations
    precision: str = "bf16"  # precision_of: a run in bf16 and its twin in fp8 are two configurations
    items: list[Loaded] = field(default_factory=list)

    @property
    def ok(self) -> list[Loaded]:
        return [i for i in self.items if i.ok]

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
        stack = "" if self.stack == "-" else f" on {self.stack}"
        return f"{self.device} + {self.framework_text}{stack} - {self.model_name}{strategy}{nodes}"

    @property
    def framework_text(self) -> str:
        """The framework, with its torch-native settings where it has them."""
        return FRAMEWORK_NAMES[self.framework] + ("" if self.settings == "-" else f" ({self.settings})") + self.low_text

    @property
    def low_text(self) -> str:
        """", fp8 (delayed)" for a precision below 16 bits, which names its row beside its BF16 twin; else ""."""
        return f", {self.precision}" if self.precision.split()[0] in precisions.LOW else ""

    def figures(self, getter: Callable[[Section], float | None]) -> list[float]:
        return figures(self.items, getter)

    def status(self) -> str:
        return statuses(self.items)


def figures(items: Sequence[Loaded], getter: Callable[[Section], float | None]) -> list[float]:
    """One figure (getter of the typed result) per successful repeat that passes validate (evaluate.gate); repeats
    without the figure are left out."""
    return [v for v in (getter(i.typed) for i in items if i.ok) if v is not None]


def statuses(items: Sequence[Loaded]) -> str:
    """How the repeats ended, as validate judged them (evaluate.gate): "2 ok, 1 failed"."""
    counts: dict[str, int] = {}
    for item in items:
        counts[item.verdict] = counts.get(item.verdict, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def tokens(r: Section) -> float | None:
    return r.performance.tokens_per_s_per_gpu


def tflops(r: Section) -> float | None:
    return r.performance.tflop_per_s_per_gpu


def mfu(r: Section) -> float | None:
    return r.performance.mfu


# The memory figure of a run, in order of preference, and its label: the allocator's peak reservation, device
# memory in use as the driver reports it (Primus), peak tensor allocation, and on the CPU (no device memory)
# the peak resident host memory of the largest worker process. Each is a field of the result's memory section.
MEMORY_KINDS = (("peak_reserved_gib", "reserved"), ("peak_device_used_gib", "device"),
                ("peak_allocated_gib", "allocated"), ("peak_host_rss_gib", "host"))


def _memory_figures(r: Section | dict) -> list[tuple[float, str]]:
    """(figure, label) of each memory kind the run reports, in MEMORY_KINDS' order."""
    section = typed(r).memory
    return [(value, label) for key, label in MEMORY_KINDS if (value := getattr(section, key)) is not None]


def memory(r: Section | dict) -> float | None:
    """Peak memory per GPU (per worker process on the CPU), the first kind of MEMORY_KINDS the run reports. Takes
    the result dict as well (evaluate/history/records.py)."""
    return next((value for value, _ in _memory_figures(r)), None)


def memory_kind(r: Section | dict) -> str:
    return next((label for _, label in _memory_figures(r)), "-")


def memory_title(items: Sequence[Loaded]) -> str:
    """The memory panel's title: per GPU, per worker process's host memory on the CPU, or both when mixed."""
    kinds = {memory_kind(i.typed) for i in items} - {"-"}
    if kinds == {"host"}:
        return "Peak host memory per worker (resident, CPU)"
    return "Peak memory per GPU" + (" (CPU: host memory per worker)" if "host" in kinds else "")


def final_loss(r: Section) -> float | None:
    return next((v for v in reversed(r.series.loss) if v is not None), None)


def precision_of(r: Section) -> str:
    """A result's precision as utils.spec.precision names it, with its FP8 recipe: "fp8 (tensorwise)", "bf16"."""
    training = r.training
    recipe = (training.fp8_recipe.fp8_recipe if training.fp8_recipe else None) or precisions.DEFAULT_FP8_RECIPE
    return precisions.name(training.precision, recipe)


def repeats_of(items: Sequence[Loaded]) -> list[Repeats]:
    """Group repeats; ordered by model, platform, framework, strategy, layout, nodes, torch-native settings and
    stack and precision (runs with compile on and off, on two stacks or in two precisions are two configurations, not
    repeats)."""
    found: dict[tuple, Repeats] = {}
    for item in items:
        r = item.typed
        p = r.parallelism
        layout = (p.tp, p.pp, p.dp, p.ga)
        key = (r.model.variant, r.platform, device_label(item), r.framework, p.strategy, layout, item.nodes or 0,
               native_settings.described(item.typed), item.stack, precision_of(r))
        found.setdefault(key, Repeats(r.platform, key[2], r.framework, key[0], p.strategy, layout,
                                      item.nodes, *key[-3:])).items.append(item)
    return [found[k] for k in sorted(found)]


def spread(values: list[float], show: Callable[[float], str] = figure_text) -> str:
    """median [min-max] of repeats, each as show writes it; a single value alone; "-" for none."""
    if not values:
        return "-"
    median = show(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} [{show(min(values))}-{show(max(values))}]"


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def workload(items: Sequence[Loaded]) -> dict[str, str]:
    """Each workload field with its value, or every distinct value when results disagree."""
    fields = {"Models": lambda r: r.model.display_name, "Sequence length (tokens)": lambda r: r.training.seq_len,
              "Global batch (sequences)": lambda r: r.training.gbs, "Micro batch": lambda r: r.training.mbs,
              "Precision": lambda r: r.training.precision.upper(), "Steps": lambda r: r.training.steps,
              "Steps left out as warm-up": lambda r: r.performance.warmup_skip,
              "Dataset": lambda r: r.training.dataset or "MOCK DATA",
              "Seed": lambda r: r.training.seed}
    out = {}
    for label, getter in fields.items():
        values = list(dict.fromkeys(str(getter(i.typed)) for i in items))
        out[label] = ", ".join(values)
    return out


def title(items: Sequence[Loaded]) -> str:
    w = workload(items)
    return (f"{w['Models']} | SL {w['Sequence length (tokens)']} | GBS {w['Global batch (sequences)']} | "
            f"{w['Precision']} | {w['Steps']} steps")
