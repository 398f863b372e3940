"""megatron-core's load-balancing loss of one mixture-of-experts layer (moe_router_load_balancing_type "aux_loss":
megatron/core/transformer/moe/moe_utils.py, switch_load_balancing_loss_func), for the frameworks whose own MoE has
none or another (fsdp and autotp on Hugging Face's experts: train/native/moe.py; torchtitan: train/torchtitan/moe.py).

Over one microbatch's tokens: E x sum_i f_i P_i, f_i the share of the top-k assignments expert i got, P_i expert i's
mean router probability (the softmax over all experts); the caller multiplies it by the coefficient.
"""

from __future__ import annotations

import torch


def aux_loss(probs: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """One layer's loss without its coefficient: probs (tokens, experts) over all experts, chosen (tokens, top_k) the
    experts each token was routed to."""
    experts = probs.shape[-1]
    assigned = torch.bincount(chosen.flatten(), minlength=experts).to(torch.float32)
    share = assigned / chosen.numel()
    return experts * torch.sum(share * probs.float().mean(dim=0))
