"""TPrimat's models (utils.spec.models specs) as megatron-core GPT models.

Everything here sticks to the megatron-core API shared by 0.12 (nemo:25.04), Primus's Megatron-LM
and 0.16 (the host). The choices a benchmark must be able to prove are made in one place each:

- the layer spec: Transformer Engine's when TE and a GPU are present, the local spec otherwise;
- the fused kernels: what the fairness profile (utils.spec.fairness) asks for, where the installed stack has the kernel
  (each recorded on or off in the result, with a warning for every one the table wanted);
- the initial weights: drawn per logical parameter (train/mega/weights.py).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import (get_gpt_layer_local_spec,
                                                      get_gpt_layer_with_transformer_engine_spec)
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_config import TransformerConfig

from train.common import local_kernels
from train.common.fp8 import te_reduce_amax
from utils.spec import precision as precisions
from utils.spec.fairness import MOE_ROUTING, WORKLOAD, sequence_parallel
from utils.spec.fairness import moe_settings as fairness_moe_settings
from utils.spec.models import ModelSpec

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
        add_bias_linear=spec.linear_bias,
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
        **variant_settings(spec),
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


def variant_settings(spec: ModelSpec) -> dict:
    """TransformerConfig's activation (SwiGLU's SiLU) and its fields for the spec's attention and activation variants
    (GPT-OSS's): learned attention
    sinks (softmax_type "learnable"), full attention on every N-th layer (window_attn_skip_freq) and the clamped SwiGLU
    (quick_gelu, the clamp, up + 1), each only where the model has it, so that a stack whose megatron-core lacks the
    field refuses that model alone, naming it."""
    wanted: dict[str, object] = {"activation_func": F.silu}
    if spec.attention_sinks:
        wanted["softmax_type"] = "learnable"
    if spec.full_attention_every is not None:
        wanted["window_attn_skip_freq"] = spec.full_attention_every
    if spec.swiglu_limit is not None:
        from megatron.core.fusions.fused_bias_geglu import quick_gelu
        wanted.update(activation_func=quick_gelu, activation_func_clamp_value=spec.swiglu_limit, glu_linear_offset=1.0)
    fields = {f.name for f in dataclasses.fields(TransformerConfig)}
    if missing := [name for name in wanted if name not in fields]:  # none for a dense Llama-style model
        raise ModelError(f"{spec.variant} needs TransformerConfig's {', '.join(missing)}, which this megatron-core "
                         "lacks: run it on a stack with megatron-core 0.15 or newer")
    return wanted


def yarn_settings(spec: ModelSpec) -> dict:
    """YaRN's numbers under the names megatron-core's GPTModel reads off its config (yarn_*), {} without YaRN.
    mscale None is megatron-core's 0.1 ln(factor) + 1, Hugging Face's attention factor; truncate is the correction
    range's rounding."""
    scaling = spec.rope_scaling
    if not spec.yarn:
        return {}
    return {"yarn_rotary_scaling_factor": scaling["factor"],
            "yarn_original_max_position_embeddings": scaling["original_max_position_embeddings"],
            "yarn_beta_fast": scaling["beta_fast"], "yarn_beta_slow": scaling["beta_slow"], "yarn_mscale": None,
            "yarn_mscale_all_dim": None, "yarn_correction_range_round_to_int": scaling["truncate"]}


def moe_notes(config: TransformerConfig, table: dict = MOE_ROUTING) -> list[str]:
    """One warning for each of MOE_ROUTING's kernels the built configuration runs without."""
    if not config.num_moe_experts:
        return []
    missing = [name for name in ("moe_grouped_gemm", "moe_permute_fusion") if table[name] and not getattr(config, name)]
    return [f"MoE kernels unavailable on this stack (Transformer Engine's), running without: {', '.join(missing)}"] \
        if missing else []


def moe_read_back(config: TransformerConfig, spec: ModelSpec) -> dict:
    """The MoE settings the built configuration holds (the result's effective.moe), under the names it was built
    from (utils.spec.fairness.moe_settings, and the EP size); None for a dense model."""
    if not config.num_moe_experts:
        return {"moe": None}
    names = [*fairness_moe_settings(spec.moe), "expert_model_parallel_size"]
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
    if not spec.rope_scaling or spec.yarn:
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
    for name, value in yarn_settings(spec).items():
        setattr(config, name, value)  # GPTModel reads them off its config; TransformerConfig declares none
    experts = {"num_experts": config.num_moe_experts, "moe_grouped_gemm": bool(config.moe_grouped_gemm),
               "qk_layernorm": bool(config.qk_layernorm)}
    if stack.transformer_engine:
        layer_spec = get_gpt_layer_with_transformer_engine_spec(**experts)
    else:
        layer_spec = get_gpt_layer_local_spec(**experts, normalization="RMSNorm")
        if config.num_moe_experts and config.add_bias_linear:
            _reduce_without_a_view()
    return GPTModel(
        config=config,
        transformer_layer_spec=layer_spec,
        vocab_size=spec.vocab_size,
        max_sequence_length=seq_len,
        pre_process=parallel_state.is_pipeline_first_stage(),
        post_process=parallel_state.is_pipeline_last_stage(),
        parallel_output=True,
        share_embeddings_and_output_weights=spec.tied_embeddings,
        position_embedding_type="yarn" if spec.yarn else "rope",
        rotary_percent=1.0,
        rotary_base=int(spec.rope_theta),
        rope_scaling=bool(spec.rope_scaling) and not spec.yarn,  # Llama 3's frequency scaling
        rope_scaling_factor=float(spec.rope_scaling.get("factor", 8.0)),
    )


def _reduce_without_a_view() -> None:
    """Let the local experts' biases be added: megatron-core's MLP adds an expert's fc2 bias in place on fc2's output
    (transformer/mlp.py, MLP.forward), which its RowParallelLinear returns through _ReduceFromModelParallelRegion,
    an autograd Function that hands a one-rank group's input back as it is (tensor_parallel/mappings.py, _reduce), and
    torch refuses an in-place change of such an output. On a one-rank group the reduction is the identity both ways,
    so it is skipped there without the Function; any other group reduces as before. Transformer Engine's grouped
    experts add their biases otherwise and need none of this (tests/test_train_mega_model.py shows the refusal)."""
    from megatron.core.tensor_parallel import layers

    reduce = layers.reduce_from_tensor_model_parallel_region
    if getattr(reduce, "skips_one_rank", False):
        return

    def reduced(input_: torch.Tensor, group=None) -> torch.Tensor:
        one_rank = group is not None and group.size() == 1
        return input_ if one_rank else reduce(input_, group=group)

    reduced.skips_one_rank = True
    layers.reduce_from_tensor_model_parallel_region = reduced


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
