"""The autotp framework's Engine (train/native/engine.py): DeepSpeed's AutoTP tensor parallelism with ZeRO 0-2.

deepspeed.tp_model_init records the TP size and dtype; deepspeed.initialize then shards the built Hugging Face model
(the model's own TP plan: q, k, v, gate, up column-wise, o and down row-wise) and, with vocab_parallel_lm_head, the
LM head over the vocabulary: each TP rank keeps its slice of the logits, and the loss is DeepSpeed's
vocabulary-parallel cross-entropy (no full-logit gather). The input embedding of these untied models stays whole on
every rank (DeepSpeed shards an embedding over the vocabulary only when it is tied to the head). TP groups are
consecutive ranks, DP groups the columns; ZeRO (ZERO_STAGE) shards the optimizer state (1) and gradients (2) over
DP. One TPrimat step is one DeepSpeed step: the trainer marks the last microbatch as the accumulation boundary, and
the schedule's LR is the one DeepSpeed's optimizer reads from its param groups. Every refusal is a SettingsError.
"""

from __future__ import annotations

import math
import os
from collections import Counter

import torch

from train.native import trainer as native_trainer
from utils.machine import compile_aside
from train.common.outcome import SettingsError
from utils.spec import fairness
from utils.spec.request import Request

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def check(req: Request) -> None:
    """What this engine refuses (utils/config/native.py refuses what it can before anything starts)."""
    lay, native, precision = req.parallelism, req.native, req.training.precision
    if lay.pp != 1:
        raise SettingsError(f"PP={lay.pp}: autotp has no pipeline parallelism; give a strategy with PP=1")
    if precision not in DTYPES:
        raise SettingsError(f"PRECISION={precision}: DeepSpeed AutoTP trains bf16 or fp32 here (it has no FP8 "
                            "path); set PRECISION=bf16")
    if native.zero_stage not in (0, 1, 2):
        raise SettingsError(f"ZERO_STAGE={native.zero_stage}: AutoTP runs ZeRO stage 0, 1 or 2")
    if native.zero_stage == 0 and precision == "bf16" and lay.tp > 1:
        # measured on the tiny Llama at TP=2: its gradient norm 2.59 where ZeRO 1/2 and fsdp have 3.13 at step 1, and
        # the losses leave theirs from step 3
        raise SettingsError("ZERO_STAGE=0 with PRECISION=bf16 and TP>1: DeepSpeed's bf16 optimizer without ZeRO "
                            "gets AutoTP's gradient norm (and so its clipping) wrong; set ZERO_STAGE=1 or 2")
    if native.compile or native.sac_every:
        raise SettingsError("COMPILE=1 or SAC_FREQ under autotp: torch.compile and activation checkpointing are "
                            "wired into fsdp only; set COMPILE=0 and clear SAC_FREQ, or run FRAMEWORK=fsdp")


def accelerator(device: torch.device) -> str:
    """DeepSpeed's accelerator for this device (cuda on NVIDIA and ROCm GPUs, cpu here), checked: DS_ACCELERATOR
    comes from utils/machine/platform_env.py (the launch's environment, or train/common/outcome.py's platform_env.apply)."""
    wanted = "cuda" if device.type == "cuda" else "cpu"
    given = os.environ.get("DS_ACCELERATOR", "")
    if given != wanted:
        raise SettingsError(f"DS_ACCELERATOR={given}, but this run trains on {device.type}: set "
                            f"DS_ACCELERATOR={wanted} (or leave it unset)")
    from deepspeed.accelerator import get_accelerator

    chosen = get_accelerator().device_name()
    if chosen != wanted:
        raise SettingsError(f"DeepSpeed chose its '{chosen}' accelerator for a {device.type} run: DeepSpeed was "
                            f"imported before DS_ACCELERATOR={wanted} was set; set it in the launch environment")
    return chosen


def ds_config(req: Request) -> dict:
    """DeepSpeed's configuration of the request: batch, accumulation, clipping, AutoTP, ZeRO, precision, and the
    fairness profile's gradient reduction. Left unset, DeepSpeed 0.19 reduces bf16 gradients in bf16
    (engine.communication_data_type follows the training dtype) and overlaps them only under ZeRO 3
    (zero/config.py's overlap_comm default), whatever the profile says."""
    t, lay, table = req.training, req.parallelism, req.fairness.table
    fp32_reduce = bool(table["grad_reduce_in_fp32"]) or t.precision == "fp32"
    return {
        "train_micro_batch_size_per_gpu": t.mbs, "gradient_accumulation_steps": lay.ga,
        "gradient_clipping": t.grad_clip,
        "tensor_parallel": {"autotp_size": lay.tp, **({"vocab_parallel_lm_head": True} if lay.tp > 1 else {})},
        "zero_optimization": {"stage": req.native.zero_stage, "overlap_comm": bool(table["overlap_grad_reduce"])},
        "communication_data_type": "fp32" if fp32_reduce else "bf16",
        # divide by DP, then sum (megatron-core's average_in_collective=False): ZeRO 1/2's reduce-scatter path does so
        # itself and refuses the option; ZeRO 0's all-reduce would otherwise sum, then divide
        "prescale_gradients": req.native.zero_stage == 0,
        "zero_allow_untested_optimizer": True,  # torch's AdamW in megatron-core's groups (native_trainer.adamw)
        "bf16": {"enabled": t.precision == "bf16"},
        "steps_per_print": 2 ** 31, "wall_clock_breakdown": False,
    }


class AutotpEngine:
    """DeepSpeed's engine around one built Hugging Face causal LM."""

    expert_load = None  # dense models only (its registry entry builds no mixture of experts): no router counts

    def __init__(self, model: torch.nn.Module, req: Request, device: torch.device):
        check(req)
        self.accelerator = accelerator(device)
        import deepspeed
        from deepspeed.utils import groups

        self.request, self.hf_model = req, model
        if "WORLD_SIZE" not in os.environ:  # one process started by hand: DeepSpeed reads what torchrun sets
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
        deepspeed.init_distributed(dist_backend=torch.distributed.get_backend())  # the trainer's process group
        dtype = DTYPES[req.training.precision]
        deepspeed.tp_model_init(model, tp_size=req.parallelism.tp, dtype=dtype)
        compile_aside.deepspeed_muon()  # initialize's optimizer check imports it; AdamW never runs its kernels
        # A callable optimizer: DeepSpeed calls it after AutoTP replaced the layers, so the groups hold the shards.
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=lambda _parameters: native_trainer.adamw(model, req), config=ds_config(req))
        self.dp_group = groups.get_data_parallel_group()
        self.dp_rank, self.dp_size = groups.get_data_parallel_rank(), groups.get_data_parallel_world_size()
        self.tp_size = groups.get_tensor_model_parallel_world_size()
        if self.dp_size * self.tp_size != req.parallelism.num_gpus or self.tp_size != req.parallelism.tp:
            raise SettingsError(f"DeepSpeed built TP={self.tp_size} x DP={self.dp_size}, the request asks TP="
                                f"{req.parallelism.tp} x DP={req.parallelism.dp}")
        head = model.lm_head
        self.vocab_head = head if getattr(head, "is_vocab_parallel_lm_head", False) else None

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.engine(input_ids=batch["tokens"], position_ids=batch["position_ids"], use_cache=False).logits
        if self.vocab_head is None:
            return native_trainer.masked_loss(logits, batch)
        from deepspeed.sequence.cross_entropy import vocab_parallel_cross_entropy

        head = self.vocab_head
        losses = vocab_parallel_cross_entropy(logits.float(), batch["labels"], tp_group=head.mp_group,
                                              vocab_start_index=head.vocab_start_index,
                                              vocab_end_index=head.vocab_end_index,
                                              global_vocab_size=head.vocab_size, reduction="none")
        mask = batch["loss_mask"].float()
        return torch.sum(losses * mask) / mask.sum()

    def backward(self, loss: torch.Tensor, last_microbatch: bool) -> None:
        """DeepSpeed's backward (it divides by GA); its gradient reduction waits for the boundary."""
        self.engine.set_gradient_accumulation_boundary(last_microbatch)
        self.engine.backward(loss)

    def optimizer_step(self) -> float | None:
        """DeepSpeed's step at the boundary: its clipping to GRAD_CLIP (Megatron-LM's rule) and the optimizer at
        the LR the schedule set; DeepSpeed's global gradient norm (over TP and DP)."""
        self.engine.step()
        if not self.engine.was_step_applied():
            raise RuntimeError("DeepSpeed skipped the optimizer step at the accumulation boundary")
        norm = self.engine.get_global_grad_norm()
        return None if norm is None else float(norm)

    def sharded_modules(self) -> dict[str, int]:
        """The module classes AutoTP put in place of the model's layers, and how many of each."""
        return dict(Counter(type(module).__name__ for module in self.hf_model.modules()
                            if type(module).__module__.startswith("deepspeed.")))

    def parameters(self) -> int:
        """The whole model's parameter count: sharded parameters by their logical (unsharded) shape."""
        from deepspeed.checkpoint.constants import DS_AUTOTP_UC_META

        total = 0
        for param in self.hf_model.parameters():
            shape = (getattr(param, DS_AUTOTP_UC_META, None) or {}).get("logical_shape")
            total += math.prod(shape) if shape else param.numel()
        return total

    def read_back(self) -> dict:
        import deepspeed

        engine, req = self.engine, self.request
        return {
            "tp": self.tp_size, "dp": self.dp_size, "pp": 1, "num_gpus": self.tp_size * self.dp_size,
            "sharding": f"zero{engine.zero_optimization_stage()}", "zero_stage": engine.zero_optimization_stage(),
            "autotp_size": engine.autotp_size(), "autotp_modules": self.sharded_modules(),
            "vocab_parallel_lm_head": self.vocab_head is not None,
            "embedding": type(self.hf_model.get_input_embeddings()).__name__,
            "precision": req.training.precision,
            "param_dtype": str(next(self.hf_model.parameters()).dtype).removeprefix("torch."),
            "ds_optimizer": type(engine.optimizer).__name__, **self.reduction(),
            "gradient_accumulation_steps": engine.gradient_accumulation_steps(),
            "ds_grad_clip": engine.gradient_clipping(),
            "parameters": self.parameters(), "compile": False, "compile_mode": None, "checkpointed_layers": [],
            "attn_impl": self.hf_model.config._attn_implementation, "ds_accelerator": self.accelerator,
            "torch_version": torch.__version__, "deepspeed_version": deepspeed.__version__,
        }

    def reduction(self) -> dict:
        """The profile's gradient-reduction settings as the built engine applies them (utils.spec.fairness.FIXED:
        what DeepSpeed has no switch for)."""
        engine, zero = self.engine, self.engine.zero_optimization_stage()
        found = fairness.fixed("deepspeed", *(["deepspeed_zero0"] if zero == 0 else []))
        if zero > 0:
            found["overlap_grad_reduce"] = bool(engine.zero_overlap_comm())
        if self.request.training.precision != "fp32":  # fp32 gradients are reduced in fp32 whatever the profile says
            found["grad_reduce_in_fp32"] = engine.communication_data_type == torch.float32
        found["communication_data_type"] = str(engine.communication_data_type).removeprefix("torch.")
        prescaled = not engine.postscale_gradients() or (zero > 0 and engine.zero_reduce_scatter())
        found["average_in_collective"] = False if prescaled else None
        return found

    def features(self) -> dict:
        return {"attention": self.hf_model.config._attn_implementation, "torch_compile": False,
                "activation_checkpointing": False, "deepspeed_autotp": True,
                "zero": f"ZeRO stage {self.engine.zero_optimization_stage()}",
                "vocab_parallel_loss": self.vocab_head is not None}
