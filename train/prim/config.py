"""TPrimat request (config.json) + Primus's shipped experiment YAML -> the run's experiment YAML.

Primus reads every training setting from `modules.pre_trainer.overrides` (a key at the top level
is silently ignored) and trains on `MockGPTDataset` unless `mock_data: false` is set there, so the
experiment keeps the shipped file's structure and writes every requested setting, real data
included, under the overrides. `experiment()` is pure; the launch glue is `command()`.

    python3 -m train.prim.config --request RUN_DIR/config.json [--primus CHECKOUT] \
        -o RUN_DIR/primus_experiment.yaml

The Primus release (the run's stack's `primus`) decides the checkout and the launch (train/prim/releases.py), and
every override key must be one the checkout's presets hold (train/prim/presets.py): v26.5 would ignore any other
silently. A mixture-of-experts model's experts and routing are train/prim/moe.py's.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
from dataclasses import dataclass
from pathlib import Path

from train.prim import moe, presets, releases
from utils.cli import Parser, UsageError, run
from utils.files import atomic_open
from utils.frameworks import TABLE
from utils.spec import precision as precisions
from utils.spec.request import Request, RequestError

# Where Primus keeps its shipped experiments, in the order TPrimat looks: the MI300X's, else the MI355X's. Primus
# v25.11 ships Qwen3 30B-A3B under MI355X/ only, v26.5 under both (utils/upstream/primus_facts.py); every setting in
# which the two folders' files differ is one TPrimat writes or turns off (tests/test_train_prim_moe.py), so the
# folder changes what the experiment keeps unused (Primus-Turbo's DeepEP CU count, its RMSNorm switch left off),
# never what trains.
CONFIG_DIRS = ("examples/megatron/configs/MI300X", "examples/megatron/configs/MI355X")
# Primus's ${VAR:default} placeholder, which the node's environment fills before the default
# (primus/core/config/yaml_loader.py in both releases)
PLACEHOLDER = re.compile(r"\$\{[^:{}]+:([^}]*)\}")
# The shipped file a precision derives from: FP8's own; the block-scaled formats the BF16 one, with TPrimat's switch
# (utils.spec.precision.megatron_settings) over it. Primus ships them for the MI355X only
# (configs/MI355X/llama3.1_8B-{MXFP8,MXFP4}-pretrain.yaml), whose precision keys are exactly that switch (fp8 and
# fp8_recipe mxfp8; fp4 e2m1 and fp4_recipe mxfp4) and whose other keys TPrimat sets from the profile as for BF16.
SHIPPED_PRECISION = {"fp8": "FP8"}
# Shipped experiment files per model, newest naming first (Primus renamed them to -BF16-/-FP8- in
# late 2025; older images ship the single -pretrain.yaml). {precision} is BF16 or FP8. A model without one
# (the entry's no_model says why) is absent: the planner skips prim for it.
# Fairness-table names Megatron (and so Primus) spells the same way.
FAIRNESS_KEYS = ("context_parallel_size", "use_distributed_optimizer", "overlap_grad_reduce",
                 "overlap_param_gather", "bias_swiglu_fusion", "apply_rope_fusion", "bias_dropout_fusion",
                 "cross_entropy_loss_fusion", "cross_entropy_fusion_impl", "gradient_accumulation_fusion",
                 "attention_softmax_in_fp32",
                 "attention_backend", "use_flash_attn", "adam_eps", "fp8_param_gather", "fp8_recipe",
                 "fp8_margin", "fp8_amax_history_len", "fp8_amax_compute_algo")
# Fairness-table names that Megatron-LM's arguments (Primus v25.11's trainer_base.yaml) spell otherwise.
RENAMED_KEYS = {"grad_reduce_in_fp32": "accumulate_allreduce_grads_in_fp32",
                "check_for_nan_in_grad": "check_for_nan_in_loss_and_grad",
                "average_in_collective": "ddp_average_in_collective", "primus_turbo": "enable_primus_turbo"}
# Megatron-LM builds its GPTModel with rope_scaling=use_rope_scaling but never passes rope_scaling_factor
# (gpt_builders.py at 847781764, Primus v25.11's Megatron-LM, and at d3528a21, v26.5's), so GPTModel's default is the
# factor that trains whatever an experiment says: TPrimat writes no factor and refuses a model whose factor differs.
APPLIED_ROPE_SCALING_FACTOR = 8.0


class ShippedConfigMissing(FileNotFoundError):
    """Primus's shipped experiment file for the model is not where Primus keeps it."""


class UnknownKeys(ValueError):
    """The experiment sets a key the release's presets do not hold."""


class NotApplied(ValueError):
    """The model needs a setting Primus's Megatron-LM would not apply."""


def checkout(req: Request) -> Path:
    """The Primus checkout the run's release runs from: PRIMUS_PATH, else the release's own (train/prim/releases.py)."""
    return Path(os.environ.get("PRIMUS_PATH") or releases.of(req.stack.primus).checkout)


def require_checkout(req: Request, primus_path: Path) -> None:
    """One line saying how to get the release's checkout when primus_path is none (it lacks the release's launcher:
    another release's checkout is not one)."""
    release = releases.of(req.stack.primus)
    if not (Path(primus_path) / release.marker).is_file():
        raise ShippedConfigMissing(f"no Primus {release.name} checkout at {primus_path} (it holds no "
                                   f"{release.marker}): {release.get_checkout} (or set PRIMUS_PATH to one)")


def shipped_config(primus_path: Path, model: str, precision: str) -> Path:
    """The shipped experiment YAML this run derives from (the first of the known names present, folder by folder)."""
    directories = [Path(primus_path) / folder for folder in CONFIG_DIRS]
    names = TABLE["prim"].model_name(model)
    if names is None:
        raise ShippedConfigMissing(f"Primus ships no experiment config for {model} (utils/frameworks/prim/: its "
                                   "model_names has none); run it with another framework")
    tried = [directory / name.format(precision=SHIPPED_PRECISION.get(precision, "BF16"))
             for directory in directories for name in names]
    for path in tried:
        if path.is_file():
            return path
    raise ShippedConfigMissing(
        f"no shipped Primus config for {model} in {' or '.join(map(str, directories))} (looked for "
        + ", ".join(dict.fromkeys(p.name for p in tried)) + "); set PRIMUS_PATH to a Primus checkout")


def precision_switch(precision: str, fairness: dict) -> dict:
    """The precision's Megatron-LM arguments (utils.spec.precision.megatron_settings); {} in bf16."""
    return precisions.megatron_settings(precision, str(fairness["fp8_recipe"]), str(fairness["fp8_format"]))


def overrides(req: Request) -> dict:
    """Every setting the run requests, in Megatron's argument names."""
    lay, train, data, env = req.parallelism, req.training, req.data, req.environment
    fairness = req.fairness.table
    spec = req.model  # a MODEL_LAYERS proxy's num_layers too
    steps = train.steps
    settings: dict[str, object] = {
        # parallelism
        "tensor_model_parallel_size": lay.tp,
        "pipeline_model_parallel_size": lay.pp,
        "expert_model_parallel_size": lay.ep,
        "sequence_parallel": lay.sequence_parallel,
        # batch and steps
        "micro_batch_size": train.mbs,
        "global_batch_size": train.gbs,
        "seq_length": train.seq_len,
        "max_position_embeddings": spec.max_position_embeddings,
        "train_iters": steps,
        # optimizer and schedule
        "lr": train.lr,
        "min_lr": train.min_lr,
        "lr_warmup_iters": train.warmup_steps,
        "lr_decay_iters": steps,
        "lr_decay_style": train.lr_decay_style,
        "weight_decay": train.weight_decay,
        "adam_beta1": train.beta1,
        "adam_beta2": train.beta2,
        "clip_grad": train.grad_clip,
        "seed": train.seed,
        # precision
        "bf16": True,
        "fp16": False,
        "fp8": None,  # below 16 bits: fp8 and fp8_recipe (FP8, MXFP8), or fp4 and fp4_recipe (MXFP4, Primus's own)
        # data: real unless mock data was asked for explicitly
        "mock_data": bool(data.mock_data),
        "tokenizer_type": "HuggingFaceTokenizer",
        "tokenizer_model": data.tokenizer_dir,
        # architecture from TPrimat's spec, so the variant is exactly the one requested
        "num_layers": spec.num_layers,
        "hidden_size": spec.hidden_size,
        "ffn_hidden_size": spec.ffn_hidden_size,
        "num_attention_heads": spec.num_attention_heads,
        "group_query_attention": spec.num_kv_heads < spec.num_attention_heads,
        "num_query_groups": spec.num_kv_heads,
        "add_qkv_bias": spec.qkv_bias,
        "untie_embeddings_and_output_weights": True,
        "rotary_base": spec.rope_theta,
        "norm_epsilon": spec.norm_eps,
        "use_rope_scaling": bool(spec.rope_scaling),
        "kv_channels": spec.head_dim,  # Qwen3 30B-A3B's heads are wider than hidden / heads
        "qk_layernorm": spec.qk_norm,
        # the request's layout and memory, as mega runs them: Megatron's distributed optimizer without FSDP2 and no
        # activation recompute (the 70B file ships FSDP2, which Megatron refuses beside the distributed optimizer,
        # and full recompute of all 80 layers; mega and nemo run neither)
        "use_torch_fsdp2": False,
        "recompute_granularity": None,
        "recompute_method": None,
        "recompute_num_layers": None,
        # the optimizer as mega runs it: megatron-core's own, with fp32 main gradients and Adam moments (the MI355X
        # Qwen3 30B-A3B files ship its precision-aware optimizer with bf16 ones), and none of megatron-core's code
        # behind its experimental flag (they ship enable_experimental; megatron-core's default and mega's is off)
        "use_precision_aware_optimizer": False,
        "main_grads_dtype": "fp32",
        "exp_avg_dtype": "fp32",
        "exp_avg_sq_dtype": "fp32",
        "enable_experimental": False,
        # logging every step, no checkpoints, no external trackers
        "log_interval": 1,
        "log_throughput": True,
        "disable_wandb": True,
        "disable_tensorboard": not env.profiling,
        "save": None,
        "disable_last_saving": True,
        # Primus's own profiler switch (PyTorch profiler over the configured steps)
        "profile": bool(env.profiling),
        "use_pytorch_profiler": bool(env.profiling),
        "profile_step_start": env.profile_start_step,
        "profile_step_end": env.profile_end_step,
    }
    if spec.rope_scaling and spec.rope_scaling["factor"] != APPLIED_ROPE_SCALING_FACTOR:
        raise NotApplied(f"{spec.variant} scales RoPE by {spec.rope_scaling['factor']}, but Primus's Megatron-LM "
                         f"applies only {APPLIED_ROPE_SCALING_FACTOR} (gpt_builders.py passes no factor); run it "
                         "with another framework")
    settings.update({key: fairness[key] for key in FAIRNESS_KEYS})
    settings.update({name: fairness[key] for key, name in RENAMED_KEYS.items()})
    # Megatron-LM's validate_args turns accumulate_allreduce_grads_in_fp32 on under bf16 unless grad_reduce_in_bf16
    # says otherwise (utils/upstream/table.py: megatron-lm-bf16-reduces-in-fp32), and Primus runs it
    settings["grad_reduce_in_bf16"] = not fairness["grad_reduce_in_fp32"]
    settings.update(precision_switch(train.precision, fairness))  # MXFP8's fp8_recipe over the profile's FP8 one
    settings.update(moe.overrides(spec))
    settings.update(workload_overrides(req))
    settings.update(validation_overrides(req))
    return settings


def validation_overrides(req: Request) -> dict:
    """Megatron-LM's own evaluation on the request's validation split (utils/spec/evaluation.py).

    Megatron-LM cuts a split only from `data_path` (given separate train, valid and test paths it reads each whole),
    so a run with EVAL_INTERVAL gives the prefix as data_path with the split, and megatron-core's builder sets apart
    the same documents as in mega; without it the prefix is the training path alone and Megatron never evaluates.
    """
    asked, train, data = req.evaluation, req.training, req.data
    prefix = None if data.mock_data else data.prefix
    if not asked.enabled:
        return {"eval_iters": 0, "eval_interval": train.steps, "data_path": None, "split": None,
                "train_data_path": prefix, "valid_data_path": None, "test_data_path": None}
    return {"eval_iters": asked.iters(train.gbs, train.seq_len), "eval_interval": asked.interval_steps,
            "data_path": prefix, "split": asked.megatron_split(),
            "train_data_path": None, "valid_data_path": None, "test_data_path": None}


def workload_overrides(req: Request) -> dict:
    """The workload conventions (utils.spec.fairness.WORKLOAD) over Primus's shipped ones: no EOD loss masking,
    init std 0.02, the sequential sampler, and the model's published vocabulary at every TP (Megatron-LM
    pads the tokenizer's size to a multiple of make_vocab_size_divisible_by x TP: this divisor lands on it)."""
    applied = req.fairness.workload
    return {"init_method_std": applied["init_method_std"], "eod_mask_loss": applied["eod_mask_loss"],
            "dataloader_type": applied["dataloader_type"],
            "make_vocab_size_divisible_by": applied["padded_vocab_size"] // req.parallelism.tp}


def experiment(req: Request, shipped: dict, run_dir: str) -> dict:
    """The shipped experiment with the run's name, workspace and every requested setting applied."""
    exp = copy.deepcopy(shipped)
    try:
        trainer = exp["modules"]["pre_trainer"]
    except (KeyError, TypeError):
        raise ValueError("the shipped Primus config has no modules.pre_trainer section") from None
    exp["exp_name"] = req.identity.run_id
    exp["workspace"] = f"{run_dir}/primus"
    trainer["model"] = model_preset(str(trainer["model"]))
    merged = {**(trainer.get("overrides") or {}), **overrides(req)}
    if not req.fairness.table["primus_turbo"]:
        # each Primus-Turbo piece the shipped file turns on, off again: its kernels and its DeepEP dispatcher
        # (use_turbo_*), and its sync-free MoE, which both releases' ROCm argument check refuses without Primus-Turbo
        # and which, like DeepEP, sets MoE arguments after Megatron-LM's argument dump has printed them
        merged.update({key: False for key in merged if key.startswith("use_turbo_")})
        if "turbo_sync_free_moe_stage" in merged:
            merged["turbo_sync_free_moe_stage"] = 0
    trainer["overrides"] = merged
    return exp


def model_preset(name: str) -> str:
    """The shipped file's model preset with each ${VAR:default} at its default: the Qwen3 30B-A3B files name theirs
    ${PRIMUS_MODEL:qwen3_30B_A3B}.yaml, which a PRIMUS_MODEL on the node would change under TPrimat's settings."""
    resolved = PLACEHOLDER.sub(r"\1", name)
    if "${" in resolved:
        raise ValueError(f"the shipped Primus config names its model preset {name}, a placeholder without a default: "
                         "TPrimat cannot tell which model it is")
    return resolved


def render(exp: dict, base: Path) -> str:
    """YAML text, with a header saying where it came from."""
    import yaml  # here, not at the top: the launcher's dry run plans with the standard library alone

    return (f"# Generated by TPrimat (train/prim/config.py) from {base}.\n"
            "# Every training setting sits under modules.pre_trainer.overrides; Primus ignores top-level keys.\n"
            + yaml.safe_dump(exp, sort_keys=False, default_flow_style=False))


@dataclass(frozen=True)
class Command:
    """How to start Primus for one run."""

    argv: list[str]
    env: dict[str, str]
    cwd: str


def command(req: Request, primus_path: Path, exp_path: Path, log_dir: str) -> Command:
    """The release's pretrain launcher (train/prim/releases.py) with the experiment and this node's rendezvous
    settings, which both releases' launchers read from the environment; the launcher tees its own copy of the
    console into log_dir."""
    lay, node = req.parallelism, req.environment
    release = releases.of(req.stack.primus)
    fill = {"exp": str(exp_path), "log": f"{log_dir}/primus_launcher.log"}
    env = {
        **{key: value.format(**fill) for key, value in release.env.items()},
        "NNODES": str(lay.nnodes),
        "NODE_RANK": str(node.node_rank),
        "GPUS_PER_NODE": str(lay.gpus_per_node),
        "MASTER_ADDR": node.master_addr,
        "MASTER_PORT": str(node.master_port),
        "DATA_PATH": req.data.data_dir,
        "HF_HOME": node.hf_home,
        "HF_HUB_OFFLINE": "1",
        **(release.same_validation_samples if req.evaluation.enabled else {}),
    }
    if release.filters_to_rank_0 and lay.nnodes == 1 and lay.gpus_per_node > 1:
        # torchrun keeps the last --local-ranks-filter it is given (its argparse action stores each value over the
        # last), so this one, after the launcher's own, is the one that applies
        env["LOCAL_RANKS"] = f"--local-ranks-filter 0,{lay.gpus_per_node - 1}"
    return Command([word.format(**fill) for word in release.launcher], env, str(primus_path))


def check_keys(req: Request, primus_path: Path, exp: dict) -> None:
    """Refuse an override key the checkout's presets do not hold (v25.11 would stop on it, v26.5 ignore it)."""
    module = exp["modules"]["pre_trainer"]
    unknown = presets.unknown_keys(primus_path, module)
    if unknown:
        files = " + ".join(str(path.relative_to(primus_path)) for path in presets.preset_files(primus_path, module))
        raise UnknownKeys(f"Primus {req.stack.primus} has no key {', '.join(unknown)} in its presets ({files} "
                          f"in {primus_path}); name it as that release does in train/prim/config.py")


def write_experiment(req: Request, primus_path: Path, out: Path, run_dir: str) -> Path:
    """Read the shipped file, check the run's experiment against the checkout's presets and write it atomically;
    returns the base it came from."""
    require_checkout(req, primus_path)
    base = shipped_config(primus_path, req.identity.model, req.training.precision)
    import yaml  # as in render()

    exp = experiment(req, yaml.safe_load(base.read_text()), run_dir)
    check_keys(req, primus_path, exp)
    text = render(exp, base)
    with atomic_open(out) as handle:
        handle.write(text)
    return base


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m train.prim.config", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--request", type=Path, required=True, help="the run's config.json")
    parser.add_argument("--primus", type=Path, help="Primus checkout (default: PRIMUS_PATH, else the release's own)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="experiment YAML to write")
    args = parser.parse_args(argv)
    try:
        req = Request.read(args.request)
        base = write_experiment(req, args.primus or checkout(req), args.output, str(args.request.parent))
    except (OSError, RequestError, ValueError) as err:  # ShippedConfigMissing, PresetsMissing, UnknownKeys included
        raise UsageError(str(err)) from None
    print(f"wrote {args.output} from {base}")
    return 0


if __name__ == "__main__":
    run(main, "train.prim.config")
