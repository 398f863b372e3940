"""The projection to many nodes in a comparison, when evaluate.compare is asked for it (--project-nodes): the
fastest strategy of each platform + framework per model, projected by evaluate.project (data-parallel weak scaling
from the measured run, the time bound's communication model), as a panel of compare-strategies.png and a section of
report.md. Labelled everywhere as a model-based projection, with its assumptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from evaluate.project import LABEL, NodeProjection, lines, projection
from utils.cli import UsageError

if TYPE_CHECKING:
    from evaluate.comparison.strategies import Entry


@dataclass(frozen=True)
class Ask:
    """What the user asked to project to: node counts, and the inter-node bandwidth per GPU (None: the default)."""

    nodes: list[int]
    link_gbps: float | None = None


def fastest_per_config(group: Sequence[Entry]) -> list[Entry]:
    """Each platform + framework's fastest measured strategy, in first-seen order."""
    out: dict[str, Entry] = {}
    for entry in group:
        if entry.tokens is not None and (entry.config not in out or entry.tokens > out[entry.config].tokens):
            out[entry.config] = entry
    return list(out.values())


def projected(group: Sequence[Entry], ask: Ask) -> tuple[list[tuple[Entry, NodeProjection]], list[str]]:
    """The projections of one model's configurations, and a line for each that cannot be projected and why."""
    done, skipped = [], []
    for entry in fastest_per_config(group):
        try:
            done.append((entry, projection(entry.result, ask.nodes, ask.link_gbps)))
        except UsageError as err:
            skipped.append(f"{entry.config} ({entry.strategy}): {err}")
    return done, skipped


def draw(ax, model: str, group: Sequence[Entry], ask: Ask, colours: dict[str, str]) -> int:
    """The panel: projected tokens/s/GPU against nodes, one line per configuration; returns the lines drawn."""
    done, skipped = projected(group, ask)
    for entry, result in done:
        ax.plot([p.nodes for p in result.points], [p.tokens_per_gpu for p in result.points], marker="o",
                color=colours[entry.config], label=f"{entry.config} ({entry.strategy})")
    ax.set_title(f"{model}: {LABEL}", fontsize=10)
    ax.set_xlabel("nodes (data-parallel weak scaling)")
    ax.set_ylabel("projected tokens/s per GPU")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ask.nodes, [str(n) for n in ask.nodes])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)  # from zero: a few percent lost at scale must not look like a cliff
    ax.grid(alpha=0.3)
    if done:
        ax.legend(fontsize=7, loc="lower left")
    if skipped:
        ax.text(0.02, 0.98, "not projected:\n" + "\n".join(skipped), transform=ax.transAxes, fontsize=7,
                va="top", wrap=True)
    return len(done)


def section(items: Sequence[Entry], ask: Ask, project_tokens: float | None, png_name: str | None) -> list[str]:
    """report.md's projection section: per model and configuration, evaluate.project's table."""
    out = ["## Projection to many nodes", "", f"**{LABEL}**: each platform + framework's fastest strategy, projected "
           "by `python3 -m evaluate.project` from its measured run (the repeat nearest the median).", ""]
    for model in dict.fromkeys(e.model for e in items):
        done, skipped = projected([e for e in items if e.model == model], ask)
        out += [f"### {model}", ""]
        for _, result in done:
            out += ["```", *lines(result, project_tokens), "```", ""]
        out += [f"- not projected: {line}" for line in skipped] + ([""] if skipped else [])
    return out + ([f"![strategies and projection]({png_name})", ""] if png_name else [])
