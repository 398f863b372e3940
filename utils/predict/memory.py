"""Memory per GPU of one planned run, by part: weights, gradients, optimizer state, activations, logits and loss
buffers, and a workspace allowance; each formula with its source, each framework as it really lays memory out.

The parts are for the most loaded rank (TP shards, the first pipeline stage for activations and the embedding, the
last for the LM head and logits; rank 0 of its data-parallel group). Weights, gradients and optimizer state are
what the frameworks allocate, to the byte, for the tiny models on the CPU (tests/test_utils_predict.py counts the
real tensors); activations come from the tensors each layer keeps for backward, checked against PyTorch's
MemTracker. Standard library only: the plan runs it before any environment exists.

Megatron (mega, nemo, prim; megatron-core's DistributedDataParallel + DistributedOptimizer, which NeMo and Primus
run): every parameter and its gradient live in one contiguous buffer per dtype (megatron/core/distributed/
param_and_grad_buffer.py: parameter starts aligned to 64 elements, each bucket padded to lcm(DP, 128) elements under
the distributed optimizer; one bucket unless overlap_grad_reduce, then about max(40M, 1M x DP) elements each). The
distributed optimizer keeps fp32 master weights and Adam's two moments for this rank's 1/DP of each bucket, and an
fp32 copy of that shard of the gradient when gradients are 16-bit (Megatron-LM docs/source/api-guide/
dist_optimizer.md: bytes per parameter 4 + 16/d for 16-bit parameters and gradients, 6 + 12/d for bf16 parameters
with fp32 gradients, 8 + 8/d for fp32 both).
fsdp (FSDP2 fully_shard per layer and on the root): fp32 parameters, gradients and both moments sharded over DP on
dimension 0, padded to a multiple of DP rows (torch/distributed/fsdp/_fully_shard/_fsdp_param.py); DDP instead
keeps the whole fp32 model, its gradients and a flat bucket copy of them (gradient_as_bucket_view=False).
autotp (DeepSpeed AutoTP + ZeRO): the model in the training dtype; ZeRO 1 and 2 keep fp32 master weights, the
moments and an fp32 gradient for this rank's 1/DP of each flattened parameter group (deepspeed/runtime/zero/
stage_1_and_2.py); stage 0 keeps them for the whole model (bf16: deepspeed/runtime/bf16_optimizer.py).
torch's AdamW keeps one float32 step counter per parameter tensor it updates (4 bytes each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from utils.spec.models import ModelSpec

GIB = 2 ** 30
DTYPE_BYTES = {"bf16": 2, "fp8": 2, "fp32": 4}  # FP8 trains from bf16 weights: its activations are counted as bf16
MEGATRON = ("mega", "nemo", "prim")
# Not tensors: the CUDA/HIP context, cuBLAS/hipBLASLt workspaces, NCCL/RCCL buffers and the caching allocator's
# fragmentation. A stated allowance per GPU (PyTorch's own context is 0.5-1 GiB on H100 and MI300X; NCCL's buffers
# a few hundred MiB per communicator), not a measurement; on the CPU nothing is reserved outside tensors.
GPU_WORKSPACE_BYTES = 3 * GIB // 2


@dataclass(frozen=True)
class Layout:
    """What the memory of one rank depends on, read from a run's request."""

    framework: str
    tp: int
    pp: int
    dp: int
    ga: int
    mbs: int
    seq_len: int
    precision: str  # bf16 | fp8 | fp32
    grad_fp32: bool  # gradients reduced (and kept) in fp32: the profile's grad_reduce_in_fp32, or fp32 training
    distributed_optimizer: bool
    overlap_grad_reduce: bool
    data_parallel: str = "fsdp"  # fsdp's: fsdp | ddp
    sac_every: int = 0  # fsdp: every N-th layer checkpointed (full recomputation of that layer); 0: none
    zero_stage: int = 1  # autotp's ZeRO stage
    on_gpu: bool = True

    @property
    def width(self) -> int:
        """Bytes of one element of the compute dtype."""
        return DTYPE_BYTES[self.precision]


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU by part, the peak and the phase that sets it."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    logits: int
    workspace: int
    peak: int
    phase: str  # "forward-backward" or "optimizer step"

    def parts(self) -> dict[str, int]:
        return {"weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
                "activations": self.activations, "logits": self.logits, "workspace": self.workspace}


# --- Parameters as each framework holds them ------------------------------------------------------------------------

def layer_shapes(spec: ModelSpec, tp: int) -> list[tuple[int, int]]:
    """One decoder layer's parameter tensors on one TP rank as (rows, columns) in Hugging Face's order; a vector is
    (n, 1). Column-parallel q, k, v (+ biases), gate and up split their rows by TP, row-parallel o and down their
    columns (Megatron-LM's and the torch-native TP plans alike); the norms stay whole."""
    h, d, f = spec.hidden_size, spec.head_dim, spec.ffn_hidden_size
    q, kv = spec.num_attention_heads * d // tp, spec.num_kv_heads * d // tp
    shapes = [(h, 1), (q, h), (kv, h), (kv, h)]
    if spec.qkv_bias:
        shapes += [(q, 1), (kv, 1), (kv, 1)]
    return shapes + [(h, q), (h, 1), (f // tp, h), (f // tp, h), (h, f // tp)]


def megatron_numels(spec: ModelSpec, tp: int, layers: int, first: bool, last: bool) -> list[int]:
    """A Megatron stage's parameters in megatron-core's order (embedding, per layer: norm, fused QKV (+ bias), output
    projection, norm, fused gate+up, down; final norm, output layer); the vocabulary split over TP."""
    h, d, f = spec.hidden_size, spec.head_dim, spec.ffn_hidden_size
    qkv = (spec.num_attention_heads + 2 * spec.num_kv_heads) * d // tp
    layer = [h, qkv * h] + ([qkv] if spec.qkv_bias else []) + [h * spec.num_attention_heads * d // tp,
                                                                h, 2 * f // tp * h, h * f // tp]
    numels = [spec.vocab_size // tp * h] if first else []
    numels += layer * layers
    return numels + ([h, spec.vocab_size // tp * h] if last else [])


def hf_shapes(spec: ModelSpec, tp: int, vocab_parallel_head: bool) -> list[tuple[int, int]]:
    """The Hugging Face model's parameters on one TP rank: embedding (whole), layers, final norm, LM head (whole, or
    split over the vocabulary: autotp's vocab_parallel_lm_head)."""
    h, v = spec.hidden_size, spec.vocab_size
    head = (v // tp if vocab_parallel_head else v, h)
    return [(v, h)] + layer_shapes(spec, tp) * spec.num_layers + [(h, 1), head]


@dataclass(frozen=True)
class Buffer:
    """megatron-core's contiguous parameter-and-gradient buffer of one stage, and rank 0's shard of it."""

    numel: int  # with padding
    shard_numel: int  # rank 0's elements that are parameters (the distributed optimizer's master weights)
    shard_tensors: int  # parameters with elements in rank 0's shard (one Adam step counter each)


def megatron_buffer(numels: list[int], dp: int, bucket_size: int | None, distributed: bool) -> Buffer:
    """The buffer megatron-core builds (param_and_grad_buffer.py: parameters in reverse order, starts aligned to
    64 elements and buckets padded to lcm(DP, 128) under the distributed optimizer), and rank 0's 1/DP of each
    bucket."""
    if not distributed:
        return Buffer(sum(numels), sum(numels), len(numels))
    divisor = math.lcm(dp, 128)
    buckets: list[tuple[int, int, list[tuple[int, int]]]] = []  # start, end (padded), parameters' ranges
    start = cursor = 0
    params: list[tuple[int, int]] = []
    for numel in reversed(numels):
        cursor = -(-cursor // 64) * 64
        params.append((cursor, cursor + numel))
        cursor += numel
        if bucket_size is not None and cursor - start >= bucket_size:
            end = -(-cursor // divisor) * divisor
            buckets.append((start, end, params))
            start = cursor = end
            params = []
    if params:
        buckets.append((start, -(-cursor // divisor) * divisor, params))
    shard = tensors = 0
    for begin, end, ranges in buckets:
        own_end = begin + (end - begin) // dp
        overlaps = [min(stop, own_end) - max(first, begin) for first, stop in ranges]
        shard += sum(n for n in overlaps if n > 0)
        tensors += sum(n > 0 for n in overlaps)
    return Buffer(buckets[-1][1] if buckets else 0, shard, tensors)


def megatron_bucket_size(lay: Layout) -> int | None:
    """megatron-core's DDP bucket: none (one bucket) without overlap_grad_reduce, else max(40M, 1M x DP) elements
    (distributed_data_parallel.py); later pipeline stages never split (their reduction is off the critical path)."""
    return max(40_000_000, 1_000_000 * lay.dp) if lay.overlap_grad_reduce else None


# --- Activations -----------------------------------------------------------------------------------------------------

def hf_layer_bytes_per_token(spec: ModelSpec, tp: int, width: int) -> int:
    """What one Hugging Face Llama/Qwen decoder layer keeps for backward, per token (torch's autograd saves, counted
    tensor by tensor with saved_tensors_hooks and held against MemTracker in tests/test_utils_predict.py):
    each RMSNorm its input cast to fp32 (4h), 1/rms (4), the normalised value cast back (w h) and its output
    (w h); attention q and k after RoPE, v (w (a d + 2 g d)), the flash/SDPA output (w a d) and its log-sum-exp
    (4 a, fp32); the SwiGLU MLP gate, SiLU, up and their product (4 w f). Flash attention keeps no a x s x s scores;
    grouped-query attention keeps g KV heads (SDPA's enable_gqa, taken when there is no explicit mask). Under TP
    the heads and the FFN split; the norms stay whole (the torch-native TP plans have no sequence parallelism)."""
    h, d, f, a, g = spec.hidden_size, spec.head_dim, spec.ffn_hidden_size, spec.num_attention_heads, spec.num_kv_heads
    norms = 2 * (4 * h + 4 + 2 * width * h)
    attention = width * (2 * a * d + 2 * g * d) + 4 * a
    return norms + (attention + 4 * width * f) // tp


def megatron_layer_bytes_per_token(spec: ModelSpec, tp: int, width: int) -> float:
    """What one megatron-core decoder layer keeps for backward, per token: Korthikanti et al. 2022 (arXiv 2205.05198,
    Table 2; Megatron-LM's theoretical_memory_usage.py uses it) redone for RMSNorm, grouped-query attention, flash
    attention and SwiGLU, without dropout (both models train without it). Per token, in the compute dtype w: each
    norm's input and rstd (w h + 4), the QKV projection's input (w h), q, k, v after RoPE (w (a d + 2 g d)), the
    flash output and log-sum-exp (w a d + 4 a), the MLP's input (w h), fc1's gate-and-up output (2 w f, the fused
    SwiGLU's input) and fc2's input (w f). The paper's 34 s b h (h-wide MLP of 4h, multi-head, with dropout masks)
    becomes this; with sequence parallelism (TP > 1) the h-wide tensors are split over TP too, as the rest is."""
    h, d, f, a, g = spec.hidden_size, spec.head_dim, spec.ffn_hidden_size, spec.num_attention_heads, spec.num_kv_heads
    wide = 2 * (width * h + 4) + 2 * width * h
    attention = width * (2 * a * d + 2 * g * d) + 4 * a
    return (wide + attention + 3 * width * f) / tp


def activations(spec: ModelSpec, lay: Layout, in_flight: int = 1) -> int:
    """Activations of one stage at the start of backward: its layers' saved tensors for every microbatch in flight
    (1F1B: stage k of PP holds min(PP - k, GA) microbatches, the first stage the most; PP = 1: one, each microbatch's
    backward runs before the next forward), plus the model-level ones (token ids, RoPE's cos and sin, the final
    norm)."""
    tokens = lay.mbs * lay.seq_len
    w = lay.width
    if lay.framework in MEGATRON:
        per_layer = megatron_layer_bytes_per_token(spec, lay.tp, w)
        return math.ceil((per_layer * (spec.num_layers // lay.pp) + 8) * tokens * in_flight)
    full = hf_layer_bytes_per_token(spec, lay.tp, w)
    checkpointed = spec.num_layers // lay.sac_every if lay.sac_every else 0
    stored = (spec.num_layers - checkpointed) * full + checkpointed * w * spec.hidden_size  # a checkpoint keeps its input
    model_level = 8 + 2 * w * spec.head_dim + 4 * spec.hidden_size + 4 + 2 * w * spec.hidden_size
    return (stored + model_level) * tokens


def logits(spec: ModelSpec, lay: Layout) -> int:
    """The LM head's logits and the loss's buffers at the start of backward, one microbatch on the last stage: the
    fp32 log-softmax output kept for backward (4 V) and the two fp32 gradients that meet at its backward (8 V);
    Megatron's vocabulary-parallel cross-entropy keeps its fp32 softmax (4 V) and the w V logits and gradient of the
    same width (its fused kernel works in place), over V/TP; autotp's vocabulary-parallel head splits V over TP."""
    tokens = lay.mbs * lay.seq_len
    vocab = spec.vocab_size
    if lay.framework in MEGATRON:
        return tokens * (vocab // lay.tp) * (4 + 2 * lay.width)
    split = lay.tp if lay.framework == "autotp" and lay.tp > 1 else 1
    return tokens * (vocab // split) * 12


# --- Weights, gradients and optimizer state, per framework ----------------------------------------------------------

@dataclass(frozen=True)
class States:
    """Persistent bytes: weights, gradients (as held between backward and the optimizer step), optimizer state;
    and which of the gradients stay allocated through the next forward and backward."""

    weights: int
    gradients: int
    optimizer: int
    gradients_in_backward: int


def megatron_stage(spec: ModelSpec, lay: Layout, first: bool, last: bool) -> States:
    """One pipeline stage (the first holds the embedding, the last the final norm and LM head): megatron-core's
    buffer and the distributed optimizer's shard (module docstring)."""
    numels = megatron_numels(spec, lay.tp, spec.num_layers // lay.pp, first, last)
    buf = megatron_buffer(numels, lay.dp, megatron_bucket_size(lay) if first else None, lay.distributed_optimizer)
    w, g = lay.width, 4 if lay.grad_fp32 else lay.width
    grad_buffer = buf.numel * g
    master = 0 if lay.precision == "fp32" else 4 * buf.shard_numel  # fp32 weights are their own master copy
    main_grads = 4 * buf.shard_numel if g < 4 else 0  # the step's fp32 copy of the shard's 16-bit gradients
    return States(buf.numel * w, grad_buffer + main_grads, master + 8 * buf.shard_numel + 4 * buf.shard_tensors,
                  grad_buffer)


def fsdp_states(spec: ModelSpec, lay: Layout) -> States:
    """FSDP2: fp32 shards of ceil(rows / DP) rows of every tensor, its fp32 gradient and two moments; with GA > 1
    the unsynchronised microbatches accumulate unsharded gradients in the compute dtype. DDP: whole fp32 model,
    gradients twice (.grad and the bucket)."""
    shapes = hf_shapes(spec, lay.tp, vocab_parallel_head=False)
    steps = 4 * len(shapes)
    if lay.data_parallel == "ddp":
        n = sum(r * c for r, c in shapes)
        return States(4 * n, 8 * n, 8 * n + steps, 8 * n)
    shard = sum(-(-r // lay.dp) * c for r, c in shapes)
    accumulated = sum(r * c for r, c in shapes) * lay.width if lay.ga > 1 else 0
    return States(4 * shard, 4 * shard, 8 * shard + steps, accumulated)


def autotp_states(spec: ModelSpec, lay: Layout) -> States:
    """DeepSpeed: the model in the training dtype; ZeRO 1/2: per parameter group (decayed matrices, undecayed
    vectors: native_trainer.adamw) a flat copy padded to a multiple of 2 x DP elements, and for this rank's 1/DP of
    it fp32 master weights, an fp32 gradient and two moments (one step counter per group). Through backward stage 2
    keeps only its shard of the reduced 16-bit gradients, stage 1 all of them; at the step they have become the
    fp32 shard's gradient (stage_1_and_2.py's step flattens, converts and frees them group by group). Stage 0 in bf16: the BF16 optimizer's fp32 master
    weights and gradients for the whole model; in fp32: torch's AdamW on the model."""
    shapes = hf_shapes(spec, lay.tp, vocab_parallel_head=lay.tp > 1)
    w = lay.width
    groups = [sum(r * c for r, c in shapes if c > 1), sum(r for r, c in shapes if c == 1)]
    n = sum(groups)
    if lay.zero_stage == 0:
        if w == 4:
            return States(4 * n, 4 * n, 8 * n + 4 * len(shapes), 4 * n)
        return States(w * n, w * n + 4 * n, 12 * n + 4 * len(groups), w * n + 4 * n)
    align = 2 * lay.dp
    padded = [-(-g // align) * align for g in groups]
    shard = sum(p // lay.dp for p in padded)
    held = w * n if lay.zero_stage == 1 else w * sum(padded) // lay.dp  # through backward, before the step
    return States(w * sum(padded), 4 * shard, 12 * shard + 4 * len(groups), held)


STATES = {"fsdp": fsdp_states, "autotp": autotp_states}


def stages(spec: ModelSpec, lay: Layout) -> list[tuple[States, int, int]]:
    """Each distinct stage's states, activations and logits: the first stage (with the most microbatches in flight)
    and, under pipeline parallelism, the last (with the LM head and the logits of one microbatch)."""
    if lay.framework not in MEGATRON:
        return [(STATES[lay.framework](spec, lay), activations(spec, lay), logits(spec, lay))]
    if lay.pp == 1:
        return [(megatron_stage(spec, lay, True, True), activations(spec, lay), logits(spec, lay))]
    return [(megatron_stage(spec, lay, True, False), activations(spec, lay, min(lay.pp, lay.ga)), 0),
            (megatron_stage(spec, lay, False, True), activations(spec, lay), logits(spec, lay))]


def memory(spec: ModelSpec, lay: Layout) -> Memory:
    """Every part of the stage with the highest peak, and that peak: the larger of the start of backward (weights,
    optimizer state, the gradients kept through backward, activations, logits) and the optimizer step (weights,
    gradients, optimizer state), plus the workspace allowance on a GPU."""
    workspace = GPU_WORKSPACE_BYTES if lay.on_gpu else 0
    best: Memory | None = None
    for states, acts, lgts in stages(spec, lay):
        backward = states.weights + states.optimizer + states.gradients_in_backward + acts + lgts
        step = states.weights + states.gradients + states.optimizer
        found = Memory(states.weights, states.gradients, states.optimizer, acts, lgts, workspace,
                       max(backward, step) + workspace, "forward-backward" if backward >= step else "optimizer step")
        if best is None or found.peak > best.peak:
            best = found
    assert best is not None
    return best
