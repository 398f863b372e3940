"""The experts' load of a mixture-of-experts model, counted as it trains (issue 47): per step and MoE layer, how
many token-to-expert assignments the router gave each expert, summed over the step's microbatches and every rank
that routes tokens of its own. The step record keeps two numbers a layer (utils.spec.metrics.EXPERT_LOAD_KEYS): the
busiest expert's count and all the layer's assignments; utils.spec.metrics.expert_load turns them into the result's
max / mean and dropped assignments, and evaluate.series_checks recomputes those from the same two numbers.

Evaluation forwards are not counted (a router outside training mode). Every rank routes tokens of its own, so the
sum counts each token once: mega runs sequence parallelism wherever TP > 1 (utils.spec.fairness.sequence_parallel:
each TP rank routes its share of the sequence), and fsdp builds a mixture of experts at TP 1 only.
"""

from __future__ import annotations

import torch


class ExpertLoad:
    """One step's router counts of every MoE layer of the whole model (a pipeline stage fills its own layers)."""

    def __init__(self, layers: int, experts: int, device: torch.device):
        self.counts = torch.zeros(layers, experts, dtype=torch.int64, device=device)

    def add(self, layer: int, chosen: torch.Tensor) -> None:
        """A microbatch's choices at one layer (0-based among the MoE layers): a (tokens, experts) 0/1 routing map,
        or the (tokens, top_k) indices of the chosen experts."""
        if chosen.dtype == torch.bool:
            self.counts[layer] += chosen.sum(dim=0).to(torch.int64)
        else:
            self.counts[layer] += torch.bincount(chosen.flatten(), minlength=self.counts.shape[1]).to(torch.int64)

    def reduce(self) -> dict[str, list[int]]:
        """The step's counts summed over all ranks (a collective every rank joins), as the step record's two
        numbers a layer; the counts start again at zero."""
        total = self.counts.clone()
        torch.distributed.all_reduce(total)
        self.counts.zero_()
        return {"expert_load_max": total.max(dim=1).values.tolist(), "expert_load_assigned": total.sum(dim=1).tolist()}
