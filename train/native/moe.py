"""A mixture-of-experts model (utils.spec.models' MoESpec) in the torch-native frameworks: Hugging Face's experts and
router, trained with megatron-core's load-balancing loss and a router in fp32, so that its workload is mega's.

- The load-balancing loss is megatron-core's aux_loss (train/common/moe_loss.py) of each layer over this rank's
  microbatch, their sum trained. Hugging Face's own load_balancing_loss_func pools every layer's tokens into one
  such sum and multiplies it by top_k, which weighs the loss k/L times megatron-core's for the same balance (1/6 for
  Qwen3 30B-A3B): TPrimat computes megatron-core's from the router logits Hugging Face returns.
- The loss is added to the gradient only, as megatron-core's MoEAuxLossAutoScaler adds it: the recorded loss stays
  the language-model loss, the number every framework's step line shows.
- The router's logits are computed in fp32 (utils.spec.fairness.MOE_ROUTING's moe_router_dtype):
  autocast is off inside it and its input is cast up; FSDP2 keeps its weight in fp32 (train/fsdp/engine.py).
"""

from __future__ import annotations

import functools

import torch

from train.common import moe_loss


def load_balancing_loss(router_logits: tuple[torch.Tensor, ...], config) -> torch.Tensor:
    """megatron-core's aux_loss of every layer (router logits: one (tokens, experts) tensor a layer), summed, with
    the top-k and coefficient of the built model's Hugging Face config."""
    total = torch.zeros((), dtype=torch.float32, device=router_logits[0].device)
    for logits in router_logits:
        probs = torch.softmax(logits.float(), dim=-1)
        total = total + moe_loss.aux_loss(probs, torch.topk(probs, config.num_experts_per_tok, dim=-1).indices)
    return total * config.router_aux_loss_coef


def count_choices(router_logits: tuple[torch.Tensor, ...], config, load) -> None:
    """Each layer's top-k choices (Hugging Face's router takes the top-k of the softmax, so of the logits) added to
    the step's counts (train/common/expert_load.py's ExpertLoad)."""
    for layer, logits in enumerate(router_logits):
        load.add(layer, torch.topk(logits, config.num_experts_per_tok, dim=-1).indices)


def with_aux_gradient(loss: torch.Tensor, aux_loss: torch.Tensor) -> torch.Tensor:
    """The loss's value, with the auxiliary loss's gradient added to its backward (aux - aux is exactly 0)."""
    return loss + (aux_loss - aux_loss.detach())


def routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Each MoE layer's router (Hugging Face's mlp.gate of a sparse layer)."""
    return [layer.mlp.gate for layer in model.model.layers if hasattr(layer.mlp, "experts")]


def router_in_fp32(router: torch.nn.Module) -> None:
    """The router's forward without autocast, on its input cast to fp32 (its weight is fp32: the model's under DDP,
    FSDP2's policy for it under FSDP2)."""
    forward = router.forward

    @functools.wraps(forward)
    def fp32_forward(hidden_states: torch.Tensor, *args, **kwargs):
        with torch.autocast(hidden_states.device.type, enabled=False):
            return forward(hidden_states.float(), *args, **kwargs)

    router.forward = fp32_forward


def read_back(model: torch.nn.Module, router_dtype: torch.dtype | None) -> dict:
    """The built model's MoE settings in megatron-core's names (mega's effective.moe), None for a dense model:
    Hugging Face's router is a softmax whose top-k it renormalises where norm_topk_prob; it drops no token and
    dispatches none (each expert gathers its tokens in a loop, no grouped GEMM); router_dtype: what the router computes
    in (the FSDP2 policy it was given, or its weight's dtype under DDP)."""
    found = routers(model)
    if not found:
        return {"moe": None}
    config = model.config
    wrapped = all(hasattr(router.forward, "__wrapped__") for router in found)
    return {"moe": {
        "num_moe_experts": config.num_experts, "moe_router_topk": config.num_experts_per_tok,
        "moe_ffn_hidden_size": config.moe_intermediate_size, "moe_shared_expert_intermediate_size": None,
        "moe_router_score_function": "softmax", "moe_router_pre_softmax": not config.norm_topk_prob,
        "moe_router_load_balancing_type": "aux_loss", "moe_aux_loss_coeff": config.router_aux_loss_coef,
        "moe_token_dispatcher_type": None, "moe_router_dtype": _dtype_name(router_dtype) if wrapped else None,
        "moe_expert_capacity_factor": None, "moe_z_loss_coeff": None,
        "moe_grouped_gemm": (config._experts_implementation or "eager") != "eager",
        "experts_implementation": config._experts_implementation or "eager",
        "moe_permute_fusion": False, "moe_shared_expert_overlap": None, "expert_model_parallel_size": 1,
        "moe_layers": len(found)}}


def _dtype_name(dtype: torch.dtype | None) -> str | None:
    """fp32 / bf16 as the fairness profile names them."""
    return {torch.float32: "fp32", torch.bfloat16: "bf16"}.get(dtype, None if dtype is None else str(dtype))
