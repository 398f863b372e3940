"""The fairness table: performance settings every framework must run with, whatever its defaults.

NeMo's recipes and Primus's shipped configs disagree on many of these (NeMo: CP=2, fused gradient
accumulation; Primus: no cross-entropy fusion, overlap off in the base config), so a comparison is
only fair when each launcher sets them explicitly to the values below. The names are
megatron-core's (Megatron-LM argument names); each launcher maps them onto its framework's own.
"""

from __future__ import annotations

# Settings with one value for every run. Why each value:
FAIRNESS: dict[str, object] = {
    "context_parallel_size": 1,  # NeMo's 8B recipe defaults to CP=2; TPrimat's layouts are TP x PP x DP
    "use_distributed_optimizer": True,  # ZeRO-1 sharded optimizer state, the default of all three stacks
    "overlap_grad_reduce": True,  # DP gradient reduce-scatter overlapped with the backward pass
    "overlap_param_gather": True,  # DP parameter all-gather overlapped with the forward pass
    "bias_swiglu_fusion": True,  # fused SwiGLU activation (NeMo: bias_activation_fusion)
    "apply_rope_fusion": True,  # fused rotary embedding kernel
    "bias_dropout_fusion": True,  # fused bias-dropout-add (dropout is 0 in both models)
    "cross_entropy_loss_fusion": True,  # fused vocab-parallel cross entropy
    "cross_entropy_fusion_impl": "native",  # megatron-core's own kernel, available on CUDA and ROCm
    "gradient_accumulation_fusion": False,  # Primus ships it off on ROCm; NeMo follows for parity
    "attention_backend": "auto",  # Transformer Engine's fused/flash attention kernels on both vendors
    "use_flash_attn": True,  # NeMo: NVTE_FLASH_ATTN=1 from utils/platform_env.py
    "adam_eps": 1e-8,
    "fp8_param_gather": False,  # with PRECISION=fp8: Primus's default; NeMo's FP8 plugin turns it on
}


def sequence_parallel(tp: int) -> bool:
    """Sequence parallelism accompanies tensor parallelism (it is meaningless at TP=1)."""
    return tp > 1
