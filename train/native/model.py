"""The torch-native frameworks' model (fsdp, autotp): a Hugging Face `transformers` causal LM built from TPrimat's
model spec (utils/spec/models.py) with random weights; nothing is downloaded.

Every architecture number comes from the spec; the initialisation std is the workload's (utils.spec.fairness). The
model is built from one seed on every rank, so every layout of a seed starts from the same weights (TP=2 and
TP=1 alike), and its parameter count must equal the spec's (the FLOPs and the result rely on it).
"""

from __future__ import annotations

import importlib.util
import inspect

import torch

from train.common.outcome import SettingsError
from utils.spec.fairness import WORKLOAD
from utils.spec.models import ModelSpec

ATTENTION = ("sdpa", "eager", "flash_attention_2")


def config_classes() -> dict:
    """Each Hugging Face family's config class (utils.spec.models' hf_family): a new family is one line here."""
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    return {"llama": LlamaConfig, "qwen2": Qwen2Config, "mistral": MistralConfig}


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
    config = cls(vocab_size=spec.vocab_size, hidden_size=spec.hidden_size, intermediate_size=spec.ffn_hidden_size,
                 num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_attention_heads,
                 num_key_value_heads=spec.num_kv_heads, max_position_embeddings=spec.max_position_embeddings,
                 rms_norm_eps=spec.norm_eps, **rope_arguments(spec), tie_word_embeddings=spec.tied_embeddings,
                 initializer_range=float(WORKLOAD["init_method_std"]), attention_dropout=0.0, use_cache=False,
                 **extra)
    config._attn_implementation = attn_impl
    return config


def check_attention(attn_impl: str) -> None:
    """An attention implementation this Python can run (flash needs the flash_attn package)."""
    if attn_impl not in ATTENTION:
        raise SettingsError(f"ATTN_IMPL={attn_impl}: not one of {', '.join(ATTENTION)}")
    if attn_impl == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        raise SettingsError("ATTN_IMPL=flash_attention_2 needs the flash_attn package, which this Python lacks: "
                            "install flash-attn or set ATTN_IMPL=sdpa")


def count_parameters(model: torch.nn.Module) -> int:
    return sum(param.numel() for param in model.parameters())


def build(spec: ModelSpec, attn_impl: str, seed: int, device: torch.device) -> torch.nn.Module:
    """The randomly initialised model in fp32 on the device, the same on every rank for one seed."""
    from transformers import AutoModelForCausalLM

    check_attention(attn_impl)
    torch.manual_seed(seed)
    with device:
        # torch's default dtype (fp32): transformers 4 and 5 name the dtype argument differently
        model = AutoModelForCausalLM.from_config(hf_config(spec, attn_impl), attn_implementation=attn_impl)
    if next(model.parameters()).dtype != torch.float32:
        raise SettingsError(f"the model was built in {next(model.parameters()).dtype}, not fp32: torch's default "
                            "dtype was changed before the build")
    parameters = count_parameters(model)
    if parameters != spec.param_count():
        raise RuntimeError(f"the built model has {parameters} parameters, the {spec.variant} spec "
                           f"{spec.param_count()}: utils/spec/models.py and train/native/model.py disagree")
    return model
