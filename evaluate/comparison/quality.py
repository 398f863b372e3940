"""Throughput at a quality: the held-out validation loss of the compared runs (compare.png's panel, report.md's
"Validation loss" section) and the check of each low-precision configuration against its BF16 twin.

A twin is the same configuration (every key of evaluate/comparison/repeats.py's Repeats but the precision) in bf16
and in a precision below 16 bits (utils.spec.precision.LOW). The two are compared at the last evaluation both ran at
equal training tokens: gap = low - bf16 (nats), relative gap = gap / bf16. MLPerf's quality rule is the reference:
every submission must reach the same target log-perplexity whatever its precision, so a precision that learns worse
has not earned its throughput. Beyond PRECISION_LOSS_TOLERANCE (utils.spec.precision.LOSS_TOLERANCE unless given)
the low-precision configuration is flagged and ranked nowhere as a win (the decision of evaluate/comparison/
energy.py skips it); a twin without validation at equal tokens is unchecked and ranked nowhere either.

Runs of different precisions stay an UNFAIR comparison (evaluate.validate.fairness) unless evaluate.compare is asked
for a precision comparison (--precision-comparison), which report.md then states at its top.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from evaluate.collect import Loaded
from evaluate.comparison.repeats import Repeats
from utils.config.reading import CONFIG_FILE
from utils.machine.energy_cost import knob_values
from utils.spec import precision as precisions
from utils.spec.metrics import figure_text
from utils.spec.result_types import Section

TOLERANCE_KNOB = "PRECISION_LOSS_TOLERANCE"
FLAGS = {TOLERANCE_KNOB: "--precision-loss-tolerance"}
PANEL_TITLE = "Validation loss (held-out; evaluation time outside the throughput)"
LOSS = "{:.3f}".format


@dataclass(frozen=True)
class QualitySettings:
    """How the report judges precision: the twin's tolerance (relative gap) and whether precisions may differ."""

    tolerance: float = precisions.LOSS_TOLERANCE
    precision_comparison: bool = False


def quality_settings(flags: Mapping[str, str | None], precision_comparison: bool = False,
                     env: Mapping[str, str] | None = None, config_file: Path = CONFIG_FILE) -> QualitySettings:
    """The tolerance from the command line, else the environment, else config.env (empty: LOSS_TOLERANCE); a bad
    value is the configuration's one line (ConfigError)."""
    given = knob_values(FLAGS, flags, os.environ if env is None else env, config_file)[TOLERANCE_KNOB]
    return QualitySettings(precisions.LOSS_TOLERANCE if given is None else given, precision_comparison)


def evaluated(items: Sequence[Loaded]) -> list[Loaded]:
    """The results that may enter a figure (evaluate.gate) and carry held-out validation."""
    return [item for item in items if item.ok and item.typed.evaluation]


def loss_at(result: Section, tokens: int) -> float | None:
    """The validation loss a result measured at exactly `tokens` training tokens; None where it did not evaluate."""
    points = result.evaluation.points
    return next((loss for t, loss in zip(points.tokens, points.loss) if t == tokens), None)


def shared_tokens(items: Sequence[Loaded]) -> int | None:
    """The last token count at which every one of the results has a validation loss (equal tokens); None: none."""
    common: set[int] | None = None
    for item in items:
        points = item.typed.evaluation.points
        mine = {t for t, loss in zip(points.tokens, points.loss) if loss is not None}
        common = mine if common is None else common & mine
    return max(common) if common else None


def row_loss(row: Repeats, tokens: int | None) -> float | None:
    """The median over a configuration's repeats of its validation loss at `tokens`."""
    values = [v for item in evaluated(row.items) if tokens is not None
              and (v := loss_at(item.typed, tokens)) is not None]
    return statistics.median(values) if values else None


def panel(ax, rows: Sequence[Repeats], colour: dict[int, str], styles: Sequence[str], variants: list[str]) -> int:
    """compare.png's validation panel: loss against training tokens, one line per run (repeats after the first
    faint), the targets of time-to-train runs dashed; returns the number of runs drawn."""
    drawn = 0
    for x, row in enumerate(rows):
        for n, item in enumerate(evaluated(row.items)):
            points = item.typed.evaluation.points
            ax.plot(points.tokens, [float("nan") if v is None else v for v in points.loss], color=colour[x],
                    linestyle=styles[variants.index(row.variant) % len(styles)], marker="o", markersize=3,
                    linewidth=1.4, alpha=0.9 if n == 0 else 0.35)
            drawn += 1
    targets = {item.typed.time_to_train.target_loss for row in rows for item in evaluated(row.items)
               if item.typed.time_to_train}
    for target in sorted(targets):
        ax.axhline(target, color="dimgray", linestyle="--", linewidth=1)
        ax.text(0.99, target, f"target {target:g}", transform=ax.get_yaxis_transform(), ha="right", va="bottom",
                fontsize=8, color="dimgray")
    ax.set_title(PANEL_TITLE, fontsize=12)
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss (nats)")
    ax.grid(alpha=0.3)
    return drawn


def validation_section(rows: Sequence[Repeats]) -> list[str]:
    """report.md's "Validation loss": per configuration the loss at the last evaluation all compared runs of its
    model share, the cadence, the split and the evaluation time (outside the throughput)."""
    if not any(evaluated(row.items) for row in rows):
        return []
    out = ["## Validation loss", "",
           "Held-out validation (utils/spec/evaluation.py): the same documents, set apart by the data's seed and never "
           "trained on, evaluated every EVAL_INTERVAL steps over the same EVAL_TOKENS in every framework; the loss is "
           "the mean per-token cross-entropy in nats (MLPerf's log-perplexity). Evaluation time is outside the "
           "throughput: no step time, and so no tokens/s figure above, includes it. Repeats: median.", ""]
    for variant in dict.fromkeys(r.variant for r in rows):
        mine = [r for r in rows if r.variant == variant and evaluated(r.items)]
        if not mine:
            continue
        tokens = shared_tokens([i for r in mine for i in evaluated(r.items)])
        at = f"at {tokens:,} tokens" if tokens is not None else "at equal tokens (none shared)"
        out += [f"### {mine[0].model_name}", "",
                f"| Configuration | Validation loss {at} | Last evaluation | Evaluations | Split | "
                "Evaluation time (s, outside the throughput) |", "|---|---|---|---|---|---|"]
        for row in mine:
            runs = evaluated(row.items)
            evaluations = [i.typed.evaluation for i in runs]
            first = evaluations[0]
            last = [(e.points.tokens[-1], e.points.loss[-1]) for e in evaluations if e.points.tokens]
            shared = row_loss(row, tokens)
            split = first.split
            out.append(
                f"| {row.label} | {'-' if shared is None else LOSS(shared)} | "
                + ("; ".join(f"{'-' if loss is None else LOSS(loss)} at {t:,} tokens" for t, loss in last) or "-")
                + f" | every {first.interval_steps} steps, {first.tokens:,} tokens ({first.iters} batches) | "
                f"{split.percent}% ({split.megatron_split}), {split.documents if split.documents is not None else '?'} "
                f"documents, {split.fingerprint or 'fingerprint unknown'} | "
                + ", ".join(figure_text(e.time_s) for e in evaluations) + " |")
        out.append("")
    return out


@dataclass(frozen=True)
class Twin:
    """A low-precision configuration and its BF16 twin, compared at equal tokens."""

    bf16: Repeats
    low: Repeats
    tokens: int | None  # the last evaluation both ran at equal tokens; None: none shared
    bf16_loss: float | None
    low_loss: float | None

    @property
    def gap(self) -> float | None:
        return None if self.low_loss is None or self.bf16_loss is None else self.low_loss - self.bf16_loss

    @property
    def relative(self) -> float | None:
        return None if self.gap is None else self.gap / self.bf16_loss

    def flagged(self, tolerance: float) -> str:
        """Why the low precision is no win (one phrase), or "" when its loss is within the tolerance."""
        if self.relative is None:
            return "quality unchecked: no validation loss of both at equal tokens (set EVAL_INTERVAL)"
        if self.relative > tolerance:
            return f"its validation loss is {100 * self.relative:.2f}% above BF16's, beyond the {100 * tolerance:g}% tolerance"
        return ""


def _twin_key(row: Repeats) -> tuple:
    return (row.platform, row.device, row.framework, row.variant, row.strategy, row.layout, row.nodes, row.settings,
            row.stack)


def twins(rows: Sequence[Repeats]) -> list[Twin]:
    """Every low-precision configuration with a BF16 twin among rows."""
    bf16 = {_twin_key(r): r for r in rows if r.precision == "bf16"}
    out = []
    for low in rows:
        twin = bf16.get(_twin_key(low))
        if twin is None or low.precision.split()[0] not in precisions.LOW:
            continue
        tokens = shared_tokens(evaluated(twin.items) + evaluated(low.items)) \
            if evaluated(twin.items) and evaluated(low.items) else None
        out.append(Twin(twin, low, tokens, row_loss(twin, tokens), row_loss(low, tokens)))
    return out


def orphans(rows: Sequence[Repeats], found: Sequence[Twin]) -> list[Repeats]:
    """The low-precision configurations without a BF16 twin among rows: their quality is unchecked."""
    return [row for row in rows if row.precision.split()[0] in precisions.LOW
            and not any(row is twin.low for twin in found)]


def unranked_rows(rows: Sequence[Repeats], found: Sequence[Twin], settings: QualitySettings) -> list[Repeats]:
    """The low-precision configurations no ranking may count as a win: flagged against their twin, or without one."""
    return [t.low for t in found if t.flagged(settings.tolerance)] + orphans(rows, found)


def twin_section(found: Sequence[Twin], settings: QualitySettings, throughput) -> list[str]:
    """report.md's "Precision against its BF16 twin": the losses at equal tokens, the gap, the low precision's
    throughput with its gap, and the flag."""
    if not found:
        return []
    tolerance = settings.tolerance
    out = ["## Precision against its BF16 twin", "",
           f"Each configuration below 16 bits beside the same configuration in BF16, at the last evaluation both ran at "
           f"equal tokens; gap = low - BF16. Tolerance {100 * tolerance:g}% of BF16's loss ({TOLERANCE_KNOB}, "
           f"{FLAGS[TOLERANCE_KNOB]}; default {100 * precisions.LOSS_TOLERANCE:g}%): MLPerf's quality rule, every "
           "submission reaching the same target log-perplexity whatever its precision, is the reference. Beyond it "
           "the low precision's throughput is **flagged** and ranked nowhere as a win.", "",
           "| Configuration | Precision | Tokens | BF16 loss | Low loss | Gap | Relative gap | tokens/s/GPU (x BF16) | "
           "Verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for twin in found:
        low_rate, bf16_rate = throughput(twin.low), throughput(twin.bf16)
        rate = "-" if low_rate is None else figure_text(low_rate) + (
            f" ({low_rate / bf16_rate:.2f}x)" if bf16_rate else "")
        why = twin.flagged(tolerance)
        out.append(f"| {twin.bf16.label} | {twin.low.precision} | {'-' if twin.tokens is None else f'{twin.tokens:,}'} "
                   f"| {'-' if twin.bf16_loss is None else LOSS(twin.bf16_loss)} | "
                   f"{'-' if twin.low_loss is None else LOSS(twin.low_loss)} | "
                   f"{'-' if twin.gap is None else f'{twin.gap:+.4f}'} | "
                   f"{'-' if twin.relative is None else f'{100 * twin.relative:+.2f}%'} | {rate} at a gap of "
                   f"{'?' if twin.relative is None else f'{100 * twin.relative:+.2f}%'} | "
                   + (f"**FLAGGED**: {why}; not a win" if why else "within the tolerance") + " |")
    return out + [""]


def banner(settings: QualitySettings, items: Sequence[Loaded]) -> list[str]:
    """The line at the top of report.md (and the console) when a precision comparison was asked for."""
    if not settings.precision_comparison:
        return []
    names = sorted({f"{i.typed.training.precision}" for i in items})
    return [f"**Precision comparison**: asked for (--precision-comparison): runs of different precisions "
            f"({', '.join(names)}) are compared as such, not marked UNFAIR; each low precision is checked against "
            f"its BF16 twin's validation loss (tolerance {100 * settings.tolerance:g}%).", ""]
