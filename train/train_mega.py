"""TPrimat's pretraining loop on megatron-core (framework `mega`): the same code on AMD, NVIDIA and the CPU.

    eval "$(python3 -m utils.platform_env)"   # PLATFORM, GPUS_PER_NODE and the platform's environment, as the launcher resolves them
    torchrun --nproc_per_node=N [--nnodes=M --node_rank=R --master_addr=A --master_port=P] \\
        train/train_mega.py --model llama|qwen --run-dir DIR [--strategy NAME]
    python3 train/train_mega.py --model llama --run-dir DIR  # one process (TP x PP x DP = 1), no torchrun

Every other setting comes from the configuration (config.env + environment, utils.config): the
layout (TP, PP, DP, GA) of the run's strategy, MBS, SL, the optimizer and LR schedule, SEED, DATASET,
DATA_DIR, MOCK_DATA, WARMUP_SKIP and PROFILING. GBS = MBS x DP x GA.

The loop is Megatron-LM's: megatron-core's GPTModel (train/mega_model.py) under its DDP with the
distributed optimizer (AdamW), linear warm-up then cosine decay to MIN_LR, and the forward-backward
schedule of the layout (no pipelining, or 1F1B). Each step is timed between device synchronisations
and written to DIR/steps.jsonl and the console (train/mega_steps.py); the last rank then writes
DIR/result.json through utils.result. PROFILING=true adds DIR/profile/ (rank 0's Chrome trace and
top-kernels table). A crash, an out-of-memory error or a NaN loss still ends in a result with
status failed (a failing rank leaves its traceback in DIR/error_rank<N>.txt); the exit status is
then non-zero.

Exit status: 0 trained every step; 1 the training failed; 2 bad input (configuration, missing data).
On a machine without an accelerator train/cpu_compat.py adapts megatron-core (gloo, the CPU as device).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script by torchrun: make the project's packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import math
import os
import random
import signal
import time
import traceback
import warnings
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import Iterator

# Import-time and per-collective notices of megatron-core and torch that would bury the per-step log:
# which optional kernels are missing is recorded in the result's features instead.
QUIET_WARNINGS = (r"Transformer Engine and Apex are not installed", r"Apex is not installed",
                  r"full scope is deprecated",
                  r"`torch\.distributed\.(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated")
for _pattern in QUIET_WARNINGS:
    warnings.filterwarnings("ignore", message=_pattern)

import numpy
import torch

from train import cpu_compat
from train.mega_data import DataError, DataSource, build_dataset, locate, microbatches
from train.mega_steps import GIB, StepLog, StepRecord, megatron_line, memory_line, peak_host_rss_gib
from utils import metrics, platform_env
from utils.config import ConfigError, load_config
from utils.hardware import cpu_native_bf16
from utils.models import ModelSpec
from utils.strategies import Layout

FRAMEWORK = "mega"
EXCERPT_LINES = 20
PEER_ERROR_WAIT_S = 3.0  # how long the last rank waits for another rank's error report when it fails


class SettingsError(ValueError):
    """A request this run cannot honour (exit 2)."""


class NonFiniteLoss(RuntimeError):
    """The loss or the gradient norm of a step was nan or inf: the run stops as failed."""


class Stopped(BaseException):
    """The process received SIGTERM or SIGINT (torchrun stops every worker when one fails)."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by signal {signal.Signals(signum).name}")
        self.signum = signum


@dataclass(frozen=True)
class Settings:
    """What one mega run was asked to do (from the configuration, in settings_from_config only)."""

    model: ModelSpec
    platform: str
    strategy: str
    layout: Layout  # TP, PP, DP and GA of the strategy
    mbs: int
    seq_len: int
    steps: int
    warmup_steps: int
    lr: float
    min_lr: float
    weight_decay: float
    beta1: float
    beta2: float
    grad_clip: float
    precision: str
    seed: int
    dataset: str
    data_dir: str
    mock_data: bool
    warmup_skip: int
    profiling: bool
    profile_start: int
    profile_end: int
    fairness_profile: str  # FAIRNESS: which utils.fairness profile table the run applies

    @property
    def gbs(self) -> int:
        return self.mbs * self.layout.dp * self.layout.ga

    @property
    def fairness(self) -> dict:
        from utils.fairness import profile

        return profile(self.fairness_profile)


def settings_from_config(model_key: str, strategy: str | None) -> Settings:
    """The run's settings from utils.config (the one place the trainer reads the configuration)."""
    cfg = load_config()
    name = strategy or cfg.strategies[0]
    v = cfg.values
    return Settings(
        model=cfg.model(model_key), platform=cfg.platform, strategy=name, layout=cfg.layout(model_key, name),
        mbs=v["MBS"], seq_len=v["SL"],
        steps=v["TRAIN_ITERS"], warmup_steps=v["WARMUP_STEPS"], lr=v["LR"], min_lr=v["MIN_LR"],
        weight_decay=v["WEIGHT_DECAY"], beta1=v["BETA1"], beta2=v["BETA2"], grad_clip=v["GRAD_CLIP"],
        precision=v["PRECISION"], seed=v["SEED"], dataset=v["DATASET"], data_dir=v["DATA_DIR"],
        mock_data=v["MOCK_DATA"], warmup_skip=v["WARMUP_SKIP"], profiling=v["PROFILING"],
        profile_start=v["PROFILE_START_STEP"], profile_end=v["PROFILE_END_STEP"],
        fairness_profile=v["FAIRNESS"],
    )


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


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def seed_everything(seed: int) -> None:
    """Python, NumPy, torch and megatron-core's model-parallel RNG tracker (dropout is 0; data order is seeded)."""
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)


def init_distributed(settings: Settings) -> None:
    """Process group (NCCL/RCCL on GPUs, gloo without) and megatron-core's TP/PP/DP groups."""
    from megatron.core import parallel_state

    world = int(os.environ.get("WORLD_SIZE", "1"))
    lay = settings.layout
    if world != lay.gpus:
        raise SettingsError(f"{world} processes started, but TP x PP x DP = {lay.tp} x {lay.pp} x {lay.dp} = "
                            f"{lay.gpus}; start torchrun with that many processes")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if "WORLD_SIZE" in os.environ:  # started by torchrun
        torch.distributed.init_process_group(backend=backend)
    else:  # one process started by hand: a group of one, no rendezvous
        torch.distributed.init_process_group(backend=backend, store=torch.distributed.HashStore(), rank=0,
                                             world_size=1)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=lay.tp, pipeline_model_parallel_size=lay.pp)


class ForwardStep:
    """megatron-core's forward_step_func: one microbatch through this stage, then the masked mean loss."""

    def __init__(self, inject_nan_step: int | None):
        self.step = 0
        self.microbatches = 0  # counted per step: the GA the schedule really ran
        self.batch_shape: tuple[int, ...] | None = None
        self.inject_nan_step = inject_nan_step

    def __call__(self, data_iterator: Iterator[dict], model: torch.nn.Module):
        batch = next(data_iterator)
        self.microbatches += 1
        self.batch_shape = tuple(batch["tokens"].shape)
        output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
        return output, partial(self.loss, batch["loss_mask"])

    def loss(self, loss_mask: torch.Tensor, output: torch.Tensor):
        mask = loss_mask.view(-1).float()
        loss = torch.sum(output.float().view(-1) * mask) / mask.sum()
        if self.step == self.inject_nan_step:
            loss = loss * float("nan")  # fault injection for the failure-path test (--inject-nan-at-step)
        # The schedule divides the returned loss by the number of microbatches in place: log a copy.
        return loss, {"lm loss": loss.detach().clone()}


@dataclass
class Trainer:
    """The built run: model chunk, optimizer, LR schedule and data, and the step loop over them."""

    settings: Settings
    source: DataSource
    run_dir: Path
    inject_nan_step: int | None = None
    instrumented: bool = True  # False only for bench_instrumentation: no syncs, records or reductions
    notes: list[str] = field(default_factory=list)
    effective: dict = field(default_factory=dict)
    features: dict = field(default_factory=dict)
    host_rss_gib_per_worker: list[float] = field(default_factory=list)
    log: StepLog | None = None

    def build(self) -> None:
        """Everything megatron-core needs, in Megatron-LM's order; reads back the effective settings."""
        from megatron.core import parallel_state
        from megatron.core.distributed import finalize_model_grads
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

        from train import mega_model

        s = self.settings
        table = s.fairness
        seed_everything(s.seed)
        stack = mega_model.Stack.detect()
        fusions, fusion_notes = mega_model.choose_fusions(stack, table)
        self.notes += fusion_notes
        config = mega_model.transformer_config(s.model, s.layout.tp, s.layout.pp, s.precision, stack, fusions, table)
        model = mega_model.gpt_model(s.model, config, stack, s.seq_len)
        model.to(torch.device("cuda", torch.cuda.current_device()))
        mega_model.initialise_layout_invariant(model, s.seed)
        parameters = mega_model.count_parameters(model)
        if parameters != s.model.param_count():
            raise RuntimeError(f"the built model has {parameters} parameters, the {s.model.variant} spec "
                               f"{s.model.param_count()}: utils/models.py and the model builder disagree")
        self.model = mega_model.wrap(model, config, table)
        self.optimizer = get_megatron_optimizer(OptimizerConfig(
            optimizer="adam", lr=s.lr, min_lr=s.min_lr, weight_decay=s.weight_decay, adam_beta1=s.beta1,
            adam_beta2=s.beta2, adam_eps=table["adam_eps"], clip_grad=s.grad_clip, bf16=config.bf16,
            params_dtype=config.params_dtype, use_distributed_optimizer=self.model.ddp_config.use_distributed_optimizer,
        ), [self.model])
        self.scheduler = OptimizerParamScheduler(
            self.optimizer, init_lr=0.0, max_lr=s.lr, min_lr=s.min_lr, lr_warmup_steps=s.warmup_steps,
            lr_decay_steps=s.steps, lr_decay_style="cosine", start_wd=s.weight_decay, end_wd=s.weight_decay,
            wd_incr_steps=s.steps, wd_incr_style="constant")
        # Megatron-LM's hooks: gradient reduction overlapped with backward, finished before the optimizer.
        config.no_sync_func = self.model.no_sync
        config.grad_sync_func = self.model.start_grad_sync
        config.finalize_model_grads_func = finalize_model_grads
        config.grad_scale_func = self.optimizer.scale_loss

        dataset = build_dataset(self.source, s.seq_len, s.steps * s.gbs, s.seed, Path(s.data_dir) / "index_cache")
        device = torch.device("cuda", torch.cuda.current_device())
        self.batches = microbatches(dataset, steps=s.steps, mbs=s.mbs, dp=s.layout.dp,
                                    dp_rank=parallel_state.get_data_parallel_rank(), ga=s.layout.ga, device=device)
        self.forward_step = ForwardStep(self.inject_nan_step)
        self.config = config
        self.features = mega_model.features(config, stack)
        if not stack.gpu:
            self.features["cpu_native_bf16"] = cpu_native_bf16()
            self._warn_emulated_bf16()
        self.effective = self._read_back(model, parameters, dataset)

    def _warn_emulated_bf16(self) -> None:
        """PRECISION=bf16 on a CPU without bf16 instructions runs, but every matrix product is emulated: one
        warning line (last rank) with the slowdown measured here, kept in the result."""
        if self.settings.precision != "bf16" or self.features["cpu_native_bf16"]:
            return
        note = (f"PRECISION=bf16 on a CPU without bf16 instructions: a bf16 matrix product measured "
                f"{bf16_slowdown():.0f}x slower than fp32 here; PRECISION=auto (fp32) is the fast choice on this CPU")
        self.notes.append(note)
        if int(os.environ.get("RANK", "0")) == int(os.environ.get("WORLD_SIZE", "1")) - 1:
            print(f"train_mega: warning: {note}", file=sys.stderr, flush=True)

    def _read_back(self, model, parameters: int, dataset) -> dict:
        """The settings as megatron-core holds them (compared with the request by evaluate.validate)."""
        from megatron.core import parallel_state

        from train import mega_model

        config, ddp, scheduler = self.config, self.model.ddp_config, self.scheduler
        chain = getattr(self.optimizer, "chained_optimizers", [self.optimizer])
        inner = chain[0].optimizer
        decayed = [g for g in self.optimizer.param_groups if g.get("wd_mult", 1.0) > 0]
        beta1, beta2 = inner.param_groups[0]["betas"]
        return {
            "tp": parallel_state.get_tensor_model_parallel_world_size(),
            "pp": parallel_state.get_pipeline_model_parallel_world_size(),
            "dp": parallel_state.get_data_parallel_world_size(),
            "num_gpus": torch.distributed.get_world_size(),
            "sequence_parallel": bool(config.sequence_parallel),
            "distributed_optimizer": all(type(o).__name__ == "DistributedOptimizer" for o in chain),
            "overlap_grad_reduce": bool(ddp.overlap_grad_reduce),
            "overlap_param_gather": bool(ddp.overlap_param_gather),
            "grad_reduce_in_fp32": bool(ddp.grad_reduce_in_fp32),
            "check_for_nan_in_grad": bool(ddp.check_for_nan_in_grad),
            "average_in_collective": bool(ddp.average_in_collective),
            "fairness_profile": self.settings.fairness_profile,
            "optimizer": type(inner).__name__,
            "precision": mega_model.precision_of(config),
            "fp8_recipe": mega_model.fp8_recipe_of(config),
            "steps": scheduler.lr_decay_steps,
            "lr": scheduler.max_lr, "min_lr": scheduler.min_lr, "warmup_steps": scheduler.lr_warmup_steps,
            "lr_decay_steps": scheduler.lr_decay_steps, "lr_decay_style": scheduler.lr_decay_style,
            "weight_decay": decayed[0]["weight_decay"] if decayed else 0.0,
            "beta1": beta1, "beta2": beta2, "adam_eps": inner.param_groups[0]["eps"],
            "grad_clip": chain[0].config.clip_grad,
            "seed": self.settings.seed,
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
            "dataloader_type": "single",  # train/mega_data.microbatches: Megatron-LM's sequential sample order
            "lr_warmup_convention": "megatron",  # run_step: the schedule advances after the optimizer step
        }

    def run_step(self, step: int) -> tuple[list, float | None, bool, float]:
        """One optimizer step: zero grads, forward-backward over GA microbatches, LR schedule, optimizer."""
        from megatron.core.pipeline_parallel import get_forward_backward_func

        s = self.settings
        self.forward_step.step, self.forward_step.microbatches = step, 0
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        losses = get_forward_backward_func()(
            forward_step_func=self.forward_step, data_iterator=self.batches, model=[self.model],
            num_microbatches=s.layout.ga, seq_length=s.seq_len, micro_batch_size=s.mbs, decoder_seq_length=s.seq_len,
            forward_only=False)
        # Megatron-LM's order: the optimizer steps at the schedule's current value, then the schedule
        # advances, so step k (1-based) runs at LR x (k-1)/W during the warm-up (step 1 at 0).
        lr = self.optimizer.param_groups[0]["lr"]
        success, grad_norm, _ = self.optimizer.step()
        self.scheduler.step(increment=1)
        return losses, grad_norm, success, lr

    def measure(self, step: int, elapsed: float, losses: list, grad_norm: float | None, success: bool,
                lr: float) -> StepRecord:
        """The step's record: loss averaged over microbatches and DP ranks, peak memory over all ranks."""
        from megatron.core import parallel_state

        s = self.settings
        grad_norm = None if grad_norm is None else float(grad_norm)
        loss = None
        nonfinite = grad_norm is not None and not math.isfinite(grad_norm)
        if losses:  # the last pipeline stage
            mean = torch.stack([item["lm loss"] for item in losses]).mean()
            torch.distributed.all_reduce(mean, group=parallel_state.get_data_parallel_group())
            loss = mean.item() / s.layout.dp
            nonfinite = nonfinite or not math.isfinite(loss)
        memory = [torch.cuda.max_memory_allocated() / GIB, torch.cuda.max_memory_reserved() / GIB] \
            if torch.cuda.is_available() else [-1.0, -1.0]
        shared = torch.tensor([float(nonfinite), *memory, peak_host_rss_gib()], dtype=torch.float64,
                              device=torch.device("cuda", torch.cuda.current_device()))
        torch.distributed.all_reduce(shared, op=torch.distributed.ReduceOp.MAX)
        flag, allocated, reserved, host_rss = shared.tolist()
        return StepRecord(step=step, step_time_s=elapsed, loss=loss, lr=lr, grad_norm=grad_norm,
                          skipped=0 if success else 1, nan=int(flag), tokens=s.gbs * s.seq_len,
                          mem_allocated_gib=allocated if allocated >= 0 else None,
                          mem_reserved_gib=reserved if reserved >= 0 else None, mem_host_rss_gib=host_rss)

    def train(self) -> None:
        """Every step in order (the profiler follows along on rank 0), then the end-of-run checks."""
        profiler = self._profiler()
        with profiler or nullcontext():
            for step in range(1, self.settings.steps + 1):
                self.step(step)
                if profiler is not None:
                    profiler.step()
        self.finish()

    def step(self, step: int) -> float:
        """One step, timed between device synchronisations, recorded (last rank) and checked for nan.

        Returns the seconds the recording itself took (0 when not instrumented): bench_instrumentation's figure.
        """
        if not self.instrumented:
            self.run_step(step)
            return 0.0
        torch.cuda.synchronize()
        start = time.perf_counter()
        losses, grad_norm, success, lr = self.run_step(step)
        torch.cuda.synchronize()
        end = time.perf_counter()
        record = self.measure(step, end - start, losses, grad_norm, success, lr)
        if step == 1:
            self._read_back_batch()
        if self.log is not None:
            self._report(record)
        if record.nan:
            raise NonFiniteLoss(f"step {step}: loss {record.loss} / grad norm {record.grad_norm} is not finite; "
                                "training stopped")
        return time.perf_counter() - end

    def finish(self) -> None:
        """Complete the last overlapped parameter gather (profile tuned), then check that the DP replicas agree."""
        from train.mega_model import replicas_identical

        torch.cuda.synchronize()
        if self.model.ddp_config.overlap_param_gather:  # without overlap the optimizer step gathered them
            self.model.disable_forward_pre_hook(param_sync=True)
        self.effective["dp_replicas_identical"] = replicas_identical(self.model)
        peaks: list = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(peaks, peak_host_rss_gib())
        self.host_rss_gib_per_worker = peaks  # in rank order
        if not self.effective["dp_replicas_identical"]:
            self.notes.append("data-parallel replicas ended with different weights: the gradient or parameter "
                              "synchronisation is broken")

    def _read_back_batch(self) -> None:
        """MBS, SL and GA as the first step really ran them."""
        if self.forward_step.batch_shape is not None:
            mbs, seq_len = self.forward_step.batch_shape
            ga = self.forward_step.microbatches
            self.effective.update(mbs=mbs, seq_len=seq_len, ga=ga, gbs=mbs * ga * self.effective["dp"])

    def _report(self, record: StepRecord) -> None:
        s = self.settings
        self.log.write(record)
        tflops = None
        if record.step_time_s > 0:
            per_gpu = metrics.per_gpu(metrics.tokens_per_second(record.tokens, record.step_time_s), s.layout.gpus)
            tflops = metrics.tflops_per_gpu(s.model, s.seq_len, per_gpu)
        print(megatron_line(record, s.steps, s.gbs, tflops), flush=True)
        if record.step == 1 and record.mem_allocated_gib is not None:
            print(memory_line(torch.distributed.get_rank(), 1, torch.cuda.memory_allocated() / GIB,
                              record.mem_allocated_gib, torch.cuda.memory_reserved() / GIB,
                              record.mem_reserved_gib), flush=True)

    def _profiler(self):
        """torch.profiler over PROFILE_START_STEP..PROFILE_END_STEP on rank 0 (None otherwise)."""
        s = self.settings
        if not s.profiling or torch.distributed.get_rank() != 0:
            return None
        out = self.run_dir / "profile"
        out.mkdir(exist_ok=True)
        warmup = 1 if s.profile_start > 1 else 0
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        sort_key = "self_device_time_total" if torch.cuda.is_available() else "self_cpu_time_total"

        def save(prof: torch.profiler.profile) -> None:
            prof.export_chrome_trace(str(out / "trace_rank0.json"))
            table = prof.key_averages().table(sort_by=sort_key, row_limit=40)
            (out / "top_kernels.txt").write_text(
                f"steps {s.profile_start}-{s.profile_end}, rank 0, sorted by {sort_key}\n{table}\n")

        self.notes.append(f"steps {s.profile_start}-{s.profile_end} ran under the profiler (rank 0) and are slower; "
                          f"trace and top kernels in {out}")
        return torch.profiler.profile(
            activities=activities, on_trace_ready=save, record_shapes=False,
            schedule=torch.profiler.schedule(wait=s.profile_start - 1 - warmup, warmup=warmup,
                                             active=s.profile_end - s.profile_start + 1, repeat=1))


def _error_file(run_dir: Path, rank: int) -> Path:
    return run_dir / f"error_rank{rank}.txt"


def _excerpt(text: str, lines: int = EXCERPT_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _peer_errors(run_dir: Path, rank: int, wait: bool, own: str) -> str:
    """The last lines of errors other ranks left in the run directory, unless they repeat this rank's own."""
    deadline = time.monotonic() + (PEER_ERROR_WAIT_S if wait else 0.0)
    while True:
        found = sorted(p for p in run_dir.glob("error_rank*.txt") if p != _error_file(run_dir, rank))
        if found or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    reports = {p.stem: _excerpt(p.read_text(), 5) for p in found}
    return "\n".join(f"[{name}] {text}" for name, text in reports.items() if text != _excerpt(own, 5))


def _system(run_dir: Path) -> tuple[dict, list[str]]:
    """The probe's system.json of the run set (the run directory's parent), if it ran."""
    for path in (run_dir / "system.json", run_dir.parent / "system.json"):
        if path.is_file():
            return json.loads(path.read_text()), []
    return {}, ["no system.json beside the run: system description empty"]


def assemble_result(settings: Settings, trainer: Trainer | None, source: DataSource | None, run_dir: Path, *,
                    started_at: str, status: str, exit_code: int, error: str | None) -> dict:
    """The run's result in TPrimat's one shape (utils.result), figures from utils.metrics."""
    from utils.fingerprint import project_commit
    from utils.fairness import identity, workload
    from utils.result import build_result

    s = settings
    system, notes = _system(run_dir)
    if trainer is not None:
        notes = trainer.notes + notes
    if s.mock_data:
        notes.append("MOCK DATA: trained on synthetic tokens (MOCK_DATA=1), not on a dataset")
    if cpu_compat.needed():
        notes.append("no accelerator: megatron-core ran on the CPU through train/cpu_compat.py (gloo)")
    records = trainer.log.records if trainer is not None and trainer.log is not None else []
    return build_result(
        run={"id": run_dir.name, "started_at": started_at, "ended_at": now_iso(), "status": status,
             "exit_code": exit_code, "error_excerpt": error, "commit": project_commit(), "source": "trainer"},
        platform=s.platform, framework=FRAMEWORK, variant=s.model.variant, system=system,
        parallelism={"strategy": s.strategy, **asdict(s.layout), "sequence_parallel": s.layout.tp > 1,
                     "distributed_optimizer": True},
        training={"steps": s.steps, "mbs": s.mbs, "gbs": s.gbs, "seq_len": s.seq_len, "precision": s.precision,
                  "lr": s.lr, "min_lr": s.min_lr, "warmup_steps": s.warmup_steps, "lr_decay_style": "cosine",
                  "weight_decay": s.weight_decay, "beta1": s.beta1, "beta2": s.beta2, "grad_clip": s.grad_clip,
                  "seed": s.seed, "dataset": None if s.mock_data else s.dataset,
                  "dataset_fingerprint": source.fingerprint if source else None,
                  "tokenizer_fingerprint": source.tokenizer_fingerprint if source else None,
                  "mock_data": s.mock_data,
                  **identity(s.fairness_profile, s.fairness, workload(FRAMEWORK, s.model.vocab_size, s.layout.tp),
                             s.precision)},
        steps=[asdict(r) for r in records], warmup_skip=s.warmup_skip, num_gpus=s.layout.gpus,
        device_name=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        effective=trainer.effective if trainer is not None else {},
        features=trainer.features if trainer is not None else {},
        host_rss_gib_per_worker=trainer.host_rss_gib_per_worker if trainer is not None else (), warnings=notes)


def execute(settings: Settings, run_dir: Path, inject_nan_step: int | None = None) -> int:
    """Train one run and write its result (last rank); returns the process exit status."""
    from utils.result import write_result

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    last = rank == world - 1
    started_at = now_iso()
    trainer: Trainer | None = None
    source: DataSource | None = None
    status, code, error = "ok", 0, None
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _raise_stopped)
    try:
        env = platform_env.apply(settings.platform)
        check_device(settings.platform)
        source = locate(settings.data_dir, settings.dataset, settings.model.key, settings.model.vocab_size,
                        settings.mock_data)
        cpu_compat.apply()
        init_distributed(settings)
        trainer = Trainer(settings, source, run_dir, inject_nan_step)
        trainer.build()
        trainer.effective["environment"] = env
        if last:
            trainer.log = StepLog(run_dir / "steps.jsonl")
            print(f"TPRIMAT_EFFECTIVE {json.dumps(trainer.effective, default=str)}", flush=True)
        trainer.train()
    except (DataError, SettingsError, NonFiniteLoss) as err:  # the same on every rank: reported once
        status, code, error = "failed", 1 if isinstance(err, NonFiniteLoss) else 2, str(err)
        if last:
            print(f"train_mega: {err}", file=sys.stderr, flush=True)
    except Stopped as stop:
        peers = _peer_errors(run_dir, rank, wait=True, own="")
        status, code = ("failed" if peers else "incomplete"), 128 + stop.signum
        error = "\n".join(part for part in (str(stop), peers) if part)
    except BaseException:  # noqa: BLE001 - every failure must still end in a result
        text = traceback.format_exc()
        print(text, file=sys.stderr, flush=True)
        status, code = "failed", 1
        if not last:
            _error_file(run_dir, rank).write_text(text)
        peers = _peer_errors(run_dir, rank, wait=world > 1, own=text) if last else ""
        error = "\n".join(part for part in (_excerpt(text), peers) if part)
    if last:
        try:
            result = assemble_result(settings, trainer, source, run_dir, started_at=started_at, status=status,
                                     exit_code=code, error=error)
            write_result(run_dir / "result.json", result)
        except Exception:  # noqa: BLE001 - report, and make sure the exit status says so
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            code = code or 1
    if trainer is not None and trainer.log is not None:
        trainer.log.close()
    if code == 0 and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return code


def check_device(platform: str) -> None:
    """A result names the hardware that really trained: a GPU platform needs a torch that sees its GPUs
    (else cpu_compat would train on the CPU under an amd/nvd label), and the CPU platform must not train
    on a GPU torch happens to see."""
    if platform != "cpu" and not torch.cuda.is_available():
        raise SettingsError(f"PLATFORM={platform}: torch {torch.__version__} sees no GPU; run in the container "
                            "runtime (./shell/run_train.sh on a node with a Docker engine) or set TPRIMAT_PYTHON to "
                            "a Python with the vendor's GPU stack")
    if platform == "cpu" and torch.cuda.is_available():
        raise SettingsError("PLATFORM=cpu, but torch sees a GPU: hide it (CUDA_VISIBLE_DEVICES= HIP_VISIBLE_DEVICES=) "
                            "or run the GPU platform (unset PLATFORM)")


def _raise_stopped(signum: int, _frame) -> None:
    raise Stopped(signum)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="train/train_mega.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Settings come from config.env and the environment (utils.config).")
    parser.add_argument("--model", required=True, choices=("llama", "qwen"), help="model key")
    parser.add_argument("--run-dir", required=True, type=Path, help="run directory (created if missing)")
    parser.add_argument("--strategy", help="parallelism strategy (default: the configuration's first)")
    parser.add_argument("--inject-nan-at-step", type=int, metavar="N",
                        help="testing only: make the loss of step N nan, to exercise the failure path")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = settings_from_config(args.model, args.strategy)
    except ConfigError as err:
        err.report("train_mega")
        return 2
    except KeyError as err:
        print(f"train_mega: {err.args[0]}", file=sys.stderr)
        return 2
    run_dir = args.run_dir.resolve()
    taken = [name for name in ("steps.jsonl", "result.json") if (run_dir / name).exists()]
    if taken:
        print(f"train_mega: {run_dir} already holds a run ({', '.join(taken)}); give a new --run-dir", file=sys.stderr)
        return 2
    run_dir.mkdir(parents=True, exist_ok=True)
    return execute(settings, run_dir, args.inject_nan_at_step)


if __name__ == "__main__":
    sys.exit(main())
