"""A mixture-of-experts model in torchtitan 0.3.0: TPrimat's Qwen3 30B-A3B (utils.spec.models, key qwen3moe) as
torchtitan's own qwen3 MoE model, megatron-core's load-balancing loss around its routers, and what it built, read back
in megatron-core's names (the result's effective.moe, as train/mega/model.py's moe_read_back).

- The model: torchtitan's Qwen3Model with the layers its own registry builds for Qwen3 MoE
  (torchtitan/models/qwen3/__init__.py: _build_qwen3_moe_layers, its parameter initialisations and norms; private
  names of the pinned 0.3.0), every number from the spec: experts, top-k, expert width, head_dim, the QK-norm its
  Qwen3 layers always have, RoPE theta (its CosSinRoPE), untied embeddings. The router's softmax over all experts,
  its top-k renormalised where the spec's norm_topk_prob says (route_norm), and its gate under autocast to fp32
  (models/common/moe.py:297-299; on a GPU: the CPU's autocast has no fp32, where the gate runs in the parameters'
  dtype). Its token dispatcher ("standard": models/common/config_utils.py) drops no token: at EP=1 it reorders the
  tokens on the rank (token_dispatcher.py:403), at EP > 1 it sends them to their experts' ranks by all-to-all.
- Load balancing: torchtitan 0.3.0 has no auxiliary loss. Its MoE's load_balance_coeff (1e-3 by default,
  config_utils.py's make_moe_config) is the auxiliary-loss-free scheme: an expert bias, added to the scores the top-k
  is chosen by, which optimizer.py's register_moe_load_balancing_hook moves before each optimizer step by coeff x
  sign(mean load - the expert's load). It adds no loss and routes tokens differently: not the spec's aux_loss. TPrimat
  turns it off (load_balance_coeff None: no bias, no hook) and adds megatron-core's aux_loss (train/common/moe_loss.py)
  as megatron-core does, through the gradient only (its MoEAuxLossAutoScaler): a forward hook on each router returns
  the top-k scores unchanged, their backward adding the loss's gradient, so the logged loss stays the language-model
  loss. torchtitan's loss is each microbatch's token sum over the step's global token count, its gradients summed
  over DP; megatron-core weighs each microbatch's aux loss 1/GA and averages over DP, so each one's gradient here is
  scaled by 1 / (GA x DP).
- The experts: torchtitan's GroupedExperts (torch._grouped_mm over every local expert: a grouped GEMM, no fused
  permutation) computes in bf16 whatever the run's precision (models/common/moe.py:94-108): an fp32 run's experts too,
  which the read-back says (experts_dtype).
"""

from __future__ import annotations

import torch
from torchtitan.models import qwen3 as titan_qwen3
from torchtitan.models.common import CosSinRoPE, Embedding, Linear
from torchtitan.models.common.moe import GroupedExperts, MoE, TokenChoiceTopKRouter
from torchtitan.models.qwen3.model import Qwen3Model

from train.common import moe_loss

COMM_BACKEND = "standard"  # torchtitan's all-to-all dispatcher (local at EP=1): its Qwen3 registry's default
EXPERTS_DTYPE = "bf16"  # what GroupedExperts casts its tokens and weights to (models/common/moe.py:94-108)


def qwen3_moe(numbers: dict, attention: str) -> Qwen3Model.Config:
    """torchtitan's qwen3 MoE model config with exactly the spec's numbers (settings.py's model())."""
    dim, vocab, head_dim, moe = numbers["dim"], numbers["vocab_size"], numbers["head_dim"], numbers["moe"]
    layers = titan_qwen3._build_qwen3_moe_layers(
        n_layers=numbers["num_layers"], dim=dim, n_heads=numbers["n_heads"], n_kv_heads=numbers["n_kv_heads"],
        head_dim=head_dim, moe_hidden_dim=moe["expert_ffn_size"], num_experts=moe["num_experts"],
        top_k=moe["top_k"], fuse_qkv=True, attn_backend=attention, moe_comm_backend=COMM_BACKEND,
        rope=CosSinRoPE.Config(dim=head_dim, max_seq_len=numbers["max_seq_len"], theta=numbers["rope_theta"]))
    for layer in layers:
        layer.moe.load_balance_coeff = None  # no expert bias: megatron-core's aux loss instead (add_aux_loss)
        layer.moe.router.score_func = moe["score_function"]
        layer.moe.router.route_norm = moe["norm_topk_prob"]
    tied = numbers["tied_embeddings"]
    return Qwen3Model.Config(
        dim=dim, vocab_size=vocab, enable_weight_tying=tied, norm=titan_qwen3._qwen3_norm(dim), layers=layers,
        tok_embeddings=Embedding.Config(
            num_embeddings=vocab, embedding_dim=dim,
            param_init=titan_qwen3._EMBEDDING_SKIP_INIT if tied else titan_qwen3._EMBEDDING_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=vocab, param_init=titan_qwen3._LINEAR_INIT))


class AuxLossScaler(torch.autograd.Function):
    """megatron-core's MoEAuxLossAutoScaler: the router's output unchanged, the auxiliary loss's gradient (times the
    scale) started in its backward."""

    @staticmethod
    def forward(ctx, output: torch.Tensor, aux_loss: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(aux_loss)
        ctx.scale = scale
        return output

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (aux_loss,) = ctx.saved_tensors
        return grad, torch.full_like(aux_loss, ctx.scale), None


class RouterAuxLoss:
    """A forward hook on one torchtitan router: its microbatch's aux loss (its full softmax scores and top-k choices)
    times the coefficient, its gradient scaled by `scale`, in training with gradients only."""

    def __init__(self, coeff: float, scale: float) -> None:
        self.coeff, self.scale = coeff, scale

    def __call__(self, router: TokenChoiceTopKRouter, _inputs, output):
        if not (router.training and torch.is_grad_enabled()):
            return None
        topk_scores, chosen, scores = output
        experts, top_k = scores.shape[-1], chosen.shape[-1]
        loss = moe_loss.aux_loss(scores.reshape(-1, experts), chosen.reshape(-1, top_k)) * self.coeff
        return AuxLossScaler.apply(topk_scores, loss, self.scale), chosen, scores


def moe_layers(model: torch.nn.Module) -> list[MoE]:
    return [module for module in model.modules() if isinstance(module, MoE)]


def add_aux_loss(trainer) -> None:
    """megatron-core's aux loss, with the built trainer's coefficient (TimedTrainer.Config.moe_aux_loss_coeff), on
    every MoE layer's router, each microbatch's gradient scaled by 1 / (GA x DP) (see the module's docstring)."""
    coeff, dims = trainer.config.moe_aux_loss_coeff, trainer.parallel_dims
    if not coeff:
        return
    scale = 1.0 / (trainer.gradient_accumulation_steps * dims.dp_shard * dims.dp_replicate)
    for part in trainer.model_parts:
        for layer in moe_layers(part):
            hook = RouterAuxLoss(coeff, scale)
            layer.router.register_forward_hook(hook)
            layer.router.aux_loss = hook  # what read_back finds


def read_back(model: torch.nn.Module, ep: int, router_dtype: str) -> dict:
    """The built model's MoE settings in megatron-core's names (None for a dense model), with what torchtitan adds:
    whether its expert bias is on, what its experts compute in, the MoE layers; router_dtype: what the router's gate
    runs in (fp32 under torchtitan's autocast on a GPU, the parameters' dtype on the CPU)."""
    layers = moe_layers(model)
    if not layers:
        return {"moe": None}
    first = layers[0]
    router, experts = first.router, first.routed_experts.inner_experts
    hooks = [getattr(layer.router, "aux_loss", None) for layer in layers]
    aux = all(hook is not None for hook in hooks)
    dispatcher = first.routed_experts.token_dispatcher
    shared = first.shared_experts
    return {"moe": {
        "num_moe_experts": router.num_experts, "moe_router_topk": router.top_k,
        # the down projection's (experts, dim, width): GroupedExperts' w2_EDF, GPT-OSS's mlp2_weight_EDF
        "moe_ffn_hidden_size": next(p for name, p in experts.named_parameters() if name.endswith("_EDF")).shape[2],
        "moe_shared_expert_intermediate_size": None if shared is None else shared.w1.weight.shape[0],
        "moe_router_score_function": router.score_func, "moe_router_pre_softmax": not router.route_norm,
        "moe_router_load_balancing_type": "aux_loss" if aux else "none",
        "moe_aux_loss_coeff": hooks[0].coeff if aux else 0.0,
        "moe_token_dispatcher_type": "alltoall" if getattr(dispatcher, "ep_mesh", None) is not None else "local",
        "moe_router_dtype": router_dtype,
        "moe_expert_capacity_factor": getattr(dispatcher, "non_blocking_capacity_factor", None),
        "moe_z_loss_coeff": None, "moe_grouped_gemm": isinstance(experts, GroupedExperts),
        "moe_permute_fusion": False, "moe_shared_expert_overlap": False, "expert_model_parallel_size": ep,
        "moe_router_enable_expert_bias": first.load_balance_coeff is not None,
        "experts_dtype": EXPERTS_DTYPE if isinstance(experts, GroupedExperts) else None,
        "moe_layers": len(layers)}}
