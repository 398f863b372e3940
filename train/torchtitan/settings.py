"""TPrimat request (config.json) -> torchtitan 0.3.0 settings: a pure mapping, testable without torchtitan.

The result is plain JSON, the run's torchtitan_settings.json, that train/torchtitan/config_registry.py applies to
torchtitan's Trainer.Config: `set` holds dotted field paths on that config (each one checked to exist there, so a
field renamed by another torchtitan fails the run instead of being ignored), `model` the architecture numbers of the
request's ModelSpec, `optimizer` AdamW's settings in megatron-core's parameter groups, and `request` the run's
config.json, from which TPrimat's dataloader reads the prepared data.

Field names are torchtitan 0.3.0's: torchtitan/config/configs.py (TrainingConfig, ParallelismConfig, CompileConfig,
DebugConfig), components/optimizer/lr_scheduler.py (LRSchedulersContainer.Config), components/metrics.py
(MetricsProcessor.Config), trainer.py (Trainer.Config).
"""

from __future__ import annotations

import dataclasses

from train.launch.builder import REQUEST_FILE
from utils.config.native import REPLICATED, SHARDED
from utils.errors import UsageError
from utils.frameworks.torchtitan import model_name
from utils.spec.request import Request

SETTINGS_ENV = "TPRIMAT_TORCHTITAN_SETTINGS"  # where config_registry.tprimat finds the settings
SETTINGS_FILE = "torchtitan_settings.json"
CONFIG_FILE = "torchtitan_config.json"  # torchtitan's own dump of the config it built (DebugConfig.save_config_file)
# LRSchedulersContainer.Config.decay_type's values that are TPrimat's LR_DECAY_STYLE too.
DECAY_STYLES = ("cosine", "linear")
# TPrimat's PRECISION -> torchtitan's mixed_precision_param: bf16 compute over fp32 master weights, or fp32 throughout
# (the CPU's, where it has no native bf16)
PRECISIONS = {"bf16": "bfloat16", "fp32": "float32"}
# The attention each layer runs: torchtitan's llama3 default FlexAttention, or on the CPU, where FlexAttention has no
# backward (torch nn/attention/flex_attention.py:2236), torch's scaled_dot_product_attention through torchtitan's own
# ScaledDotProductAttention (causal; with positions 0..SL-1 in every row, as TPrimat's data gives them, the same
# mask as FlexAttention's block-causal one)
ATTENTION = {"cpu": "sdpa"}
DEFAULT_ATTENTION = "flex"
# A mixture of experts' load balancing (utils.spec.models' MoESpec) that TPrimat adds to torchtitan's routers, which
# have no loss of their own: megatron-core's aux_loss (train/torchtitan/moe.py), or none
LOAD_BALANCING = ("aux_loss", "none")


def refusals(req: Request) -> list[str]:
    """What torchtitan 0.3.0 cannot run as asked (one line each, with the fix); the plan's skips come first
    (utils/frameworks/torchtitan/): these guard what the plan cannot see."""
    lay, native, t = req.parallelism, req.native, req.training
    found = []
    if lay.pp != 1:
        found.append(f"PP={lay.pp}: TPrimat does not map torchtitan's pipeline parallelism; give a strategy with PP=1")
    if native.data_parallel == REPLICATED and lay.tp != 1:
        found.append(f"DATA_PARALLEL=ddp with TP={lay.tp}: DDP replicates whole models; set DATA_PARALLEL=fsdp or "
                     "TP=1")
    if native.compile and native.compile_mode != "default":
        found.append(f"COMPILE_MODE={native.compile_mode}: torchtitan 0.3.0's CompileConfig has no mode (it "
                     "compiles each layer with its default); set COMPILE_MODE=default")
    if native.sac_every:
        found.append("SAC_FREQ: torchtitan 0.3.0 checkpoints by operation on every layer, not every N-th layer; "
                     "clear SAC_FREQ")
    if t.precision not in PRECISIONS:
        found.append(f"PRECISION={t.precision}: TPrimat maps torchtitan's {' and '.join(PRECISIONS)} only; set "
                     "PRECISION=bf16")
    if t.lr_decay_style not in DECAY_STYLES:
        found.append(f"LR_DECAY_STYLE={t.lr_decay_style}: torchtitan decays {' or '.join(DECAY_STYLES)}")
    name = model_name(req.model)
    if name is None:
        found.append(f"{req.model.key}: TPrimat builds no torchtitan model for it (its llama3 model has no sliding "
                     "window or QK-norm; its qwen3 and gpt_oss MoE models are Qwen3's and GPT-OSS's)")
    if name == "gpt_oss" and attention(req) == "sdpa":
        found.append(f"{req.model.key} on the {req.identity.platform}: torchtitan's GPT-OSS attention scales its "
                     "output by the sinks with the attention's log-sum-exp, which only FlexAttention (no backward "
                     "on the CPU) and flash attention (GPUs only) give; run it on a GPU")
    if name == "gpt_oss" and t.precision != "bf16":
        found.append(f"{req.model.key} with PRECISION={t.precision}: torchtitan's GPT-OSS experts return bf16 "
                     "whatever the precision, which its token combine cannot add into the layer's "
                     f"{t.precision} activations; set PRECISION=bf16")
    if lay.ep > 1 and native.data_parallel == REPLICATED:
        found.append(f"EP={lay.ep} with DATA_PARALLEL=ddp: torchtitan's expert parallelism takes its ranks from "
                     "FSDP's (ParallelismConfig.expert_parallel_degree); set DATA_PARALLEL=fsdp or EP=1")
    moe = req.model.moe
    if moe is not None and moe.load_balancing not in LOAD_BALANCING:
        found.append(f"{req.model.key}: its {moe.load_balancing} load balancing is not mapped onto torchtitan (which "
                     f"has no load-balancing loss; TPrimat adds {' or '.join(LOAD_BALANCING)})")
    return found


def attention(req: Request) -> str:
    """The inner attention torchtitan's layers run on the request's platform (ATTENTION)."""
    return ATTENTION.get(req.identity.platform, DEFAULT_ATTENTION)


def model(req: Request) -> dict:
    """The architecture, every number from the request's ModelSpec (a MODEL_LAYERS proxy's fewer layers too), the
    vocabulary padded as every framework pads it (utils.spec.fairness.workload), and torchtitan's model it is built
    as (utils/frameworks/torchtitan: model_name)."""
    spec = req.model
    return {"name": model_name(spec), "variant": spec.variant, "num_layers": spec.num_layers, "dim": spec.hidden_size,
            "n_heads": spec.num_attention_heads, "n_kv_heads": spec.num_kv_heads, "ffn_hidden": spec.ffn_hidden_size,
            "vocab_size": req.fairness.workload["padded_vocab_size"], "rope_theta": spec.rope_theta,
            "rope_scaling": dict(spec.rope_scaling), "norm_eps": spec.norm_eps, "qkv_bias": spec.qkv_bias,
            "tied_embeddings": spec.tied_embeddings, "head_dim": spec.head_dim, "qk_norm": spec.qk_norm,
            "moe": dataclasses.asdict(spec.moe) if spec.moe else None, "sliding_window": spec.sliding_window,
            "full_attention_every": spec.full_attention_every, "swiglu_limit": spec.swiglu_limit,
            "max_seq_len": max(spec.max_position_embeddings, req.training.seq_len)}


def settings(req: Request, run_dir: str) -> dict:
    """Everything config_registry.tprimat sets for one run, from the run's request; UsageError lists what
    torchtitan cannot run as asked."""
    problems = refusals(req)
    if problems:
        raise UsageError("torchtitan cannot run this request: " + "; ".join(problems))
    lay, t, native, table, moe = req.parallelism, req.training, req.native, req.fairness.table, req.model.moe
    fsdp = native.data_parallel == SHARDED
    values: dict[str, object] = {
        "dump_folder": f"{run_dir}/torchtitan",
        "hf_assets_path": req.data.tokenizer_dir,  # the tokenizer torchtitan builds (TPrimat's data never uses it)
        # the batch: MBS per DP rank and microbatch; torchtitan derives GA = GBS / (MBS x DP)
        "training.local_batch_size": t.mbs,
        "training.global_batch_size": t.gbs,
        "training.seq_len": t.seq_len,
        "training.steps": t.steps,
        "training.max_norm": t.grad_clip,
        # bf16 mixed precision: fp32 master weights, bf16 compute, the profile's gradient reduction (FSDP2's
        # reduce_dtype, models/llama3/parallelize.py; under DDP torchtitan autocasts and reduces fp32 gradients);
        # fp32: fp32 compute and reduction
        "training.dtype": "float32",
        "training.mixed_precision_param": PRECISIONS[t.precision],
        "training.mixed_precision_reduce": "float32" if table["grad_reduce_in_fp32"] or t.precision == "fp32"
        else "bfloat16",
        # torchtitan captures each forward-backward in a CUDA graph by default, on NVIDIA only (ROCm runs eagerly:
        # distributed/cudagraph.py, wrap_with_cuda_graph): off, so both vendors (and fsdp) run the same eager work
        "training.disable_cuda_graphs": True,
        # the layout: FSDP2 over DP (or DDP), DTensor TP with sequence parallelism as the request says
        "parallelism.data_parallel_shard_degree": lay.dp if fsdp else 1,
        "parallelism.data_parallel_replicate_degree": 1 if fsdp else lay.dp,
        "parallelism.tensor_parallel_degree": lay.tp,
        "parallelism.enable_sequence_parallel": lay.sequence_parallel,
        "parallelism.pipeline_parallel_degree": 1,
        "parallelism.context_parallel_degree": 1,
        # a mixture of experts' experts split over EP of the FSDP ranks (torchtitan's efsdp = DP / EP), and
        # megatron-core's load-balancing loss, which TPrimat adds to its routers (train/torchtitan/moe.py)
        "parallelism.expert_parallel_degree": lay.ep,
        "moe_aux_loss_coeff": moe.aux_loss_coeff if moe and moe.load_balancing == "aux_loss" else None,
        # the LR schedule: linear warm-up (torchtitan's convention), then the decay to MIN_LR over the other steps
        "lr_scheduler.warmup_steps": t.warmup_steps,
        "lr_scheduler.decay_type": t.lr_decay_style,
        "lr_scheduler.decay_ratio": None,
        "lr_scheduler.min_lr_factor": t.min_lr / t.lr if t.lr else 0.0,
        "lr_scheduler.total_steps": None,
        "compile.enable": native.compile,
        "activation_checkpoint": None,  # SAC_FREQ is refused above: no checkpointing
        # every step logged on the console, nothing else written: no checkpoints, profiles, loggers; torchtitan's
        # validator stays off, as TPrimat's evaluation runs in the trainer (train/torchtitan/trainer.py)
        "metrics.log_freq": 1,
        "metrics.enable_tensorboard": False,
        "metrics.enable_wandb": False,
        "metrics.disable_color_printing": True,
        "checkpoint.enable": False,
        "validator.enable": False,
        "profiler.enable_profiling": False,
        "debug.seed": t.seed,
        "debug.save_config_file": CONFIG_FILE,
    }
    decayed = {"lr": t.lr, "betas": [t.beta1, t.beta2], "eps": float(table["adam_eps"]),
               "weight_decay": t.weight_decay}
    return {"set": values, "model": model(req), "request": f"{run_dir}/{REQUEST_FILE}",
            "attention": attention(req),
            # megatron-core's parameter groups: no weight decay on biases and norms (the 1-D weights), first match
            # wins (components/optimizer/optimizer.py, OptimizersContainer._build_param_groups)
            "optimizer": [{"pattern": r"(norm\.weight|\.bias)$", "kwargs": {**decayed, "weight_decay": 0.0}},
                          {"pattern": r".*", "kwargs": decayed}]}
