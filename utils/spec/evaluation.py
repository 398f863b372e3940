"""Held-out validation and time to train: the one definition every framework evaluates by.

A run with EVAL_INTERVAL > 0 sets apart VALIDATION_PERCENT of the prepared documents as its validation split (a
megatron-core split string, so that mega, fsdp, autotp, torchtitan, NeMo, Megatron-Bridge and Primus all build the
same documents with megatron-core's own builder; the documents are in the order the data stage's SEED shuffled
them), never trains on them, and every EVAL_INTERVAL steps evaluates the mean per-token cross-entropy (nats, MLPerf's
log-perplexity) over the same EVAL_TOKENS, rounded up to whole global batches. TARGET_LOSS makes the run a
time-to-train run: it ends at the first evaluation at or below the target.
"""

from __future__ import annotations

from dataclasses import dataclass

NO_SPLIT = "100,0,0"  # all documents train: the split of a run without validation


@dataclass(frozen=True)
class Evaluation:
    """A run's validation request (the request's `evaluation` section)."""

    interval_steps: int  # EVAL_INTERVAL: evaluate after every this many steps (and after the last); 0: never
    tokens: int  # EVAL_TOKENS: tokens per evaluation asked for (rounded up to whole global batches by iters())
    validation_percent: int  # VALIDATION_PERCENT: share of the documents held out, in percent
    target_loss: float | None = None  # TARGET_LOSS: stop at the first evaluation at or below it; None: train all steps

    @property
    def enabled(self) -> bool:
        return self.interval_steps > 0

    def iters(self, gbs: int, seq_len: int) -> int:
        """Global batches per evaluation: EVAL_TOKENS rounded up (Megatron's eval_iters)."""
        return max(1, -(-self.tokens // (gbs * seq_len)))

    def megatron_split(self) -> str:
        """megatron-core's split string: train, validation, test weights."""
        if not self.enabled:
            return NO_SPLIT
        return f"{100 - self.validation_percent},{self.validation_percent},0"


def section(asked: Evaluation, *, iters: int, tokens: int, split: dict, points: dict) -> dict:
    """The result's evaluation section (the one place it is made: the judge's for a trainer's evals.jsonl and
    evaluate.extract's for a log's validation reports): points are its columns (step, tokens, train_time_s,
    wall_s, loss, eval_time_s); time_s counts the evaluations that report a duration."""
    return {"interval_steps": asked.interval_steps, "iters": iters, "tokens": tokens, "split": split,
            "time_s": sum(t for t in points["eval_time_s"] if t is not None), "points": points}
