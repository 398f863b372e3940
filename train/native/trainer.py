"""The torch-native trainer's loop, shared by fsdp and autotp: distributed start-up, the built run (Hugging Face
model, an Engine, Megatron-LM's LR schedule, the data) and its steps.

The workload is mega's: the same samples in the same order (train/common/megatron_data.py), the same loss (mean token
cross-entropy over the loss mask, on the dataset's already shifted labels), AdamW with Megatron-LM's parameter
groups (no weight decay on biases and 1-D weights) and its schedule (megatron-core's OptimizerParamScheduler
driving the torch optimizer: step k runs at LR x (k-1)/W during the warm-up, then cosine to MIN_LR). What differs
per framework is the Engine (train/native/engine.py).

Each step is timed from the previous step's end to its own (train/common/step_timer.py's StepClock). Its forward /
backward / optimizer breakdown is mega's (train/common/step_marks.py, the same intervals): device events recorded
into the stream and read only after the step's final synchronisation, so the measurement adds no synchronisation; on
the CPU, where the work is synchronous, the host clock at the same points.

With EVAL_INTERVAL, each due step is followed by an evaluation (train/common/evaluation.py): the model in eval mode
under no_grad, the validation split's global batches through the engine's own forward, so with training's loss and
mask (loss parallel at TP > 1 as in training); each microbatch's mean times its unmasked tokens gives the loss's sum,
and sum and count are added over every rank (tensor-parallel ranks hold the same loss and add the same share to
both), so that every rank holds the mean per-token validation loss.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from train.native import model as native_model
from train.native import readback as native_readback
from train.common import step_marks
from train.common.evaluation import Evaluator
from train.common.megatron_data import DataSource, build_splits, microbatches
from train.native.engine import Engine
from train.common.outcome import NonFiniteLoss, RunRecord, SettingsError
from train.common.step_log import GIB, StepRecord, is_last_rank, peak_host_rss_gib
from train.common.step_timer import StepClock
from utils.machine import compile_aside
from utils.machine.hardware import cpu_native_bf16
from utils.spec.models import ModelSpec
from utils.spec.request import Request

MakeEngine = Callable[[torch.nn.Module, Request, torch.device], Engine]
DEVICE_EVENTS = ("CUDA events (train/common/step_marks.py) around each microbatch's forward and loss, the "
                 "microbatches' forward-backward and the optimizer step, read after the step's synchronisation")
HOST_CLOCK = ("host clock (train/common/step_marks.py) around each microbatch's forward and loss, the microbatches' "
              "forward-backward and the optimizer step: CPU work is synchronous")


def init_distributed(req: Request) -> torch.device:
    """The process group (NCCL/RCCL on GPUs, gloo on the CPU) for TP x DP processes; this rank's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    lay = req.parallelism
    if lay.pp != 1:
        raise SettingsError(f"PP={lay.pp}: framework {req.identity.framework} has no pipeline parallelism; "
                            "give a strategy with PP=1")
    if world != lay.num_gpus:
        raise SettingsError(f"{world} processes started, but TP x PP x DP = {lay.tp} x {lay.pp} x {lay.dp} = "
                            f"{lay.num_gpus}; start torchrun with that many processes")
    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    backend = "nccl" if gpu else "gloo"
    if "WORLD_SIZE" in os.environ:  # started by torchrun
        torch.distributed.init_process_group(backend=backend)
    else:  # one process started by hand: a group of one, no rendezvous
        torch.distributed.init_process_group(backend=backend, store=torch.distributed.HashStore(), rank=0,
                                             world_size=1)
    return torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")


def masked_loss(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean token cross-entropy over the loss mask, in fp32 (the labels are already shifted: train.common.megatron_data)."""
    losses = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), batch["labels"].view(-1),
                                               reduction="none")
    if hasattr(losses, "full_tensor"):  # loss parallel (fsdp at TP > 1): each token's loss, whole on every TP rank
        losses = losses.full_tensor()
    mask = batch["loss_mask"].view(-1).float()
    return torch.sum(losses * mask) / mask.sum()


def adamw(model: torch.nn.Module, req: Request) -> torch.optim.AdamW:
    """AdamW in megatron-core's parameter groups: biases and 1-D weights (norms) without weight decay (wd_mult 0,
    which the schedule reads); call after the engine wrapped the model, on the parameters it trains."""
    t = req.training
    decayed, plain = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (plain if param.dim() == 1 or name.endswith(".bias") else decayed).append(param)
    groups = [{"params": decayed, "wd_mult": 1.0}, {"params": plain, "wd_mult": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=t.lr, betas=(t.beta1, t.beta2),
                             eps=float(req.fairness.table["adam_eps"]), weight_decay=t.weight_decay)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class NativeTrainer(RunRecord):
    """The built run (model, engine, schedule, data) and the step loop over them."""

    request: Request
    source: DataSource
    run_dir: Path
    make_engine: MakeEngine
    device: torch.device
    inject_nan_step: int | None = None
    breakdown: bool = True  # False only for bench/breakdown.py's comparison
    spec: ModelSpec = field(init=False)
    marks: step_marks.StepMarks = field(init=False)
    clock: StepClock = field(init=False)

    def __post_init__(self) -> None:
        self.spec = self.request.model
        self.marks = step_marks.StepMarks(on_device=self.device.type == "cuda")
        self.clock = StepClock(lambda: synchronize(self.device))

    def _mark(self, name: str) -> None:
        if self.breakdown:
            self.marks.mark(name)

    @property
    def breakdown_method(self) -> str | None:
        if not self.breakdown:
            return None
        return DEVICE_EVENTS if self.device.type == "cuda" else HOST_CLOCK

    def build(self) -> None:
        """The model (one seed, every rank), the engine's wrapping and optimizer, the schedule and the data:
        megatron-core's schedule and dataset, imported without torch's compiler (utils/machine/compile_aside.py)."""
        compile_aside.megatron_core()
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

        t, lay = self.request.training, self.request.parallelism
        model = native_model.build(self.spec, self.request.native.attn_impl, t.seed, self.device)
        self.engine = self.make_engine(model, self.request, self.device)
        self.scheduler = OptimizerParamScheduler(
            self.engine.optimizer, init_lr=0.0, max_lr=t.lr, min_lr=t.min_lr, lr_warmup_steps=t.warmup_steps,
            lr_decay_steps=t.steps, lr_decay_style=t.lr_decay_style, start_wd=t.weight_decay, end_wd=t.weight_decay,
            wd_incr_steps=t.steps, wd_incr_style="constant")
        dataset, validation = build_splits(self.source, t.seq_len, t.steps * t.gbs, t.seed,
                                           Path(self.request.data.data_dir) / "index_cache",
                                           evaluation=self.request.evaluation, gbs=t.gbs, fingerprint=is_last_rank())
        self.batches = microbatches(dataset, steps=t.steps, mbs=t.mbs, dp=self.engine.dp_size,
                                    dp_rank=self.engine.dp_rank, ga=lay.ga, device=self.device)
        if validation is not None:
            self.evaluator = Evaluator(self.request, validation, self.clock)
        self.features = self.engine.features()
        if self.device.type == "cpu":
            self.features["cpu_native_bf16"] = cpu_native_bf16()
            if t.precision == "bf16" and not self.features["cpu_native_bf16"]:
                self.notes.append("PRECISION=bf16 on a CPU without bf16 instructions: every bf16 product is emulated "
                                  "(many times slower than fp32); the step times say nothing about bf16 hardware")
        if self.features.get("float8") == "torchao" and not self.request.native.compile:
            self.notes.append("PRECISION=fp8 without COMPILE=1: torchao's float8 scaling and casts run as separate "
                              "kernels around each matmul (0.48x bf16's tokens/s on an H100, docs/results.md); "
                              "COMPILE=1 fuses them")
        self.effective = {**native_readback.run_settings(self, model, dataset), **self.engine.read_back()}

    def run_step(self, step: int) -> tuple[list[torch.Tensor], float | None, float]:
        """One optimizer step: GA microbatches forward and backward, then the optimizer at the schedule's LR and
        the schedule's advance; the losses, the gradient norm and the LR applied."""
        ga = self.request.parallelism.ga
        losses = []
        self.marks.reset()
        self._mark(step_marks.SCHEDULE)
        for micro in range(ga):
            self._mark(step_marks.FETCH)
            batch = next(self.batches)
            self._mark(step_marks.FORWARD_BEGIN)
            loss = self.engine.forward(batch)
            if step == self.inject_nan_step:
                loss = loss * float("nan")  # fault injection for the failure-path test (--inject-nan-at-step)
            self._mark(step_marks.FORWARD_END)
            self.engine.backward(loss, last_microbatch=micro == ga - 1)
            losses.append(loss.detach())
            if step == 1 and micro == 0:
                native_readback.read_back_batch(self.effective, batch, ga)
        self._mark(step_marks.SCHEDULE)
        # Megatron-LM's order: the optimizer steps at the schedule's current value, then the schedule advances.
        lr = self.engine.optimizer.param_groups[0]["lr"]
        self._mark(step_marks.OPTIMIZER)
        grad_norm = self.engine.optimizer_step()
        self.scheduler.step(increment=1)
        self._mark(step_marks.OPTIMIZER)
        return losses, grad_norm, lr

    def evaluate(self) -> tuple[float, float]:
        """One evaluation over the validation split's first samples (the same every time): the per-token loss's sum
        and count, added over every rank."""
        split = self.evaluator.split
        batches = microbatches(split.dataset, steps=split.iters, mbs=self.request.training.mbs,
                               dp=self.engine.dp_size, dp_rank=self.engine.dp_rank, ga=self.request.parallelism.ga,
                               device=self.device)
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)
        self.engine.hf_model.eval()
        with torch.no_grad():
            for batch in batches:
                tokens = batch["loss_mask"].float().sum()
                totals += torch.stack([self.engine.forward(batch).detach().double() * tokens, tokens.double()])
        self.engine.hf_model.train()
        torch.distributed.all_reduce(totals)
        total, count = totals.tolist()
        return total, count

    def reduce_step_record(self, step: int, elapsed: float, losses: list[torch.Tensor], grad_norm: float | None,
                           lr: float, parts: dict[str, float]) -> StepRecord:
        """The step's record: the loss averaged over microbatches and DP replicas, the nan flag and peak memory
        the largest over all ranks (collectives every rank joins)."""
        t, engine = self.request.training, self.engine
        mean = torch.stack(losses).float().mean()
        torch.distributed.all_reduce(mean, group=engine.dp_group)
        loss = mean.item() / engine.dp_size
        nonfinite = not math.isfinite(loss) or (grad_norm is not None and not math.isfinite(grad_norm))
        gpu = self.device.type == "cuda"
        memory = [torch.cuda.max_memory_allocated() / GIB, torch.cuda.max_memory_reserved() / GIB] if gpu \
            else [-1.0, -1.0]
        shared = torch.tensor([float(nonfinite), *memory, peak_host_rss_gib()], dtype=torch.float64,
                              device=self.device)
        torch.distributed.all_reduce(shared, op=torch.distributed.ReduceOp.MAX)
        flag, allocated, reserved, host_rss = shared.tolist()
        return StepRecord(step=step, step_time_s=elapsed, loss=loss, lr=lr, grad_norm=grad_norm, skipped=0,
                          nan=int(flag), tokens=t.gbs * t.seq_len,
                          mem_allocated_gib=allocated if allocated >= 0 else None,
                          mem_reserved_gib=reserved if reserved >= 0 else None, mem_host_rss_gib=host_rss, **parts,
                          **(engine.expert_load.reduce() if engine.expert_load is not None else {}))

    def train(self) -> None:
        if self.request.environment.profiling:
            self.notes.append("PROFILING is not wired for the torch-native trainer: no profile/ was written")
        for step in range(1, self.request.training.steps + 1):
            if self.step(step):
                break
        self.finish()

    def step(self, step: int) -> bool:
        """One step, timed from the previous step's end to its own (train/common/step_timer.py's StepClock: the
        previous step's recording inside), recorded (last rank), checked for nan and followed by its evaluation when
        one is due. True: the evaluation reached TARGET_LOSS."""
        self.clock.start()
        losses, grad_norm, lr = self.run_step(step)
        elapsed = self.clock.lap()
        parts = self.marks.parts() if self.breakdown else {}
        record = self.reduce_step_record(step, elapsed, losses, grad_norm, lr, parts)
        if self.log is not None:
            self.log.report(record, self.spec, self.request.training, self.request.parallelism.num_gpus)
        if record.nan:
            raise NonFiniteLoss(f"step {step}: loss {record.loss} / grad norm {record.grad_norm} is not finite; "
                                "training stopped")
        return self.evaluator is not None and self.evaluator.after_step(step, elapsed, self.evaluate)

    def finish(self) -> None:
        """Every worker's peak host memory, in rank order."""
        synchronize(self.device)
        peaks: list = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(peaks, peak_host_rss_gib())
        self.host_rss_gib_per_worker = peaks


def starter(make_engine: MakeEngine):
    """A framework's start(req, source, run_dir, inject_nan_step) for train/common/outcome.py: distributed, then the
    trainer around its engine."""
    def start(req: Request, source: DataSource, run_dir: Path, inject_nan_step: int | None) -> NativeTrainer:
        device = init_distributed(req)
        return NativeTrainer(req, source, run_dir, make_engine, device, inject_nan_step)
    return start
