"""GPT-OSS-20B in torchtitan 0.3.0: TPrimat's spec (utils.spec.models, key gptoss) as torchtitan's own gpt_oss model,
and the model features (utils.spec.models.FEATURES) a built torchtitan model has, read off it for the judge
(effective.model_features, evaluate/model_checks.py).

The model: torchtitan's GptOssModel with the layers its own registry builds (torchtitan/models/gpt_oss/__init__.py:
_build_gptoss_layers and _make_gptoss_attn_config, private names of the pinned 0.3.0), every number from the spec.
Its builder fixes what the spec varies, so TPrimat sets each from the spec:

- heads, KV heads and head_dim: the builder leaves the attention helper's defaults (GPT-OSS-20B's 64, 8, 64), so
  every layer's attention is rebuilt with the helper from the spec's numbers;
- the sliding window: the builder gives every even layer (counted from 0) a window of 128. The spec's window W (a
  token sees itself and W - 1 earlier tokens, Hugging Face's sliding_window) is set on every layer but each
  full_attention_every-th (counted from 1): layers 1, 3, ... windowed, 2, 4, ... full, as torchtitan's and Hugging
  Face's own. torchtitan's W means the same: FlexAttention's mask keeps q - kv < W
  (models/common/attention.py, get_sliding_window_mask_mod), flash attention's window is (W - 1, 0);
- load balancing: the builder's load_balance_coeff is torchtitan's auxiliary-loss-free expert bias (1e-3 in its
  _20b), not the spec's "none": it is None (no bias, no update hook), as Qwen3's (train/torchtitan/moe.py);
- the router's score function and top-k renormalisation, and the SwiGLU's clamp, from the spec.

What torchtitan's gpt_oss always has, and the spec's GPT-OSS too: attention sinks (a learned logit per head: the
attention's output scaled by sigmoid(lse - sink), the sink's share of the softmax; models/gpt_oss/model.py:34-40),
biases on QKV, the output projection, the router and both expert projections, the clamped SwiGLU (gate x
sigmoid(1.702 gate) x (up + 1), gate <= limit, |up| <= limit; models/gpt_oss/moe.py:67-74) and YaRN (its CosSinRoPE
with the spec's factor, betas and truncation; the attention factor 0.1 ln(factor) + 1, Hugging Face's and
megatron-core's default, folded into the softmax scale squared: model.py:72-78). tests/test_train_torchtitan_gpt_oss.py
holds the tiny model's forward to Hugging Face's GptOssForCausalLM with the same weights.

Its attention needs the log-sum-exp for the sinks, which only FlexAttention (no backward on the CPU) and flash
attention's varlen (GPUs only) give: GPT-OSS trains in torchtitan on GPUs only (train/torchtitan/settings.py refuses
the CPU). TPrimat builds it with FlexAttention, as every other torchtitan model of TPrimat's (torchtitan's gpt_oss
registry defaults to varlen). Its experts compute in bf16 whatever the precision, as Qwen3's, but return bf16 too
(moe.py:160-188), which the token combine cannot add into an fp32 run's activations (token_dispatcher.py:156-167):
PRECISION=fp32 is refused as well.
"""

from __future__ import annotations

import torch
from torchtitan.models import gpt_oss as titan_gpt_oss
from torchtitan.models.common import CosSinRoPE, Embedding, Linear, RMSNorm, RoPE
from torchtitan.models.common.moe import GroupedExperts
from torchtitan.models.gpt_oss.model import GptOssModel

from utils.spec.models import FEATURES

COMM_BACKEND = "standard"  # torchtitan's all-to-all dispatcher (local at EP=1): its gpt_oss registry's default


def window(numbers: dict, layer: int) -> int | None:
    """The sliding window of a layer (counted from 0), None for full attention: the spec's window on every layer
    but each full_attention_every-th counted from 1 (utils.spec.models.ModelSpec.full_attention_every)."""
    every = numbers["full_attention_every"]
    return None if every and (layer + 1) % every == 0 else numbers["sliding_window"]


def rope(numbers: dict) -> CosSinRoPE.Config:
    """The spec's RoPE as torchtitan's CosSinRoPE: YaRN's numbers where the spec has YaRN."""
    scaling = numbers["rope_scaling"]
    yarn = {"scaling": "yarn", "rope_factor": scaling["factor"], "beta_fast": scaling["beta_fast"],
            "beta_slow": scaling["beta_slow"], "truncate": scaling["truncate"],
            "original_seq_len": scaling["original_max_position_embeddings"]} \
        if scaling.get("rope_type") == "yarn" else {}
    return CosSinRoPE.Config(dim=numbers["head_dim"], max_seq_len=numbers["max_seq_len"], theta=numbers["rope_theta"],
                             **yarn)


def gpt_oss(numbers: dict, attention: str) -> GptOssModel.Config:
    """torchtitan's gpt_oss model config with exactly the spec's numbers (settings.py's model())."""
    dim, vocab, moe = numbers["dim"], numbers["vocab_size"], numbers["moe"]
    layers = titan_gpt_oss._build_gptoss_layers(
        dim=dim, n_layers=numbers["num_layers"], hidden_dim=moe["expert_ffn_size"], num_experts=moe["num_experts"],
        top_k=moe["top_k"], load_balance_coeff=None, attn_backend=attention, fuse_qkv=True,
        moe_comm_backend=COMM_BACKEND, rope=rope(numbers))
    for layer_id, layer in enumerate(layers):
        layer.attention = titan_gpt_oss._make_gptoss_attn_config(
            dim=dim, layer_id=layer_id, attn_backend=attention, n_heads=numbers["n_heads"],
            n_kv_heads=numbers["n_kv_heads"], head_dim=numbers["head_dim"],
            sliding_window_size=window(numbers, layer_id), fuse_qkv=True, rope=rope(numbers))
        layer.moe.routed_experts.inner_experts.swiglu_limit = numbers["swiglu_limit"]
        layer.moe.router.score_func = moe["score_function"]
        layer.moe.router.route_norm = moe["norm_topk_prob"]
    return GptOssModel.Config(
        dim=dim, vocab_size=vocab, enable_weight_tying=numbers["tied_embeddings"], layers=layers,
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim,
                                        param_init=titan_gpt_oss._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=titan_gpt_oss._NORM_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=vocab,
                              param_init=titan_gpt_oss._output_linear_init(dim)))


def features(model: torch.nn.Module) -> list[str]:
    """The model features (utils.spec.models.FEATURES) a built torchtitan model (any of TPrimat's) has, read off its
    modules and the config it was built from (whose windows its attention masks are made of, model.py:256-269):
    windows and whether some layers attend fully, attention sinks, a bias on every linear layer and expert, the
    clamped SwiGLU, YaRN."""
    windows = [getattr(layer.attention, "sliding_window_size", None) for layer in model.config.layers]
    windowed = [size for size in windows if size is not None]
    layers = list(model.layers.values())
    linears = [module for layer in layers for module in layer.modules() if isinstance(module, torch.nn.Linear)]
    experts = [module for layer in layers for module in layer.modules() if isinstance(module, GroupedExperts)]
    present = {"sliding_window": bool(windowed), "alternating_window": bool(windowed) and None in windows,
               "attention_sinks": any(name.endswith(".sinks") for name, _ in model.named_parameters()),
               "linear_bias": all(module.bias is not None for module in linears)
               and all(any("bias" in name for name, _ in module.named_parameters()) for module in experts),
               "clamped_swiglu": bool(experts) and all(getattr(module, "swiglu_limit", None) is not None
                                                       for module in experts),
               "yarn": any(module.config.scaling == "yarn" and module.config.rope_factor > 1.0
                           for module in model.modules() if isinstance(module, RoPE))}
    return [name for name in FEATURES if present[name]]
