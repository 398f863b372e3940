"""A stack's modules imported with torch.compile standing aside, where they compile kernels the importer never runs.

Two stacks wrap kernels in torch.compile as their modules are imported, and the first torch.compile call imports
TorchDynamo and Inductor: 1.4 to 2.3 s of each process's start on a 2-core machine, in each worker of every run.
- megatron-core wraps its fusion kernels (megatron/core/jit.py; the fact mcore-jit-fuser-is-torch-compile in
  utils/upstream/table.py). The fsdp and autotp trainers and data.verify import it for GPTDataset and the LR
  schedule only (`megatron_core`).
- DeepSpeed's ZeRO checks every optimizer against its Muon optimizer, imported for the check, whose kernels are wrapped
  as the module is imported (the facts deepspeed-zero-check-imports-muon and deepspeed-compile-is-torch-compile).
  autotp's optimizer is torch's AdamW (`deepspeed_muon`).
While those modules are imported, torch.compile hands each function back unchanged (`unchanged`), and it is put back
after: the importer's own torch.compile calls still compile. A module already imported is left as whoever imported it
chose. The trainers that run megatron-core's model (mega, mbridge, nemo) never come here: they import it themselves,
and on the CPU train/common/cpu_compat.py stands `unchanged` in for torch.compile for mega, whose fusions are all off
there. Standard library only at import: torch is imported when called.
"""

from __future__ import annotations

import importlib
import sys


def unchanged(model=None, **_options):
    """torch.compile's signature, compiling nothing: the function itself, or as a decorator (with or without
    options) one that returns it."""
    return model if model is not None else (lambda function: function)


def imported(*modules: str) -> None:
    """Import each module not yet imported with torch.compile standing aside."""
    missing = [name for name in modules if name not in sys.modules]
    if not missing:
        return
    import torch

    compile_ = torch.compile
    torch.compile = unchanged
    try:
        for name in missing:
            importlib.import_module(name)
    finally:
        torch.compile = compile_


def megatron_core() -> None:
    """megatron-core for its data pipeline and LR schedule: its fusion kernels stay plain functions."""
    imported("megatron.core")


def deepspeed_muon() -> None:
    """DeepSpeed's Muon optimizer module, which its ZeRO optimizer check imports: its kernels stay plain functions."""
    imported("deepspeed.runtime.zero.muon.muon_optimizer")
