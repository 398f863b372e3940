"""TPrimat's models (utils.spec.models specs) as megatron-core GPT models.

Everything here sticks to the megatron-core API shared by 0.12 (nemo:25.04), Primus's Megatron-LM
and 0.16 (the host). The choices a benchmark must be able to prove are made in one place each:

- the layer spec: Transformer Engine's when TE and a GPU are present, the local spec otherwise;
- the fused kernels: what the fairness profile (utils.spec.fairness) asks for, where the installed stack has the kernel
  (each recorded on or off in the result, with a warning for every one the table wanted);
- the initial weights: drawn per logical parameter, so every TP/PP/DP layout of one seed starts
  from the same model (megatron-core's own initialisation depends on the layout).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import inspect
import math
import os
import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import (get_gpt_layer_local_spec,
                                                      get_gpt_layer_with_transformer_engine_spec)
from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_config import TransformerConfig

from train.common import local_kernels
from train.common.fp8 import te_reduce_amax
from utils.spec import precision as precisions
from utils.spec.fairness import MOE_ROUTING, WORKLOAD, sequence_parallel
from utils.spec.fairness import moe_settings as fairness_moe_settings
from utils.spec.models import ModelSpec

# Megatron initialises the attention output and second MLP projections with std / sqrt(2 L); a MoE's experts are MLPs
# too (mlp.experts.local_experts.<i>.linear_fc2, mlp.shared_experts.linear_fc2).
OUTPUT_PROJECTIONS = ("self_attention.linear_proj.weight", "linear_fc2.weight")
GATED_FC1 = "linear_fc1.weight"
LAYER_INDEX = re.compile(r"decoder\.layers\.(\d+)\.")
# A routed expert's index among this EP rank's experts: megatron-core's local experts (SequentialMLP) or grouped GEMM
# weights (TEGroupedMLP)
EXPERT_INDEX = re.compile(r"(?<=\.experts\.local_experts\.)\d+(?=\.)|(?<=\.experts\.linear_fc[12]\.weight)\d+$")


class ModelError(ValueError):
    """A model or precision request this stack cannot build faithfully."""


@dataclass(frozen=True)
class Stack:
    """What the installed software offers on this machine: decides the layer spec and fused kernels."""

    gpu: bool
    transformer_engine: bool
    rope_kernel: bool  # a fused RoPE kernel megatron-core can call (TE >= 1.4 or Apex)
    softmax_kernel: bool  # Megatron's fused masked-softmax CUDA extension (shipped with Apex)

    @classmethod
    def detect(cls, transformer_impl: str = "transformer_engine") -> "Stack":
        """What this machine has; TRANSFORMER_IMPL=local keeps Transformer Engine out even where it is installed."""
        gpu, kernels = torch.cuda.is_available(), local_kernels.available()
        return cls(gpu=gpu,
                   transformer_engine=(gpu and transformer_impl != "local"
                                       and importlib.util.find_spec("transformer_engine") is not None),
                   rope_kernel=gpu and kernels["apply_rope_fusion"],
                   softmax_kernel=gpu and kernels["masked_softmax_fusion"])

    @property
    def layer_spec(self) -> str:
        return "transformer_engine" if self.transformer_engine else "local"


def choose_fusions(stack: Stack, table: dict) -> tuple[dict[str, bool], list[str]]:
    """TransformerConfig fusion flags: the fairness profile table's wish where the stack has the kernel.

    The jit fusions (bias-SwiGLU, bias-dropout-add, cross entropy) are torch.compile'd GPU kernels;
    persist_layer_norm is Apex's LayerNorm kernel and does not apply to RMSNorm. Returns the flags
    and one warning per fusion the table wanted but the stack cannot give.
    """
    wanted = {
        "bias_activation_fusion": (table["bias_swiglu_fusion"], stack.gpu),
        "bias_dropout_fusion": (table["bias_dropout_fusion"], stack.gpu),
        "masked_softmax_fusion": (True, stack.softmax_kernel),
        "apply_rope_fusion": (table["apply_rope_fusion"], stack.rope_kernel),
        "cross_entropy_loss_fusion": (table["cross_entropy_loss_fusion"], stack.gpu),
        "gradient_accumulation_fusion": (table["gradient_accumulation_fusion"], stack.transformer_engine),
    }
    flags = {name: want and have for name, (want, have) in wanted.items()}
    missing = [name for name, (want, have) in wanted.items() if want and not have]
    notes = [f"fused kernels unavailable on this stack, running without: {', '.join(missing)}"] if missing else []
    return {**flags, "persist_layer_norm": False}, notes


def params_dtype(precision: str) -> torch.dtype:
    """The dtype of the model's weights: bf16 (FP8 computes from bf16 weights), or fp32 on a CPU without bf16."""
    return torch.float32 if precision == "fp32" else torch.bfloat16


def fp8_settings(table: dict, precision: str = "fp8") -> dict[str, object]:
    """A precision below 16 bits in TransformerConfig's names (utils.spec.precision.megatron_settings: fp8 and
    fp8_recipe, or fp4 and fp4_recipe), with the profile's delayed-scaling fields (read by that recipe only, set
    under every one so that the read-back recipe is the result's); fp8_recipe only where the installed megatron-core
    has the field (it names the delayed-scaling recipe it would use anyway)."""
    settings = precisions.megatron_settings(precision, str(table["fp8_recipe"]), str(table["fp8_format"]))
    settings.update({"fp8_margin": table["fp8_margin"], "fp8_amax_history_len": table["fp8_amax_history_len"],
                     "fp8_amax_compute_algo": table["fp8_amax_compute_algo"]})
    fields = {f.name for f in dataclasses.fields(TransformerConfig)}
    if settings.get("fp8_recipe") == "delayed" and "fp8_recipe" not in fields:
        del settings["fp8_recipe"]
    return settings


def transformer_config(spec: ModelSpec, tp: int, pp: int, precision: str, stack: Stack,
                       fusions: dict[str, bool], table: dict, ep: int = 1) -> TransformerConfig:
    """The megatron-core configuration of one model variant under one layout (EP: a MoE model's expert-parallel
    size) and fairness profile table."""
    if precision in precisions.LOW and not stack.transformer_engine:
        raise ModelError(f"PRECISION={precision} needs Transformer Engine on a GPU; this stack has none. Use "
                         "PRECISION=bf16")
    if precision == "fp32" and stack.gpu:
        raise ModelError("PRECISION=fp32 is for CPUs without bf16 instructions; GPUs train in bf16 or fp8")
    return TransformerConfig(
        num_layers=spec.num_layers,
        hidden_size=spec.hidden_size,
        ffn_hidden_size=spec.ffn_hidden_size,
        num_attention_heads=spec.num_attention_heads,
        num_query_groups=spec.num_kv_heads,
        kv_channels=spec.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=spec.norm_eps,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=spec.qkv_bias,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        init_method_std=WORKLOAD["init_method_std"],
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        sequence_parallel=sequence_parallel(tp),
        bf16=precision != "fp32",
        params_dtype=params_dtype(precision),
        pipeline_dtype=params_dtype(precision),
        **(fp8_settings(table, precision) if precision in precisions.LOW else {"fp8": None}),
        deallocate_pipeline_outputs=True, attention_softmax_in_fp32=table["attention_softmax_in_fp32"],
        cross_entropy_fusion_impl=table["cross_entropy_fusion_impl"],
        qk_layernorm=spec.qk_norm,
        **moe_settings(spec, stack, ep),
        **{**fusions, **_sliding_window(spec, stack, fusions)},
    )


def moe_settings(spec: ModelSpec, stack: Stack, ep: int = 1, table: dict = MOE_ROUTING) -> dict:
    """TransformerConfig's MoE fields for a mixture-of-experts spec ({} for a dense one): the model's numbers from
    its MoESpec, the routing from utils.spec.fairness.MOE_ROUTING, the experts split over EP ranks (each builds
    experts / EP of them; utils.config.layout holds EP to megatron-core's rules first). The grouped expert GEMM and the
    fused permutation are Transformer Engine's: the local layers (the CPU) run each expert's own GEMMs and torch's
    permutation (moe_notes says so)."""
    if spec.moe is None:
        return {}
    return {**fairness_moe_settings(spec.moe, table),
            "moe_grouped_gemm": table["moe_grouped_gemm"] and stack.transformer_engine,
            "moe_permute_fusion": table["moe_permute_fusion"] and stack.transformer_engine,
            "expert_model_parallel_size": ep}


def moe_notes(config: TransformerConfig, table: dict = MOE_ROUTING) -> list[str]:
    """One warning for each of MOE_ROUTING's kernels the built configuration runs without."""
    if not config.num_moe_experts:
        return []
    missing = [name for name in ("moe_grouped_gemm", "moe_permute_fusion") if table[name] and not getattr(config, name)]
    return [f"MoE kernels unavailable on this stack (Transformer Engine's), running without: {', '.join(missing)}"] \
        if missing else []


def moe_read_back(config: TransformerConfig) -> dict:
    """The MoE settings the built configuration holds (the result's effective.moe), None for a dense model."""
    if not config.num_moe_experts:
        return {"moe": None}
    names = ("num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
             "moe_router_score_function", "moe_router_pre_softmax", "moe_router_load_balancing_type",
             "moe_aux_loss_coeff", "moe_token_dispatcher_type", "moe_router_dtype", "moe_expert_capacity_factor",
             "moe_z_loss_coeff", "moe_grouped_gemm", "moe_permute_fusion", "moe_shared_expert_overlap",
             "expert_model_parallel_size")
    return {"moe": {name: getattr(config, name) for name in names}}


def _sliding_window(spec: ModelSpec, stack: Stack, fusions: dict[str, bool]) -> dict:
    """megatron-core's window_size for a sliding-window model (the spec's megatron_window, every layer).

    Transformer Engine's attention takes the window; the local spec applies it in its unfused softmax only:
    megatron-core 0.16.1's fused masked-softmax kernel builds a plain causal mask and would train full attention
    silently, so a windowed model on the local spec runs with that fusion off (features() records it)."""
    if spec.megatron_window is None:
        return {}
    local_kernel = fusions["masked_softmax_fusion"] and not stack.transformer_engine
    return {"window_size": spec.megatron_window, **({"masked_softmax_fusion": False} if local_kernel else {})}


def precision_of(config: TransformerConfig) -> str:
    """The precision the built configuration trains in, named as PRECISION names it."""
    if low := precisions.read_back(config):
        return low
    if config.bf16:
        return "bf16"
    return "fp32" if config.params_dtype == torch.float32 else str(config.params_dtype)


def fp8_recipe_of(config: TransformerConfig) -> dict | None:
    """The low-precision recipe the built configuration trains with (None in bf16 and fp32), in
    utils.spec.fairness's names (FP4's format and recipe in the fp8 fields). A megatron-core without the fp8_recipe
    field has only the delayed-scaling recipe."""
    fp4 = getattr(config, "fp4", None)
    if not config.fp8 and not fp4:
        return None
    recipe = getattr(config, "fp4_recipe", None) if fp4 else getattr(config, "fp8_recipe", "delayed")
    return {"fp8_format": str(fp4 or config.fp8), "fp8_recipe": str(getattr(recipe, "value", recipe)),
            "fp8_margin": config.fp8_margin, "fp8_amax_history_len": config.fp8_amax_history_len,
            "fp8_amax_compute_algo": config.fp8_amax_compute_algo, "fp8_reduce_amax": te_reduce_amax()}


def _check_rope_scaling(spec: ModelSpec) -> None:
    """megatron-core fixes Llama 3's low/high frequency factors and original context: they must match."""
    if not spec.rope_scaling:
        return
    fixed = {name: p.default for name, p in inspect.signature(RotaryEmbedding._apply_scaling).parameters.items()
             if p.default is not inspect.Parameter.empty}
    for name in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
        if float(spec.rope_scaling[name]) != float(fixed[name]):
            raise ModelError(f"{spec.variant}: rope_scaling {name}={spec.rope_scaling[name]}, but megatron-core "
                             f"fixes it at {fixed[name]}")


def gpt_model(spec: ModelSpec, config: TransformerConfig, stack: Stack, seq_len: int) -> GPTModel:
    """This pipeline stage's part of the model (the LM head tied to the embedding where the spec ties them, RoPE with
    the spec's base and scaling)."""
    _check_rope_scaling(spec)
    experts = {"num_experts": config.num_moe_experts, "moe_grouped_gemm": bool(config.moe_grouped_gemm),
               "qk_layernorm": bool(config.qk_layernorm)}
    if stack.transformer_engine:
        layer_spec = get_gpt_layer_with_transformer_engine_spec(**experts)
    else:
        layer_spec = get_gpt_layer_local_spec(**experts, normalization="RMSNorm")
    return GPTModel(
        config=config,
        transformer_layer_spec=layer_spec,
        vocab_size=spec.vocab_size,
        max_sequence_length=seq_len,
        pre_process=parallel_state.is_pipeline_first_stage(),
        post_process=parallel_state.is_pipeline_last_stage(),
        parallel_output=True,
        share_embeddings_and_output_weights=spec.tied_embeddings,
        position_embedding_type="rope",
        rotary_percent=1.0,
        rotary_base=int(spec.rope_theta),
        rope_scaling=bool(spec.rope_scaling),
        rope_scaling_factor=float(spec.rope_scaling.get("factor", 8.0)),
    )


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
                stride = 2 if logical.endswith(GATED_FC1) and config.gated_linear_unit else getattr(param, "partition_stride", 1)
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


def wrap(model: GPTModel, config: TransformerConfig, table: dict) -> DistributedDataParallel:
    """The model under megatron-core's DDP with the distributed optimizer's grad buffers and overlap; a bf16
    model inside megatron-core's Float16Module (which casts inputs and outputs), an fp32 one as it is
    (Float16Module refuses fp32)."""
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=table["grad_reduce_in_fp32"],
        overlap_grad_reduce=table["overlap_grad_reduce"],
        overlap_param_gather=table["overlap_param_gather"],
        use_distributed_optimizer=table["use_distributed_optimizer"],
        check_for_nan_in_grad=table["check_for_nan_in_grad"],  # off: the trainer checks loss and grad norm itself
        average_in_collective=table["average_in_collective"],
    )
    module = Float16Module(config, model) if config.bf16 else model
    return DistributedDataParallel(config=config, ddp_config=ddp_config, module=module)


def features(config: TransformerConfig, stack: Stack) -> dict[str, bool | str]:
    """Fused kernels and attention implementation, read back from the built model's configuration."""
    out: dict[str, bool | str] = {name: bool(getattr(config, name)) for name in (
        "bias_activation_fusion", "bias_dropout_fusion", "masked_softmax_fusion", "apply_rope_fusion",
        "cross_entropy_loss_fusion", "gradient_accumulation_fusion")}
    out["persist_layer_norm"] = "not applicable (RMSNorm)" if config.normalization == "RMSNorm" \
        else bool(config.persist_layer_norm)
    out["layer_spec"] = stack.layer_spec
    out["optimizer_fusion"] = local_kernels.fused_optimizer()
    if stack.transformer_engine:
        switches = {key: os.environ.get(key, "unset") for key in ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN")}
        out["attention"] = "transformer_engine " + " ".join(f"{k}={v}" for k, v in switches.items())
        out["flash_attention"] = switches["NVTE_FLASH_ATTN"] != "0"
    else:
        out["attention"] = "local (unfused softmax)" if not config.masked_softmax_fusion else "local (fused softmax)"
        out["flash_attention"] = False
    out["attention_backend"] = str(getattr(config, "attention_backend", "n/a"))
    out["sliding_window"] = f"window_size={tuple(config.window_size)}" if config.window_size else False
    return out
