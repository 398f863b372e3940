"""TPrimat's config function for torchtitan 0.3.0: `python -m torchtitan.train --module train.torchtitan --config
tprimat` (torchtitan/config/manager.py, ConfigManager._load_config, imports <module>.config_registry and calls the
function) returns the Trainer.Config of one run, from the settings of train/torchtitan/settings.py named by
TPRIMAT_TORCHTITAN_SETTINGS.

A dense model is torchtitan's llama3 model built from the spec's numbers with the helpers its own registry uses
(torchtitan/models/llama3/__init__.py: _build_llama3_layers and the parameter initialisations, private names of the
pinned 0.3.0): FlexAttention (its llama3 default), fused QKV, Llama 3's RoPE scaling where the spec has one, the
spec's norm epsilon, and Qwen 2.5's QKV bias as a bias on the fused QKV projection (whose tensor-parallel placement
torchtitan shards with the weight: models/common/decoder_sharding.py). A mixture of experts is its qwen3 MoE model
(Qwen3 30B-A3B: train/torchtitan/moe.py) or its gpt_oss model (GPT-OSS-20B: train/torchtitan/gpt_oss.py), each
parallelised by its own parallelize_fn. The loss is its configs' chunked cross entropy, the data TPrimat's
(train/torchtitan/data.py), the trainer TPrimat's timed one (train/torchtitan/trainer.py, which adds megatron-core's
load-balancing loss to a MoE model's routers where the spec has one).
Every dotted path of the settings' `set` must name an existing field: a misspelt or renamed one stops the run.

On ranks other than the one torchtitan logs metrics on (rank 0 without pipeline parallelism), its INFO lines are
silenced, so that one metrics line per step reaches the log; warnings and errors of every rank still do.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.optimizer import OptimizersContainer, register_moe_load_balancing_hook
from torchtitan.components.optimizer.optimizer import ParamGroupConfig
from torchtitan.distributed.pipeline_parallel import pipeline_llm
from torchtitan.models import llama3 as titan_llama
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.attention import ScaledDotProductAttention
from torchtitan.models.gpt_oss import parallelize_gptoss
from torchtitan.models.gpt_oss.model import GptOssModel
from torchtitan.models.llama3.model import Llama3Model
from torchtitan.models.qwen3 import parallelize_qwen3
from torchtitan.models.qwen3.model import Qwen3Model
from torchtitan.protocols.model_spec import ModelSpec

from train.common import console
from train.torchtitan import gpt_oss, moe
from train.torchtitan.data import PreparedDataLoader
from train.torchtitan.settings import SETTINGS_ENV
from train.torchtitan.trainer import TimedTrainer

ATTENTION = "flex"  # models/llama3/__init__.py, model_registry's default, which the layers are built with
# torchtitan's own wiring of each model (models/{llama3,qwen3,gpt_oss}/__init__.py: model_registry): its parallelize_fn,
# and for a MoE model its load-balancing hook, which registers nothing where no layer has an expert bias (moe.py)
PARALLELIZE = {"llama3": titan_llama.parallelize_llama, "qwen3": parallelize_qwen3, "gpt_oss": parallelize_gptoss}


def read_settings() -> dict:
    path = os.environ.get(SETTINGS_ENV)
    if not path:
        raise SystemExit(f"{SETTINGS_ENV} is not set: start torchtitan through TPrimat's launcher "
                         "(train/launch.sh PLATFORM torchtitan MODEL), which writes the run's settings")
    return json.loads(Path(path).read_text())


def build_model(numbers: dict, attention: str = ATTENTION) -> Llama3Model.Config | Qwen3Model.Config | \
        GptOssModel.Config:
    """torchtitan's model config (numbers["name"]: its llama3, qwen3 MoE or gpt_oss model) with exactly the spec's
    numbers; attention "sdpa": each layer's inner attention torchtitan's ScaledDotProductAttention (causal) instead of
    FlexAttention (settings.py, ATTENTION). torchtitan's own builder refuses "sdpa" for language models
    (models/common/config_utils.py:97-101) but takes the layer's config set afterwards; not GPT-OSS's, whose sinks
    need the attention's log-sum-exp (settings.py refuses it)."""
    name = numbers["name"]
    if name == "gpt_oss" and attention != ATTENTION:
        raise ValueError(f"attention {attention!r}: TPrimat builds torchtitan's gpt_oss layers with {ATTENTION} only")
    config = {"llama3": llama, "qwen3": moe.qwen3_moe, "gpt_oss": gpt_oss.gpt_oss}[name](numbers, ATTENTION)
    for _, norm, _, _ in config.traverse(RMSNorm.Config):
        norm.eps = numbers["norm_eps"]
    if attention == "sdpa":
        for layer in config.layers:
            layer.attention.inner_attention = ScaledDotProductAttention.Config()
    elif attention != ATTENTION:
        raise ValueError(f"attention {attention!r}: TPrimat builds torchtitan's layers with {ATTENTION} or sdpa")
    if numbers["qkv_bias"]:
        for fqn, linear, _, _ in config.traverse(Linear.Config):
            if fqn.endswith(".wqkv"):
                linear.bias = True
    return config


def llama(numbers: dict, attention: str) -> Llama3Model.Config:
    """torchtitan's llama3 model config with the spec's numbers."""
    dim, heads = numbers["dim"], numbers["n_heads"]
    scaling = numbers["rope_scaling"]
    rope = ComplexRoPE.Config(
        dim=dim // heads, max_seq_len=numbers["max_seq_len"], theta=numbers["rope_theta"],
        **({"scaling": "llama", "scaling_factor": scaling["factor"], "low_freq_factor": scaling["low_freq_factor"],
            "high_freq_factor": scaling["high_freq_factor"],
            "original_max_position_embeddings": scaling["original_max_position_embeddings"]} if scaling else {}))
    vocab, tied = numbers["vocab_size"], numbers["tied_embeddings"]
    return Llama3Model.Config(
        dim=dim, vocab_size=vocab, enable_weight_tying=tied,
        tok_embeddings=Embedding.Config(
            num_embeddings=vocab, embedding_dim=dim,
            param_init=titan_llama._EMBEDDING_SKIP_INIT if tied else titan_llama._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=titan_llama._NORM_INIT),
        lm_head=Linear.Config(in_features=dim, out_features=vocab, param_init=titan_llama._output_linear_init(dim)),
        layers=titan_llama._build_llama3_layers(
            n_layers=numbers["num_layers"], dim=dim, n_heads=heads, n_kv_heads=numbers["n_kv_heads"],
            hidden_dim=numbers["ffn_hidden"], rope=rope, fuse_qkv=True, attn_backend=attention))


def apply(config: TimedTrainer.Config, values: dict) -> None:
    """Set each dotted field path; one that names no field of torchtitan's config is an error."""
    for path, value in values.items():
        *parents, name = path.split(".")
        target = config
        for part in parents:
            target = getattr(target, part)
        if not hasattr(target, name):
            raise AttributeError(f"torchtitan's {type(target).__qualname__} has no field {name!r} ({path}): this "
                                 "is not the torchtitan requirements/torchtitan.txt pins")
        setattr(target, name, value)


def quiet_other_ranks() -> None:
    """torchtitan logs its metrics line on every rank; only the first rank's is kept (the loss is global)."""
    if int(os.environ.get("RANK", "0")) != 0:
        logging.getLogger().setLevel(logging.WARNING)


def tprimat() -> TimedTrainer.Config:
    """The run's Trainer.Config (torchtitan's config function)."""
    console.whole_lines()  # torchtitan calls this in its own process, before it prints a step
    settings = read_settings()
    numbers = settings["model"]
    model = build_model(numbers, settings["attention"])
    name = numbers["name"]
    config = TimedTrainer.Config(
        model_spec=ModelSpec(name=name, flavor=numbers["variant"], model=model, pipelining_fn=pipeline_llm,
                             state_dict_adapter=None, parallelize_fn=PARALLELIZE[name],
                             post_optimizer_build_fn=register_moe_load_balancing_hook if numbers["moe"] else None),
        loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=model.vocab_size)),
        optimizer=OptimizersContainer.Config(param_groups=[
            ParamGroupConfig(pattern=group["pattern"], optimizer_name="AdamW",
                             optimizer_kwargs={**group["kwargs"], "betas": tuple(group["kwargs"]["betas"])})
            for group in settings["optimizer"]]),
        dataloader=PreparedDataLoader.Config(request=settings["request"]),
    )
    apply(config, settings["set"])
    quiet_other_ranks()
    return config
