"""The torch-native frameworks' model (fsdp, autotp): a Hugging Face `transformers` causal LM built from TPrimat's
model spec (utils/spec/models.py) with random weights; nothing is downloaded.

Every architecture number comes from the spec; the initialisation std is the workload's (utils.spec.fairness). The
model is built from one seed on every rank, so every layout of a seed starts from the same weights (TP=2 and
TP=1 alike), and its parameter count must equal the spec's (the FLOPs and the result rely on it).
"""

from __future__ import annotations

import importlib.util

import torch

from train.common.hf_config import hf_config
from train.common.outcome import SettingsError
from utils.spec.models import ModelSpec

ATTENTION = ("sdpa", "eager", "flash_attention_2")


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
