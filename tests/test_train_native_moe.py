"""The torch-native frameworks' mixture of experts (train/native/moe.py): megatron-core's load-balancing loss, added
to the gradient only, and a router computing in fp32 whatever the autocast around it."""

from __future__ import annotations

import pytest
import torch
from megatron.core.transformer.moe.moe_utils import switch_load_balancing_loss_func
from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

from train.native import moe as native_moe
from train.native.model import build
from utils.spec.models import get_model


class Config:
    num_experts_per_tok, router_aux_loss_coef = 2, 1e-3


def logits(layers: int = 3, tokens: int = 64, experts: int = 8) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    return tuple(torch.randn(tokens, experts, generator=generator, requires_grad=True) for _ in range(layers))


def megatron_cores(router_logits, top_k: int, coeff: float) -> torch.Tensor:
    """megatron-core's own aux_loss of each layer (its router's scores and top-k counts), summed over the layers."""
    total = 0.0
    for layer in router_logits:
        probs = torch.softmax(layer, dim=-1)
        chosen = torch.topk(probs, top_k, dim=-1).indices
        tokens_per_expert = torch.bincount(chosen.flatten(), minlength=layer.shape[1])
        total = total + switch_load_balancing_loss_func(probs, tokens_per_expert, layer.shape[0], top_k,
                                                        layer.shape[1], coeff)
    return total


def test_the_load_balancing_loss_is_megatron_cores_per_layer_summed_not_hugging_faces_pooled():
    router_logits = logits()
    ours = native_moe.load_balancing_loss(router_logits, Config)
    assert ours.item() == pytest.approx(megatron_cores(router_logits, 2, 1e-3).item(), rel=1e-6)
    pooled = load_balancing_loss_func(router_logits, num_experts=8, top_k=2) * 1e-3  # Hugging Face's own
    assert abs(pooled.item() - ours.item()) > 0.1 * ours.item()


def test_the_auxiliary_loss_reaches_the_gradient_and_leaves_the_recorded_loss_as_it_was():
    router_logits = logits()
    lm_loss = torch.stack([layer.sum() for layer in router_logits]).sum() * 0 + torch.tensor(11.5)
    aux = native_moe.load_balancing_loss(router_logits, Config)
    trained = native_moe.with_aux_gradient(lm_loss, aux)
    assert trained.item() == lm_loss.item()  # exactly: the step line shows the language-model loss
    trained.backward()
    expected = torch.autograd.grad(native_moe.load_balancing_loss(router_logits, Config), router_logits)
    for layer, grad in zip(router_logits, expected):
        assert torch.equal(layer.grad, grad)


def test_the_router_computes_in_fp32_under_bf16_autocast():
    model = build(get_model("qwen3moe", "tiny"), "sdpa", 42, torch.device("cpu"))
    batch = torch.randint(0, 512, (1, 16))

    def router_dtypes() -> set[torch.dtype]:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(input_ids=batch, use_cache=False, output_router_logits=True)
        return {layer.dtype for layer in out.router_logits}

    assert router_dtypes() == {torch.bfloat16}  # Hugging Face's router under autocast
    routers = native_moe.routers(model)
    for router in routers:
        native_moe.router_in_fp32(router)
    assert len(routers) == 2 and router_dtypes() == {torch.float32}
    read = native_moe.read_back(model, torch.float32)["moe"]
    assert (read["num_moe_experts"], read["moe_router_topk"], read["moe_router_dtype"], read["moe_layers"]) == \
        (8, 2, "fp32", 2)
