"""The validation and time-to-train figures again, from their evidence: a result's `evaluation` and `time_to_train`
are not taken on faith (issue 45).

The evidence is the run's own: the step series (which steps ran, their step times), the trainer's evals.jsonl
(written point by point during the run, beside result.json: evaluate.collect reads it as Loaded.evals), the split the
run trained with (training.validation_split) and utils.spec.metrics.time_to_target, the one definition of the time to
train. FIGURE_EVIDENCE says, for every figure field of the two sections, which check recomputes it; a test walks
utils/spec/result.schema.json and fails on a figure field without an entry, so a new figure cannot go unchecked.
"""

from __future__ import annotations

import math
import zipfile
from typing import BinaryIO, Callable, Mapping

from utils import run_files
from evaluate.effective_settings import same
from evaluate.logs.parse import parse_logs, step_ranges
from utils.frameworks import TABLE
from utils.spec.evaluation import Evaluation
from utils.spec.metrics import time_to_target
from utils.spec.result_types import Section, typed

Problem = tuple[str, str]  # (check, message), as evaluate.integrity's
COLUMNS = ("step", "tokens", "train_time_s", "wall_s", "loss", "eval_time_s")
TTT_FIGURES = ("reached", "step", "tokens", "wall_s", "train_time_s", "last_loss")
SLACK_S = 1e-3  # a wall clock and a sum of step times both rounded to the millisecond in a log


def _train_times(series: Section) -> dict[int, float | None]:
    """Each recorded step's sum of the step times up to it (None from the first unmeasured step on)."""
    total: float | None = 0.0
    out = {}
    for step, time in sorted(zip(series.step, series.step_time_s)):
        total = None if total is None or time is None else total + time
        out[step] = total
    return out


def _columns(points: Section) -> dict[str, tuple]:
    """The points' columns by name (COLUMNS), as evals.jsonl's records name them."""
    return {key: getattr(points, key) for key in COLUMNS}


def cadence(r: Section) -> list[Problem]:
    """interval_steps, the points' steps and tokens: every point at a step that ran, at the cadence (a multiple of
    interval_steps, or the run's last step), none of the cadence's skipped, tokens = step x gbs x seq_len."""
    ev, training, series = r.evaluation, r.training, r.series
    points, interval = ev.points, ev.interval_steps
    lengths = {key: len(column) for key, column in _columns(points).items()}
    if len(set(lengths.values())) > 1:
        return [("evaluation", f"points' columns differ in length: {lengths}")]
    steps, found = list(points.step), []
    last = max(series.step, default=0)
    beyond = [s for s in steps if s > last]
    if beyond:
        found.append(("evaluation", f"evaluation(s) at step(s) {step_ranges(beyond)}, beyond the last step that ran "
                      f"({last})"))
    if steps != sorted(set(steps)):
        found.append(("evaluation", f"evaluation steps {steps[:20]} are not increasing"))
    off = [s for s in steps if s % interval and s != training.steps]
    skipped = sorted(set(range(interval, max(steps, default=0) + 1, interval)) - set(steps))
    if off or skipped:
        found.append(("evaluation cadence", f"every {interval} steps asked: "
                      + "; ".join(([f"off-cadence evaluation(s) at step(s) {step_ranges(off)}"] if off else [])
                                  + ([f"no evaluation at step(s) {step_ranges(skipped)}"] if skipped else []))))
    per_step = training.gbs * training.seq_len
    wrong = [s for s, t in zip(steps, points.tokens) if t != s * per_step]
    if wrong:
        found.append(("evaluation", f"tokens at step(s) {step_ranges(wrong)} are not step x {per_step:,}"))
    return found


def size(r: Section) -> list[Problem]:
    """iters, tokens and time_s: tokens = iters x gbs x seq_len, time_s the sum of the points' eval_time_s."""
    ev, training = r.evaluation, r.training
    found = []
    if ev.tokens != ev.iters * training.gbs * training.seq_len:
        found.append(("evaluation", f"tokens {ev.tokens:,} per evaluation are not iters {ev.iters} x gbs x seq_len"))
    timed = sum(t for t in ev.points.eval_time_s if t is not None)
    if not same(float(ev.time_s), float(timed)):
        found.append(("evaluation", f"time_s {ev.time_s:g} is not the sum of its evaluations' {timed:g} s"))
    return found


def split(r: Section) -> list[Problem]:
    """split.percent and split.megatron_split are one cut, the cut training.validation_split trained with; the
    documents are counted where the fingerprint was taken (both are the framework's read-back of the split)."""
    cut, trained = r.evaluation.split, r.training.validation_split
    found = []
    asked = Evaluation(interval_steps=1, tokens=1, validation_percent=cut.percent).megatron_split()
    if cut.megatron_split != asked:
        found.append(("validation split", f"evaluation.split {cut.megatron_split} is not the cut of "
                      f"{cut.percent}% ({asked})"))
    if (cut.documents is None) != (cut.fingerprint is None):
        found.append(("validation split", f"{cut.documents} documents with fingerprint {cut.fingerprint}: "
                      "both come from the split read back, or neither"))
    if trained is not None and trained != cut.megatron_split:
        found.append(("validation split", f"training.validation_split {trained} is not evaluation.split "
                      f"{cut.megatron_split}: the run evaluated on documents of another cut than it trained by"))
    return found


def clocks(r: Section) -> list[Problem]:
    """train_time_s and wall_s per point: the step times up to the point (the step series), and a wall clock no
    shorter than them (it holds them and the evaluations)."""
    points, found = r.evaluation.points, []
    sums = _train_times(r.series)
    bad = [s for s, t in zip(points.step, points.train_time_s)
           if t is not None and sums.get(s) is not None and abs(t - sums[s]) > SLACK_S + 1e-6 * sums[s]]
    if bad:
        found.append(("evaluation", f"train_time_s at step(s) {step_ranges(bad)} is not the sum of the step times up "
                      "to it"))
    short = [s for s, w in zip(points.step, points.wall_s)
             if w is not None and sums.get(s) is not None and w + SLACK_S < sums[s]]
    if short:
        found.append(("evaluation", f"wall_s at step(s) {step_ranges(short)} is shorter than the step times it "
                      "contains"))
    return found


def evals_file(r: Section, evals: list[dict] | str | None) -> list[Problem]:
    """The points are the trainer's evals.jsonl, written as each evaluation ended: the same steps, the same
    values (a result edited after the run, its losses lowered, is caught). None: no such file (a log's framework)."""
    if evals is None:
        return []
    if isinstance(evals, str):
        return [("evaluation evidence", evals)]
    theirs = [tuple(p.get(key) for key in COLUMNS) for p in evals]  # evals.jsonl's records, not the result
    ours = list(zip(*_columns(r.evaluation.points).values()))
    differ = sorted({a[0] for a, b in zip(ours, theirs) if not all(_equal(x, y) for x, y in zip(a, b))}
                    | {p[0] for p in ours[len(theirs):]} | {p[0] for p in theirs[len(ours):]})
    if differ:
        return [("evaluation evidence", f"points at step(s) {step_ranges(differ)} are not evals.jsonl's")]
    return []


LOG_FILE = run_files.LOG  # the judge's log (evaluate.judge), node N's under nodeN/
LOG_COLUMNS = ("loss", "wall_s", "eval_time_s")  # what a log's validation report says (evaluate.logs.evaluations)


def log_points(r: Section, beside: dict[str, Callable[[], BinaryIO]] | None) -> list[Problem]:
    """A log's framework (prim, mbridge, nemo: the judge extracts its result from train.log) writes no evals.jsonl:
    its points are the log's validation reports, read again here with the judge's reader (parse_logs, one streamed
    pass over train.log and the other nodes' nodeN/train.log), so a loss lowered in result.json while the log keeps
    the real one fails. Nothing is said where the log is not beside the result (a zip or copy without logs, a result
    read without its run directory): there is nothing to read again, and evals_file's absence is no fault either."""
    framework = TABLE.get(r.framework)
    if (beside is None or LOG_FILE not in beside or r.evaluation is None or framework is None
            or framework.own_trainer):
        return []
    nnodes = r.parallelism.nnodes or 1
    names = [LOG_FILE] + [name for n in range(1, nnodes) if (name := f"node{n}/{LOG_FILE}") in beside]
    try:
        validations = parse_logs([beside[name]() for name in names]).validations
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        return [("evaluation evidence", f"{LOG_FILE} cannot be read again: {err}")]
    points = r.evaluation.points
    ours = {step: [getattr(points, key)[n] for key in LOG_COLUMNS] for n, step in enumerate(points.step)}
    theirs = {v["step"]: [v.get(key) if v.get(key) is None or math.isfinite(v[key]) else None for key in LOG_COLUMNS]
              for v in validations}
    differ = sorted(step for step in ours.keys() | theirs.keys()
                    if step not in ours or step not in theirs or not all(map(_equal, ours[step], theirs[step])))
    if differ:
        return [("evaluation evidence", f"points at step(s) {step_ranges(differ)} are not {LOG_FILE}'s validation "
                 f"reports (loss {_shown(ours, differ[0])} in the result, {_shown(theirs, differ[0])} in the log at "
                 f"step {differ[0]})")]
    return []


def _shown(points: dict[int, list], step: int) -> str:
    return "none" if step not in points else str(points[step][0])


def _equal(a: object, b: object) -> bool:
    return a is b is None or (a is not None and b is not None and same(float(a), float(b)))  # type: ignore[arg-type]


def target(r: Section) -> list[Problem]:
    """time_to_train's figures are time_to_target of the points (first evaluation at or below target_loss)."""
    ttt = r.time_to_train
    if r.evaluation is None:
        return [("time to train", "a time to train without the evaluation it is read from")]
    again = time_to_target(_columns(r.evaluation.points), ttt.target_loss,
                           stopped_at_target=ttt.stopped_at_target, how=ttt.how)
    wrong = [key for key in TTT_FIGURES if not _equal(getattr(ttt, key), again[key])]
    if wrong:
        return [("time to train", "; ".join(f"{key} is {getattr(ttt, key)} in the result, {again[key]} from the "
                                              "validation points" for key in wrong))]
    return []


def stopped_at(result: Mapping | Section) -> int | None:
    """The step a run stopped at its target, where its evidence says so: the framework can stop, the first
    evaluation at or below the target is that step, and that step is the last that ran, before the steps asked.
    None otherwise: the run is held to all its steps."""
    r = typed(result)
    ttt, ev = r.time_to_train, r.evaluation
    if not ttt or not ev or not ttt.stopped_at_target:
        return None
    again = time_to_target(_columns(ev.points), ttt.target_loss, stopped_at_target=True, how="")
    step, framework = again["step"], TABLE.get(r.framework)
    ran = r.run.steps_completed
    if (framework is None or not framework.stops_at_target or step is None or step != ttt.step
            or step != ran or step != max(r.series.step, default=0) or ran >= r.training.steps):
        return None
    return step


def stop(r: Section) -> list[Problem]:
    """stopped_at_target only where stopped_at finds the stop in the evidence."""
    ttt = r.time_to_train
    if ttt.stopped_at_target and stopped_at(r) is None:
        return [("time to train", f"stopped_at_target claimed at step {ttt.step}, but the run's steps "
                 f"({r.run.steps_completed} of {r.training.steps}, last recorded "
                 f"{max(r.series.step, default=0)}) and its validation points show no stop there")]
    return []


def tokens_key(result: Mapping | Section) -> str:
    """The tokens each of a result's evaluations read: runs of different ones compare no losses (a loss over 3
    tokens is no measure beside one over 512,000), so evaluate.validate.fairness and the time-to-train ranking
    (evaluate/comparison/time_to_train.py) both key on it."""
    return f"{typed(result).evaluation.tokens:,}"


def split_key(result: Mapping | Section) -> str:
    """The validation split a result evaluated on, its cut and its documents' fingerprint: runs of different ones
    measured losses over other documents (and trained on other ones)."""
    split = typed(result).evaluation.split
    return f"{split.megatron_split} {split.fingerprint}"


# What every evaluated run of one model must share for its losses to compare (evaluate.validate.fairness).
SHARED_EVALUATION = (("evaluation split", split_key), ("evaluation tokens", tokens_key))


# Every figure field of `evaluation` and `time_to_train` -> the function above that checks it against its evidence
# (evals_file besides, where the trainer wrote evals.jsonl, holds every points column to it; log_points, where a log's
# framework left train.log beside the result, holds loss, wall_s and eval_time_s to its validation reports).
FIGURE_EVIDENCE = {
    "evaluation.interval_steps": "cadence", "evaluation.points.step": "cadence",
    "evaluation.points.tokens": "cadence", "evaluation.iters": "size", "evaluation.tokens": "size",
    "evaluation.time_s": "size", "evaluation.points.eval_time_s": "size", "evaluation.split.percent": "split",
    "evaluation.split.documents": "split", "evaluation.points.train_time_s": "clocks",
    "evaluation.points.wall_s": "clocks", "evaluation.points.loss": "evals_file",
    "time_to_train.target_loss": "target", "time_to_train.step": "target", "time_to_train.tokens": "target",
    "time_to_train.wall_s": "target", "time_to_train.train_time_s": "target", "time_to_train.last_loss": "target",
}


def problems(result: Mapping | Section, evals: list[dict] | str | None = None,
             beside: dict[str, Callable[[], BinaryIO]] | None = None) -> list[Problem]:
    """Every check of a schema-valid result's `evaluation` and `time_to_train` (none when it has neither)."""
    r = typed(result)
    found: list[Problem] = []
    if r.evaluation is not None:
        found += cadence(r) + size(r) + split(r) + clocks(r) + evals_file(r, evals) + log_points(r, beside)
    if r.time_to_train is not None:
        found += target(r) + (stop(r) if r.evaluation is not None else [])
    return found
