"""torchtitan's Trainer with TPrimat's step timer and read-back, so that its result is measured as every other's.

torchtitan's metrics line (components/metrics.py, MetricsProcessor.log) gives no step time, only tokens/s per device
over the host clock, and its memory is rank 0's peak reserved since the previous line. This subclass times each
step as train/common/step_timer.py does for NeMo: the device synchronised at every step boundary, every rank's peak
memory, one TPRIMAT_STEP line per step from global rank 0, the interval since the previous step's end (so what the
loop runs between steps is inside). Once built it gives a mixture of experts' routers megatron-core's load-balancing
loss (train/torchtitan/moe.py) and prints the settings it really trains with, read from the built trainer (a MoE
model's experts and routing too), as a TPRIMAT_EFFECTIVE line, which evaluate.judge compares with the request.

With EVAL_INTERVAL it evaluates as mega, fsdp and autotp do (train/common/evaluation.py's Evaluator: after every
interval and the last step, the same first samples of the prepared validation split each time, the seconds taken out
of the step clock, evals.jsonl and Megatron-LM's validation line, the stop at TARGET_LOSS), with torchtitan's own
model forward and loss in eval mode without gradients, as its Validator runs them. torchtitan's Validator itself
stays off: it evaluates at step 1 and every `freq` steps but not after the last, and gives its loss only to its
metrics logger.

torchtitan builds it through Trainer.Config.build (torchtitan/config/configurable.py wires a nested Config to its
owner class), from the Config config_registry.tprimat returns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torchtitan.components.loss import IGNORE_INDEX
from torchtitan.trainer import Trainer

from train.common.evaluation import EVALS_FILE, Evaluator
from train.common.step_log import StepLog
from train.common.step_timer import StepClock, peak_memory, step_line
from train.torchtitan import gpt_oss, moe
from train.torchtitan.settings import PRECISIONS
from utils.config.native import REPLICATED, SHARDED
from utils.spec import fairness


class TimedTrainer(Trainer):
    """torchtitan's Trainer, each step timed and the built run read back."""

    @dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        moe_aux_loss_coeff: float | None = None
        """A mixture of experts' load-balancing loss weight: megatron-core's aux loss, which TPrimat adds to every
        router (train/torchtitan/moe.py); None: none."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        moe.add_aux_loss(self)
        self.clock = StepClock()
        self.evaluator: Evaluator | None = None
        self.reached_target = False
        loader = self.dataloader
        if loader.validation is not None:
            run_dir = Path(config.dataloader.request).parent
            log = StepLog(run_dir / EVALS_FILE) if dist.get_rank() == 0 else None
            self.evaluator = Evaluator(loader.request, loader.validation, self.clock, log)
        if dist.get_rank() == 0:
            print(f"TPRIMAT_EFFECTIVE {json.dumps(effective(self), default=str)}", flush=True)

    def train_step(self, data_iterator) -> None:
        self.clock.start()
        super().train_step(data_iterator)
        seconds = self.clock.lap()
        peaks = peak_memory()  # a collective: in the next step's interval, as every trainer's per-step reductions
        if dist.get_rank() == 0:
            print(step_line(self.step, self.config.training.steps, seconds, peaks), flush=True)
        if self.evaluator is not None:
            self.reached_target = self.evaluator.after_step(self.step, seconds, self.evaluate)

    def should_continue_training(self) -> bool:
        """torchtitan's own test, and no further step once an evaluation reached TARGET_LOSS."""
        return not self.reached_target and super().should_continue_training()

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        """One evaluation of this DP rank's validation microbatches with torchtitan's forward and (summing) loss: the
        per-token loss's sum and count, added over every rank (each TP rank holds its group's whole loss, so both
        are counted TP times and their ratio is the mean)."""
        model = self.model_parts[0]
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)
        model.eval()
        for inputs, labels in self.dataloader.validation_pairs():
            inputs = {key: value.to(self.device) for key, value in inputs.items()}
            labels = labels.to(self.device)
            inputs, labels, extra = self.post_dataloading_process(inputs, labels)
            with self.train_context():
                loss_sum, _ = self.loss_fn(model(inputs, **extra), labels)
            totals += torch.stack([loss_sum.detach().double(), (labels != IGNORE_INDEX).sum().double()])
        model.train()
        dist.all_reduce(totals)
        total, count = totals.tolist()
        return total, count


def effective(trainer: Trainer) -> dict:
    """The settings the built trainer applies, in the result's names (evaluate.logs.settings)."""
    config, dims, model = trainer.config, trainer.parallel_dims, trainer.model_config
    training, schedule = config.training, config.lr_scheduler
    group = config.optimizer.param_groups[-1].optimizer_kwargs  # the decayed group
    dp, ddp = dims.dp_shard * dims.dp_replicate, dims.dp_shard == 1 and dims.dp_replicate > 1
    attention = model.layers[0].attention
    loader = trainer.dataloader
    precision = {titan: name for name, titan in PRECISIONS.items()}[training.mixed_precision_param]
    return {
        "tp": dims.tp, "pp": dims.pp, "dp": dp, "cp": dims.cp, "num_gpus": dims.world_size,
        "sequence_parallel": dims.tp > 1 and config.parallelism.enable_sequence_parallel,
        "ga": trainer.gradient_accumulation_steps, "mbs": training.local_batch_size,
        "gbs": training.local_batch_size * dp * trainer.gradient_accumulation_steps,
        "seq_len": training.seq_len, "steps": training.steps, "precision": precision,
        "grad_reduce_in_fp32": ddp or training.mixed_precision_reduce == "float32",
        **fairness.fixed("ddp" if ddp else "fsdp2"),  # what torchtitan's FSDP2 or DDP does with overlap and averaging
        "lr": group["lr"], "min_lr": group["lr"] * schedule.min_lr_factor, "warmup_steps": schedule.warmup_steps,
        "lr_decay_style": schedule.decay_type, "weight_decay": group["weight_decay"], "beta1": group["betas"][0],
        "beta2": group["betas"][1], "grad_clip": training.max_norm, "seed": config.debug.seed,
        "data_parallel": REPLICATED if ddp else SHARDED, "compile": config.compile.enable,
        "sac_every": 0 if config.activation_checkpoint is None else None,
        "num_layers": len(model.layers), "hidden_size": model.dim, "padded_vocab_size": model.vocab_size,
        "num_attention_heads": attention.n_heads, "num_kv_heads": attention.n_kv_heads,
        "head_dim": attention.head_dim or model.dim // attention.n_heads,
        "qk_norm": getattr(attention, "qk_norm", None) is not None, "ep": dims.ep,
        # the features of utils.spec.models.FEATURES the built model has (windows, sinks, biases, ...: gpt_oss.py)
        "model_features": gpt_oss.features(trainer.model_parts[0]),
        # the experts and routing it built (train/torchtitan/moe.py); the router's gate computes under autocast to
        # fp32, which the CPU's autocast lacks (there it runs in the parameters' dtype)
        **moe.read_back(trainer.model_parts[0], dims.ep, "fp32" if trainer.device.type != "cpu" else precision),
        # the attention every layer runs (FlexAttention; on the CPU ScaledDotProductAttention: settings.py)
        "attention_backend": type(attention.inner_attention).__qualname__.removesuffix(".Config"),
        "mock_data": loader.source.mock, "data_path": None if loader.source.mock else str(loader.source.prefix),
        # the held-out documents it evaluates on (evaluate/logs/evaluations.py puts them in the result's evaluation)
        "validation": None if loader.validation is None else loader.validation.result_split(),
    }
