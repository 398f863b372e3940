"""Regressions: for every configuration stored more than once, the newest runs against the ones before.

The runs of one configuration (evaluate/history/records.py: everything alike but the stack and the date) fall into
groups: run sets (default) or stacks (`--by stack`), each dated by its first run. The newest group is the
candidate and every earlier group the baseline; `--baseline NAME` takes as baseline only the runs whose stack, tag
or run set is NAME (the candidate is then the newest group without it), and `--since DATE` splits at a date
instead (candidate: runs from DATE on). Only runs that passed validate count.

A change is reported when all three hold (docs/results.md, "History and regressions"):
- Mann-Whitney U (two-sided) on the steady-state step times of the candidate's runs against the baseline's, every
  step one sample: p below ALPHA (0.01);
- the medians differ by at least MIN_CHANGE (5%);
- the change is larger than the runs' own spread: the range of the per-run medians on either side, relative to
  their median (zero with one run a side).
A slower candidate is a regression, a faster one an improvement.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from datetime import datetime, timezone

from evaluate.history.records import configuration, label, steady_step_times
from utils.cli import quoted

ALPHA = 0.01
MIN_CHANGE = 0.05
GROUPINGS = {"run-set": "run_set", "stack": "stack"}


@dataclass
class Run:
    """One stored run that passed validate, with its steady-state step times."""

    stored: dict
    times: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def date(self) -> str:
        return self.stored["run_date"] or self.stored["added_at"]


@dataclass
class Verdict:
    """The comparison of one configuration's candidate runs with its baseline runs."""

    label: str
    candidate: list[Run]
    baseline: list[Run]
    change: float  # candidate median step time / baseline median - 1
    p_value: float
    spread: float
    alpha: float = ALPHA
    min_change: float = MIN_CHANGE

    @property
    def kind(self) -> str:
        if self.p_value >= self.alpha or abs(self.change) < self.min_change or abs(self.change) <= self.spread:
            return "no change"
        return "regression" if self.change > 0 else "improvement"

    def line(self) -> str:
        cand, base = (statistics.median([t for r in runs for t in r.times]) for runs in (self.candidate, self.baseline))
        return (f"{self.kind.upper() if self.kind != 'no change' else 'no change'}: {self.label}: step time "
                f"{self.change:+.1%} ({cand:.4g} s over {_described(self.candidate)} vs {base:.4g} s over "
                f"{_described(self.baseline)}; Mann-Whitney U p={self.p_value:.2g}, runs' own spread "
                f"{self.spread:.1%})")


def _described(runs: list[Run]) -> str:
    groups = sorted({(r.stored["run_set"], r.stored["stack"]) for r in runs})
    steps = sum(len(r.times) for r in runs)
    shown = ", ".join(f"{quoted(run_set, 60)} on {quoted(stack, 40)}" for run_set, stack in groups[:3])
    more = f" and {len(groups) - 3} more" if len(groups) > 3 else ""
    return f"{len(runs)} run(s), {steps} steps: {shown}{more}"


def spread(runs: list[Run]) -> float:
    """The range of the runs' median step times relative to their median; 0 for a single run."""
    medians = [r.median for r in runs]
    return (max(medians) - min(medians)) / statistics.median(medians) if len(medians) > 1 else 0.0


def _when(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def split(runs: list[Run], by: str, baseline: str | None, since: datetime | None) -> tuple[list[Run], list[Run]]:
    """(candidate, baseline) of one configuration's runs; either may be empty (nothing to compare)."""
    if baseline is not None:
        named = [r for r in runs if baseline in (r.stored["stack"], r.stored["tag"], r.stored["run_set"])]
        runs = [r for r in runs if r not in named]
    if since is not None:
        after = [r for r in runs if _when(r.date) >= since]
        before = named if baseline is not None else [r for r in runs if _when(r.date) < since]
        return after, before
    groups: dict[str, list[Run]] = {}
    for run in sorted(runs, key=lambda r: _when(r.date)):
        groups.setdefault(str(run.stored[GROUPINGS[by]]), []).append(run)
    if not groups:
        return [], []
    newest = max(groups, key=lambda g: min(_when(r.date) for r in groups[g]))
    if baseline is not None:
        return groups[newest], named
    return groups[newest], [r for g, members in groups.items() if g != newest for r in members]


def regressions(stored: list[dict], by: str = "run-set", baseline: str | None = None, since: datetime | None = None,
                alpha: float = ALPHA, min_change: float = MIN_CHANGE) -> tuple[list[Verdict], list[str]]:
    """A verdict per configuration with both a candidate and a baseline, and the configurations left out (why)."""
    from scipy.stats import mannwhitneyu  # only this command needs scipy
    by_configuration: dict[str, list[Run]] = {}
    for row in stored:
        times = steady_step_times(json.loads(row["result"])) if row["verdict"] == "ok" else []
        if times:
            by_configuration.setdefault(configuration(row), []).append(Run(row, times))
    verdicts, left_out = [], []
    for runs in by_configuration.values():
        name = quoted(label(runs[0].stored), 300)  # text from the store, for a terminal
        candidate, base = split(runs, by, baseline, since)
        if not candidate or not base:
            left_out.append(f"{name}: {len(runs)} run(s), nothing to compare them with")
            continue
        x = [t for r in candidate for t in r.times]
        y = [t for r in base for t in r.times]
        change = statistics.median(x) / statistics.median(y) - 1
        p_value = float(mannwhitneyu(x, y, alternative="two-sided").pvalue)
        verdicts.append(Verdict(name, candidate, base, change, p_value, max(spread(candidate), spread(base)),
                                alpha, min_change))
    return verdicts, left_out
