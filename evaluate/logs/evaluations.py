"""A log's validation reports -> the result's `evaluation` and `time_to_train` (utils/spec/evaluation.py).

Primus, Megatron-Bridge and NeMo evaluate with their own loops (Megatron-LM's, Megatron-Bridge's, Lightning's under
TPrimat's timer), and all print Megatron-LM's report ("validation loss at iteration N | lm loss value: X |", read by
evaluate.logs.records.validation_point). The cadence, batches and split are the run's request: a log alone does not
say them all, so a log without its run directory keeps its losses out of the result, with a note. A point's
train_time_s is the sum of the step times up to its step (the frameworks stop their step clock around an
evaluation). eval_time_s and wall_s (from the start of step 1 to the end of the evaluation, MLPerf's clock) come from
TPrimat's own report (train.common.evaluation.validation_line: NeMo's timer, torchtitan's trainer); Megatron-LM's and
Megatron-Bridge's give neither, and carry no time of day to derive them from, so theirs are null, as is any value
that is not finite. The split's documents and fingerprint are known where the framework read TPrimat's split itself
and printed it (torchtitan's TPRIMAT_EFFECTIVE line: `validation`); else, or where what it printed is not a split of
the request's cut, they are null, with a note.
"""

from __future__ import annotations

import math
import reprlib

from utils.frameworks import TABLE
from utils.spec.evaluation import Evaluation, section
from utils.spec.metrics import time_to_target

STOPPED = "the trainer stopped at the first evaluation at or below the target"


def _train_time(records: list[dict], step: int) -> float | None:
    """The step times up to `step`, evaluations excluded; None where one of them is not measured."""
    times = [r["step_time_s"] for r in records if r["step"] <= step]
    if len(times) < step or any(t is None or not math.isfinite(t) for t in times):
        return None
    return sum(times)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _split(asked: Evaluation, said: object, notes: list[str]) -> dict:
    """The result's evaluation.split: the request's cut, with the documents and fingerprint the log printed where
    they are a split of that cut (said: the log's `validation` read-back, None where it printed none)."""
    split = {"megatron_split": asked.megatron_split(), "documents": None, "fingerprint": None,
             "percent": asked.validation_percent}
    if said is None:
        return split
    documents = said.get("documents") if isinstance(said, dict) else None
    fitting = (isinstance(said, dict) and said.get("megatron_split") == split["megatron_split"]
               and (documents is None or (isinstance(documents, int) and not isinstance(documents, bool)
                                          and documents >= 0))
               and isinstance(said.get("fingerprint"), (str, type(None))))
    if not fitting:
        notes.append(f"the log's validation split {reprlib.repr(said)} is not a split of the request's "
                     f"{split['megatron_split']} with a document count and a fingerprint: the request's is recorded, "
                     "without them")
        return split
    return {**split, "documents": documents, "fingerprint": said.get("fingerprint")}


def evaluation_of(validations: list[dict], records: list[dict], asked: Evaluation | None, *, framework: str,
                  gbs: int, seq_len: int, steps: int, notes: list[str],
                  split: object = None) -> tuple[dict | None, dict | None]:
    """(evaluation, time_to_train) for build_result; (None, None) when the log has no report or the run asked for
    none. `asked` is the request's evaluation (None: a log without its run directory); `split` the split the log
    says it evaluated on (the result's evaluation.split), else the request's without documents or fingerprint."""
    if not validations:
        if asked is not None and asked.enabled and records:
            notes.append(f"the run asked for an evaluation every {asked.interval_steps} steps, but the log has no "
                         "validation report")
        return None, None
    if asked is None or not asked.enabled:
        notes.append(f"the log holds {len(validations)} validation losses, but "
                     + ("its run directory's request asked for no validation" if asked is not None else
                        "without the run's request (--run-dir) their cadence and split are unknown")
                     + ": left out of the result")
        return None, None
    iters = asked.iters(gbs, seq_len)
    points = {"step": [p["step"] for p in validations],
              "tokens": [p["step"] * gbs * seq_len for p in validations],
              "train_time_s": [_train_time(records, p["step"]) for p in validations],
              "wall_s": [_finite(p.get("wall_s")) for p in validations],
              "loss": [_finite(p["loss"]) for p in validations],
              "eval_time_s": [_finite(p["eval_time_s"]) for p in validations]}
    timed = [t for t in points["eval_time_s"] if t is not None]
    if len(timed) < len(validations):
        notes.append(f"{len(validations) - len(timed)} of {len(validations)} validation reports give no duration "
                     f"({TABLE[framework].display_name} prints none): evaluation.time_s counts only the reports "
                     "that give it, and their wall_s is null (no report has a time of day)")
    evaluation = section(asked, iters=iters, tokens=iters * gbs * seq_len, split=_split(asked, split, notes),
                         points=points)
    if asked.target_loss is None:
        return evaluation, None
    last = records[-1]["step"] if records else 0
    reached = next((p["step"] for p in validations if p["loss"] is not None and p["loss"] <= asked.target_loss),
                   None)
    can_stop = TABLE[framework].stops_at_target
    stopped = can_stop and reached is not None and last == reached and last < steps
    how = STOPPED if stopped else (
        f"read from the validation series: {TABLE[framework].display_name} cannot stop at a target"
        if not can_stop else "read from the validation series: the run did not stop at it")
    return evaluation, time_to_target(points, asked.target_loss, stopped_at_target=stopped, how=how)
