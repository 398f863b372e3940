"""The frameworks TPrimat runs: the one table of what each one is and where it runs.

The configuration (which frameworks a platform runs, and the counterpart FRAMEWORK=nemo maps to on AMD), the
fairness workload (its LR warm-up convention), the launcher (whether its stack is checked from this Python) and
the judge (whether its trainer writes result.json or the log is extracted) all read this table. A new framework
is one entry here, one command function in train/launch/command.py, its trainer, and its
train/train_<platform>_<framework>_<model>.sh wrappers (docs/ARCHITECTURE.md lists them).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    name: str  # FRAMEWORK's value and the run directory's first word
    platforms: tuple[str, ...]  # where it runs
    warmup_convention: str  # its LR warm-up (utils.spec.fairness.WORKLOAD's lr_warmup_convention)
    writes_result: bool  # its trainer writes result.json itself; otherwise evaluate.judge extracts it from the log
    in_this_python: bool  # its trainer runs under this Python's torchrun, so the launcher checks that stack here
    memory_model: str = "megatron"  # how it lays memory out: a key of utils.predict.memory.MEMORY_MODELS


TABLE = {spec.name: spec for spec in (
    Framework("mega", ("amd", "nvd", "cpu"), "megatron", writes_result=True, in_this_python=True),
    Framework("prim", ("amd",), "megatron", writes_result=False, in_this_python=False),  # Primus's own launcher
    Framework("nemo", ("nvd",), "nemo-cosine-annealing", writes_result=False, in_this_python=True),
    # Torch-native: Hugging Face models on plain PyTorch (FSDP2 + DTensor TP, or DDP) and DeepSpeed AutoTP, with
    # Megatron-LM's LR schedule implemented by TPrimat (train/native/trainer.py); both run unchanged everywhere.
    Framework("fsdp", ("amd", "nvd", "cpu"), "megatron", writes_result=True, in_this_python=True,
              memory_model="fsdp"),
    Framework("autotp", ("amd", "nvd", "cpu"), "megatron", writes_result=True, in_this_python=True,
              memory_model="autotp"),
)}
NAMES = tuple(TABLE)
NATIVE = ("fsdp", "autotp")  # no pipeline parallelism: a PP > 1 layout skips them (train.plan)


def on(platform: str) -> tuple[str, ...]:
    """The frameworks one platform runs, in the table's order."""
    return tuple(name for name, spec in TABLE.items() if platform in spec.platforms)


def torch_native(name: str) -> bool:
    """Whether a framework is one of the torch-native ones, whose own knobs (COMPILE, SAC_FREQ, ...) apply to it."""
    return name in NATIVE


def vendor_framework(platform: str) -> str | None:
    """The framework only this platform's vendor ships (nemo on nvd, prim on amd), or None."""
    return next((name for name, spec in TABLE.items() if spec.platforms == (platform,)), None)
