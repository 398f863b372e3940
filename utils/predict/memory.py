"""Memory per GPU of one planned run, by part: weights, gradients, optimizer state, activations, logits and loss
buffers, the framework's gradient-reduction buffers, the optimizer step's temporaries, and a workspace allowance;
each formula with its source, each framework's memory model (MEMORY_MODELS, keyed by the framework registry's
Framework.memory_model: megatron for megatron-core's layout, fsdp2 for FSDP2's or DDP's, deepspeed for DeepSpeed
AutoTP with ZeRO) as it really lays memory out.

The peak is the largest of the moments a step passes through: the start of backward (the loss: every activation and
the logits' buffers alive), the end of backward (the gradients complete, with the buffers that reduce them) and the
optimizer step (gradients, the optimizer's fp32 copies and its temporaries). The parts a Memory reports are each the
largest over those moments; the peak is the largest moment's sum. The parts are for the most loaded rank (TP shards,
the first pipeline stage for activations and the embedding, the last for the LM head and logits; rank 0 of its
data-parallel group). Weights, gradients and optimizer state are what the frameworks allocate, to the byte, for the
tiny models on the CPU (tests/test_utils_predict.py counts the real tensors); activations and the logits' buffers
are the tensors each layer and loss keep for backward, and the peaks of each moment are held against every live
tensor of a real CPU step (tests/test_utils_predict_measured.py: every phase within 1% for every memory model at two
sizes). What a model leaves out is named in its MemoryModel entry (not_modelled) and travels with every prediction;
the GPU workspace is an allowance, not a model. The parameters' layouts are in utils/predict/parameters.py, the
activations and logits in utils/predict/activations.py (a mixture of experts' layer and its token dispatch in
utils/predict/moe.py), Layout and Moment in utils/predict/layout.py. Standard library only: the plan runs it before
any environment exists.

megatron (megatron-core's DistributedDataParallel + DistributedOptimizer, which NeMo and Primus run): every parameter
and its gradient live in one contiguous buffer per dtype (megatron/core/distributed/param_and_grad_buffer.py:
parameter starts aligned to 64 elements, each bucket padded to lcm(DP, 128) elements under the distributed optimizer;
one bucket unless overlap_grad_reduce, then about max(40M, 1M x DP) elements each). The distributed optimizer keeps
fp32 master weights and Adam's two moments for this rank's 1/DP of each bucket, and at the step an fp32 copy of that
shard of the gradient when gradients are 16-bit (Megatron-LM docs/source/api-guide/dist_optimizer.md: bytes per
parameter 4 + 16/d for 16-bit parameters and gradients, 6 + 12/d for bf16 parameters with fp32 gradients, 8 + 8/d for
fp32 both; megatron/core/optimizer/distrib_optimizer.py _copy_model_grads_to_main_grads: shard_model_grad.float()).
Below 16 bits its weights add the quantized copies of the decoder's GEMM weights (quantized_weights): about 2 bytes
per such parameter under FP8's per-tensor recipes, 2.06 under MXFP8, 1.06 under MXFP4, 1.13 under NVFP4.
fsdp (FSDP2 fully_shard per layer and on the root): fp32 parameters, gradients and both moments sharded over DP on
dimension 0, padded to a multiple of DP rows (torch/distributed/fsdp/_fully_shard/_fsdp_param.py); DDP instead
keeps the whole fp32 model, its gradients and a flat bucket copy of them (gradient_as_bucket_view=False).
autotp (DeepSpeed AutoTP + ZeRO): the model in the training dtype; ZeRO 1 and 2 keep fp32 master weights, the
moments and an fp32 gradient for this rank's 1/DP of each flattened parameter group (deepspeed/runtime/zero/
stage_1_and_2.py); stage 0 keeps them for the whole model (bf16: deepspeed/runtime/bf16_optimizer.py).
torch's AdamW keeps one float32 step counter per parameter tensor it updates (4 bytes each).
A tied LM head (ModelSpec.tied_embeddings) is one tensor with the embedding: counted once in weights, gradients and
optimizer state, except on the last pipeline stage of a Megatron model with PP > 1, which holds its own copy
(megatron-core's share_embeddings_and_output_weights: the last stage's output layer, kept equal to the first stage's
embedding by an all-reduce of their gradients).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from utils.config.native import REPLICATED
from utils.predict.activations import activations, logits
from utils.predict.layout import DTYPE_BYTES, GIB, PHASES, Layout, Moment
from utils.predict.moe import dispatch_bytes_per_token
from utils.predict.parameters import (Buffer, adamw_temporaries, fsdp_shapes, hf_shapes, layer_shapes,
                                      megatron_bucket_size, megatron_buffer, megatron_expert_numels, megatron_numels,
                                      param_groups, tied_contributions)
from utils.spec.models import ModelSpec
from utils.spec.precision import weight_copy_bytes

__all__ = ["DTYPE_BYTES", "GIB", "PHASES", "Buffer", "Layout", "Memory", "MEMORY_MODELS", "Moment", "hf_shapes",
           "layer_shapes", "megatron_buffer", "megatron_numels", "memory"]

# Not tensors: the CUDA/HIP context, cuBLAS/hipBLASLt workspaces, NCCL/RCCL buffers and the caching allocator's
# fragmentation. A stated allowance per GPU (PyTorch's own context is 0.5-1 GiB on H100 and MI300X; NCCL's buffers
# a few hundred MiB per communicator), not a measurement; on the CPU nothing is reserved outside tensors.
GPU_WORKSPACE_BYTES = 3 * GIB // 2
# DeepSpeed's ZeRO 1/2 reduction bucket, in elements: deepspeed/runtime/zero/config.py's reduce_bucket_size default
# (TPrimat's ds_config sets none); contiguous_gradients (default True) allocates one bucket of this size in the
# gradient dtype, two with overlap_comm (default off below stage 3).
DEEPSPEED_REDUCE_BUCKET = 500_000_000
DISPATCH = "a MoE layer's token dispatch"  # the Moment of megatron_stage's last MoE layer's forward


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU by part (each the largest over the step's moments), the peak (the largest moment, plus the
    workspace allowance on a GPU) and the phase that sets it; which memory model made it, the parts it models tensor
    by tensor and what it leaves out."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    logits: int
    buffers: int  # the framework's own: DeepSpeed's reduction bucket and gradient partition, FSDP2's gathered root
    # and its reduce-scatter
    temporaries: int  # transient tensors: AdamW's at the step; a weight gradient before it joins its buffer,
    # autograd's sum of a tied head's two, at the end of backward; a Megatron MoE layer's token-dispatch buffers
    workspace: int  # an allowance on a GPU, not a model (GPU_WORKSPACE_BYTES); 0 on the CPU
    peak: int
    phase: str  # one of PHASES
    memory_model: str = ""
    moments: tuple[tuple[str, int], ...] = ()  # (phase, bytes without the workspace) of the largest moment of each
    modelled: tuple[str, ...] = ()  # the parts this memory model models tensor by tensor
    not_modelled: tuple[str, ...] = ()  # what it leaves out, in words

    PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "buffers", "temporaries", "workspace")

    def parts(self) -> dict[str, int]:
        return {part: getattr(self, part) for part in self.PARTS}

    def phase_peak(self, phase: str) -> int:
        """The largest moment of one phase, without the workspace."""
        return max((size for name, size in self.moments if name == phase), default=0)

    def describe(self) -> str:
        """What the prediction is made of, in one clause: "megatron model: weights, gradients, ...; + 1.5 GiB
        workspace allowance" (the allowance on a GPU only)."""
        allowance = f"; + {self.workspace / GIB:g} GiB workspace allowance" if self.workspace else ""
        return f"{self.memory_model} model: {', '.join(self.modelled)}{allowance}"


# --- Each memory model: the moments of its step --------------------------------------------------------------------

def quantized_weights(spec: ModelSpec, lay: Layout, layers: int) -> int:
    """Bytes of the low-precision copies Transformer Engine keeps of a stage's decoder GEMM weights through a step
    (utils.spec.precision.weight_copy_bytes: two per weight with their scales); the embedding, norms and output layer
    are no Transformer Engine Linear and stay bf16. 0 for bf16 and fp32."""
    per_layer = sum(rows * cols for rows, cols in layer_shapes(spec, lay.tp, lay.ep) if cols > 1)
    return round(weight_copy_bytes(lay.precision, lay.fp8_recipe) * per_layer * layers)


def megatron_stage(spec: ModelSpec, lay: Layout, first: bool, last: bool) -> list[Moment]:
    """One pipeline stage (the first holds the embedding, the last the final norm and LM head): megatron-core's
    buffer and the distributed optimizer's shard (module docstring). The fp32 copy of the gradient shard lives from
    the step's start (_copy_model_grads_to_main_grads) to the next step's zero_grad, which frees it before the
    forward. The optimizer's temporaries: none on a GPU with Transformer Engine or Apex (megatron-core takes their
    FusedAdam, multi-tensor kernels that update in place: megatron-core 0.19.2 optimizer/__init__.py:13-35), else
    torch's AdamW over the fp32 main parameters (one per parameter's piece of the shard): on a GPU its foreach path
    over the whole shard (the no-decay group of norms is the smaller), on the CPU one piece at a time. On the lent
    H200 without either (2026-11-28), the fallback's foreach square root was the 7.2 GiB the fused model lacked.
    A mixture of experts adds the moment its last layer's forward holds the token-dispatch buffers
    (utils.predict.moe.dispatch_bytes_per_token) beside every layer's activations (the final norm's not yet made):
    below the loss's moment where the stage has the LM head, the stage's peak where it has none (PP > 1)."""
    layers, bucket = spec.num_layers // lay.pp, megatron_bucket_size(lay) if first else None
    numels = megatron_numels(spec, lay.tp, layers, first, last, routed_experts=False)
    buf = megatron_buffer(numels, lay.dp, bucket, lay.distributed_optimizer)
    if spec.moe is not None:  # the routed experts' own buffer: experts / EP, sharded over the DP / EP expert replicas
        buf = buf.joined(megatron_buffer(megatron_expert_numels(spec, lay.tp, layers, lay.ep), lay.dp // lay.ep,
                                         bucket, lay.distributed_optimizer))
    w, g = lay.width, 4 if lay.grad_fp32 else lay.width
    weights, grad_buffer = buf.numel * w + quantized_weights(spec, lay, spec.num_layers // lay.pp), buf.numel * g
    master = 0 if lay.precision == "fp32" else 4 * buf.shard_numel  # fp32 weights are their own master copy
    main_grads = 4 * buf.shard_numel if g < 4 else 0  # the step's fp32 copy of the shard's 16-bit gradients
    optimizer = master + 8 * buf.shard_numel + 4 * buf.shard_tensors
    if lay.on_gpu:
        temporaries = 0 if lay.fused_optimizer else adamw_temporaries(True, [[buf.shard_numel]])
    else:
        temporaries = adamw_temporaries(False, [[buf.largest_piece]])
    in_flight = min(lay.pp, lay.ga) if first and not last else 1
    held = {"weights": weights, "optimizer": optimizer}
    embedding_grads = (tied_contributions(spec) if last else 1) * w * spec.vocab_size // lay.tp * spec.hidden_size
    dispatch = [] if spec.moe is None else [Moment(
        "forward-backward", {**held, "gradients": grad_buffer, "activations": activations(spec, lay, in_flight, False),
                             "temporaries": math.ceil(dispatch_bytes_per_token(spec, lay) * lay.tokens)}, DISPATCH)]
    return [Moment("forward-backward", {**held, "gradients": grad_buffer,
                                        "activations": activations(spec, lay, in_flight, final_norm=last),
                                        "logits": logits(spec, lay) if last else 0}),
            *dispatch,
            Moment("forward-backward", {**held, "gradients": grad_buffer,
                                        "temporaries": embedding_grads if first else 0}),
            Moment("optimizer step", {**held, "gradients": grad_buffer + main_grads, "temporaries": temporaries})]


def megatron_stages(spec: ModelSpec, lay: Layout) -> list[list[Moment]]:
    """The first stage (with the most microbatches in flight) and, under pipeline parallelism, the last (with the
    LM head and the logits of one microbatch)."""
    if lay.pp == 1:
        return [megatron_stage(spec, lay, True, True)]
    return [megatron_stage(spec, lay, True, False), megatron_stage(spec, lay, False, True)]


def fsdp_moments(spec: ModelSpec, lay: Layout) -> list[Moment]:
    """FSDP2 (train/fsdp/engine.py: fully_shard per layer and on the root, reshard_after_forward, parameters in the
    compute dtype w, gradients reduced in g: fp32 under grad_reduce_in_fp32): fp32 shards of ceil(rows / DP) rows of
    every tensor, its fp32 gradient and two moments; with GA > 1 the unsynchronised microbatches accumulate
    unsharded gradients in w through the last backward, or, where every microbatch reduce-scatters (the entry's
    synced_microbatches: torchtitan), into the fp32 shards. Beyond the loss, two moments of backward are FSDP2's own
    (torch/distributed/fsdp/_fully_shard/: _fsdp_param_group.py, _fsdp_collectives.py):
    - the LM head's backward: the root (embedding, final norm, head) was resharded after forward and is gathered
      again in w for its backward (w x its elements), while the logits' gradient (w T V; fp32, 4 T V, in fp32 runs)
      meets the head's weight gradient (w V h) and the input gradient (w T h), every activation still alive;
    - the root's reduce-scatter at the end of backward, every layer's fp32 gradient shard already made: its
      unsharded gradients copied into the reduce-scatter input (w + g, x its elements: foreach_reduce_scatter_copy_in),
      then the input, the output (g x its shard) and, when g is 16-bit, the output cast to the fp32 shard.
    DDP: whole fp32 model; its gradients twice (.grad and the bucket, which persists across steps). At the step,
    torch's AdamW over the (sharded) fp32 parameters (adamw_temporaries)."""
    shapes = fsdp_shapes(spec, lay.tp)
    steps = 4 * len(shapes)
    acts, lgts = activations(spec, lay), logits(spec, lay)
    if lay.data_parallel == REPLICATED:
        n = sum(r * c for r, c in shapes)
        held = {"weights": 4 * n, "optimizer": 8 * n + steps}
        temporaries = adamw_temporaries(lay.on_gpu, param_groups(shapes))
        return [Moment("forward-backward", {**held, "gradients": 4 * n, "activations": acts, "logits": lgts}),
                Moment("forward-backward", {**held, "gradients": 8 * n}),
                Moment("optimizer step", {**held, "gradients": 8 * n, "temporaries": temporaries})]
    w, g, h, tokens = lay.width, 4 if lay.grad_fp32 else lay.width, spec.hidden_size, lay.tokens
    v = spec.vocab_size // lay.tp  # the head's vocabulary rows and logits on one TP rank (loss parallel at TP > 1)
    sharded = [(-(-r // lay.dp), c) for r, c in shapes]
    shard = sum(r * c for r, c in sharded)
    tied = spec.tied_embeddings
    root = [0, -1] if tied else [0, -2, -1]  # embedding, final norm (and the untied head): hf_shapes' order
    root_numel = sum(shapes[i][0] * shapes[i][1] for i in root)
    root_shard = sum(sharded[i][0] * sharded[i][1] for i in root)
    synced = lay.ga > 1 and lay.synced_microbatches  # the earlier microbatches' gradients already in fp32 shards
    accumulated = (4 * shard if synced else sum(r * c for r, c in shapes) * w) if lay.ga > 1 else 0
    held = {"weights": 4 * shard, "optimizer": 8 * shard + steps}
    temporaries = adamw_temporaries(lay.on_gpu, param_groups(sharded))
    head_backward = {**held, "gradients": accumulated + w * v * h, "activations": acts,
                     "logits": tokens * v * (w if w < 4 else 4) + tokens * h * w, "buffers": w * root_numel}
    reduced = 4 * (shard if synced else shard - root_shard)  # every layer's fp32 gradient shard (the root's too)
    after = g * root_numel + (g * root_shard if g < 4 else 0) + 4 * root_shard
    reduce_scatter = {**held, "gradients": reduced, "buffers": max((w + g) * root_numel, after)}
    # the embedding's backward: the root still gathered, its unsharded gradients (a tied one twice and their sum)
    embedding = {**held, "gradients": reduced + w * root_numel, "buffers": w * root_numel,
                 "temporaries": (tied_contributions(spec) - 1) * w * v * h}
    return [Moment("forward-backward", {**held, "gradients": accumulated, "activations": acts, "logits": lgts}),
            Moment("forward-backward", head_backward),
            Moment("forward-backward", embedding),
            Moment("forward-backward", reduce_scatter),
            Moment("optimizer step", {**held, "gradients": 4 * shard, "temporaries": temporaries})]


def autotp_moments(spec: ModelSpec, lay: Layout) -> list[Moment]:
    """DeepSpeed: the model in the training dtype, flattened per parameter group (decayed matrices, undecayed vectors:
    native_trainer.adamw) and padded to a multiple of 2 x DP elements.
    ZeRO 1/2 (stage_1_and_2.py), for this rank's 1/DP of each group: fp32 master weights and two moments (one step
    counter per group). Through backward the 16-bit gradients fill param.grad (stage 1: all of them; stage 2 reduces
    them bucket by bucket and keeps its shard), and from the first gradient on the reduction bucket is allocated
    (setup_buckets: DEEPSPEED_REDUCE_BUCKET elements of the gradient dtype, released at the boundary's epilogue).
    At the step the reduced gradients of the shard sit in one contiguous partition in the gradient dtype
    (copy_grads_in_partition, freed with the last group), and group by group step() flattens that group's into a new
    tensor and converts it to an fp32 gradient (flatten(averaged_gradients[i]).to(fp32): in fp32 the flat copy
    itself), runs torch's AdamW on the group's one flat tensor and frees the fp32 gradient.
    Stage 0 in bf16: the BF16 optimizer's fp32 master weights and gradients for the whole model; in fp32: torch's
    AdamW on the model."""
    shapes = hf_shapes(spec, lay.tp, vocab_parallel_head=lay.tp > 1)
    w = lay.width
    groups = [sum(group) for group in param_groups(shapes)]
    n = sum(groups)
    acts, lgts = activations(spec, lay), logits(spec, lay)
    if lay.zero_stage == 0:
        if w == 4:
            held = {"weights": 4 * n, "optimizer": 8 * n + 4 * len(shapes)}
            temporaries = adamw_temporaries(lay.on_gpu, param_groups(shapes))
            kept = 4 * n if lay.ga > 1 else 0
            return [Moment("forward-backward", {**held, "gradients": kept, "activations": acts, "logits": lgts}),
                    Moment("optimizer step", {**held, "gradients": 4 * n, "temporaries": temporaries})]
        held = {"weights": w * n, "optimizer": 12 * n + 4 * len(groups)}
        temporaries = adamw_temporaries(lay.on_gpu, [[g] for g in groups])
        return [Moment("forward-backward", {**held, "gradients": w * n + 4 * n, "activations": acts,
                                            "logits": lgts}),
                Moment("optimizer step", {**held, "gradients": w * n + 4 * n, "temporaries": temporaries})]
    align = 2 * lay.dp
    parts = [-(-g // align) * align // lay.dp for g in groups]  # this rank's elements of each group
    shard = sum(parts)
    held = {"weights": w * sum(parts) * lay.dp, "optimizer": 12 * shard + 4 * len(groups)}
    grads = w * n if lay.zero_stage == 1 else w * shard  # the 16-bit gradients at the end of backward
    kept = grads if lay.ga > 1 else 0  # accumulated over the earlier microbatches
    bucket = w * DEEPSPEED_REDUCE_BUCKET
    tied = (tied_contributions(spec) - 1) * w * shapes[0][0] * shapes[0][1]  # beyond the gradient itself
    moments = [Moment("forward-backward", {**held, "gradients": kept, "buffers": bucket if lay.ga > 1 else 0,
                                           "activations": acts, "logits": lgts}),
               Moment("forward-backward", {**held, "gradients": grads, "buffers": bucket, "temporaries": tied})]
    for part in parts:  # the partition and this group's fp32 gradient, with AdamW's temporaries over it
        moments.append(Moment("optimizer step", {**held, "gradients": 4 * part, "buffers": w * shard,
                                                 "temporaries": adamw_temporaries(lay.on_gpu, [[part]])}))
    return moments


@dataclass(frozen=True)
class MemoryModel:
    """How one family of frameworks lays memory out: each distinct stage's moments, the parameters one TP rank of its
    first stage holds (what its data-parallel group reduces: utils/predict/step_time.py), the parts it models and
    what it leaves out."""

    name: str
    stages: Callable[[ModelSpec, Layout], list[list[Moment]]]
    parameters: Callable[[ModelSpec, Layout], int]
    modelled: tuple[str, ...]
    not_modelled: tuple[str, ...]


COMMON_NOT_MODELLED = ("the batch's token ids, labels and masks and the loss's index tensors (under 100 bytes a "
                       "token)",
                       "on a GPU: the CUDA/HIP context, library workspaces, NCCL/RCCL buffers and the caching "
                       "allocator's fragmentation (the workspace allowance stands for them)")

MODELLED = ("weights", "gradients", "optimizer", "activations", "logits", "temporaries")
WITH_BUFFERS = ("weights", "gradients", "optimizer", "activations", "logits", "buffers", "temporaries")

MEMORY_MODELS: dict[str, MemoryModel] = {
    "megatron": MemoryModel(
        "megatron", megatron_stages,
        lambda spec, lay: sum(megatron_numels(spec, lay.tp, spec.num_layers // lay.pp, True, lay.pp == 1, False))
        + sum(megatron_expert_numels(spec, lay.tp, spec.num_layers // lay.pp, lay.ep)),
        MODELLED,
        COMMON_NOT_MODELLED + ("pipeline send and receive buffers (PP > 1)",
                               "Transformer Engine's amax histories and scales (a few KiB per tensor) and its "
                               "casts of activations (PRECISION below 16 bits)",
                               "a MoE layer's gradients through the token dispatch in its backward (its forward's "
                               "buffers are modelled), and routing imbalance: the experts' tokens are the mean, "
                               "tokens x top-k")),
    "fsdp2": MemoryModel(
        "fsdp2", lambda spec, lay: [fsdp_moments(spec, lay)],
        lambda spec, lay: sum(r * c for r, c in fsdp_shapes(spec, lay.tp)),
        WITH_BUFFERS,
        COMMON_NOT_MODELLED + ("FSDP2's gathered parameters and reduce-scatter buffers of the decoder layers (one or "
                               "two layers' at a time; the root's are modelled)",
                               "DDP's reduction buckets beyond its flat gradient copy",
                               "a Hugging Face MoE block's forward temporaries (its experts' fp32 weighted outputs, "
                               "one layer's at a time)",
                               "torch.compile's buffers (COMPILE=1)")),
    "deepspeed": MemoryModel(
        "deepspeed", lambda spec, lay: [autotp_moments(spec, lay)],
        lambda spec, lay: sum(r * c for r, c in hf_shapes(spec, lay.tp, vocab_parallel_head=lay.tp > 1)),
        WITH_BUFFERS,
        COMMON_NOT_MODELLED + ("DeepSpeed's all-gather buffers after the step (allgather_bucket_size)",)),
}


def memory(spec: ModelSpec, lay: Layout) -> Memory:
    """Every part at its largest over the step's moments (on the stage with the highest peak), and the peak: the
    largest moment, plus the workspace allowance on a GPU."""
    model = MEMORY_MODELS[lay.memory_model]
    found = max(model.stages(spec, lay), key=lambda moments: max(m.total for m in moments))
    top = max(found, key=lambda moment: moment.total)
    workspace = GPU_WORKSPACE_BYTES if lay.on_gpu else 0
    largest = {part: max(m.parts.get(part, 0) for m in found) for part in Memory.PARTS[:-1]}
    by_phase = tuple((phase, max(m.total for m in found if m.phase == phase))
                     for phase in PHASES if any(m.phase == phase for m in found))
    return Memory(**largest, workspace=workspace, peak=top.total + workspace, phase=top.phase,
                  memory_model=model.name, moments=by_phase, modelled=model.modelled,
                  not_modelled=model.not_modelled)
