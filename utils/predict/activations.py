"""Activations and the logits' buffers of one microbatch, per token and layer where they scale so: the tensors each
decoder layer and each loss keeps for backward, as megatron-core (its Transformer Engine spec on GPUs, its local spec
on the CPU), Hugging Face's Llama/Qwen and the frameworks' cross-entropies hold them. Each formula with its source and
how it is checked; the memory models (utils/predict/memory.py) place them in the moments of a step."""

from __future__ import annotations

import math

from utils.predict.layout import Layout
from utils.predict.moe import hf_moe_bytes_per_token, megatron_moe_bytes_per_token
from utils.spec.models import ModelSpec


def hf_layer_bytes_per_token(spec: ModelSpec, tp: int, width: int, sequence_parallel: bool = False) -> float:
    """What one Hugging Face Llama/Qwen decoder layer keeps for backward, per token (torch's autograd saves, counted
    tensor by tensor with saved_tensors_hooks and held against MemTracker in tests/test_utils_predict.py):
    each RMSNorm its input cast to fp32 (4h), 1/rms (4), the normalised value cast back (w h) and its output
    (w h); attention q and k after RoPE, v (w (a d + 2 g d)), the flash/SDPA output (w a d) and its log-sum-exp
    (4 a, fp32); the SwiGLU MLP gate, SiLU, up and their product (4 w f). Flash attention keeps no a x s x s scores;
    grouped-query attention keeps g KV heads (SDPA's enable_gqa, taken when there is no explicit mask). Under TP
    the heads and the FFN split; autotp's norms stay whole. With sequence parallelism (fsdp at TP > 1: torchtitan's
    plan) each norm runs on 1/TP of the tokens, but its output all-gathered for the column-parallel projections
    (what they save: w h per token) is whole. QK-norm (Qwen3) keeps each head's fp32 input, 1/rms and the normalised
    value cast back ((4 + w) d + 4 per query and KV head). A mixture of experts (fsdp: TP = 1) keeps no
    post-attention norm output but its router's fp32 input, in utils.predict.moe.hf_moe_bytes_per_token with the rest
    of its sparse block. From the sources; the CPU's measured peaks check TP = 1."""
    h, d, f, a, g = spec.hidden_size, spec.head_dim, spec.ffn_hidden_size, spec.num_attention_heads, spec.num_kv_heads
    shard = tp if sequence_parallel else 1
    outputs = (2 if spec.moe is None else 1) * width * h
    norms = 2 * (4 * h + 4 + width * h) / shard + outputs
    qk_norm = ((4 + width) * d + 4) * (a + g) if spec.qk_norm else 0
    attention = width * (2 * a * d + 2 * g * d) + 4 * a + qk_norm
    mlp = 4 * width * f if spec.moe is None else hf_moe_bytes_per_token(spec, width)
    return norms + (attention + mlp) // tp


def megatron_layer_bytes_per_token(spec: ModelSpec, tp: int, width: int, fused_swiglu: bool = True) -> float:
    """What one megatron-core decoder layer of the Transformer Engine spec (GPUs) keeps for backward, per token:
    Korthikanti et al. 2022 (arXiv 2205.05198, Table 2; Megatron-LM's theoretical_memory_usage.py uses it) redone for
    RMSNorm, grouped-query attention, flash attention and SwiGLU, without dropout (both models train without it). Per
    token, in the compute dtype w: each norm's input and rstd (w h + 4), the QKV projection's input (w h), q, k, v
    after RoPE (w (a d + 2 g d)), the flash output and log-sum-exp (w a d + 4 a), the MLP's input (w h), fc1's
    gate-and-up output (2 w f, the fused SwiGLU's input) and fc2's input (w f); without the fused bias-SwiGLU
    (the profile's bias_swiglu_fusion off) also the SiLU output and the up half plus glu_linear_offset (2 w f, as
    the local spec: megatron_local_layer_bytes). The paper's 34 s b h (h-wide MLP of 4h, multi-head, with dropout
    masks) becomes this; with sequence parallelism (TP > 1) the h-wide tensors are split over TP too, as the rest
    is. QK-norm (Qwen3: Transformer Engine's RMSNorm on each head) keeps its input, a part of the QKV projection's
    output that v holds too, and rstd (w d + 4 per query and KV head). A mixture of experts' layer in place of the
    MLP: utils.predict.moe.megatron_moe_bytes_per_token (the router keeps the MLP's input, the pre-MLP norm's output).
    From the sources, not checked on a GPU here (the CPU runs the local spec)."""
    h, d, f, a, g = spec.hidden_size, spec.head_dim, spec.ffn_hidden_size, spec.num_attention_heads, spec.num_kv_heads
    wide = 2 * (width * h + 4) + 2 * width * h
    qk_norm = (width * d + 4) * (a + g) if spec.qk_norm else 0
    attention = width * (2 * a * d + 2 * g * d) + 4 * a + qk_norm
    if spec.moe is not None:
        return (wide + attention) / tp + megatron_moe_bytes_per_token(spec, tp, width, True, fused_swiglu)
    return (wide + attention + (3 if fused_swiglu else 5) * width * f) / tp


def megatron_local_layer_bytes(spec: ModelSpec, tp: int, width: int, seq_len: int, mbs: int) -> float:
    """What one megatron-core decoder layer of the local spec (the CPU: torch's RMSNorm, megatron-core's own
    DotProductAttention and MLP, no fused kernels) keeps for backward, per token; every tensor seen alive at the end
    of a real CPU forward (tests/test_utils_predict_measured.py):
    - each of the two RMSNorms (torch.nn.functional.rms_norm, computed in fp32): the fp32 input, the fp32 normalised
      value, 1/rms (8 h + 4), and the output in the compute dtype (w h; in fp32 the input itself, which is the
      residual stream);
    - attention (megatron/core/transformer/dot_product_attention.py): q after RoPE (w a d), k and v repeated to the
      a query heads (repeat_interleave, 2 w a d, when g < a), the context made contiguous for the output projection
      (w a d), the softmax in fp32 (FusedScaleMaskSoftmax unfused, softmax_in_fp32: 4 a s) and the probabilities
      cast back for the value product (w a s, 16-bit runs); once for the microbatch the boolean causal mask
      (s x s bytes) and RoPE's cos and sin cast to w for q and for k (4 x s x d x w bytes, rope_utils.py);
    - QK-norm (Qwen3: torch's rms_norm on each head): the fp32 input, the fp32 normalised value and 1/rms (8 d + 4 per
      query and KV head); in fp32 the inputs are the queries, copied out of the QKV projection's output where their
      reshape to heads cannot be a view (1 < g < a on the rank: attention.py get_query_key_value_tensors), and the
      keys, a view that keeps that output whole (4 (a + 2 g) d);
    - the MLP (megatron/core/transformer/mlp.py, gated_linear_unit unfused): fc1's gate-and-up output (2 w f), the
      up half plus glu_linear_offset (a copy, w f), SiLU of the gate (w f) and their product, fc2's input (w f); a
      mixture of experts' layer in its place: utils.predict.moe.megatron_moe_bytes_per_token.
    Under TP the heads and the FFN split, and with sequence parallelism (TP > 1) the h-wide tensors too."""
    h, d, f, a, g = spec.hidden_size, spec.head_dim, spec.ffn_hidden_size, spec.num_attention_heads, spec.num_kv_heads
    w, s = width, seq_len
    norms = 2 * (8 * h + 4 + w * h)
    kv_heads = a if g < a else g
    probs = 4 + (w if w < 4 else 0)
    attention = w * (2 * a * d + 2 * kv_heads * d) + probs * a * s
    if spec.qk_norm:
        copied = 1 < max(g // tp, 1) < a // tp  # the queries' reshape on this rank's heads and groups
        inputs = 4 * (a + 2 * g) * d + (4 * a * d if copied else 0) if w == 4 else 4 * (a + g) * d
        attention += inputs + (4 * d + 4) * (a + g)
    shared = s * s + 4 * s * d * w  # the mask and RoPE's cos and sin, one for the microbatch's mbs sequences
    if spec.moe is not None:
        mlp = megatron_moe_bytes_per_token(spec, tp, w, False, False)
        return (norms + attention) / tp + mlp + shared / (mbs * s)
    return (norms + attention + 5 * w * f) / tp + shared / (mbs * s)


def activations(spec: ModelSpec, lay: Layout, in_flight: int = 1, final_norm: bool = True) -> int:
    """Activations of one stage at the start of backward: its layers' saved tensors for every microbatch in flight
    (1F1B: stage k of PP holds min(PP - k, GA) microbatches, the first stage the most; PP = 1: one, each microbatch's
    backward runs before the next forward), plus the model-level ones (the embedding's output and, on the stage that
    holds it, the final norm; RoPE's cos and sin in the Hugging Face model)."""
    tokens, w, h = lay.tokens, lay.width, spec.hidden_size
    if lay.memory_model == "megatron":
        if lay.on_gpu:
            per_layer = megatron_layer_bytes_per_token(spec, lay.tp, w, lay.fused_swiglu)
            norm = 2 * w * h + 4  # Transformer Engine's RMSNorm: input, rstd, output (the output layer's input)
        else:
            per_layer = megatron_local_layer_bytes(spec, lay.tp, w, lay.seq_len, lay.mbs)
            norm = 8 * h + 4 + w * h
        model_level = w * h + (norm if final_norm else 0)  # the embedding's output stays referenced through forward
        return math.ceil((per_layer * (spec.num_layers // lay.pp) + model_level) * tokens * in_flight)
    sequence_parallel = lay.memory_model == "fsdp2" and lay.tp > 1  # train/native/tensor_parallel.py
    shard = lay.tp if sequence_parallel else 1
    full = hf_layer_bytes_per_token(spec, lay.tp, w, sequence_parallel)
    checkpointed = spec.num_layers // lay.sac_every if lay.sac_every else 0
    stored = (spec.num_layers - checkpointed) * full + checkpointed * w * h / shard  # a checkpoint keeps its input
    # RoPE's cos and sin (whole: built from the full position_ids), the final norm (on its sequence shard) and its
    # output gathered for the LM head
    model_level = 8 + 2 * w * spec.head_dim + (4 * h + 4 + w * h) / shard + w * h
    return math.ceil((stored + model_level) * tokens)


def logits(spec: ModelSpec, lay: Layout) -> int:
    """The LM head's logits and the loss's buffers of one microbatch on the last stage, at their largest.
    megatron (tensor_parallel/cross_entropy.py, and fusions/fused_cross_entropy.py, which keeps the same tensors):
    calculate_logits_max's .float() copy of the w-wide logits becomes the fp32 softmax kept for backward (exp and
    division in place: 4 V), beside the w-wide logits at the loss and their gradient cast back to w at the start of
    backward (w V; in fp32 .float() is the logits themselves); then the output layer's backward holds that gradient
    with its weight gradient (V h w, added to the gradient buffer after) and the input gradient (h w), over V/TP.
    Hugging Face's cross-entropy on .float() logits (fsdp; autotp at TP = 1): the fp32 log-softmax output kept for
    backward (4 V) and the two fp32 gradients that meet at its backward (8 V). autotp's vocabulary-parallel head
    (TP > 1; deepspeed/sequence/cross_entropy.py): the w-wide logits, their .float() copy, logits - max and its exp
    (kept) at once (12 V + w V, the w V absent in fp32), over V/TP. fsdp's loss parallel (TP > 1: torch's
    loss_parallel() over the head's vocabulary-sharded logits) keeps Hugging Face's three fp32 tensors, over V/TP
    (from the source: torch/distributed/tensor/parallel/loss.py; the CPU's measured peaks check TP = 1)."""
    tokens, w, h = lay.tokens, lay.width, spec.hidden_size
    sixteen = w if w < 4 else 0
    if lay.memory_model == "megatron":
        vocab = spec.vocab_size // lay.tp
        at_loss = tokens * vocab * (4 + sixteen)
        head_backward = tokens * vocab * w + vocab * h * w + tokens * h * w
        return max(at_loss, head_backward)
    if lay.memory_model == "deepspeed" and lay.tp > 1:
        return tokens * (spec.vocab_size // lay.tp) * (12 + sixteen)
    if lay.memory_model == "fsdp2" and lay.tp > 1:
        return tokens * (spec.vocab_size // lay.tp) * 12
    return tokens * spec.vocab_size * 12
