"""The fairness profiles and the workload conventions: what every framework must run with, whatever its defaults.

NeMo's recipes and Primus's shipped configs disagree on many of these (NeMo: CP=2, fp32 gradient
reduction; Primus: EOD loss masking, init std 0.008, a cyclic sampler), so a comparison is only
fair when each launcher sets them explicitly. The names are Megatron-LM's argument names (the
DDP ones megatron-core's); each launcher maps them onto its framework's own.

Two profiles (FAIRNESS=spec|tuned in config.env):
- `spec`, the default: the fair-comparison table of the original specification
  (reference/fairness.md): no overlap of gradient reduce or parameter gather, bf16 gradient reduction.
- `tuned`: the stacks' own performance defaults, each listed in TUNED with the reason.
Both share every other value, and WORKLOAD is the same in both: it defines the training itself.
"""

from __future__ import annotations

from utils.frameworks import TABLE
from utils.spec import precision as precisions
from utils.spec.evaluation import NO_SPLIT

PROFILES = ("spec", "tuned")
DEFAULT_PROFILE = "spec"
# megatron-core's layer implementations, as Megatron-LM's --transformer-impl names them: Transformer Engine's layers,
# or megatron-core's own (the local spec: torch's norm, an unfused attention softmax). The CPU always runs local; a GPU
# run of mega or mbridge runs local only when TRANSFORMER_IMPL=local asks (its kernels differ, so the result records
# it as effective.layer_spec and evaluate.validate never compares it with a Transformer Engine run as equal).
TRANSFORMER_IMPLS = ("transformer_engine", "local")

# The specification's table (reference/fairness.md), plus the settings it leaves open, fixed here so
# that no framework's default decides them. Why each value that is not the table's:
SPEC: dict[str, object] = {
    "context_parallel_size": 1,  # NeMo's 8B recipe defaults to CP=2; TPrimat's layouts are TP x PP x DP
    "use_distributed_optimizer": True,
    "overlap_grad_reduce": False,
    "overlap_param_gather": False,
    "grad_reduce_in_fp32": False,
    # Gradients pre-scaled by 1/DP then summed (megatron-core's and Megatron-LM's default, Primus's
    # trainer_base.yaml), not averaged inside the collective as NeMo's 8B recipes ship it.
    "average_in_collective": False,
    "bias_swiglu_fusion": True,  # the table's bias_activation_fusion (NeMo's name)
    "apply_rope_fusion": True,
    "bias_dropout_fusion": True,  # dropout is 0 in both models
    "cross_entropy_loss_fusion": True,
    "cross_entropy_fusion_impl": "native",  # megatron-core's own kernel, available on CUDA and ROCm
    # The unfused attention's softmax in fp32: megatron-core's TransformerConfig default and Primus's Llama and Qwen
    # presets; Megatron-LM's pretrain_gpt.py (a store_true option) and Megatron-Bridge's GPT provider default to bf16,
    # 5% faster on megatron-core's local layers (docs/frameworks.md, "The Megatron paths on one GPU"). Transformer
    # Engine's fused and flash attention keep their own fp32 softmax whatever it says.
    "attention_softmax_in_fp32": True,
    "gradient_accumulation_fusion": False,  # Primus ships it off on ROCm; NeMo and mega follow for parity
    "attention_backend": "auto",  # Transformer Engine's fused/flash attention kernels on both vendors
    "use_flash_attn": True,  # NeMo: NVTE_FLASH_ATTN=1 from utils/machine/platform_env.py
    # Primus-Turbo's kernels (attention, GEMMs, norms) stay off in every profile: Primus ships them on for Qwen 2.5
    # 7B and Llama 3.1 70B but off for Llama 3.1 8B, and no other framework can run them, so with them on a prim
    # run would measure other attention kernels than the Transformer Engine ones everyone else runs.
    "primus_turbo": False,
    "adam_eps": 1e-8,
    "fp8_param_gather": False,  # with PRECISION=fp8: Primus's default; NeMo's FP8 plugin turns it on
    # A debugging aid that costs a host synchronisation per gradient bucket (megatron-core 0.12 DDP);
    # NeMo and Primus ship it on, mega off. Every trainer's NaN still shows in its loss and grad-norm
    # lines, and evaluate.validate fails such a run.
    "check_for_nan_in_grad": False,
    # The FP8 delayed-scaling recipe (used with PRECISION=fp8 only): Transformer Engine's DelayedScaling
    # defaults, which NeMo's bf16_with_fp8_mixed and Primus v25.11's trainer_base.yaml both ship;
    # megatron-core's TransformerConfig defaults (1, most_recent) are overridden for mega.
    "fp8_format": "hybrid",  # E4M3 forward, E5M2 backward
    "fp8_recipe": precisions.DEFAULT_FP8_RECIPE,  # FP8_RECIPE replaces it in a run's table (profile())
    "fp8_margin": 0,
    "fp8_amax_history_len": 1024,
    "fp8_amax_compute_algo": "max",
    # Whether each step's amax is all-reduced across the ranks before the scales are computed: Transformer Engine's
    # DelayedScaling default, which megatron-core (TEDelayedScaling passes no reduce_amax), so mega, NeMo and
    # Megatron-Bridge, run. Primus builds its own recipe, with it off but in v26.5 at TP > 1 with sequence
    # parallelism (FIXED["primus"]).
    "fp8_reduce_amax": True,
}

# A mixture-of-experts model's routing, under every profile (utils.spec.models' MoESpec holds the model's own
# numbers): the token dispatcher Megatron-Bridge's and Primus's Qwen3 MoE presets ship (at EP=1 no token leaves its
# rank), the router's scores and top-k in fp32, dropless (no capacity factor: every token reaches its top-k experts,
# as both presets ship), no router z-loss; the grouped expert GEMM and the fused permutation (both presets ship them
# on) where the stack has Transformer Engine's kernels, each recorded on or off; the shared experts' computation not
# overlapped with the dispatch (megatron-core's default; Qwen3 has no shared expert to overlap). Not in the profile
# tables: a dense model has none of these, and the frameworks that apply every profile setting to it have no switch
# for them.
MOE_ROUTING: dict[str, object] = {
    "moe_token_dispatcher_type": "alltoall",
    "moe_router_dtype": "fp32",
    "moe_expert_capacity_factor": None,
    "moe_z_loss_coeff": None,
    "moe_grouped_gemm": True,
    "moe_permute_fusion": True,
    "moe_shared_expert_overlap": False,
}
# Of a MoE run's settings (moe_settings' names), those that change only how fast the experts run, not what they
# compute: compared between the runs of a model and named where they differ (evaluate/model_checks.py), never failing
# a run; every other one changes the loss and must be moe_settings' value in every framework that reports it.
MOE_SPEED_SETTINGS = ("moe_token_dispatcher_type", "moe_grouped_gemm", "moe_permute_fusion",
                      "moe_shared_expert_overlap")


def moe_settings(moe, table: dict = MOE_ROUTING) -> dict[str, object]:
    """A MoESpec's numbers and the routing in megatron-core's TransformerConfig names: what every framework sets (mega
    builds it; the others map it onto their own names) and reads back into effective.moe."""
    return {"num_moe_experts": moe.num_experts, "moe_router_topk": moe.top_k,
            "moe_ffn_hidden_size": moe.expert_ffn_size,
            "moe_shared_expert_intermediate_size": moe.shared_experts * moe.shared_expert_ffn_size or None,
            "moe_router_score_function": moe.score_function,
            "moe_router_pre_softmax": not moe.norm_topk_prob,  # softmax over the top-k only: renormalised
            "moe_router_load_balancing_type": moe.load_balancing, "moe_aux_loss_coeff": moe.aux_loss_coeff,
            **table}

# Where `tuned` differs from `spec`: value and reason.
TUNED: dict[str, tuple[object, str]] = {
    "overlap_grad_reduce": (True, "hides the data-parallel gradient reduce-scatter behind the backward pass; "
                                  "on in NeMo's 25.04 recipes and Primus's shipped MI300X configs"),
    "overlap_param_gather": (True, "hides the distributed optimizer's parameter all-gather behind the next "
                                   "forward pass; on in NeMo's 25.04 recipes and Primus's shipped MI300X configs"),
    "grad_reduce_in_fp32": (True, "reduces gradients in fp32 for BF16 numerics, as NeMo's bf16_mixed plugin "
                                  "does by default (Megatron-LM: --accumulate-allreduce-grads-in-fp32)"),
}

# The profile's gradient-reduction settings that a data-parallel implementation has no switch for: what it always
# does, and why. The torch-native engines read them back (train/native/, train/torchtitan/) with their reasons in
# `profile_fixed`, and evaluate.validate warns, instead of failing, where such a value differs from the profile.
FIXED: dict[str, dict[str, tuple[object, str]]] = {
    "fsdp2": {
        "overlap_grad_reduce": (True, "FSDP2 reduce-scatters each layer's gradients during the backward pass; "
                                      "no switch defers them"),
        "overlap_param_gather": (True, "FSDP2 prefetches the next layer's parameter all-gather; no switch turns "
                                       "that off"),
        "average_in_collective": (True, "FSDP2 averages bf16 and fp32 gradients inside the collective "
                                        "(ReduceOp.AVG)"),
    },
    "ddp": {
        "overlap_grad_reduce": (True, "DDP all-reduces its gradient buckets during the backward pass"),
        "overlap_param_gather": (False, "DDP keeps whole parameters on every rank: there is no gather to overlap"),
        "average_in_collective": (False, "DDP divides each bucket by the world size, then sums it"),
    },
    "deepspeed": {  # ZeRO 0-2: overlap_comm and communication_data_type are set from the profile
        "overlap_param_gather": (False, "DeepSpeed ZeRO 1/2 all-gathers the updated parameters inside its "
                                        "optimizer step; no option overlaps that with the next forward"),
        "average_in_collective": (False, "DeepSpeed has no averaging collective: it divides by DP, then sums (ZeRO "
                                         "1/2's reduce-scatter; prescale_gradients under ZeRO 0)"),
    },
    "torchao_float8": {  # fsdp's PRECISION=fp8
        "fp8_amax_history_len": (1, "torchao's float8 training scales each tensor by its current amax (dynamic "
                                    "scaling): there is no amax history"),
        "fp8_amax_compute_algo": ("max", "torchao's dynamic scaling takes the current tensor's amax"),
        "fp8_reduce_amax": (False, "torchao's dynamic scaling takes each tensor's amax on its own rank"),
    },
    # prim, whatever its experiment file says: Primus's Megatron trainer builds the FP8 recipe itself. v25.11
    # always without the reduction (utils/upstream/table.py: primus-v25.11 "v25.11 delayed scaling reduce_amax"); v26.5
    # with it exactly under sequence parallelism at TP > 1, and says which on rank 0 (primus-v26.5 "delayed scaling
    # reduce_amax"): a line the log reader takes over this entry, which stands for a log without it.
    "primus": {
        "fp8_reduce_amax": (False, "Primus builds Transformer Engine's DelayedScaling with reduce_amax=False "
                                   "(v25.11 at every layout; v26.5 below TP 2 or without sequence parallelism, and "
                                   "its log says so); no option turns the reduction on"),
    },
    "deepspeed_zero0": {
        "overlap_grad_reduce": (False, "ZeRO stage 0: DeepSpeed all-reduces the gradients after the backward "
                                       "pass (overlap_comm exists under ZeRO 1 and 2)"),
        "overlap_param_gather": (False, "ZeRO stage 0 keeps whole parameters on every rank: there is no gather"),
    },
}


def fixed(*kinds: str) -> dict[str, object]:
    """The read-back of what the named implementations fix (FIXED, later kinds win): their values, and their
    reasons under `profile_fixed`."""
    merged = {key: entry for kind in kinds for key, entry in FIXED[kind].items()}
    return {**{key: value for key, (value, _why) in merged.items()},
            "profile_fixed": {key: why for key, (_value, why) in merged.items()}}


# The training workload: the same in every profile and every framework (Megatron-LM's conventions,
# which Primus runs; NeMo's where it cannot follow are recorded per framework by workload()).
WORKLOAD: dict[str, object] = {
    "init_method_std": 0.02,  # the specification's table and both models' initializer_range (Primus ships 0.008)
    "eod_mask_loss": False,  # Megatron-LM's default: the loss counts the EOD tokens (Primus ships true)
    "dataloader_type": "single",  # Megatron-LM's sequential sampler (Primus's pre_trainer.yaml ships cyclic)
}
# The padded vocabulary: the model's published one (utils.spec.models' vocab_size: 152064 Qwen, 128256
# Llama), for every TP. Megatron-LM pads the tokenizer's size to a multiple of
# make_vocab_size_divisible_by x TP, which changes the model with the layout (Qwen 151680 at TP1,
# 151808 at TP2); Primus is given make_vocab_size_divisible_by = vocab_size / TP, so its padding
# lands exactly on the published size.
# The LR warm-up (each framework's convention is named in utils/frameworks): Megatron-LM's scheduler
# steps after the optimizer, so step k, 1-based, runs at LR x (k-1)/W (step 1 at 0). NeMo 2.3's
# CosineAnnealingScheduler warms as (i+1)/(W+1) for its 0-based step i (step k at k/(W+1)) and has no
# Megatron-style warm-up: it cannot be made equal.


class ProfileError(ValueError):
    """An unknown fairness profile name."""


def profile(name: str, fp8_recipe: str | None = None) -> dict[str, object]:
    """The full settings table of one profile; FP8_RECIPE's value, when given, as its fp8_recipe (every framework
    with FP8 runs the one recipe asked for, or is skipped: train.plan.skip_reason)."""
    if name not in PROFILES:
        raise ProfileError(f"unknown fairness profile {name!r}; one of {', '.join(PROFILES)}")
    table = dict(SPEC, fp8_recipe=fp8_recipe or SPEC["fp8_recipe"])
    if name == "tuned":
        table.update({key: value for key, (value, _why) in TUNED.items()})
    return table


def workload(framework: str, vocab_size: int, tp: int) -> dict[str, object]:
    """The workload-identity settings one framework's run applies (the request's `workload`)."""
    if vocab_size % tp:
        raise ValueError(f"vocabulary {vocab_size} does not split over TP={tp}")
    return {**WORKLOAD, "padded_vocab_size": vocab_size, "lr_warmup_convention": TABLE[framework].warmup_convention}


def fp8_recipe(table: dict, precision: str = "fp8") -> dict[str, object]:
    """The low-precision recipe's settings of a profile table (recorded in results of runs below 16 bits): under
    MXFP8, NVFP4 and MXFP4 fp8_recipe is that format's recipe (megatron-core's fp8_recipe or fp4_recipe), and FP4's
    format is E2M1; the delayed-scaling fields stay as the table says (no other recipe reads them)."""
    settings = {key: table[key] for key in ("fp8_format", "fp8_recipe", "fp8_margin", "fp8_amax_history_len",
                                            "fp8_amax_compute_algo", "fp8_reduce_amax")}
    settings["fp8_recipe"] = precisions.recipe(precision, str(table["fp8_recipe"]))
    if precisions.MEGATRON_SWITCH[precision][0] == "fp4":
        settings["fp8_format"] = precisions.FP4_FORMAT
    return settings


# The result's workload-identity fields (training section), compared across frameworks by evaluate.validate.
IDENTITY_KEYS = ("fairness_profile", "init_method_std", "padded_vocab_size", "eod_mask_loss", "dataloader_type",
                 "lr_warmup_convention", "check_for_nan_in_grad", "fp8_recipe", "validation_split")


def identity(profile_name: str, table: dict, applied: dict, precision: str,
             validation_split: str = NO_SPLIT) -> dict[str, object]:
    """The workload-identity fields of a result: the profile, the workload a framework applied
    (workload()), the NaN check, the low-precision recipe (None unless the run trains below 16 bits) and the
    validation split (utils.spec.evaluation: the documents held out are never trained on, so runs with other splits
    train on other documents; NO_SPLIT without validation)."""
    return {"fairness_profile": profile_name, **applied, "check_for_nan_in_grad": table["check_for_nan_in_grad"],
            "fp8_recipe": fp8_recipe(table, precision) if precision in precisions.LOW else None,
            "validation_split": validation_split}


def sequence_parallel(tp: int) -> bool:
    """Sequence parallelism accompanies tensor parallelism (it is meaningless at TP=1)."""
    return tp > 1
