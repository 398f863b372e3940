"""What a mega run really ran with: the settings read back from megatron-core, the features, the profiler.

The read-back (the result's `effective`) is what evaluate.validate and the launcher compare with the request:
each value is taken from the built objects (parallel groups, DDP and optimizer configuration, scheduler, model
and dataset), never copied from the request, except where megatron-core holds no such setting (seed, profile).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from train.common.model_features import megatron_features
from train.common.step_log import is_last_rank
from utils.files import atomic_open
from utils.machine.hardware import cpu_native_bf16
from utils.spec.request import Environment


def read_back(trainer, model, parameters: int, dataset) -> dict:
    """The settings as megatron-core holds them in a built train.mega.trainer.Trainer (its model chunk before the
    DDP wrapper, the parameter count over all ranks and the training dataset)."""
    from megatron.core import parallel_state

    from train.mega import model as mega_model

    config, ddp, scheduler, optimizer = trainer.config, trainer.model.ddp_config, trainer.scheduler, trainer.optimizer
    chain = getattr(optimizer, "chained_optimizers", [optimizer])
    inner = chain[0].optimizer
    decayed = [g for g in optimizer.param_groups if g.get("wd_mult", 1.0) > 0]
    beta1, beta2 = inner.param_groups[0]["betas"]
    return {
        "tp": parallel_state.get_tensor_model_parallel_world_size(),
        "pp": parallel_state.get_pipeline_model_parallel_world_size(),
        "dp": parallel_state.get_data_parallel_world_size(),
        "ep": parallel_state.get_expert_model_parallel_world_size(),
        "num_gpus": torch.distributed.get_world_size(),
        "sequence_parallel": bool(config.sequence_parallel),
        "distributed_optimizer": all(type(o).__name__ == "DistributedOptimizer" for o in chain),
        "overlap_grad_reduce": bool(ddp.overlap_grad_reduce),
        "overlap_param_gather": bool(ddp.overlap_param_gather),
        "grad_reduce_in_fp32": bool(ddp.grad_reduce_in_fp32),
        "check_for_nan_in_grad": bool(ddp.check_for_nan_in_grad),
        "average_in_collective": bool(ddp.average_in_collective),
        "fairness_profile": trainer.request.fairness.profile,
        "optimizer": type(inner).__name__,
        "precision": mega_model.precision_of(config),
        "fp8_recipe": mega_model.fp8_recipe_of(config),
        "steps": scheduler.lr_decay_steps,
        "lr": scheduler.max_lr, "min_lr": scheduler.min_lr, "warmup_steps": scheduler.lr_warmup_steps,
        "lr_decay_steps": scheduler.lr_decay_steps, "lr_decay_style": scheduler.lr_decay_style,
        "weight_decay": decayed[0]["weight_decay"] if decayed else 0.0,
        "beta1": beta1, "beta2": beta2, "adam_eps": inner.param_groups[0]["eps"],
        "grad_clip": chain[0].config.clip_grad,
        "seed": trainer.request.training.seed,
        "mock_data": type(dataset).__name__ == "MockGPTDataset",
        "dataset_class": type(dataset).__name__, "dataset_samples": len(dataset),
        "data_path": getattr(dataset, "dataset_path", None),  # the prefix GPTDataset read (None: mock)
        "parameters": parameters,
        "num_layers": config.num_layers, "hidden_size": config.hidden_size,
        "ffn_hidden_size": config.ffn_hidden_size, "num_attention_heads": config.num_attention_heads,
        "num_kv_heads": config.num_query_groups, "head_dim": config.kv_channels,
        "vocab_size": model.vocab_size, "qkv_bias": bool(config.add_qkv_bias),
        "normalization": config.normalization, "norm_eps": config.layernorm_epsilon,
        "activation": getattr(config.activation_func, "__name__", str(config.activation_func)),
        "gated_linear_unit": bool(config.gated_linear_unit),
        "position_embedding": model.position_embedding_type,
        "rope_scaling": bool(getattr(model, "rotary_scaling", False)),
        "tied_embeddings": bool(model.share_embeddings_and_output_weights),
        "init_method_std": config.init_method_std,
        "padded_vocab_size": model.vocab_size,
        "eod_mask_loss": bool(dataset.config.eod_mask_loss),
        "dataloader_type": "single",  # train/common/megatron_data.microbatches: Megatron-LM's sequential sample order
        "lr_warmup_convention": "megatron",  # Trainer.run_step: the schedule advances after the optimizer step
        "qk_norm": bool(config.qk_layernorm),
        "model_features": megatron_features(model.config, model.position_embedding_type),
        "attention_softmax_in_fp32": bool(config.attention_softmax_in_fp32),
        **mega_model.moe_read_back(config, trainer.spec),
    }


def read_back_batch(effective: dict, forward_step) -> None:
    """MBS, SL and GA as the first step really ran them (train.mega.trainer.ForwardStep saw them)."""
    if forward_step.batch_shape is not None:
        mbs, seq_len = forward_step.batch_shape
        ga = forward_step.microbatches
        effective.update(mbs=mbs, seq_len=seq_len, ga=ga, gbs=mbs * ga * effective["dp"])


def features(config, stack, precision: str, notes: list[str]) -> dict:
    """Fused kernels and attention (train.mega.model.features), and on the CPU whether it has bf16 instructions;
    bf16 asked for where it is emulated adds its warning to notes."""
    from train.mega import model as mega_model

    found = mega_model.features(config, stack)
    if not stack.gpu:
        found["cpu_native_bf16"] = cpu_native_bf16()
        if precision == "bf16" and not found["cpu_native_bf16"]:
            _warn_emulated_bf16(notes)
    return found


def bf16_slowdown() -> float:
    """How many times slower bf16 runs than fp32 on this CPU, for the product of a tiny model's LM head
    (256 x 128 @ 128 x 128256): seconds where bf16 is emulated, once per run that asks for it there."""
    a, b = torch.randn(256, 128), torch.randn(128, 128256)

    def seconds(dtype: torch.dtype, repeats: int) -> float:
        x, y = a.to(dtype), b.to(dtype)
        timings = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(x, y)
            timings.append(time.perf_counter() - start)
        return min(timings)

    return seconds(torch.bfloat16, 1) / seconds(torch.float32, 3)


def _warn_emulated_bf16(notes: list[str]) -> None:
    """PRECISION=bf16 on a CPU without bf16 instructions runs, but every matrix product is emulated: one
    warning line (last rank) with the slowdown measured here, kept in the result."""
    note = (f"PRECISION=bf16 on a CPU without bf16 instructions: a bf16 matrix product measured "
            f"{bf16_slowdown():.0f}x slower than fp32 here; PRECISION=auto (fp32) is the fast choice on this CPU")
    notes.append(note)
    if is_last_rank():
        print(f"train_mega: warning: {note}", file=sys.stderr, flush=True)


def profiler(env: Environment, run_dir: Path, notes: list[str]):
    """torch.profiler over PROFILE_START_STEP..PROFILE_END_STEP on rank 0 (None otherwise); says so in notes."""
    if not env.profiling or torch.distributed.get_rank() != 0:
        return None
    first, last = env.profile_start_step, env.profile_end_step
    out = run_dir / "profile"
    out.mkdir(exist_ok=True)
    warmup = 1 if first > 1 else 0
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sort_key = "self_device_time_total" if torch.cuda.is_available() else "self_cpu_time_total"

    def save(prof: torch.profiler.profile) -> None:
        prof.export_chrome_trace(str(out / "trace_rank0.json"))
        table = prof.key_averages().table(sort_by=sort_key, row_limit=40)
        with atomic_open(out / "top_kernels.txt") as top:
            top.write(f"steps {first}-{last}, rank 0, sorted by {sort_key}\n{table}\n")

    notes.append(f"steps {first}-{last} ran under the profiler (rank 0) and are slower; trace and top kernels in {out}")
    return torch.profiler.profile(
        activities=activities, on_trace_ready=save, record_shapes=False,
        schedule=torch.profiler.schedule(wait=first - 1 - warmup, warmup=warmup, active=last - first + 1, repeat=1))
