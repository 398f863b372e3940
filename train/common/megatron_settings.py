"""What NeMo 2 and Megatron-Bridge share of TPrimat's request in megatron-core's names: both build a megatron-core
GPT model from a TransformerConfig-shaped config, a DDP config and a mixed-precision config whose field names are
the same (NeMo's MegatronMixedPrecision, Megatron-Bridge's MixedPrecisionConfig), each under its own attribute
prefix. train/nemo/recipe.py and train/mbridge/recipe.py map the rest, their own paths and presets; neither imports
the other."""

from __future__ import annotations

from utils.spec import precision as precisions
from utils.spec.models import ModelSpec
from utils.spec.request import Request

# The fairness settings both take in megatron-core's DDP config (DDP overlap, fp32 reduction, the NaN check); the
# attention backend each builds as megatron-core's AttnBackend enum, flash attention comes through the environment
# (NVTE_FLASH_ATTN in utils/machine/platform_env.py), the FP8 recipe through the mixed-precision settings below.
DDP_KEYS = ("overlap_grad_reduce", "overlap_param_gather", "use_distributed_optimizer", "grad_reduce_in_fp32",
            "check_for_nan_in_grad", "average_in_collective")
DELAYED_KEYS = ("fp8_margin", "fp8_amax_history_len", "fp8_amax_compute_algo")  # the delayed-scaling recipe's own
# The other fairness settings, by the megatron-core config that holds them (the model's TransformerConfig, the
# OptimizerConfig, the parallel layout), as {TPrimat's fairness name: megatron-core's field}
FAIRNESS_FIELDS = {
    "model": {"bias_swiglu_fusion": "bias_activation_fusion", "apply_rope_fusion": "apply_rope_fusion",
              "bias_dropout_fusion": "bias_dropout_fusion", "cross_entropy_loss_fusion": "cross_entropy_loss_fusion",
              "cross_entropy_fusion_impl": "cross_entropy_fusion_impl",
              "gradient_accumulation_fusion": "gradient_accumulation_fusion",
              "attention_softmax_in_fp32": "attention_softmax_in_fp32"},
    "optimizer": {"use_distributed_optimizer": "use_distributed_optimizer", "adam_eps": "adam_eps"},
    "parallel": {"context_parallel_size": "context_parallel_size"},
}


def fairness_paths(prefixes: dict[str, str]) -> dict[str, str]:
    """{fairness name: attribute path} of FAIRNESS_FIELDS under each framework's prefix for the config that holds
    them (NeMo's recipe: "model.config.", "optim.config.", "trainer.strategy."; Megatron-Bridge's ConfigContainer:
    "model.", "optimizer.", "model.")."""
    return {name: prefixes[where] + field for where, fields in FAIRNESS_FIELDS.items() for name, field in fields.items()}


def architecture(spec: ModelSpec, padded_vocab_size: int, prefix: str) -> dict[str, object]:
    """The model's numbers from TPrimat's spec as megatron-core's TransformerConfig names them, each under `prefix`
    (NeMo's recipe: "model.config."; Megatron-Bridge's: "model."), so the framework builds exactly the variant
    requested (a proxy's fewer layers too). A sliding window is set as TPrimat's spec means it, the sliding_window
    tokens Hugging Face's Mistral sees (megatron_window); NeMo's own MistralConfig7B says [4096, 0], one token more.
    A head width other than hidden / heads (kv_channels) and QK-norm are set where the spec has them (Qwen3 MoE), so
    that a model config's own never decides them; elsewhere megatron-core's derived width and no QK-norm stand."""
    window = {"window_size": list(spec.megatron_window)} if spec.megatron_window else {}
    heads = {**({"kv_channels": spec.head_dim} if spec.explicit_head_dim else {}),
             **({"qk_layernorm": True} if spec.qk_norm else {})}
    numbers = {
        "num_layers": spec.num_layers,
        "hidden_size": spec.hidden_size,
        "ffn_hidden_size": spec.ffn_hidden_size,
        "num_attention_heads": spec.num_attention_heads,
        "num_query_groups": spec.num_kv_heads,
        "vocab_size": padded_vocab_size,  # both build a preset vocab_size as it is
        "rotary_base": spec.rope_theta,
        "layernorm_epsilon": spec.norm_eps,
        **window, **heads,
    }
    return {prefix + name: value for name, value in numbers.items()}


def precision_settings(req: Request) -> dict:
    """The mixed-precision settings, in the names NeMo's MegatronMixedPrecision and Megatron-Bridge's
    MixedPrecisionConfig share: their grad_reduce_in_fp32 overrides the DDP config's (bf16_mixed ships True), so
    both say the profile's. Below 16 bits, the precision's switch (utils.spec.precision.megatron_settings) and the
    profile's FP8 settings over the preset's: every layer quantized (the current-scaling presets keep the first and
    last in bf16, which mega and Primus do not), the parameters gathered as the profile says (fp8_param_gather, also
    for FP4's fp4_param_gather)."""
    fairness, precision = req.fairness.table, req.training.precision
    settings = {key: fairness[key] for key in ("grad_reduce_in_fp32", "fp8_param_gather")}
    if precision not in precisions.LOW:
        return settings
    settings.update(precisions.megatron_settings(precision, str(fairness["fp8_recipe"]), str(fairness["fp8_format"])))
    if precision == "fp8":
        settings.update({key: fairness[key] for key in DELAYED_KEYS})
    settings["first_last_layers_bf16"] = False
    if "fp4" in settings:
        settings["fp4_param_gather"] = fairness["fp8_param_gather"]
    return settings
