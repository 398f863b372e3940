"""What the memory and time models read of one planned run (Layout: a request's layout, precision and framework
settings, and the framework's memory model), and a moment of a step (Moment: the bytes of each part alive then).
Standard library only, as all of utils/predict/ (the plan runs it before any environment exists)."""

from __future__ import annotations

from dataclasses import dataclass, field

from utils import frameworks
from utils.config.native import SHARDED
from utils.spec.precision import DEFAULT_FP8_RECIPE, LOW

GIB = 2 ** 30
# Every precision below 16 bits trains from bf16 weights, its activations counted as bf16; what it keeps beyond them
# (the quantized weight copies) is utils.spec.precision.weight_copy_bytes
DTYPE_BYTES = {"bf16": 2, "fp32": 4, **{name: 2 for name in LOW}}
PHASES = ("forward-backward", "optimizer step")  # a moment's phase: before the optimizer step, or in it


@dataclass(frozen=True, kw_only=True)
class Layout:
    """What the memory of one rank depends on, read from a run's request.

    memory_model is a key of utils.predict.memory.MEMORY_MODELS (the framework registry's Framework.memory_model);
    a Layout given only the framework's name takes its registry entry's."""

    memory_model: str = ""
    framework: str = ""  # the framework's name, when known (messages only)
    tp: int
    pp: int
    dp: int
    ga: int
    ep: int = 1  # expert parallelism: a rank holds experts / EP of a MoE model's routed experts (megatron-core's)
    mbs: int
    seq_len: int
    precision: str  # one of utils.spec.precision.PRECISIONS
    fp8_recipe: str = DEFAULT_FP8_RECIPE  # FP8_RECIPE, with precision fp8
    grad_fp32: bool  # gradients reduced (and kept) in fp32: the profile's grad_reduce_in_fp32, or fp32 training
    distributed_optimizer: bool
    overlap_grad_reduce: bool
    data_parallel: str = SHARDED  # DATA_PARALLEL (utils.config.native): fsdp | ddp
    sac_every: int = 0  # fsdp: every N-th layer checkpointed (full recomputation of that layer); 0: none
    zero_stage: int = 1  # autotp's ZeRO stage
    fused_swiglu: bool = True  # megatron on a GPU: the profile's bias_swiglu_fusion (none on the CPU)
    # megatron on a GPU: megatron-core's FusedAdam (Transformer Engine's or Apex's); False where it fell back to
    # torch's AdamW, neither being installed (read back from the run: features.optimizer_fusion)
    fused_optimizer: bool = True
    on_gpu: bool = True
    synced_microbatches: bool = False  # fsdp2: the registry entry's (a Layout given the framework takes it)

    def __post_init__(self) -> None:
        if self.framework:
            object.__setattr__(self, "synced_microbatches", frameworks.TABLE[self.framework].synced_microbatches)
        if not self.memory_model:
            if not self.framework:
                raise ValueError("Layout needs memory_model (or the framework whose registry entry names it)")
            object.__setattr__(self, "memory_model", frameworks.TABLE[self.framework].memory_model)
        if self.memory_model not in frameworks.MEMORY_MODELS:
            raise ValueError(f"memory model {self.memory_model!r} is not one of "
                             f"{', '.join(frameworks.MEMORY_MODELS)}")

    @property
    def width(self) -> int:
        """Bytes of one element of the compute dtype."""
        return DTYPE_BYTES[self.precision]

    @property
    def tokens(self) -> int:
        """Tokens of one microbatch."""
        return self.mbs * self.seq_len


@dataclass(frozen=True)
class Moment:
    """One moment of a step on one stage: its phase and the bytes of each part alive then."""

    phase: str
    parts: dict[str, int] = field(default_factory=dict)
    name: str = ""  # what the moment is, where a measurement looks for it (memory.DISPATCH)

    @property
    def total(self) -> int:
        return sum(self.parts.values())
