"""TPrimat's model spec (utils/spec/models.py) as its family's Hugging Face config: what the torch-native frameworks
build their model from (train/native/model.py) and what Megatron-Bridge's recipes read as a local Hub folder
(train/mbridge/launch.py). No torch here: a dry run writes the config on a host Python without it (transformers'
config classes import without torch)."""

from __future__ import annotations

import inspect

from train.common.settings_file import SettingsError
from utils.spec.fairness import WORKLOAD
from utils.spec.models import ModelSpec


def config_classes() -> dict:
    """Each Hugging Face family's config class (utils.spec.models' hf_family): a new family is one line here."""
    from transformers import GptOssConfig, LlamaConfig, MistralConfig, Qwen2Config, Qwen3MoeConfig

    return {"llama": LlamaConfig, "qwen2": Qwen2Config, "mistral": MistralConfig, "qwen3_moe": Qwen3MoeConfig,
            "gpt_oss": GptOssConfig}


def moe_arguments(spec: ModelSpec) -> dict:
    """A mixture-of-experts spec in Hugging Face's qwen3_moe names (every layer sparse), the head width where it is
    not hidden/heads; {} for a dense spec of a family without them. Hugging Face's Qwen3 MoE has QK-norm and no
    shared expert: a spec that differs is refused (train.native.model's parameter count would refuse it later)."""
    extra = {"head_dim": spec.head_dim} if spec.explicit_head_dim else {}
    moe = spec.moe
    if moe is None:
        return extra
    if spec.hf_family == "gpt_oss":
        return {**extra, **gpt_oss_arguments(spec)}
    if moe.shared_experts or not spec.qk_norm or moe.score_function != "softmax":
        raise SettingsError(f"model {spec.key}: Hugging Face's {spec.hf_family} has QK-norm, a softmax router and no "
                            "shared expert; the spec asks otherwise")
    return {**extra, "num_experts": moe.num_experts, "num_experts_per_tok": moe.top_k,
            "moe_intermediate_size": moe.expert_ffn_size, "norm_topk_prob": moe.norm_topk_prob,
            "router_aux_loss_coef": moe.aux_loss_coeff, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "attention_bias": spec.qkv_bias}


def gpt_oss_arguments(spec: ModelSpec) -> dict:
    """The spec in Hugging Face's gpt_oss names: every layer sparse, its experts intermediate_size wide (GPT-OSS has no
    dense MLP), the layers windowed but every full_attention_every-th (counted from 1) as layer_types, the clamped
    SwiGLU's limit. Hugging Face's GPT-OSS always has attention sinks, biases on every linear layer, a softmax over the
    top-k router logits and no QK-norm or shared expert: a spec that differs is refused."""
    moe, every = spec.moe, spec.full_attention_every
    if (moe.shared_experts or spec.qk_norm or moe.score_function != "softmax" or not moe.norm_topk_prob
            or not (spec.attention_sinks and spec.linear_bias and spec.swiglu_limit and spec.sliding_window and every)):
        raise SettingsError(f"model {spec.key}: Hugging Face's gpt_oss has attention sinks, biases, a clamped SwiGLU, "
                            "alternating sliding windows, a softmax over the top-k and no QK-norm or shared expert; "
                            "the spec asks otherwise")
    return {"num_local_experts": moe.num_experts, "num_experts_per_tok": moe.top_k,
            "intermediate_size": moe.expert_ffn_size, "router_aux_loss_coef": moe.aux_loss_coeff,
            "attention_bias": spec.qkv_bias, "swiglu_limit": spec.swiglu_limit,
            "layer_types": ["sliding_attention" if spec.windowed(layer) else "full_attention"
                            for layer in range(1, spec.num_layers + 1)]}


def rope_arguments(spec: ModelSpec) -> dict:
    """The theta, and Llama 3's frequency scaling where the spec has it, as config arguments that transformers 4
    (the vendor images') and 5 (.venv's, which turns them into rope_parameters) both take."""
    scaling = {"rope_type": "llama3", **spec.rope_scaling} if spec.rope_scaling else None
    return {"rope_theta": spec.rope_theta, "rope_scaling": scaling}


def hf_config(spec: ModelSpec, attn_impl: str):
    """The spec as its family's Hugging Face config (the spec's tied or untied embeddings, no dropout, no KV
    cache)."""
    try:
        cls = config_classes()[spec.hf_family]
    except KeyError:
        raise SettingsError(f"model {spec.key}'s family {spec.hf_family} has no Hugging Face config class in "
                            "train/native/model.py; add it to config_classes()") from None
    # A family that can window its attention gets the spec's window, None included (Qwen2's config defaults to one)
    extra = {"sliding_window": spec.sliding_window} \
        if "sliding_window" in inspect.signature(cls.__init__).parameters else {}
    if cls.__name__ == "LlamaConfig":  # Qwen2's q/k/v always carry a bias; Llama's attention_bias adds o_proj's too
        extra["attention_bias"] = spec.qkv_bias
    arguments = dict(vocab_size=spec.vocab_size, hidden_size=spec.hidden_size, intermediate_size=spec.ffn_hidden_size,
                     num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_attention_heads,
                     num_key_value_heads=spec.num_kv_heads, max_position_embeddings=spec.max_position_embeddings,
                     rms_norm_eps=spec.norm_eps, **rope_arguments(spec), tie_word_embeddings=spec.tied_embeddings,
                     initializer_range=float(WORKLOAD["init_method_std"]), attention_dropout=0.0, use_cache=False,
                     **extra)
    config = cls(**{**arguments, **moe_arguments(spec)})  # a family's MoE names over the dense ones (GPT-OSS's MLP)
    config._attn_implementation = attn_impl
    return config
