"""The fused kernels megatron-core's local layers (TRANSFORMER_IMPL=local, and the CPU) can call on this machine, by
TransformerConfig's switch: one asked for without its kernel is turned off by every Megatron path (mega, mbridge and
bench's Megatron-LM run) and recorded, since megatron-core would otherwise stop or fail at the first step:

- apply_rope_fusion: the fused RoPE of Transformer Engine or Apex (rope_utils.fused_apply_rotary_pos_emb); without
  it TransformerConfig.__post_init__ raises "apply_rope_fusion is not available" (megatron-core 0.19.2,
  transformer/transformer_config.py);
- masked_softmax_fusion: Apex's scaled_masked_softmax_cuda, which FusedScaleMaskSoftmax.is_kernel_available imports
  for a bf16 input (fusions/fused_softmax.py get_batch_per_block) rather than falling back to torch's softmax;
- persist_layer_norm: Apex's persistent LayerNorm; without Apex the local layers' norm is WrappedTorchNorm
  (models/backends.py:25-35), which asserts the switch off (transformer/torch_norm.py:48), so the model's first
  layer stops the run (Megatron-Bridge's Llama bridge turns it on, models/llama/llama_bridge.py:69 of 0.6.2, and
  Megatron-LM's pretrain_gpt.py has it on unless --no-persist-layer-norm).

The optimizer is the other fused kernel such a stack may lack: megatron-core falls back to torch's AdamW by itself,
and every Megatron path records which it got (features.optimizer_fusion), since the memory prediction differs.
"""

from __future__ import annotations

import importlib.util


def available() -> dict[str, bool]:
    """TransformerConfig switch -> whether its kernel is installed (a GPU is not asked)."""
    from megatron.core.models.common.embeddings import rope_utils

    return {"apply_rope_fusion": getattr(rope_utils, "fused_apply_rotary_pos_emb", None) is not None,
            "masked_softmax_fusion": importlib.util.find_spec("scaled_masked_softmax_cuda") is not None,
            "persist_layer_norm": importlib.util.find_spec("apex") is not None}


def fused_optimizer() -> bool:
    """Whether megatron-core's Adam is Transformer Engine's or Apex's FusedAdam; False where neither imports and it
    falls back to torch's AdamW under the same name (megatron-core 0.19.2 optimizer/__init__.py:13-35; 0.12 has no
    USING_PYTORCH_OPTIMIZER flag beside it), whose foreach step holds a square root of every second moment at once
    (utils.predict.parameters.adamw_temporaries)."""
    import torch
    from megatron.core import optimizer

    return optimizer.Adam is not torch.optim.AdamW
