"""megatron-core imported for its data pipeline and learning-rate schedule alone, without torch's compiler.

As it is imported, megatron-core wraps its fusion kernels in torch.compile (megatron/core/jit.py, the fact
mcore-jit-fuser-is-torch-compile in utils/upstream/table.py), and the first torch.compile call imports TorchDynamo
and Inductor: 1.4 to 2.3 s of every process's start on a 2-core machine, paid by each worker of every run. The fsdp
and autotp trainers and data.verify use megatron-core's GPTDataset and OptimizerParamScheduler only and never call
those kernels, so while they import megatron-core torch.compile hands each function back unchanged (`unchanged`),
and torch.compile is restored after: their own torch.compile calls still compile. megatron-core's jit_fuser keeps
the stand-in, so its modules imported later wrap nothing either. The trainers that run megatron-core's model (mega,
mbridge, nemo) never come here: they import it themselves, and on the CPU train/common/cpu_compat.py makes the same
choice for mega, whose fusions are all off there. Standard library only at import: torch is imported when called.
"""

from __future__ import annotations

import sys


def unchanged(model=None, **_options):
    """torch.compile's signature, compiling nothing: the function itself, or as a decorator (with or without
    options) one that returns it."""
    return model if model is not None else (lambda function: function)


def for_data() -> None:
    """Import megatron-core with torch.compile standing aside; nothing when it is already imported (its kernels are
    then wrapped as whoever imported it chose)."""
    if "megatron.core" in sys.modules:
        return
    import torch

    compile_ = torch.compile
    torch.compile = unchanged
    try:
        import megatron.core  # noqa: F401
    finally:
        torch.compile = compile_
