"""The seam between the torch-native trainer's loop and one parallel implementation of it.

train/native/trainer.py owns everything the torch-native frameworks share: the request, the data (megatron-core's
GPTDataset in Megatron-LM's sample order, train/common/megatron_data.py), the Hugging Face model built from the spec
(train/native/model.py), Megatron-LM's LR schedule, the step loop, its timing and forward/backward/optimizer
breakdown, the step records and the result. An Engine is what differs: how the model is spread over the ranks and
how a gradient becomes an update. fsdp's engine is FSDP2 + DTensor TP or DDP (train/fsdp/engine.py), autotp's
DeepSpeed's AutoTP engine (train/autotp/engine.py).

A framework gives native_trainer.NativeTrainer a `make_engine(model, request, device) -> Engine`: it wraps the
built model (the same fp32 weights on every rank) and builds its optimizer, whose param_groups megatron-core's
OptimizerParamScheduler then drives (the schedule is megatron-core's own code, as mega's).
"""

from __future__ import annotations

from typing import Protocol

import torch

from train.common.expert_load import ExpertLoad


class Engine(Protocol):
    """One framework's parallel training of an already built model, on every rank."""

    optimizer: torch.optim.Optimizer  # its param_groups carry lr and weight_decay, set by the trainer's schedule
    dp_group: object  # the process group the loss is averaged over (this rank's data-parallel replicas)
    dp_rank: int  # which DP replica this rank is: it reads that replica's microbatches
    dp_size: int
    hf_model: torch.nn.Module  # the Hugging Face model inside the wrapping: eval() and train() around an evaluation
    expert_load: ExpertLoad | None  # a MoE model's router counts of the step (train/common/expert_load.py); None: dense

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """One microbatch (train/common/megatron_data.BATCH_KEYS) through the model: the mean loss over the unmasked
        tokens of this rank's samples, a float32 scalar that backward() accepts (train.native.trainer.masked_loss)."""

    def backward(self, loss: torch.Tensor, last_microbatch: bool) -> None:
        """Gradients of one microbatch's loss, divided by GA; gradient synchronisation may wait for the last."""

    def optimizer_step(self) -> float | None:
        """Clip to the request's GRAD_CLIP, step the optimizer at its param_groups' learning rate, zero the
        gradients; the gradient norm before clipping (None where the engine does not report it)."""

    def read_back(self) -> dict:
        """The effective settings of the built, wrapped model for the result's `effective`: parameter count,
        sharding, mesh, compile and checkpointing state, and anything else the engine decided."""

    def features(self) -> dict:
        """The result's `features`: attention implementation, compile, checkpointing, fused kernels -> on/off/name."""
