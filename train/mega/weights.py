"""The weights of a megatron-core GPT model as one layout-free whole: drawn per logical parameter (so every TP/PP/EP/DP
layout of one seed starts from the same model; megatron-core's own initialisation depends on the layout), counted
over every rank, and compared across data-parallel replicas."""

from __future__ import annotations

import hashlib
import math
import re

import torch
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate

# Megatron initialises the attention output and second MLP projections with std / sqrt(2 L); a MoE's experts are MLPs
# too (mlp.experts.local_experts.<i>.linear_fc2, mlp.shared_experts.linear_fc2).
OUTPUT_PROJECTIONS = ("self_attention.linear_proj.weight", "linear_fc2.weight")
GATED_FC1 = "linear_fc1.weight"
LAYER_INDEX = re.compile(r"decoder\.layers\.(\d+)\.")
# A routed expert's index among this EP rank's experts: megatron-core's local experts (SequentialMLP) or grouped GEMM
# weights (TEGroupedMLP)
EXPERT_INDEX = re.compile(r"(?<=\.experts\.local_experts\.)\d+(?=\.)|(?<=\.experts\.linear_fc[12]\.weight)\d+$")


def _logical_name(model: GPTModel, name: str) -> str:
    """The parameter's name in the whole (TP=1, PP=1, EP=1) model: local layer and expert indices become global ones
    (EP rank r holds experts r x experts / EP onwards), and a tied LM head on the last pipeline stage (its own copy of
    the embedding, kept equal by megatron-core) is the embedding."""
    if name == "output_layer.weight" and model.share_embeddings_and_output_weights:
        return "embedding.word_embeddings.weight"
    match = LAYER_INDEX.match(name)
    if not match:
        return name
    global_index = model.decoder.layers[int(match.group(1))].layer_number - 1
    experts, ep = model.config.num_moe_experts or 0, parallel_state.get_expert_model_parallel_world_size()
    first = parallel_state.get_expert_model_parallel_rank() * experts // ep
    return EXPERT_INDEX.sub(lambda local: str(first + int(local.group())),
                            f"decoder.layers.{global_index}.{name[match.end():]}")


def _shard(full: torch.Tensor, dim: int, stride: int, rank: int, world: int) -> torch.Tensor:
    """This TP rank's part of a full tensor (stride > 1: interleaved blocks, e.g. SwiGLU's [gate_r; up_r])."""
    if world == 1:
        return full
    blocks = torch.chunk(full, world * stride, dim=dim)
    return torch.cat(blocks[rank::world], dim=dim)


def initialise_layout_invariant(model: GPTModel, seed: int) -> None:
    """Redraw every weight matrix from a generator seeded by (seed, logical name), then take this rank's shard.

    Norm weights (ones) and biases (zeros) keep megatron-core's deterministic values. The
    distributions are megatron-core's: N(0, 0.02), and N(0, 0.02 / sqrt(2 L)) for the output projections.
    """
    config = model.config
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    tp_size = parallel_state.get_tensor_model_parallel_world_size()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() < 2:
                continue
            logical = _logical_name(model, name)
            std = config.init_method_std
            if logical.endswith(OUTPUT_PROJECTIONS):
                std /= math.sqrt(2.0 * config.num_layers)
            shape, dim, stride = list(param.shape), 0, 1
            split = getattr(param, "tensor_model_parallel", False)  # else whole on every rank (a MoE's router)
            if split:
                dim = param.partition_dim
                shape[dim] *= tp_size
                # megatron-core < 0.16 marks SwiGLU's fc1 with stride 1 although each rank holds [gate_r; up_r]
                gated = logical.endswith(GATED_FC1) and config.gated_linear_unit
                stride = 2 if gated else getattr(param, "partition_stride", 1)
            digest = hashlib.sha256(f"{seed}:{logical}".encode()).digest()
            generator = torch.Generator(device=param.device).manual_seed(int.from_bytes(digest[:8], "little") >> 1)
            full = torch.empty(shape, dtype=torch.float32, device=param.device).normal_(0.0, std, generator=generator)
            param.copy_(_shard(full, dim, stride, tp_rank, tp_size if split else 1))


def count_parameters(model: GPTModel) -> int:
    """Parameters of the whole model: this stage's, without TP duplicates, summed over TP and PP ranks, and the
    experts' (allreduce=False) over the expert TP, EP and PP ranks, which each hold experts / EP of them."""
    kept = [p for p in model.parameters() if param_is_not_tensor_parallel_duplicate(p)]
    return sum(_summed([p for p in kept if getattr(p, "allreduce", True) is dense], group)
               for dense, group in ((True, parallel_state.get_model_parallel_group()),
                                    (False, parallel_state.get_expert_tensor_model_pipeline_parallel_group())))


def _summed(params: list[torch.Tensor], group) -> int:
    total = torch.tensor([sum(p.numel() for p in params)], dtype=torch.float64, device=torch.cuda.current_device())
    torch.distributed.all_reduce(total, group=group)  # these parameters' elements over the group's ranks
    return int(total.item())


def replicas_identical(model: torch.nn.Module) -> bool:
    """Whether every data-parallel replica holds bit-identical weights (fp64 sum and norm of each parameter): the
    experts' over the expert-data-parallel group, since with EP > 1 the DP ranks hold different experts
    (megatron-core marks an expert's parameters allreduce=False)."""
    experts = [p for p in model.parameters() if not getattr(p, "allreduce", True)]
    dense = [p for p in model.parameters() if getattr(p, "allreduce", True)]
    return _identical(dense, parallel_state.get_data_parallel_group()) and (
        not experts or _identical(experts, parallel_state.get_expert_data_parallel_group()))


def _identical(params: list[torch.Tensor], group) -> bool:
    """Whether every rank of the group holds these parameters bit-identical."""
    summary = torch.stack([torch.stack([torch.sum(p, dtype=torch.float64),
                                        torch.linalg.vector_norm(p, dtype=torch.float64)])
                           for p in params]).flatten()
    gathered = [torch.empty_like(summary) for _ in range(torch.distributed.get_world_size(group))]
    torch.distributed.all_gather(gathered, summary, group=group)
    return all(torch.equal(other, gathered[0]) for other in gathered)
