"""Parameters as each framework holds them, per TP rank (Hugging Face's tensors for fsdp and autotp, megatron-core's
for mega, nemo and prim, with megatron-core's contiguous buffer), their optimizer groups, and the optimizer step's
temporaries (torch's AdamW). Sources in each docstring; the layouts themselves in utils/predict/memory.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

from utils.predict.layout import Layout
from utils.spec.models import ModelSpec


def layer_shapes(spec: ModelSpec, tp: int, ep: int = 1) -> list[tuple[int, int]]:
    """One decoder layer's parameter tensors on one TP rank as (rows, columns) in Hugging Face's order; a vector is
    (n, 1). Column-parallel q, k, v (+ biases), gate and up split their rows by TP, row-parallel o and down their
    columns (Megatron-LM's and the torch-native TP plans alike); the norms (QK-norm's of head_dim too) stay whole.
    A mixture of experts' MLP: Hugging Face's fused expert tensors (experts x gate-and-up rows, hidden; experts x
    hidden rows, expert width) and the router (experts, hidden), whole: fsdp builds it at TP=1 only; under expert
    parallelism (EP, megatron-core's) a rank's share of the experts."""
    h, d, f = spec.hidden_size, spec.head_dim, spec.ffn_hidden_size
    q, kv = spec.num_attention_heads * d // tp, spec.num_kv_heads * d // tp
    bias = spec.linear_bias
    shapes = [(h, 1), (q, h), (kv, h), (kv, h)]
    if spec.qkv_bias or bias:
        shapes += [(q, 1), (kv, 1), (kv, 1)]
    shapes += [(h, q)] + ([(h, 1)] if bias else []) + ([(d, 1), (d, 1)] if spec.qk_norm else []) + [(h, 1)]
    shapes += [(spec.num_attention_heads // tp, 1)] if spec.attention_sinks else []
    if spec.moe is None:
        return shapes + [(f // tp, h), (f // tp, h), (h, f // tp)] + ([(2 * f // tp, 1), (h, 1)] if bias else [])
    moe = spec.moe
    width, shared = moe.expert_ffn_size, moe.shared_experts * moe.shared_expert_ffn_size
    own = moe.num_experts // ep
    biases = [(own * 2 * width, 1), (own * h, 1), (moe.num_experts, 1)] if bias else []
    return shapes + [(own * 2 * width, h), (own * h, width), (moe.num_experts, h)] + biases + \
        ([(2 * shared, h), (h, shared)] if shared else [])


def megatron_numels(spec: ModelSpec, tp: int, layers: int, first: bool, last: bool,
                    routed_experts: bool = True) -> list[int]:
    """A Megatron stage's parameters in megatron-core's order (embedding, per layer: norm, fused QKV (+ bias), output
    projection (+ bias, attention sinks, QK-norm's two head_dim weights), norm, fused gate+up, down (+ biases); final
    norm, output layer); the vocabulary
    split over TP. A mixture of experts' MLP: the router (experts x hidden, whole on every rank) and each expert's
    fused gate+up and down split over TP as the dense ones (expert tensor parallelism is TP); without
    routed_experts, the stage's parameters but the routed experts' (megatron_expert_numels: their own buffer). A tied
    head is the embedding itself where one stage holds both (PP = 1); the last of several stages holds its own
    copy."""
    h, d, f, bias = spec.hidden_size, spec.head_dim, spec.ffn_hidden_size, spec.linear_bias
    qkv = (spec.num_attention_heads + 2 * spec.num_kv_heads) * d // tp
    mlp = [2 * f // tp * h, h * f // tp] + ([2 * f // tp, h] if bias else [])
    if spec.moe is not None:
        moe, shared = spec.moe, spec.moe.shared_experts * spec.moe.shared_expert_ffn_size
        mlp = [moe.num_experts * h] + ([moe.num_experts] if bias else []) + \
            _expert_numels(spec, tp) * (moe.num_experts if routed_experts else 0) + (
            [2 * shared // tp * h, h * shared // tp] if shared else [])
    layer = [h, qkv * h] + ([qkv] if spec.qkv_bias or bias else []) + [h * spec.num_attention_heads * d // tp] \
        + ([h] if bias else []) + ([spec.num_attention_heads // tp] if spec.attention_sinks else []) \
        + ([d, d] if spec.qk_norm else []) + [h] + mlp
    numels = [spec.vocab_size // tp * h] if first else []
    numels += layer * layers
    if not last:
        return numels
    head = [] if spec.tied_embeddings and first else [spec.vocab_size // tp * h]
    return numels + [h] + head


def megatron_expert_numels(spec: ModelSpec, tp: int, layers: int, ep: int) -> list[int]:
    """A Megatron stage's routed experts on one rank: experts / EP of each layer's, each a fused gate+up and a down
    split over TP. megatron-core's DDP keeps them in buffers of their own, sharded over the expert data-parallel group
    (DP / EP ranks) where the rest is sharded over DP (distributed_data_parallel.py: expert parameters are those not
    all-reduced over the whole DP group)."""
    if spec.moe is None:
        return []
    return _expert_numels(spec, tp) * (spec.moe.num_experts // ep) * layers


def _expert_numels(spec: ModelSpec, tp: int) -> list[int]:
    """One routed expert's tensors on one TP rank: fused gate+up and down, and their biases (linear_bias)."""
    h, width = spec.hidden_size, spec.moe.expert_ffn_size
    return [2 * width // tp * h, h * width // tp] + ([2 * width // tp, h] if spec.linear_bias else [])


def hf_shapes(spec: ModelSpec, tp: int, vocab_parallel_head: bool,
              vocab_parallel_embedding: bool = False) -> list[tuple[int, int]]:
    """The Hugging Face model's parameters on one TP rank: embedding (whole, or split over the vocabulary: fsdp's
    row-wise embedding at TP > 1), layers, final norm, LM head (whole, or split over the vocabulary: autotp's
    vocab_parallel_lm_head, fsdp's column-wise head). A tied head is the embedding's own tensor (transformers'
    tie_word_embeddings: model.parameters() yields it once), split over the vocabulary with it when either is
    (DeepSpeed shards a tied embedding as the head; fsdp re-ties the head to the sharded embedding)."""
    h, v = spec.hidden_size, spec.vocab_size
    head = (v // tp if vocab_parallel_head else v, h)
    if spec.tied_embeddings:
        tied = (v // tp if vocab_parallel_head or vocab_parallel_embedding else v, h)
        return [tied] + layer_shapes(spec, tp) * spec.num_layers + [(h, 1)]
    embedding = (v // tp if vocab_parallel_embedding else v, h)
    return [embedding] + layer_shapes(spec, tp) * spec.num_layers + [(h, 1), head]


def fsdp_shapes(spec: ModelSpec, tp: int) -> list[tuple[int, int]]:
    """fsdp's parameters on one TP rank: at TP > 1 torchtitan's plan (train/native/tensor_parallel.py) splits the
    embedding and the head over the vocabulary; the norms stay whole (sequence parallelism splits their input)."""
    return hf_shapes(spec, tp, vocab_parallel_head=tp > 1, vocab_parallel_embedding=tp > 1)


@dataclass(frozen=True)
class Buffer:
    """megatron-core's contiguous parameter-and-gradient buffer of one stage, and rank 0's shard of it."""

    numel: int  # with padding
    shard_numel: int  # rank 0's elements that are parameters (the distributed optimizer's master weights)
    shard_tensors: int  # parameters with elements in rank 0's shard (one Adam step counter each)
    largest_piece: int = 0  # the largest part of one parameter in rank 0's shard (one fp32 main parameter)

    def joined(self, other: "Buffer") -> "Buffer":
        """This buffer and another of the same stage (a MoE model's experts' own) as one."""
        return Buffer(self.numel + other.numel, self.shard_numel + other.shard_numel,
                      self.shard_tensors + other.shard_tensors, max(self.largest_piece, other.largest_piece))


def megatron_buffer(numels: list[int], dp: int, bucket_size: int | None, distributed: bool) -> Buffer:
    """The buffer megatron-core builds (param_and_grad_buffer.py: parameters in reverse order, starts aligned to
    64 elements and buckets padded to lcm(DP, 128) under the distributed optimizer), and rank 0's 1/DP of each
    bucket."""
    if not distributed:
        return Buffer(sum(numels), sum(numels), len(numels), max(numels, default=0))
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
    shard = tensors = largest = 0
    for begin, end, ranges in buckets:
        own_end = begin + (end - begin) // dp
        overlaps = [min(stop, own_end) - max(first, begin) for first, stop in ranges]
        shard += sum(n for n in overlaps if n > 0)
        tensors += sum(n > 0 for n in overlaps)
        largest = max([largest] + overlaps)
    return Buffer(buckets[-1][1] if buckets else 0, shard, tensors, largest)


def megatron_bucket_size(lay: Layout) -> int | None:
    """megatron-core's DDP bucket: none (one bucket) without overlap_grad_reduce, else max(40M, 1M x DP) elements
    (distributed_data_parallel.py); later pipeline stages never split (their reduction is off the critical path)."""
    return max(40_000_000, 1_000_000 * lay.dp) if lay.overlap_grad_reduce else None


def param_groups(shapes: list[tuple[int, int]]) -> list[list[int]]:
    """native_trainer.adamw's groups: matrices decayed, vectors (norms, biases) not."""
    return [[r * c for r, c in shapes if c > 1], [r for r, c in shapes if c == 1]]


def adamw_temporaries(on_gpu: bool, groups: list[list[int]]) -> int:
    """torch's AdamW (torch/optim/adam.py) at the step, over fp32 tensors given as their element counts per param
    group: on a GPU its default foreach path takes one sqrt of every second moment of a group at once
    (_multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(...), then divided and added to in place), 4 bytes x
    the largest group; on the CPU (foreach needs CUDA tensors) the single-tensor path, one tensor at a time:
    exp_avg_sq.sqrt() and its quotient by the bias correction live together, 2 x 4 bytes x the largest tensor."""
    if on_gpu:
        return 4 * max((sum(group) for group in groups), default=0)
    return 8 * max((n for group in groups for n in group), default=0)


def tied_contributions(spec: ModelSpec) -> int:
    """Embedding-sized weight gradients alive at once at the embedding's backward: its own (not yet added to the
    parameter's gradient or megatron-core's buffer); with a tied head also the head's, and autograd's sum of the two
    (torch/csrc/autograd/input_buffer.cpp accumulates a leaf's incoming gradients, out of place when one is still
    referenced)."""
    return 3 if spec.tied_embeddings else 1
