"""The model features (utils.spec.models.FEATURES) a megatron-core model is built with, read off its TransformerConfig
(mega's, or Megatron-Bridge's model provider, which is one) and its position embedding: the result's
effective.model_features, which the judge holds to the spec's (evaluate/model_checks.py). Plain getattr only, so a
megatron-core without a field reads as a model without that feature."""

from __future__ import annotations

from utils.spec.models import FEATURES


def megatron_features(config: object, position_embedding_type: str) -> list[str]:
    """FEATURES the config builds: a window (window_size), full attention every N-th layer (window_attn_skip_freq),
    learned attention sinks (softmax_type "learnable"), biases (add_bias_linear), the clamped SwiGLU
    (activation_func_clamp_value) and YaRN (the position embedding)."""
    present = {"sliding_window": bool(getattr(config, "window_size", None)),
               "alternating_window": getattr(config, "window_attn_skip_freq", None) is not None,
               "attention_sinks": getattr(config, "softmax_type", "vanilla") == "learnable",
               "linear_bias": bool(getattr(config, "add_bias_linear", False)),
               "clamped_swiglu": getattr(config, "activation_func_clamp_value", None) is not None,
               "yarn": position_embedding_type == "yarn"}
    return [name for name in FEATURES if present[name]]
