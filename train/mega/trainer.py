"""The mega trainer's loop: distributed start-up, the built run (model, optimizer, schedule, data) and its steps.

The loop is Megatron-LM's: megatron-core's GPTModel (train/mega/model.py) under its DDP with the distributed
optimizer (AdamW), linear warm-up then cosine decay to MIN_LR, and the forward-backward schedule of the layout
(no pipelining, or 1F1B). Each step is timed between device synchronisations; its record is reduced over the
ranks and written by the last rank to steps.jsonl and the console (train/common/step_log.py). Every setting comes
from the run's request (utils.spec.request).

The step's forward / backward / optimizer breakdown (breakdown_method) is measured without perturbing it: marks
that never wait for the device (train/common/step_marks.py: CUDA events, the host clock on the CPU) before each
microbatch's batch fetch, at the start of its model forward and at the end of its loss function (of its forward,
on a stage without the loss), around the forward-backward schedule call and around the optimizer and LR schedule
steps; they are read after the step's existing closing synchronisation. Forward is the sum of the forward
intervals; backward is the schedule call less the forwards and fetches, so it also holds what megatron-core does
between them inside the schedule: the pipeline's sends, receives and waits (PP > 1, where 1F1B interleaves the
microbatches' forwards and backwards: sums need no order) and the gradient reduction finalize_model_grads
completes at the schedule's end (a forward holds its wait for an overlapped parameter gather, profile tuned).
Each rank measures its own step; the last rank's parts are recorded, beside its own step time. Bench mode
(instrumented=False) makes no marks at all. Cost: bench/instrumentation.py.

With EVAL_INTERVAL, Megatron-LM's evaluation follows the due steps (train/common/evaluation.py): the model in eval mode
under no_grad, the overlapped parameter gather's hook disabled around it (its parameters synchronised first, as
Megatron-LM does), and the validation split's global batches through the same forward-backward schedule with
forward_only=True (no pipelining or 1F1B's forward-only order at PP > 1) and the same per-token loss and mask as
training; the loss's sum and token count are added over every rank (tensor-parallel ranks and pipeline stages without
the loss add the same share to both, or nothing), so every rank holds the mean per-token validation loss.
"""

from __future__ import annotations

import math
import os
import random
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Iterator

import numpy
import torch

from train.mega import readback as mega_readback
from train.common.step_marks import FETCH, FORWARD_BEGIN, FORWARD_END, OPTIMIZER, SCHEDULE, StepMarks
from train.common.evaluation import Evaluator
from train.common.expert_load import ExpertLoad
from train.common.megatron_data import DataSource, build_splits, microbatches
from train.common.outcome import NonFiniteLoss, RunRecord, SettingsError
from train.common.step_log import GIB, StepRecord, is_last_rank, peak_host_rss_gib
from train.common.step_timer import StepClock
from utils.spec.models import ModelSpec
from utils.spec.request import Request

# Deprecation notices of megatron-core's configuration and of torch's collectives (each call) that would bury the
# per-step log (megatron-core is imported where it is used, after these). Its warnings that Transformer Engine and
# Apex are missing are filtered on the CPU only (utils/missing_stacks.py): on a GPU they are news.
QUIET_WARNINGS = (r"full scope is deprecated",
                  r"`torch\.distributed\.(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated")
for _pattern in QUIET_WARNINGS:
    warnings.filterwarnings("ignore", message=_pattern)


def breakdown_method(on_device: bool) -> str:
    """The result's performance.breakdown.method: how this run's marks were taken and what each part holds."""
    clock = ("CUDA events recorded without synchronisation, read after the step's" if on_device else
             "the host clock (megatron-core runs synchronously on the CPU)")
    return (f"{clock}, last rank: forward = each microbatch's model forward and loss; backward = megatron-core's "
            "forward-backward schedule less the forwards and batch fetches (backward, pipeline transfers and waits, "
            "gradient reduction); optimizer = optimizer step and LR schedule step")


def seed_everything(seed: int) -> None:
    """Python, NumPy, torch and megatron-core's model-parallel RNG tracker (dropout is 0; data order is seeded)."""
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed)


def init_distributed(req: Request) -> None:
    """Process group (NCCL/RCCL on GPUs, gloo without) and megatron-core's TP/PP/DP groups, and the EP groups its
    experts split over within DP."""
    from megatron.core import parallel_state

    world = int(os.environ.get("WORLD_SIZE", "1"))
    lay = req.parallelism
    if world != lay.num_gpus:
        raise SettingsError(f"{world} processes started, but TP x PP x DP = {lay.tp} x {lay.pp} x {lay.dp} = "
                            f"{lay.num_gpus}; start torchrun with that many processes")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if "WORLD_SIZE" in os.environ:  # started by torchrun
        torch.distributed.init_process_group(backend=backend)
    else:  # one process started by hand: a group of one, no rendezvous
        torch.distributed.init_process_group(backend=backend, store=torch.distributed.HashStore(), rank=0,
                                             world_size=1)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=lay.tp, pipeline_model_parallel_size=lay.pp,
                                             expert_model_parallel_size=lay.ep)


class ForwardStep:
    """megatron-core's forward_step_func: one microbatch through this stage, then the masked mean loss."""

    def __init__(self, inject_nan_step: int | None):
        self.step = 0
        self.microbatches = 0  # counted per step: the GA the schedule really ran
        self.batch_shape: tuple[int, ...] | None = None
        self.inject_nan_step = inject_nan_step
        self.marks: StepMarks | None = None  # the step's breakdown marks (None: not measured)

    def __call__(self, data_iterator: Iterator[dict], model: torch.nn.Module):
        marks = self.marks
        if marks is not None:
            marks.mark(FETCH)
        batch = next(data_iterator)
        self.microbatches += 1
        self.batch_shape = tuple(batch["tokens"].shape)
        if marks is not None:
            marks.mark(FORWARD_BEGIN)
        output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
        if marks is not None:
            marks.mark(FORWARD_END)  # a stage without the loss function ends its forward here
        return output, partial(self.loss, batch["loss_mask"])

    def loss(self, loss_mask: torch.Tensor, output: torch.Tensor):
        mask = loss_mask.view(-1).float()
        loss = torch.sum(output.float().view(-1) * mask) / mask.sum()
        if self.step == self.inject_nan_step:
            loss = loss * float("nan")  # fault injection for the failure-path test (--inject-nan-at-step)
        # The schedule divides the returned loss by the number of microbatches in place: log a copy.
        logged = {"lm loss": loss.detach().clone()}
        if self.marks is not None:
            self.marks.mark(FORWARD_END, replace_last=True)  # the last stage's forward ends with its loss
        return loss, logged


class EvalForwardStep:
    """forward_step_func of an evaluation: the training forward and per-token loss over the mask, logged as its sum
    and token count, so that the evaluation's mean is over all its tokens."""

    def __call__(self, data_iterator: Iterator[dict], model: torch.nn.Module):
        batch = next(data_iterator)
        output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
        return output, partial(self.loss, batch["loss_mask"])

    @staticmethod
    def loss(loss_mask: torch.Tensor, output: torch.Tensor):
        mask = loss_mask.view(-1).float()
        total = torch.sum(output.float().view(-1) * mask)
        return total / mask.sum(), {"lm loss": torch.stack([total, mask.sum()]).double()}


@dataclass
class Trainer(RunRecord):
    """The built run: model chunk, optimizer, LR schedule and data, and the step loop over them."""

    request: Request
    source: DataSource
    run_dir: Path
    inject_nan_step: int | None = None
    instrumented: bool = True  # False only for bench.instrumentation: no syncs, records or reductions
    recording_s: float = 0.0  # seconds spent measuring and recording steps so far: bench.instrumentation's figure
    clock: StepClock = field(default_factory=lambda: StepClock(lambda: torch.cuda.synchronize()))
    breakdown_method: str = field(init=False)  # the result's performance.breakdown.method
    marks: StepMarks = field(init=False)  # the breakdown's marks, reused step after step
    spec: ModelSpec = field(init=False)  # the model the request names (its ModelSpec)
    expert_load: ExpertLoad | None = None  # a MoE model's router counts of the step (train/common/expert_load.py)

    def __post_init__(self) -> None:
        self.spec = self.request.model
        self.marks = StepMarks(on_device=torch.cuda.is_available())
        self.breakdown_method = breakdown_method(self.marks.on_device)

    def build(self) -> None:
        """Everything megatron-core needs, in Megatron-LM's order; reads back the effective settings."""
        from megatron.core import parallel_state
        from megatron.core.distributed import finalize_model_grads
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

        from train.mega import model as mega_model
        from train.mega import weights as mega_weights

        t, lay, table, spec = self.request.training, self.request.parallelism, self.request.fairness.table, self.spec
        seed_everything(t.seed)
        impl = self.request.environment.transformer_impl
        stack = mega_model.Stack.detect(impl)
        if impl == "local" and stack.gpu:
            self.notes.append("TRANSFORMER_IMPL=local: megatron-core's own layers on a GPU, without Transformer Engine "
                              "(features.layer_spec): not comparable with a Transformer Engine run")
        fusions, fusion_notes = mega_model.choose_fusions(stack, table)
        self.notes += fusion_notes
        config = mega_model.transformer_config(spec, lay.tp, lay.pp, t.precision, stack, fusions, table, ep=lay.ep)
        self.notes += mega_model.moe_notes(config)
        model = mega_model.gpt_model(spec, config, stack, t.seq_len)
        model.to(torch.device("cuda", torch.cuda.current_device()))
        mega_weights.initialise_layout_invariant(model, t.seed)
        if spec.moe is not None:
            self.count_routing(model)
        parameters = mega_weights.count_parameters(model)
        if parameters != spec.param_count():
            raise RuntimeError(f"the built model has {parameters} parameters, the {spec.variant} spec "
                               f"{spec.param_count()}: utils/spec/models.py and the model builder disagree")
        self.model = mega_model.wrap(model, config, table)
        self.optimizer = get_megatron_optimizer(OptimizerConfig(
            optimizer="adam", lr=t.lr, min_lr=t.min_lr, weight_decay=t.weight_decay, adam_beta1=t.beta1,
            adam_beta2=t.beta2, adam_eps=table["adam_eps"], clip_grad=t.grad_clip, bf16=config.bf16,
            params_dtype=config.params_dtype, use_distributed_optimizer=self.model.ddp_config.use_distributed_optimizer,
        ), [self.model])
        self.scheduler = OptimizerParamScheduler(
            self.optimizer, init_lr=0.0, max_lr=t.lr, min_lr=t.min_lr, lr_warmup_steps=t.warmup_steps,
            lr_decay_steps=t.steps, lr_decay_style=t.lr_decay_style, start_wd=t.weight_decay, end_wd=t.weight_decay,
            wd_incr_steps=t.steps, wd_incr_style="constant")
        # Megatron-LM's hooks: gradient reduction overlapped with backward, finished before the optimizer.
        config.no_sync_func = self.model.no_sync
        config.grad_sync_func = self.model.start_grad_sync
        config.finalize_model_grads_func = finalize_model_grads
        config.grad_scale_func = self.optimizer.scale_loss

        dataset, validation = build_splits(self.source, t.seq_len, t.steps * t.gbs, t.seed,
                                           Path(self.request.data.data_dir) / "index_cache",
                                           evaluation=self.request.evaluation, gbs=t.gbs, fingerprint=is_last_rank())
        device = torch.device("cuda", torch.cuda.current_device())
        self.batches = microbatches(dataset, steps=t.steps, mbs=t.mbs, dp=lay.dp,
                                    dp_rank=parallel_state.get_data_parallel_rank(), ga=lay.ga, device=device)
        if validation is not None:
            self.evaluator = Evaluator(self.request, validation, self.clock)
        self.forward_step = ForwardStep(self.inject_nan_step)
        self.config = config
        self.features = mega_readback.features(config, stack, t.precision, self.notes)
        self.effective = mega_readback.read_back(self, model, parameters, dataset)

    def count_routing(self, model: torch.nn.Module) -> None:
        """Every router of this stage adds its training forwards' routing maps (megatron-core's router returns its
        probabilities and the map) to the step's counts, at its layer's global number."""
        self.expert_load = ExpertLoad(self.spec.num_layers, self.spec.moe.num_experts,
                                      torch.device("cuda", torch.cuda.current_device()))

        def hook(index: int):
            return lambda router, _inputs, output: self.expert_load.add(index, output[1]) if router.training else None
        for layer in model.decoder.layers:
            layer.mlp.router.register_forward_hook(hook(layer.layer_number - 1))

    def run_step(self, step: int) -> tuple[list, float | None, bool, float]:
        """One optimizer step: zero grads, forward-backward over GA microbatches, LR schedule, optimizer."""
        from megatron.core.pipeline_parallel import get_forward_backward_func

        t = self.request.training
        marks = self.marks if self.instrumented else None
        if marks is not None:
            marks.reset()
        self.forward_step.step, self.forward_step.microbatches, self.forward_step.marks = step, 0, marks
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        schedule = get_forward_backward_func()
        if marks is not None:
            marks.mark(SCHEDULE)
        losses = schedule(
            forward_step_func=self.forward_step, data_iterator=self.batches, model=[self.model],
            num_microbatches=self.request.parallelism.ga, seq_length=t.seq_len, micro_batch_size=t.mbs,
            decoder_seq_length=t.seq_len, forward_only=False)
        if marks is not None:
            marks.mark(SCHEDULE)
        # Megatron-LM's order: the optimizer steps at the schedule's current value, then the schedule
        # advances, so step k (1-based) runs at LR x (k-1)/W during the warm-up (step 1 at 0).
        lr = self.optimizer.param_groups[0]["lr"]
        if marks is not None:
            marks.mark(OPTIMIZER)
        success, grad_norm, _ = self.optimizer.step()
        self.scheduler.step(increment=1)
        if marks is not None:
            marks.mark(OPTIMIZER)
        return losses, grad_norm, success, lr

    def evaluate(self) -> tuple[float, float]:
        """One evaluation over the validation split's first samples (the same every time): the per-token loss's sum
        and count, added over every rank."""
        from megatron.core import parallel_state
        from megatron.core.pipeline_parallel import get_forward_backward_func

        t, lay, split = self.request.training, self.request.parallelism, self.evaluator.split
        device = torch.device("cuda", torch.cuda.current_device())
        batches = microbatches(split.dataset, steps=split.iters, mbs=t.mbs, dp=lay.dp,
                               dp_rank=parallel_state.get_data_parallel_rank(), ga=lay.ga, device=device)
        overlapped = self.model.ddp_config.overlap_param_gather
        if overlapped:
            self.model.disable_forward_pre_hook(param_sync=True)
        self.model.eval()
        totals = torch.zeros(2, dtype=torch.float64, device=device)
        schedule = get_forward_backward_func()
        with torch.no_grad():
            for _ in range(split.iters):
                for item in schedule(forward_step_func=EvalForwardStep(), data_iterator=batches, model=[self.model],
                                     num_microbatches=lay.ga, seq_length=t.seq_len, micro_batch_size=t.mbs,
                                     decoder_seq_length=t.seq_len, forward_only=True):
                    totals += item["lm loss"]
        self.model.train()
        if overlapped:
            self.model.enable_forward_pre_hook()
        torch.distributed.all_reduce(totals)
        total, count = totals.tolist()
        return total, count

    def reduce_step_record(self, step: int, elapsed: float, losses: list, grad_norm: float | None, success: bool,
                           lr: float, parts: dict[str, float]) -> StepRecord:
        """The step's record, through collectives every rank joins: the loss averaged over microbatches and DP
        ranks, the nan flag and peak memory the largest over all ranks; parts (the breakdown) this rank's own."""
        from megatron.core import parallel_state

        t = self.request.training
        grad_norm = None if grad_norm is None else float(grad_norm)
        loss = None
        nonfinite = grad_norm is not None and not math.isfinite(grad_norm)
        if losses:  # the last pipeline stage
            mean = torch.stack([item["lm loss"] for item in losses]).mean()
            torch.distributed.all_reduce(mean, group=parallel_state.get_data_parallel_group())
            loss = mean.item() / self.request.parallelism.dp
            nonfinite = nonfinite or not math.isfinite(loss)
        memory = [torch.cuda.max_memory_allocated() / GIB, torch.cuda.max_memory_reserved() / GIB] \
            if torch.cuda.is_available() else [-1.0, -1.0]
        shared = torch.tensor([float(nonfinite), *memory, peak_host_rss_gib()], dtype=torch.float64,
                              device=torch.device("cuda", torch.cuda.current_device()))
        torch.distributed.all_reduce(shared, op=torch.distributed.ReduceOp.MAX)
        flag, allocated, reserved, host_rss = shared.tolist()
        return StepRecord(step=step, step_time_s=elapsed, loss=loss, lr=lr, grad_norm=grad_norm,
                          skipped=0 if success else 1, nan=int(flag), tokens=t.gbs * t.seq_len,
                          mem_allocated_gib=allocated if allocated >= 0 else None,
                          mem_reserved_gib=reserved if reserved >= 0 else None, mem_host_rss_gib=host_rss, **parts,
                          **(self.expert_load.reduce() if self.expert_load is not None else {}))

    def train(self) -> None:
        """Every step in order (the profiler follows along on rank 0), then the end-of-run checks."""
        profiler = mega_readback.profiler(self.request.environment, self.run_dir, self.notes)
        with profiler or nullcontext():
            for step in range(1, self.request.training.steps + 1):
                reached = self.step(step)
                if profiler is not None:
                    profiler.step()
                if reached:
                    break
        self.finish()

    def step(self, step: int) -> bool:
        """One step, timed from the previous step's end to its own (train/common/step_timer.py's StepClock: the
        previous step's recording inside), recorded (last rank), checked for nan and followed by its evaluation when
        one is due; the recording's own seconds (the breakdown marks' included) are added to recording_s. True: the
        evaluation reached TARGET_LOSS."""
        if not self.instrumented:
            self.run_step(step)
            self.clock.last = None  # an uninstrumented step (bench.instrumentation) ends no timed interval
            return False
        marked = self.marks.own_s
        self.clock.start()
        losses, grad_norm, success, lr = self.run_step(step)
        marked = self.marks.own_s - marked  # the breakdown marks' host seconds inside the timed step
        elapsed = self.clock.lap()
        end = self.clock.last
        record = self.reduce_step_record(step, elapsed, losses, grad_norm, success, lr, self.marks.parts())
        if step == 1:
            mega_readback.read_back_batch(self.effective, self.forward_step)
        if self.log is not None:
            self.log.report(record, self.spec, self.request.training, self.request.parallelism.num_gpus)
        if record.nan:
            raise NonFiniteLoss(f"step {step}: loss {record.loss} / grad norm {record.grad_norm} is not finite; "
                                "training stopped")
        self.recording_s += time.perf_counter() - end + marked
        return self.evaluator is not None and self.evaluator.after_step(step, elapsed, self.evaluate)

    def finish(self) -> None:
        """Complete the last overlapped parameter gather (profile tuned), then check that the DP replicas agree."""
        from train.mega.weights import replicas_identical

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
