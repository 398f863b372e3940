"""Named quality profiles (QUALITY_PROFILE): a published time-to-train definition, run in its manner.

A profile fixes the workload knobs a benchmark's definition names (dataset, model, sequence length) and its quality
rule (target validation loss, evaluation cadence and size), so that a run set asks for all of them at once. A run
under a profile is "in the manner of" the benchmark, never its result: TPrimat evaluates on a held-out share of the
training corpus (utils/spec/evaluation.py), not on the benchmark's own validation set, and keeps its own optimizer
schedule and initialisation.

mlperf-llama31-8b: MLPerf Training v5.1's Llama 3.1 8B pretraining, as mlcommons/training
small_llm_pretraining/nemo/README.md states it: C4 (c4/en/3.0.1), context 8192, quality target validation
log-perplexity 3.3, an evaluation every 12,288 sequences over 1,024 sequences (8,388,608 tokens).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QualityProfile:
    """A benchmark's time-to-train definition, in TPrimat's knobs."""

    name: str
    source: str  # where the numbers are stated
    dataset: str  # DATASET
    model: str  # MODELS: the one model the definition trains
    seq_len: int  # SL
    target_loss: float  # TARGET_LOSS: validation loss in nats (log-perplexity)
    eval_every_sequences: int  # an evaluation after every this many training sequences
    eval_sequences: int  # sequences per evaluation

    def knobs(self, gbs: int) -> dict[str, object]:
        """The typed knob values the profile sets at a global batch of gbs sequences."""
        return {"DATASET": self.dataset, "MODELS": [self.model], "MODEL_SIZE": "full", "SL": self.seq_len,
                "TARGET_LOSS": self.target_loss, "EVAL_INTERVAL": self.eval_every_sequences // gbs,
                "EVAL_TOKENS": self.eval_sequences * self.seq_len}

    def problems(self, gbs: int, platform: str) -> list[str]:
        """Why the profile cannot be run as asked (one line each, with the fix)."""
        found = []
        if platform == "cpu":
            found.append(f"QUALITY_PROFILE={self.name}: the full Llama 3.1 8B at sequence length {self.seq_len} is a "
                         "GPU workload, not for the CPU; leave QUALITY_PROFILE empty there")
        if self.eval_every_sequences % gbs:
            found.append(f"QUALITY_PROFILE={self.name}: evaluates every {self.eval_every_sequences} sequences, which "
                         f"GBS {gbs} (MBS x DP x GA) does not divide; choose a GBS that does (e.g. 512, 1024)")
        return found


PROFILES = {
    "mlperf-llama31-8b": QualityProfile(
        name="mlperf-llama31-8b",
        source="MLPerf Training v5.1, mlcommons/training small_llm_pretraining/nemo/README.md",
        dataset="c4", model="llama", seq_len=8192, target_loss=3.3, eval_every_sequences=12288, eval_sequences=1024),
}
