"""Throughput and statistics: the one place where TPrimat turns step times into figures.

Every framework's steps go through these functions, so the same run measured by two frameworks
gives the same numbers. FLOPs per token comes from utils.spec.models (one convention: Megatron's,
causal attention halved, a mixture of experts' active parameters); the device peak from utils.machine.hardware.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

from utils.spec.models import ModelSpec

# A step's parts, each timed by its framework's trainer (train/native/trainer.py, train/mega/trainer.py); "other" is
# the rest of the step (data loading, gradient clipping and synchronisation outside the three).
BREAKDOWN_KEYS = ("forward_s", "backward_s", "optimizer_s")

FLOPS_CONVENTION = ("Megatron-LM formula (megatron-core >= 0.12): 6 x (dense weights + LM head) "
                    "+ 6 x L x (a*d) x s per token, causal attention counted once; a mixture of experts' weights are "
                    "its active ones (router, top-k routed and shared experts)")


@dataclass(frozen=True)
class Summary:
    """Distribution of one quantity over a window of steps.

    p10/p90 interpolate linearly between order statistics (numpy's default, statistics'
    "inclusive" method); std is the sample standard deviation (0 for a single value).
    """

    count: int
    mean: float
    median: float
    p10: float
    p90: float
    std: float
    min: float
    max: float

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(values: Iterable[float]) -> Summary:
    """Mean, median, p10, p90, std, min and max of finite values (raises on none)."""
    data = sorted(float(v) for v in values)
    if not data:
        raise ValueError("cannot summarise an empty window")
    if not all(math.isfinite(v) for v in data):
        raise ValueError("cannot summarise non-finite values; drop them first")
    if len(data) == 1:
        only = data[0]
        return Summary(1, only, only, only, only, 0.0, only, only)
    deciles = statistics.quantiles(data, n=10, method="inclusive")
    return Summary(count=len(data), mean=statistics.fmean(data), median=statistics.median(data),
                   p10=deciles[0], p90=deciles[8], std=statistics.stdev(data), min=data[0], max=data[-1])


@dataclass(frozen=True)
class Window:
    """The steady-state steps: every measured step after the first WARMUP_SKIP steps."""

    first_step: int
    last_step: int
    steps: list[int]


def steady_window(steps: Sequence[int], step_times: Sequence[float | None], warmup_skip: int) -> Window | None:
    """Steps numbered above warmup_skip (1-based) with a finite step time above 0; None if there are none.

    Warm-up steps carry compilation, autotuning and allocator growth, so they are left out.
    """
    if warmup_skip < 0:
        raise ValueError(f"warmup_skip must be >= 0, got {warmup_skip}")
    kept = [step for step, t in zip(steps, step_times)
            if step > warmup_skip and t is not None and math.isfinite(t) and t > 0]
    if not kept:
        return None
    return Window(first_step=kept[0], last_step=kept[-1], steps=kept)


def breakdown(records: Sequence[dict]) -> dict | None:
    """Mean forward, backward, optimizer and other seconds over the steps (a window) that carry all three parts;
    means, not medians, so that the four add up to the mean step time. None when no step carries them."""
    full = [r for r in records if r.get("step_time_s") is not None
            and all(r.get(key) is not None for key in BREAKDOWN_KEYS)]
    if not full:
        return None
    means = {key: statistics.fmean(r[key] for r in full) for key in BREAKDOWN_KEYS}
    means["other_s"] = statistics.fmean(r["step_time_s"] - sum(r[key] for key in BREAKDOWN_KEYS) for r in full)
    return {**means, "step_time_s": statistics.fmean(r["step_time_s"] for r in full), "count": len(full)}


def window_breakdown(records: Sequence[dict], first_step: int, last_step: int) -> dict | None:
    """breakdown over the records of the steady window's steps first_step..last_step: what a result's
    performance.breakdown holds, so that its writer (utils.spec.result) and evaluate.validate, which recomputes it from
    the result's series, take the same steps."""
    return breakdown([r for r in records if first_step <= r["step"] <= last_step])


def tokens_per_second(tokens_per_step: int, step_time_s: float) -> float:
    """tokens/s = GBS x SL / step time."""
    if step_time_s <= 0:
        raise ValueError(f"step time must be positive, got {step_time_s}")
    return tokens_per_step / step_time_s


def per_gpu(value: float, num_gpus: int) -> float:
    """A whole-job rate divided over every GPU of the job (TP x PP x DP)."""
    if num_gpus < 1:
        raise ValueError(f"num_gpus must be >= 1, got {num_gpus}")
    return value / num_gpus


def tflops_per_gpu(spec: ModelSpec, seq_len: int, tokens_per_s_per_gpu: float) -> float:
    """TFLOP/s/GPU = FLOPs per token (utils.spec.models) x tokens/s/GPU / 1e12."""
    return spec.flops_per_token(seq_len) * tokens_per_s_per_gpu / 1e12


def mfu(tflops: float, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilisation as a fraction of the device's dense peak; None when the peak is unknown."""
    if peak_tflops is None:
        return None
    if peak_tflops <= 0:
        raise ValueError(f"peak TFLOP/s must be positive, got {peak_tflops}")
    return tflops / peak_tflops


def figure_text(value: float) -> str:
    """A figure as every table and console shows it (tokens/s, TFLOP/s, MFU, memory, times): three significant
    digits below 100, so that a CPU's 0.0472 TFLOP/s/GPU is not 0.0, and a whole number with thousands separators
    from 100 up, where more digits are noise."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def time_to_target(points: Mapping[str, Sequence], target: float, *, stopped_at_target: bool, how: str) -> dict:
    """The result's time_to_train: the first evaluation whose validation loss is at or below `target` (MLPerf's
    rule: the clock stops at the evaluation that reaches the quality), or not reached with the last loss.

    points: the result's evaluation.points (columns step, tokens, train_time_s, wall_s, loss, eval_time_s).
    stopped_at_target: the framework ended the run there; how: one line saying how the time was found.
    """
    losses = list(points.get("loss", ()))
    first = next((i for i, loss in enumerate(losses) if loss is not None and math.isfinite(loss) and loss <= target),
                 None)
    measured = [loss for loss in losses if loss is not None and math.isfinite(loss)]
    at = (lambda key: points[key][first]) if first is not None else (lambda key: None)
    return {"target_loss": target, "reached": first is not None, "step": at("step"), "tokens": at("tokens"),
            "wall_s": at("wall_s"), "train_time_s": at("train_time_s"),
            "last_loss": measured[-1] if measured else None,
            "stopped_at_target": stopped_at_target and first is not None, "how": how}


# A mixture-of-experts step's router counts, per MoE layer (train/common/expert_load.py): the token-to-expert
# assignments its busiest expert got, and all it made (top-k per token, less any a capacity factor dropped).
EXPERT_LOAD_KEYS = ("expert_load_max", "expert_load_assigned")


def expert_load(records: Sequence[dict], window: Window | None, experts: int, top_k: int,
                tokens_per_step: int) -> dict | None:
    """The experts' load over the steady-state window, from the steps that carry both counts: each layer's busiest
    expert against the mean (max x experts / assigned; 1.0 is a perfect balance, `experts` the most a layer can be
    off), as the median over the steps of the worst layer and of each layer, and the assignments dropped (tokens x
    top_k a layer should have made, less those it made, summed over the layers and steps). None without such steps."""
    if window is None:
        return None
    kept = [r for r in records if window.first_step <= r["step"] <= window.last_step
            and r.get("expert_load_max") and r.get("expert_load_assigned")]
    if not kept:
        return None
    ratios = [[most * experts / made if made else None for most, made in zip(r["expert_load_max"],
                                                                               r["expert_load_assigned"])]
              for r in kept]
    by_layer = [statistics.median(column) if None not in column else None for column in zip(*ratios)]
    worst = [max(row) if None not in row else None for row in ratios]
    return {"experts": experts, "layers": len(by_layer), "steps": len(kept),
            "max_over_mean": statistics.median(worst) if None not in worst else None,
            "max_over_mean_by_layer": by_layer,
            "dropped_assignments": sum(tokens_per_step * top_k - made for r in kept
                                       for made in r["expert_load_assigned"])}
