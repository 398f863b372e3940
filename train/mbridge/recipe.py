"""TPrimat request (config.json) -> Megatron-Bridge recipe settings: a pure mapping, testable without Megatron-Bridge.

The result is plain JSON that train/train_mbridge.py applies to the ConfigContainer a recipe function returns
(`megatron.bridge.recipes.<module>.<function>()`, utils/frameworks/mbridge/: its model_names): `set` holds attribute
paths on the container (train, model, optimizer, scheduler, ddp, dataset, tokenizer, logger, checkpoint, rng,
validation), each overriding a recipe default that would otherwise differ from the request; the other sections name
what train_mbridge.py builds itself (the mixed-precision preset, the pipeline dtype and attention backend as torch
and megatron-core objects, the model's Hugging Face config).

API facts from NVIDIA-NeMo/Megatron-Bridge v0.6.0: src/megatron/bridge/recipes/common.py (`_pretrain_common`: the
container's sections and defaults), src/megatron/bridge/training/config.py (ConfigContainer, GPTDatasetConfig whose
`data_path` becomes `blend` at finalize), src/megatron/bridge/training/mixed_precision.py (the presets by name),
src/megatron/bridge/training/setup.py (`_validate_and_set_vocab_size`: a preset model vocab_size is kept as it is
unless tokenizer.use_tokenizer_vocab_size).
"""

from __future__ import annotations

from train.common.megatron_settings import DDP_KEYS, architecture, fairness_paths, precision_settings
from utils.spec.fairness import moe_settings as fairness_moe
from utils.spec.precision import switch_key
from utils.frameworks import TABLE
from utils.spec.request import Request

# Each recipe builds its model from a Hugging Face config it names by Hub id (AutoBridge.from_hf_pretrained in
# src/megatron/bridge/recipes/{llama/h100/llama3.py,qwen/h100/qwen2.py,qwen/h100/qwen3_moe.py,
# gpt_oss/h100/gpt_oss.py}, v0.6.0; Qwen3's at a pinned revision, which a local directory does not ask for). TPrimat
# writes its spec there as a local directory of that name (launch.write_model_dir), so nothing is downloaded and the
# variant is TPrimat's.
HUB_IDS = {
    "llama.llama31_8b_pretrain_config": "meta-llama/Meta-Llama-3.1-8B",
    "llama.llama31_70b_pretrain_config": "meta-llama/Meta-Llama-3.1-70B",
    "llama.llama32_3b_pretrain_config": "meta-llama/Llama-3.2-3B",
    "qwen.qwen25_7b_pretrain_config": "Qwen/Qwen2.5-7B",
    "qwen.qwen3_30b_a3b_pretrain_config": "Qwen/Qwen3-30B-A3B",
    "gpt_oss.gpt_oss_20b_pretrain_config": "openai/gpt-oss-20b",
}
# Its mixed-precision presets (training/mixed_precision.py) by utils.spec.precision.switch_key; no MXFP4 (megatron-core
# has no such recipe)
# fp32 (a CPU without bf16 instructions, as mega trains there): no preset, a MixedPrecisionConfig with every
# reduced precision off (train_mbridge.build_config), so the model, optimizer and DDP keep megatron-core's fp32
PRESETS = {"fp32": None, "bf16": "bf16_mixed", "delayed": "bf16_with_fp8_delayed_scaling_mixed",
           "tensorwise": "bf16_with_fp8_current_scaling_mixed", "blockwise": "bf16_with_fp8_subchannel_scaling_mixed",
           "mxfp8": "bf16_with_mxfp8_mixed", "nvfp4": "bf16_with_nvfp4_mixed"}

# TPrimat's fairness names -> attribute paths on the ConfigContainer.
FAIRNESS_PATHS = fairness_paths({"model": "model.", "optimizer": "optimizer.", "parallel": "model."})

# What the recipes switch on that no other framework runs, set as they all run (the upstream lines are
# utils/upstream/table.py's facts): no communication-overlap setup (the 70B recipe's CommOverlapConfig turns on TP
# communication overlap, and at DP > 1 Megatron-Bridge's setup then also turns on the DDP gradient-reduce and
# parameter-gather overlaps with a 128 MiB bucket, over the fairness profile's), so the DDP settings are the
# profile's and TP communication is not overlapped, as in mega and Primus; no manual garbage collection (every recipe
# collects every 100 steps; Megatron-LM and Primus leave it off, the torch-native engines have none); and no process
# environment of the recipe's own (cfg.env_vars, applied inside the process): its variables are the stack's
# (utils/spec/stacks.py), which the launcher gives every framework on the stack.
# The GPT-OSS recipe also normalizes the loss by the tokens of the whole step (calculate_per_token_loss, which asks
# the DDP config not to average in the collective), where megatron-core's default, mega's and every other recipe's,
# averages each microbatch's loss: off, as the others run.
RUN_AS_THE_OTHERS = {"comm_overlap": None, "train.manual_gc": False, "env_vars": {},
                     "model.calculate_per_token_loss": False}

# A mixture-of-experts model runs its experts as mega does (train/mega/model.py: utils.spec.fairness.moe_settings
# over megatron-core's defaults), so what its recipe turns on beyond that is off (qwen3_30b_a3b_pretrain_config is the
# 16-GPU H100 recipe built over the 8-GPU one, recipes/qwen/h100/qwen3_moe.py; the lines are utils/upstream/
# table.py's facts): the flex dispatcher (DeepEP, then HybridEP; apply_flex_dispatcher_backend makes the dispatcher
# "flex", on a machine without CUDA too), cleared as Megatron-Bridge's own fallback to alltoall clears it, then
# moe_settings' dispatcher set; Transformer Engine's CUDA graphs of the router and the RNG tracker they need; the fused
# router kernel; activation recomputation (the 8-GPU recipe's full recompute of every layer, which the 16-GPU one
# clears); the precision-aware optimizer (Transformer Engine's FusedAdam holding the fp32 main weights and moments,
# where mega's distributed optimizer holds them). What changes the loss (the Qwen3 MoE bridge's own load-balancing
# weight, router and dispatcher) is moe_settings' value. Only a MoE model gets these: a dense recipe keeps its own.
MOE_AS_THE_OTHERS = {
    "model.moe_flex_dispatcher_backend": None, "model.cuda_graph_impl": "none", "model.cuda_graph_scope": None,
    "model.use_te_rng_tracker": False, "rng.te_rng_tracker": False, "model.moe_router_fusion": False,
    "model.recompute_granularity": None, "model.recompute_method": None, "model.recompute_num_layers": None,
    "optimizer.use_precision_aware_optimizer": False,
}
# The MoE kernels that are Transformer Engine's: off on megatron-core's local layers (the CPU, TRANSFORMER_IMPL=local),
# as mega's local layers run without them (each expert's own GEMMs, torch's permutation); recorded in effective.moe
TE_MOE_KERNELS = ("moe_grouped_gemm", "moe_permute_fusion")

# On the CPU (FRAMEWORK=mbridge, PLATFORM=cpu), as mega runs there: gloo for the collectives, megatron-core's local
# layers (no Transformer Engine), and the fusions that are GPU kernels off (torch.compile'd jit fusions; the fused
# RoPE and softmax kernels are turned off by train_mbridge where the stack lacks them, as on a GPU's local layers).
CPU_SETTINGS = {"dist.distributed_backend": "gloo", "model.transformer_impl": "local",
                "model.bias_activation_fusion": False, "model.bias_dropout_fusion": False,
                "model.cross_entropy_loss_fusion": False, "model.gradient_accumulation_fusion": False}


def recipe_settings(req: Request, run_dir: str) -> dict:
    """Everything train_mbridge.py sets on the recipe's ConfigContainer for one run, from the run's request."""
    lay, train, data, env, evaluation = req.parallelism, req.training, req.data, req.environment, req.evaluation
    fairness, applied = req.fairness.table, req.fairness.workload
    recipe = TABLE["mbridge"].model_name(req.identity.model)
    work = f"{run_dir}/mbridge"
    settings: dict[str, object] = {
        # layout (DP follows from the world size)
        "model.tensor_model_parallel_size": lay.tp,
        "model.pipeline_model_parallel_size": lay.pp,
        "model.expert_model_parallel_size": lay.ep,  # a MoE model's experts over EP of the DP ranks
        "model.virtual_pipeline_model_parallel_size": None,
        "model.pipeline_model_parallel_layout": None,
        "model.sequence_parallel": lay.sequence_parallel,
        # workload: steps, batch, sequence, seed; a step logged every step; no checkpoints
        "train.train_iters": train.steps,
        "train.global_batch_size": train.gbs,
        "train.micro_batch_size": train.mbs,
        "model.seq_length": train.seq_len,
        "dataset.seq_length": train.seq_len,
        "rng.seed": train.seed,
        "dataset.random_seed": train.seed,
        # held-out validation (utils/spec/evaluation.py) through Megatron-Bridge's own loop, which stops its
        # interval timer around it; without EVAL_INTERVAL none, and every document trains
        "validation.eval_iters": evaluation.iters(train.gbs, train.seq_len) if evaluation.enabled else 0,
        "validation.eval_interval": evaluation.interval_steps if evaluation.enabled else train.steps,
        "checkpoint.save": None,
        "checkpoint.load": None,
        "logger.log_interval": 1,
        "logger.log_throughput": True,  # Megatron's TFLOP/s, kept as the framework's raw figure
        "logger.tensorboard_dir": None,
        "logger.log_timers_to_tensorboard": False,
        # optimizer and schedule (megatron-core's OptimizerParamScheduler: Megatron's warm-up convention)
        "optimizer.lr": train.lr,
        "optimizer.min_lr": train.min_lr,
        "optimizer.weight_decay": train.weight_decay,
        "optimizer.adam_beta1": train.beta1,
        "optimizer.adam_beta2": train.beta2,
        "optimizer.clip_grad": train.grad_clip,
        "optimizer.bf16": train.precision != "fp32",
        "optimizer.fp16": False,
        "scheduler.lr_warmup_iters": train.warmup_steps,
        "scheduler.lr_warmup_init": 0.0,
        "scheduler.lr_decay_iters": train.steps,
        "scheduler.lr_decay_style": train.lr_decay_style,
        "scheduler.start_weight_decay": train.weight_decay,
        "scheduler.end_weight_decay": train.weight_decay,
        # model: TPrimat's spec and the workload's init; the vocabulary preset as the workload pads it
        "model.init_method_std": applied["init_method_std"],
        **architecture(req.model, applied["padded_vocab_size"], "model."),
        # the model's own tokenizer (its recipe ships NullTokenizer), whose size the preset vocab_size covers
        "tokenizer.tokenizer_type": "HuggingFaceTokenizer",
        "tokenizer.tokenizer_model": data.tokenizer_dir,
        "tokenizer.use_tokenizer_vocab_size": False,
        # data: the prepared .bin/.idx prefix (no suffix) cut by the request's split; none: mock data
        "dataset.data_path": None if data.mock_data else [data.prefix],
        "dataset.blend": None,
        "dataset.split": evaluation.megatron_split(),
        "dataset.path_to_cache": f"{work}/index_cache",
        "dataset.eod_mask_loss": applied["eod_mask_loss"],
        "dataset.dataloader_type": applied["dataloader_type"],
        **{f"ddp.{key}": fairness[key] for key in DDP_KEYS},
        **{path: fairness[name] for name, path in FAIRNESS_PATHS.items()},
        **RUN_AS_THE_OTHERS,
        "model.transformer_impl": env.transformer_impl,
    }
    cpu = req.identity.platform == "cpu"
    if cpu:
        settings.update(CPU_SETTINGS)
    impl = "local" if cpu else env.transformer_impl
    settings.update(moe_settings(req, impl))
    if env.profiling:  # megatron's nsys capture range, rank 0
        settings.update({"profiling.use_nsys_profiler": True, "profiling.profile_step_start": env.profile_start_step,
                         "profiling.profile_step_end": env.profile_end_step, "profiling.profile_ranks": [0]})
    return {
        "recipe": recipe,
        "hub_id": HUB_IDS[recipe],
        "model_dir": f"{work}/hf",  # <hub_id>/config.json under it: the model spec (train/mbridge/launch.py)
        "readback": f"{run_dir}/mbridge_readback.json",
        "set": settings,
        "pipeline_dtype": "bfloat16" if lay.pp > 1 else None,
        "attention_backend": fairness["attention_backend"],
        # megatron-core's layers (TRANSFORMER_IMPL): local builds them with Megatron-Bridge's local_layer_spec
        # (src/megatron/bridge/models/gpt_provider.py) and answers Transformer Engine's one unguarded import inertly
        "transformer_impl": impl,
        "cpu": cpu,  # train_mbridge applies train/mbridge/cpu_stand_ins.py before Megatron-Bridge is imported
        # the model's MoE settings the read-back reports as effective.moe (megatron-core's names); None: dense
        "moe": [*fairness_moe(req.model.moe), "expert_model_parallel_size"] if req.model.moe else None,
        "mixed_precision": {"preset": PRESETS[switch_key(train.precision, str(fairness["fp8_recipe"]))],
                            "set": mixed_precision(req)},
        "workload": applied,  # for the record: the sampler is Megatron's sequential one, the warm-up Megatron's
        # Megatron-Bridge's own switches; the platform's and the stack's (attention kernels, device connections,
        # the recipes' allocator and NCCL settings) come from utils/machine/platform_env.py through the launcher.
        "env": {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "MEGATRON_CONFIG_LOCK_DIR": work},
    }


def moe_settings(req: Request, impl: str) -> dict:
    """A MoE model's experts and routing (utils.spec.fairness.moe_settings) on the model, its experts split over TP
    as megatron-core's default splits them (mega's, and the memory prediction's; the recipe ships
    expert_tensor_parallel_size 1), and MOE_AS_THE_OTHERS; {} for a dense model."""
    if req.model.moe is None:
        return {}
    local = {name: False for name in TE_MOE_KERNELS} if impl == "local" else {}
    return {**{f"model.{name}": value for name, value in {**fairness_moe(req.model.moe), **local}.items()},
            "model.expert_tensor_parallel_size": req.parallelism.tp, **MOE_AS_THE_OTHERS}


def mixed_precision(req: Request) -> dict:
    """The preset's settings as NeMo's mapping gives them (train/nemo/recipe.py precision_settings), and the MXFP8
    parameter gather's grad-buffer reuse as the profile gathers parameters: bf16_with_mxfp8_mixed ships it on, and
    megatron-core's DDP config refuses it unless the parameters are gathered in MXFP8 (fp8_param_gather), which
    the profile turns off."""
    settings = precision_settings(req)
    settings["reuse_grad_buf_for_mxfp8_param_ag"] = req.training.precision == "mxfp8" and settings["fp8_param_gather"]
    return settings
