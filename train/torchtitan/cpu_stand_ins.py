"""What stands in for torchtitan 0.3.0's GPU-only parts on the CPU, applied inside torchtitan's process before its
entry point runs (train/torchtitan/on_cpu.py) and only there: everything else (its config manager, model, FSDP2,
loss, optimizer, LR schedule and loop) runs as on a GPU.

Each stand-in replaces one part, named by its file and line in torchtitan 0.3.0 (utils/upstream/table.py holds the
lines; tests/test_train_torchtitan_cpu.py trains through them):

- torchtitan/tools/utils.py:55 (get_device_info): without an accelerator it picks "cuda", and the trainer then
  sets that device and starts NCCL on it. Here torch's device probe answers "cpu" before torchtitan is imported, so
  its device is the CPU and its backend gloo (distributed/utils.py picks the device's default backend).
- torchtitan/components/metrics.py:95 (build_device_memory_monitor): builds a monitor of the device's memory
  statistics, which the CPU has none of. Here a monitor that reports every figure as not a number: torchtitan's
  metrics line then prints "memory: nanGiB(nan%)", which TPrimat's log format reads as no figure (memory not
  measured, never 0); TPrimat's own TPRIMAT_STEP line has no peaks on the CPU either.
- torchtitan/distributed/utils.py:586-587 (set_pg_timeouts, after the first step): a barrier with
  device_ids=[current device], which gloo refuses. Here the same call with the barrier's device_ids left out.
- torchtitan/distributed/fsdp.py:41 (disable_fsdp_gradient_division): a gradient divide factor of 1.0 makes FSDP2
  reduce-scatter with PREMUL_SUM, which gloo refuses with 2 or more ranks. Here each FSDP module then also reduces
  with plain SUM (FSDPModule.set_force_sum_reduction_for_comms): a pre-multiplication by 1.0 is the same arithmetic.

Attention is not a stand-in but a setting (train/torchtitan/settings.py, "attention"): FlexAttention has no CPU
backward, so a CPU run's layers use torchtitan's own ScaledDotProductAttention.
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Iterator

import torch

# (torchtitan 0.3.0 path, first line, last line, what stands in): docs/frameworks.md and the upstream facts name them
STAND_INS = (
    ("torchtitan/tools/utils.py", 55, 55, "the device probe answers cpu"),
    ("torchtitan/components/metrics.py", 95, 95, "a memory monitor that measures nothing"),
    ("torchtitan/distributed/utils.py", 586, 587, "the barrier without device_ids"),
    ("torchtitan/distributed/fsdp.py", 41, 41, "SUM instead of PREMUL_SUM(1.0)"),
)
NOT_MEASURED = math.nan  # what the memory monitor reports: no figure, which the log format leaves out


def pick_the_cpu() -> None:
    """tools/utils.py:55: torch's probe of an accelerator answers "cpu" (before torchtitan is imported: its modules
    copy the device type and module when they are first imported)."""
    torch._utils._get_available_device_type = lambda: "cpu"


class UnmeasuredMemory:
    """metrics.py:95's monitor on the CPU: every peak not a number, nothing to reset."""

    device_name = "cpu"
    device_capacity_gib = NOT_MEASURED

    def __init__(self, stats: type) -> None:
        self.stats = stats

    def get_peak_stats(self):
        return self.stats(*(NOT_MEASURED,) * 4, 0, 0)

    def reset_peak_stats(self) -> None:
        pass


@contextlib.contextmanager
def barrier_without_device_ids() -> Iterator[None]:
    """torch.distributed.barrier with device_ids dropped, for one call (gloo takes none)."""
    barrier = torch.distributed.barrier

    def plain(*args, device_ids=None, **kwargs):
        return barrier(*args, **kwargs)

    torch.distributed.barrier = plain
    try:
        yield
    finally:
        torch.distributed.barrier = barrier


def without_device_ids(set_pg_timeouts: Callable) -> Callable:
    """distributed/utils.py:586-587: torchtitan's set_pg_timeouts, its barrier without device_ids."""
    def cpu_set_pg_timeouts(*args, **kwargs):
        with barrier_without_device_ids():
            return set_pg_timeouts(*args, **kwargs)
    return cpu_set_pg_timeouts


def summing(disable_division: Callable) -> Callable:
    """distributed/fsdp.py:41: torchtitan's gradient division turned off, then every FSDP module reducing with SUM."""
    from torch.distributed.fsdp import FSDPModule

    def cpu_disable_division(model: torch.nn.Module) -> None:
        disable_division(model)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(True)
    return cpu_disable_division


def apply() -> None:
    """Every stand-in, in torchtitan's process, before torchtitan.train is imported."""
    pick_the_cpu()
    import torchtitan.components.metrics as metrics
    import torchtitan.distributed.fsdp as fsdp
    import torchtitan.distributed.utils as distributed_utils

    metrics.build_device_memory_monitor = lambda: UnmeasuredMemory(metrics.DeviceMemStats)
    distributed_utils.set_pg_timeouts = without_device_ids(distributed_utils.set_pg_timeouts)
    fsdp.disable_fsdp_gradient_division = summing(fsdp.disable_fsdp_gradient_division)
