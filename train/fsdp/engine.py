"""The fsdp framework's Engine (train/native/engine.py): FSDP2 with DTensor tensor parallelism, or DDP.

The ranks form a 2D mesh (dp, tp), row-major: TP groups are consecutive ranks ({0,1},{2,3} at TP=2), DP groups
the columns. With TP > 1 the model gets torchtitan's plan (torchtitan/models/llama3/infra/parallelize.py's apply_tp)
under Hugging Face's module names (tp_plan): the embedding row-wise over the vocabulary with its output sharded
over the sequence, every norm sequence-parallel, attention and MLP all-gathering their input, q, k, v, gate, up
column-wise, o and down row-wise with a reduce-scatter back to the sequence shards, and the LM head column-wise
with its logits left sharded over the vocabulary for the loss (loss parallel: forward and backward inside
torch's loss_parallel()). Then FP8 (torchao), torch.compile per layer, selective activation checkpointing of every
N-th layer around the compiled layer (the other way round, torch 2.13 fails under TP: the compiled checkpointed
region saves a DeviceMesh for backward), and FSDP2's fully_shard per layer and on the root over the dp mesh with
the run's mixed precision. DATA_PARALLEL=ddp replicates the model with torch's DistributedDataParallel instead
(TP=1 only). Every refusal is a SettingsError (exit 2).
"""

from __future__ import annotations

import importlib.util
from contextlib import nullcontext

import torch

from train.common.expert_load import ExpertLoad
from train.native import moe as native_moe
from train.native import tensor_parallel
from train.native import trainer as native_trainer
from train.common.outcome import SettingsError
from utils.frameworks import TABLE
from utils.spec import fairness
from utils.spec.request import Request

DTYPES = {"bf16": torch.bfloat16, "fp8": torch.bfloat16, "fp32": torch.float32}


def check(req: Request, device: torch.device) -> None:
    """The combinations this engine refuses (utils/config/native.py refuses them before anything starts: this
    is the trainer's own guard)."""
    lay, native, precision = req.parallelism, req.native, req.training.precision
    if lay.pp != 1:
        raise SettingsError(f"PP={lay.pp}: fsdp has no pipeline parallelism; give a strategy with PP=1")
    if native.data_parallel == "ddp" and lay.tp != 1:
        raise SettingsError(f"DATA_PARALLEL=ddp with TP={lay.tp}: DDP replicates whole models; set "
                            "DATA_PARALLEL=fsdp or TP=1")
    if why := TABLE["fsdp"].tp_refusal({"ATTN_IMPL": native.attn_impl, "COMPILE": native.compile}, lay.tp):
        raise SettingsError(why)  # the plan skips such a run (train.plan.skip_reason): this is the trainer's guard
    if req.model.moe is not None and (lay.tp != 1 or precision == "fp8"):
        raise SettingsError(f"{req.model.key} (mixture of experts) at TP={lay.tp} in {precision}: fsdp builds its "
                            "experts at TP=1 in bf16 or fp32 (torchao's float8 converts no expert); set TP=1 and "
                            "PRECISION=bf16")
    if native.sac_every and (native.data_parallel != "fsdp" or precision == "fp8"):
        raise SettingsError("SAC_FREQ needs DATA_PARALLEL=fsdp and a precision other than fp8; clear SAC_FREQ")
    if precision == "fp8":
        if device.type != "cuda":
            raise SettingsError("PRECISION=fp8 needs a GPU; the CPU trains bf16 or fp32")
        if importlib.util.find_spec("torchao") is None:
            raise SettingsError("PRECISION=fp8 under fsdp needs torchao's float8 training (pip install torchao); "
                                "Transformer Engine is not wired into fsdp; or set PRECISION=bf16")


def by_mesh(parameters: list[torch.nn.Parameter]) -> list[list[torch.Tensor]]:
    """The gradients grouped by the mesh they live on (FSDP2 shards the TP layers' over (dp, tp), the rest over
    dp; DDP's are plain tensors): DTensor operations never mix meshes."""
    from torch.distributed.tensor import DTensor

    groups: dict = {}
    for param in parameters:
        if param.grad is not None:
            key = param.grad.device_mesh if isinstance(param.grad, DTensor) else None
            groups.setdefault(key, []).append(param.grad)
    return list(groups.values())


def grad_norm(groups: list[list[torch.Tensor]]) -> float:
    """The global L2 norm of the gradients: one reduction per mesh (a DTensor's squared sum is a partial value
    over its mesh, completed by full_tensor)."""
    total = 0.0
    for grads in groups:
        squares = torch.stack([grad.float().pow(2).sum() for grad in grads]).sum()
        total += float(squares.full_tensor() if hasattr(squares, "full_tensor") else squares)
    return total ** 0.5


def bf16_all_reduce(group, bucket):  # no return annotation: DDP checks it, and this module's are strings
    """DDP's gradient bucket averaged in bf16 (torch's own bf16 hook refuses gloo): cast, all-reduce, cast back."""
    buffer = bucket.buffer()
    reduced = buffer.to(torch.bfloat16).div_(torch.distributed.get_world_size(group))
    future = torch.distributed.all_reduce(reduced, group=group, async_op=True).get_future()

    def back(done: torch.futures.Future) -> torch.Tensor:
        buffer.copy_(done.value()[0])
        return buffer

    return future.then(back)


class FsdpEngine:
    """FSDP2 (+ DTensor TP) or DDP around one built Hugging Face causal LM."""

    def __init__(self, model: torch.nn.Module, req: Request, device: torch.device):
        from torch.distributed.device_mesh import init_device_mesh

        check(req, device)
        lay, native, precision = req.parallelism, req.native, req.training.precision
        self.request, self.device, self.ga = req, device, lay.ga
        self.mesh = init_device_mesh(device.type, (lay.dp, lay.tp), mesh_dim_names=("dp", "tp"))
        self.dp_group = self.mesh["dp"].get_group()
        self.dp_rank, self.dp_size = self.mesh["dp"].get_local_rank(), lay.dp
        self.param_dtype = DTYPES[precision]
        table_fp32 = bool(req.fairness.table["grad_reduce_in_fp32"])
        self.reduce_dtype = torch.float32 if table_fp32 or precision == "fp32" else torch.bfloat16
        self.float8 = precision == "fp8"
        layers = model.model.layers
        if self.float8:
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training

            # FP8_RECIPE's torchao name: fsdp's entry has "tensorwise" only (the plan skips the others)
            recipe = Float8LinearConfig.from_recipe_name(str(req.fairness.table["fp8_recipe"]))
            convert_to_float8_training(model, config=recipe, module_filter_fn=lambda module, name: name != "lm_head")
        # sequence and loss parallelism with TP, as every framework (utils.spec.fairness.sequence_parallel)
        self.head_rows = tensor_parallel.apply(model, self.mesh["tp"], self.float8) if lay.tp > 1 else None
        if native.compile:
            for layer in layers:
                layer.compile(mode=native.compile_mode)
        self.checkpointed = [index for index in range(len(layers))
                             if native.sac_every and (index + 1) % native.sac_every == 0]
        if self.checkpointed:
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

            for index in self.checkpointed:
                layers[index] = checkpoint_wrapper(layers[index])
        self.fsdp = native.data_parallel == "fsdp"
        self.moe, self.router_dtype = req.model.moe is not None, torch.float32  # the model's own weights: fp32
        self.expert_load = ExpertLoad(req.model.num_layers, req.model.moe.num_experts, device) if self.moe else None
        for router in native_moe.routers(model):
            native_moe.router_in_fp32(router)
        if self.fsdp:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            policy = MixedPrecisionPolicy(param_dtype=self.param_dtype, reduce_dtype=self.reduce_dtype)
            router_policy = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
            for router in native_moe.routers(model):  # a unit of its own, computed and reduced in fp32
                fully_shard(router, mesh=self.mesh["dp"], mp_policy=router_policy, reshard_after_forward=True)
                self.router_dtype = router_policy.param_dtype
            for layer in layers:
                fully_shard(layer, mesh=self.mesh["dp"], mp_policy=policy, reshard_after_forward=True)
            fully_shard(model, mesh=self.mesh["dp"], mp_policy=policy, reshard_after_forward=True)
            self.model = model
        else:
            self.model = self._ddp(model)
        self.hf_model = model
        self.optimizer = native_trainer.adamw(model, req)
        self.parameters = [param for param in model.parameters() if param.requires_grad]

    def _ddp(self, model: torch.nn.Module) -> torch.nn.Module:
        """torch's DDP; gradients reduced in bf16 (a compression hook) where the profile reduces in bf16."""
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(model, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                                      process_group=self.dp_group)
        if self.reduce_dtype == torch.bfloat16:
            ddp.register_comm_hook(self.dp_group, bf16_all_reduce)
        return ddp

    def _autocast(self):
        """DDP keeps fp32 weights and computes in bf16 under autocast (FSDP2 casts through its policy)."""
        if self.fsdp or self.param_dtype == torch.float32:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.param_dtype)

    def _loss_parallel(self):
        """torch's loss_parallel() where the logits stay sharded over the vocabulary (TP > 1): the cross-entropy and
        its backward over the shards, no rank holding the whole logits."""
        if self.head_rows is None:
            return nullcontext()
        from torch.distributed.tensor.parallel import loss_parallel

        return loss_parallel()

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The full position_ids always: under sequence parallelism Hugging Face would otherwise number the
        positions from the embedding's sequence shard (train/native/tensor_parallel.py)."""
        with self._autocast():
            outputs = self.model(input_ids=batch["tokens"], position_ids=batch["position_ids"], use_cache=False,
                                 **({"output_router_logits": True} if self.moe else {}))
        with self._loss_parallel():
            loss = native_trainer.masked_loss(outputs.logits, batch)
        if not self.moe:
            return loss
        aux_loss = native_moe.load_balancing_loss(outputs.router_logits, self.hf_model.config)
        if self.hf_model.training:
            native_moe.count_choices(outputs.router_logits, self.hf_model.config, self.expert_load)
        return native_moe.with_aux_gradient(loss, aux_loss)

    def backward(self, loss: torch.Tensor, last_microbatch: bool) -> None:
        if self.fsdp:
            self.model.set_requires_gradient_sync(last_microbatch)
            with self._loss_parallel():
                (loss / self.ga).backward()
            return
        with nullcontext() if last_microbatch else self.model.no_sync():
            (loss / self.ga).backward()

    def optimizer_step(self) -> float | None:
        """Megatron-LM's clipping (scale by GRAD_CLIP / (norm + 1e-6) when below 1), then AdamW."""
        groups = by_mesh(self.parameters)
        norm = grad_norm(groups)
        clip = self.request.training.grad_clip
        if clip > 0 and clip / (norm + 1e-6) < 1.0:
            for grads in groups:
                torch._foreach_mul_(grads, clip / (norm + 1e-6))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def read_back(self) -> dict:
        """The wrapped model as built: sharding, mesh, precision, compile and checkpointing state."""
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

        layers = list(self.hf_model.model.layers)
        native = self.request.native
        return {
            "tp": self.mesh["tp"].size(), "dp": self.mesh["dp"].size(), "pp": 1,
            "num_gpus": self.mesh.size(), "mesh": {"shape": list(self.mesh.shape), "dims": ["dp", "tp"],
                                                   "device_type": self.mesh.device_type},
            "tp_plan": tensor_parallel.description(self.float8) if self.head_rows is not None else {},
            "sequence_parallel": self.head_rows is not None, "loss_parallel": self.head_rows is not None,
            "lm_head_vocab_rows": self.head_rows or self.hf_model.lm_head.weight.shape[0],
            "sharding": "fsdp2" if self.fsdp else "ddp", "data_parallel": native.data_parallel,
            "reshard_after_forward": True if self.fsdp else None,
            "precision": self.request.training.precision if not self.float8 else "fp8",
            "param_dtype": str(self.param_dtype).removeprefix("torch."),
            "reduce_dtype": str(self.reduce_dtype).removeprefix("torch."),
            # the profile's choice where it decides something: fp32 training reduces in fp32 whatever it says
            "grad_reduce_in_fp32": self.reduce_dtype == torch.float32 if self.param_dtype != torch.float32 else None,
            # what FSDP2 (or DDP) always does with the profile's overlap and averaging, and torchao's FP8 scaling
            **fairness.fixed("fsdp2" if self.fsdp else "ddp", *(["torchao_float8"] if self.float8 else [])),
            "float8_linears": sum(type(m).__name__ == "Float8Linear" for m in self.hf_model.modules()),
            "parameters": sum(param.numel() for param in self.hf_model.parameters()),
            "compile": all(getattr(getattr(layer, "_checkpoint_wrapped_module", layer), "_compiled_call_impl", None)
                           is not None for layer in layers),
            "compile_mode": native.compile_mode if native.compile else None,
            "checkpointed_layers": [i for i, layer in enumerate(layers) if isinstance(layer, CheckpointWrapper)],
            "attn_impl": self.hf_model.config._attn_implementation,
            **native_moe.read_back(self.hf_model, self.router_dtype),
            "torch_version": torch.__version__,
        }

    def features(self) -> dict:
        native = self.request.native
        return {"attention": self.hf_model.config._attn_implementation,
                "torch_compile": native.compile_mode if native.compile else False,
                "activation_checkpointing": f"every {native.sac_every} layers" if self.checkpointed else False,
                "fsdp2": self.fsdp, "float8": "torchao" if self.float8 else False}
