"""The FP8 delayed-scaling setting megatron-core leaves to Transformer Engine: whether each step's amax is
all-reduced across the ranks before the scales are computed (DelayedScaling's reduce_amax). megatron-core's
TEDelayedScaling passes none, so mega, NeMo and Megatron-Bridge train with the installed TE's default; their
read-backs report it as fp8_reduce_amax (utils.spec.fairness compares it with Primus's, which is off)."""

from __future__ import annotations


def te_reduce_amax() -> bool | None:
    """The installed Transformer Engine's DelayedScaling default for reduce_amax; None without it (no FP8 there)."""
    try:
        from transformer_engine.common.recipe import DelayedScaling
    except ImportError:
        return None
    return bool(DelayedScaling().reduce_amax)
