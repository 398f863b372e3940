"""fsdp's tensor parallelism: torchtitan's plan (torchtitan/models/llama3/infra/parallelize.py's apply_tp) under
Hugging Face's module names, applied to a built Llama/Qwen/Mistral causal LM, and described for the read-back.

Why torchtitan's and not only the projections: with the embedding, the norms and the LM head whole, every TP rank
recomputes the whole head (6% of Llama 3.1 8B's FLOPs, which TFLOP/s counts once) and holds full fp32 logits.
Here the embedding is row-wise over the vocabulary with its output reduce-scattered to sequence shards, every
norm runs on its rank's sequence shard (sequence parallelism), attention and MLP all-gather their input, o and
down reduce-scatter back, and the head is column-wise with its logits left sharded over the vocabulary for the
loss (loss parallelism: torch's loss_parallel() around the loss and its backward, train/fsdp/engine.py).

Hugging Face's model builds RoPE's cos and sin from position_ids and its causal mask from the embedding's output,
which is now sequence-sharded (S/TP long): the engine always passes the full position_ids, and check_mask (a
pre-hook on every attention) refuses any mask but None, i.e. SDPA's or flash attention's own causal masking over
the gathered, full-length queries and keys. Eager attention always gets an explicit mask, S/TP long, and is refused
at TP > 1 (utils/config/native.py, and check() here for a request written by hand).
"""

from __future__ import annotations

import torch

ATTENTION_INPUT = "hidden_states"  # Hugging Face's decoder layers call self_attn with keyword arguments, mlp without
COLUMN = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
ROW = ("self_attn.o_proj", "mlp.down_proj")
NORMS = ("input_layernorm", "post_attention_layernorm")
EMBEDDING, FINAL_NORM, HEAD = "model.embed_tokens", "model.norm", "lm_head"


def plans(fp8: bool) -> tuple[dict, dict]:
    """(the root's plan, one decoder layer's plan): module name -> ParallelStyle (torchao's float8 styles for the
    layers' linears and their inputs under FP8, as torchtitan's tensorwise FP8 TP; the head stays high precision)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    if fp8:
        from torchao.float8.float8_tensor_parallel import Float8ColwiseParallel as Column
        from torchao.float8.float8_tensor_parallel import Float8RowwiseParallel as Row
        from torchao.float8.float8_tensor_parallel import PrepareFloat8ModuleInput as Prepare
    else:
        from torch.distributed.tensor.parallel import ColwiseParallel as Column
        from torch.distributed.tensor.parallel import PrepareModuleInput as Prepare
        from torch.distributed.tensor.parallel import RowwiseParallel as Row
    root = {EMBEDDING: RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            FINAL_NORM: SequenceParallel(),
            HEAD: ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)}
    layer = {**{name: SequenceParallel() for name in NORMS},
             "self_attn": Prepare(input_kwarg_layouts={ATTENTION_INPUT: Shard(1)},
                                  desired_input_kwarg_layouts={ATTENTION_INPUT: Replicate()}),
             "mlp": Prepare(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
             **{name: Column() for name in COLUMN},
             **{name: Row(output_layouts=Shard(1)) for name in ROW}}
    return root, layer


def describe(style) -> str:
    """One ParallelStyle as the read-back says it: its class and the layouts it goes from and to."""
    name = type(style).__name__
    if hasattr(style, "sequence_sharding"):
        return f"{name} {style.sequence_sharding[0]!r}"
    if hasattr(style, "output_layouts"):
        return f"{name} {style.input_layouts[0]!r} -> {style.output_layouts[0]!r}"
    if style.input_kwarg_layouts:
        return ", ".join(f"{name} {key}: {layout!r} -> {style.desired_input_kwarg_layouts[key]!r}"
                         for key, layout in style.input_kwarg_layouts.items())
    return f"{name} {style.input_layouts[0]!r} -> {style.desired_input_layouts[0]!r}"


def description(fp8: bool) -> dict[str, str]:
    """The plan as the read-back records it: root modules by their names, a decoder layer's as layers.N.<name>."""
    root, layer = plans(fp8)
    return {**{name: describe(style) for name, style in root.items()},
            **{f"layers.N.{name}": describe(style) for name, style in layer.items()}}


def check_mask(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    """Refuse an explicit attention mask under sequence parallelism: Hugging Face built it from the sequence shard
    (S/TP long), so it would mask the wrong keys; SDPA and flash attention mask causally by themselves (None)."""
    if kwargs.get("attention_mask") is not None:
        raise RuntimeError(f"attention got an explicit mask of shape {tuple(kwargs['attention_mask'].shape)} under "
                           "sequence parallelism: it was built from the sequence-sharded embedding output and would "
                           "be wrong; only ATTN_IMPL=sdpa or flash_attention_2 without a mask run at TP > 1")


def apply(model: torch.nn.Module, mesh, fp8: bool) -> int:
    """The plan on the model over the TP mesh, a tied head re-tied to the sharded embedding (parallelize_module
    replaces each parameter, which unties them), every attention's mask checked; the LM head's vocabulary rows per
    TP rank, read from the sharded weight."""
    from torch.distributed.tensor.parallel import parallelize_module

    root, layer_plan = plans(fp8)
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    parallelize_module(model, mesh, root)
    if tied:
        model.lm_head.weight = model.model.embed_tokens.weight
    for layer in model.model.layers:
        parallelize_module(layer, mesh, layer_plan)
        layer.self_attn.register_forward_pre_hook(check_mask, with_kwargs=True)
    return model.lm_head.weight.to_local().shape[0]
