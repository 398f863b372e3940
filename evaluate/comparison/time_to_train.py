"""report.md's "Time to train": configurations ranked by wall time to their validation target (TARGET_LOSS), in the
manner of MLPerf Training.

The time is each result's time_to_train.wall_s (utils.spec.metrics.time_to_target: from the start of step 1 to the
end of the first evaluation at or below the target, evaluations included, as MLPerf's clock runs). Only runs that
reached the target are ranked; the others are listed with their last and best validation loss. Results of different
targets (or models), or of different evaluations (tokens per evaluation, split), are never ranked together. With
repeats the statistic is MLPerf's olympic mean (the fastest and the slowest dropped, the rest averaged) from 5
reached repeats, the median below (where dropping two of four or fewer would leave too little), with the spread
min-max of all reached repeats.
"""

from __future__ import annotations

import statistics
from typing import Sequence

from evaluate.collect import Loaded
from evaluate.comparison.repeats import Repeats
from evaluate.evaluation_checks import split_key, tokens_key
from utils.spec.metrics import figure_text
from utils.spec.result_types import Section

OLYMPIC_FROM = 5  # reached repeats from which the fastest and the slowest are dropped (MLPerf's olympic scoring)
STATISTIC = (f"olympic mean (the fastest and the slowest dropped, MLPerf's scoring) from {OLYMPIC_FROM} reached "
             f"repeats, else the median; [min-max] over the reached repeats")


def statistic(times: Sequence[float]) -> tuple[float, str]:
    """The ranked time of a configuration's reached repeats, and the statistic's name."""
    ordered = sorted(times)
    if len(ordered) >= OLYMPIC_FROM:
        return statistics.fmean(ordered[1:-1]), f"olympic mean of {len(ordered)}"
    return statistics.median(ordered), "median" if len(ordered) > 1 else "one run"


def _runs(row: Repeats) -> list[Loaded]:
    return [item for item in row.ok if item.typed.time_to_train]


def _evaluation(item: Loaded) -> str:
    """What a result's losses were measured over: runs of different evaluations (sizes, splits) are not ranked
    together, a loss over 3 tokens reaching a target says nothing beside one over 512,000. (The keys are
    evaluate.evaluation_checks', which validate's fairness shares; they are given the result as read.)"""
    return f"{tokens_key(item.typed)} tokens of split {split_key(item.typed)}"


def best_loss(result: Section) -> float | None:
    points = result.evaluation.points if result.evaluation else None
    losses = [v for v in ((points.loss if points else None) or ()) if v is not None]
    return min(losses) if losses else None


def _loss(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def section(rows: Sequence[Repeats]) -> list[str]:
    """The ranking per model and target; empty when no result has a time_to_train."""
    groups: dict[tuple[str, float, str], list[Repeats]] = {}
    for row in rows:
        for target, evaluation in dict.fromkeys((i.typed.time_to_train.target_loss, _evaluation(i))
                                                for i in _runs(row)):
            groups.setdefault((row.variant, target, evaluation), []).append(row)
    if not groups:
        return []
    out = ["## Time to train", "",
           "Wall time from the start of step 1 to the end of the first evaluation at or below the target validation "
           "loss, evaluations included (MLPerf's clock); ranked fastest first, runs that reached the target only. "
           f"Statistic: {STATISTIC}. Results of different targets are not ranked together.", ""]
    for (variant, target, evaluation), mine in groups.items():
        ranked, missed = [], []
        for row in mine:
            runs = [i for i in _runs(row) if i.typed.time_to_train.target_loss == target
                    and _evaluation(i) == evaluation]
            reached = [i.typed.time_to_train.wall_s for i in runs if i.typed.time_to_train.reached]
            missed += [(row, i) for i in runs if not i.typed.time_to_train.reached]
            if reached:
                ranked.append((*statistic(reached), reached, row, runs))
        several = sum(key[:2] == (variant, target) for key in groups) > 1
        out += [f"### {mine[0].model_name}, target {target:g}" + (f", evaluated on {evaluation}" if several else ""),
                ""]
        if ranked:
            out += ["| Rank | Configuration | Time to target (s) | Statistic | Spread (s) | Tokens | Reached | How |",
                    "|---|---|---|---|---|---|---|---|"]
            for rank, (time, name, reached, row, runs) in enumerate(sorted(ranked, key=lambda entry: entry[0]), 1):
                tokens = sorted({i.typed.time_to_train.tokens for i in runs if i.typed.time_to_train.reached})
                hows = sorted({"stopped at the target" if i.typed.time_to_train.stopped_at_target
                               else "read from the validation series" for i in runs})
                out.append(f"| {rank} | {row.label} | {figure_text(time)} | {name} | "
                           f"{figure_text(min(reached))}-{figure_text(max(reached))} | "
                           f"{', '.join(f'{t:,}' for t in tokens)} | {len(reached)} of {len(runs)} | "
                           f"{'; '.join(hows)} |")
        else:
            out.append("- no run reached the target")
        out += [""] + [f"- not reached, not ranked: {item.name} ({row.label}): last loss "
                       f"{_loss(item.typed.time_to_train.last_loss)}, best {_loss(best_loss(item.typed))}"
                       for row, item in missed]
        out.append("")
    return out
