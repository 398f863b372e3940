"""Let megatron-core train on a machine without an accelerator: the CPU stands in for CUDA device 0.

megatron-core (0.12 to 0.19) assumes a CUDA device in a handful of places, listed in
../shared/reference/frameworks.md ("megatron-core on a CPU"):

1. the model-parallel RNG tracker saves, seeds and restores CUDA RNG states;
2. ``torch.cuda.current_device()`` places RoPE frequencies, DDP grad buffers and pipeline buffers;
3. tensors are created with ``device="cuda"`` in the optimizer, gradient clipping and the schedules;
4. gradient clipping and the distributed optimizer assert ``param.type() == "torch.cuda.FloatTensor"``;
5. ``torch.cuda.synchronize()`` / ``set_device()`` / ``empty_cache()`` are called unconditionally;
6. the causal mask built when no attention mask is passed goes to the CUDA device (covered by 2/3);
7. without Apex (which the CPU stack lacks), the local layer spec's norm is megatron-core's torch
   fallback, which refuses sequence parallelism: it becomes torch's norm with its weight marked
   ``sequence_parallel``, as Apex's FusedLayerNorm marks it, so that finalize_model_grads sums the
   weight's gradient over the TP ranks that each normalised a slice of the sequence;
8. megatron-core wraps its fusion kernels in ``torch.compile`` when it is imported, which loads the
   inductor compiler (seconds of start-up per process) for GPU kernels the CPU never runs (every
   fusion is off here): ``torch.compile`` returns the function unchanged instead;
9. megatron-core 0.12's distributed optimizer calls ``fp8_utils.quantize_param_shard`` at every step,
   and without Transformer Engine that function raises even when no parameter is FP8 (0.13+ returns
   when the list is empty). On GPUs TE is present and each of its implementations returns at once for
   an empty list, as TPrimat keeps no FP8 parameters: the CPU gets that same early return, and a call
   with FP8 parameters still reaches megatron-core's own function;
10. megatron-core 0.19's DDP makes ``torch.cuda.current_stream()`` wait for CUDA-graph replay events before
   every gradient reduction, events that only a CUDA graph records: a CPU runs in order, so its current
   stream is one whose waits return at once;
11. megatron-core's all-to-all MoE token dispatcher (0.19) copies its routing counts to the host on a side stream
   of its own (``torch.cuda.Stream()``, entered with ``torch.cuda.stream``) and waits for the copy's event: the
   CPU's side stream is its one in-order stream, whose event is already reached;
12. with expert parallelism that dispatcher hands torch's all_to_all_single its split sizes as the host copies of
   (11), which it turns into lists of numbers only for a CUDA tensor (moe_utils.maybe_move_tensor_to_cpu): the
   CPU's counts stay tensors, which torch refuses as split sizes, so they are given as the lists a GPU gives.

The RNG tracker also warns "CPU RNG state changed within GPU RNG context" whenever it forks: here
the two generators are one, so that is expected, and apply() filters exactly that message, as it filters
megatron-core's import-time warnings that Transformer Engine and Apex are missing (utils/missing_stacks.py).

``apply()`` adapts exactly these and nothing else, and only when torch sees no accelerator: the
CUDA RNG functions use the CPU generator (so the tracker forks the generator the CPU really
draws from), device-placement calls resolve to the CPU, and CPU tensors report CUDA type names.
Everything else in the trainer is the GPU code path, unchanged. The patches act process-wide
and cannot be undone; call ``apply()`` once, before megatron-core is imported.
"""

from __future__ import annotations

import contextlib
import logging

import torch
from torch.overrides import TorchFunctionMode

from utils import missing_stacks
from utils.machine import compile_aside

_applied = False


def needed() -> bool:
    """True on a machine where torch has no CUDA/ROCm device."""
    return not torch.cuda.is_available()


def _is_cuda(device: object) -> bool:
    """A device argument that means the (absent) CUDA device: "cuda", "cuda:0", 0, torch.device("cuda")."""
    if isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True  # a bare index means the current accelerator
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, torch.device) and device.type == "cuda"


class _CudaIsCpu(TorchFunctionMode):
    """Resolve CUDA placement to the CPU and give CPU tensors CUDA type names (assumptions 2-4), and the
    all-to-all's split sizes as numbers (12)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False  # pinned host memory needs an accelerator
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.to and len(args) > 1 and _is_cuda(args[1]):
            args = (args[0], "cpu", *args[2:])
        if func is torch.distributed.all_to_all_single:
            kwargs.update({key: sizes.tolist() for key in ("output_split_sizes", "input_split_sizes")
                           if torch.is_tensor(sizes := kwargs.get(key))})
        result = func(*args, **kwargs)
        if func is torch.Tensor.type and len(args) == 1 and not kwargs and result.startswith("torch."):
            return "torch.cuda." + result[len("torch."):]
        return result


class InOrder:
    """The CPU's one stream: work runs in program order, so a wait has nothing to wait for (10). One instance: a
    stream made (11) is that one. A class, as torch.cuda.Stream is: modules imported later annotate with
    `torch.cuda.Stream | None`, which a function would break."""

    _the_one: "InOrder | None" = None

    def __new__(cls, *_args, **_kwargs) -> "InOrder":
        if cls._the_one is None:
            cls._the_one = super().__new__(cls)
        return cls._the_one

    def wait_event(self, _event) -> None:
        return None

    def wait_stream(self, _stream) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def record_event(self, _event=None) -> "InOrder":
        return self  # an event of the one stream: reached when recorded (11)


def _cpu_rng_state(*_args, **_kwargs) -> torch.Tensor:
    return torch.get_rng_state()


def _set_cpu_rng_state(state: torch.Tensor, *_args, **_kwargs) -> None:
    torch.set_rng_state(state)


def _stand_in(name: str, body):
    """A distinct function per patched name: torch.compile's rule table rejects one object under two names."""
    def stand_in(*args, **kwargs):
        return body(*args, **kwargs)
    stand_in.__name__ = stand_in.__qualname__ = f"cpu_{name}"
    return stand_in


def _sequence_parallel_torch_norm(_cls, config, hidden_size: int, eps: float = 1e-5, **_unused):
    """megatron-core's WrappedTorchNorm, with sequence parallelism handled as Apex's norm handles it (7)."""
    norm_class = {"RMSNorm": torch.nn.RMSNorm, "LayerNorm": torch.nn.LayerNorm}[config.normalization]
    norm = norm_class(hidden_size, eps=eps)
    for param in norm.parameters():
        param.sequence_parallel = config.sequence_parallel
    return norm


def _skip_without_fp8_params(quantize):
    """quantize_param_shard returning at once for an empty list of FP8 parameters, as TE's versions do (9)."""
    def quantize_param_shard(model_params, *args, **kwargs):
        if len(model_params) == 0:
            return None
        return quantize(model_params, *args, **kwargs)
    return quantize_param_shard


def quiet(platform: str) -> None:
    """On the CPU platform, ignore megatron-core's warnings that Transformer Engine and Apex are missing, which
    train.matrix says once (utils/missing_stacks.py); on a GPU platform nothing: a missing library there is news."""
    if platform == "cpu":
        missing_stacks.silence()


def apply() -> None:
    """Install the adaptations when no accelerator is present (once per process)."""
    global _applied
    if _applied or not needed():
        return
    missing_stacks.silence()  # megatron-core's Transformer Engine and Apex warnings, said once by train.matrix
    torch.compile = compile_aside.unchanged  # 8. first: megatron-core applies it while being imported
    from megatron.core.optimizer import distrib_optimizer
    from megatron.core.tensor_parallel import random as megatron_random
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    # 1. RNG: the tracker's CUDA states become CPU generator states.
    for module in (torch.cuda, torch.cuda.random):
        module.get_rng_state = _stand_in("get_rng_state", _cpu_rng_state)
        module.set_rng_state = _stand_in("set_rng_state", _set_cpu_rng_state)
        module.manual_seed = _stand_in("manual_seed", torch.default_generator.manual_seed)
        module.manual_seed_all = _stand_in("manual_seed_all", torch.default_generator.manual_seed)
    megatron_random._get_cuda_rng_state = _stand_in("megatron_get_rng_state", _cpu_rng_state)
    megatron_random._set_cuda_rng_state = _stand_in("megatron_set_rng_state", _set_cpu_rng_state)
    logging.getLogger(megatron_random.__name__).addFilter(
        lambda record: record.getMessage() != "CPU RNG state changed within GPU RNG context")
    # 2. and 5. device queries and device-wide calls.
    torch.cuda.current_device = _stand_in("current_device", lambda: 0)
    for name in ("set_device", "synchronize", "empty_cache"):
        setattr(torch.cuda, name, _stand_in(name, lambda *args, **kwargs: None))
    in_order = InOrder()
    torch.cuda.current_stream = _stand_in("current_stream", lambda *args, **kwargs: in_order)  # 10.
    torch.cuda.Stream = InOrder  # 11.
    torch.cuda.stream = _stand_in("stream", lambda *args, **kwargs: contextlib.nullcontext())
    # 7. sequence parallelism with torch's norm (the local spec without Apex).
    WrappedTorchNorm.__new__ = _sequence_parallel_torch_norm
    # 9. no FP8 parameter, nothing to quantize (megatron-core 0.12 without TE raises instead).
    distrib_optimizer.quantize_param_shard = _skip_without_fp8_params(distrib_optimizer.quantize_param_shard)
    # 3. and 4. tensor placement and type names, for every torch call from here on.
    _CudaIsCpu().__enter__()
    _applied = True
