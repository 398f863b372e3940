"""report.md's section on the mixture-of-experts runs: each one's experts' load beside its throughput
(performance.expert_load, recomputed by the gate from the steps' router counts), so that a MoE figure is never read
without its balance. Dense runs have no such section; the results tables rank each model on its own, so a MoE model
and a dense one are never ranked together."""

from __future__ import annotations

from typing import Sequence

from evaluate.collect import Loaded
from evaluate.comparison.repeats import FRAMEWORK_NAMES
from utils.spec.metrics import figure_text


def section(items: Sequence[Loaded]) -> list[str]:
    """The section over the successful runs of a mixture-of-experts model; [] where there are none."""
    moe = [item for item in items if item.typed.model.moe is not None]
    if not moe:
        return []
    out = ["## Mixture of experts: the experts' load", "",
           "Each MoE layer's busiest expert against the mean of its experts (token-to-expert assignments over the "
           "steady-state steps: 1.00 is a perfect balance, the expert count the worst), the worst layer's and the "
           "layers' range, and the assignments a capacity factor dropped (docs/results.md, \"The experts' load\"). "
           "The share of the step spent dispatching tokens is not shown: no framework's own timers separate it "
           "(megatron-core's MoE layer marks it with NVTX ranges only); a PROFILING=1 trace shows the all-to-all.", "",
           "| Run | Framework | Model | TP/PP/DP/EP | tokens/s/GPU | experts, top-k | max / mean, worst layer | "
           "max / mean, layers | dropped |",
           "|---|---|---|---|---|---|---|---|---|"]
    for item in moe:
        r, p = item.typed, item.typed.parallelism
        load, experts = r.performance.expert_load, r.model.moe
        speed = r.performance.tokens_per_s_per_gpu
        head = (f"| {item.name} | {FRAMEWORK_NAMES[r.framework]} | {r.model.display_name} | "
                f"{p.tp}/{p.pp}/{p.dp}/{p.ep or 1} | {'-' if speed is None else figure_text(speed)} | "
                f"{experts.num_experts}, {experts.top_k} | ")
        layers = [value for value in (load.max_over_mean_by_layer if load else ()) if value is not None]
        if load is None or load.max_over_mean is None or not layers:
            out.append(head + "not counted | - | - |")
            continue
        out.append(head + f"{load.max_over_mean:.2f} | {min(layers):.2f}-{max(layers):.2f} | "
                   f"{load.dropped_assignments} |")
    return out + [""]
