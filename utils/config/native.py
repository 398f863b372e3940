"""The torch-native frameworks' own knobs (config.env's Torch-native section: fsdp, autotp and torchtitan) and the
compatibility rules between them, enforced before anything starts (what only autotp cannot do, COMPILE and
SAC_FREQ, skips its runs in the run list instead: train.plan).

The rules are those of the torch-native benchmarks TPrimat follows: torch.compile and FP8 not together (the FP8
kernels' own graph breaks), FP8 and selective activation checkpointing not together (recomputing an FP8
layer re-quantises it with other scaling), SAC only under FSDP (fsdp with DATA_PARALLEL=fsdp), DDP (fsdp's or
torchtitan's) only without tensor parallelism, flash attention only where flash-attn is (a GPU), DeepSpeed's ZeRO stage 3 not
with AutoTP, and ZeRO stage 0 not in bf16 with AutoTP's TP > 1 (train/autotp/engine.py measured its gradient
norm wrong there). Pipeline parallelism is no rule here: a PP > 1 layout skips these frameworks in the run list
(train.plan), since another framework can still run it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from utils.config.parse import Knob
from utils.frameworks import NATIVE, TABLE

if TYPE_CHECKING:
    from utils.config.resolved import Config

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
ATTENTION = ("sdpa", "flash_attention_2", "eager")
SAC_PATTERN = r"(1/[1-9][0-9]*)?"

# DATA_PARALLEL's modes: FSDP2 shards parameters, gradients and optimizer state; DDP replicates the model
SHARDED, REPLICATED = "fsdp", "ddp"

KNOBS = {
    "DATA_PARALLEL": Knob("enum", (SHARDED, REPLICATED)),
    "COMPILE": Knob("bool"),
    "COMPILE_MODE": Knob("enum", COMPILE_MODES),
    "SAC_FREQ": Knob("str", pattern=SAC_PATTERN, rule="1/N checkpoints every N-th layer's activations "
                                                      "(1/1: every layer); empty: off"),
    "ATTN_IMPL": Knob("enum", ATTENTION),
    "ZERO_STAGE": Knob("int", high=2, rule="DeepSpeed's ZeRO stage under AutoTP (3 shards what TP already splits)"),
}
# The knobs that switch on a feature some torch-native framework lacks: its runs are skipped (train.plan).
FEATURE_KNOBS = {"COMPILE": "torch.compile", "SAC_FREQ": "activation checkpointing"}


def sac_every(text: str) -> int:
    """SAC_FREQ as the N of "every N-th layer"; 0 when off."""
    found = re.fullmatch(r"1/([0-9]+)", text.strip())
    return int(found.group(1)) if found else 0


def problems(config: Config) -> list[str]:
    """The compatibility rules, for the torch-native frameworks this invocation runs (none: nothing to check)."""
    chosen = [name for name in config.frameworks if name in NATIVE]
    if not chosen:
        return []
    v, found = config.values, []
    sac = sac_every(v["SAC_FREQ"])
    fp8 = v["PRECISION"] == "fp8"
    if v["COMPILE"] and fp8:
        found.append("COMPILE=1 with PRECISION=fp8: torch.compile and FP8 do not go together in the torch-native "
                     "frameworks; set COMPILE=0 or PRECISION=bf16")
    if sac and fp8:
        found.append(f"SAC_FREQ={v['SAC_FREQ']} with PRECISION=fp8: selective activation checkpointing and FP8 do "
                     "not go together; clear SAC_FREQ or set PRECISION=bf16")
    honouring = {knob: [name for name in chosen if knob in TABLE[name].knobs] for knob in KNOBS}
    sharded = [name for name in honouring["SAC_FREQ"] if name in honouring["DATA_PARALLEL"]]
    if sac and sharded and v["DATA_PARALLEL"] != SHARDED:  # a framework without the knobs skips it (train.plan)
        found.append(f"SAC_FREQ={v['SAC_FREQ']}: selective activation checkpointing runs only under FSDP (framework "
                     f"{', '.join(sharded)} with DATA_PARALLEL=fsdp), and DATA_PARALLEL={v['DATA_PARALLEL']}; clear "
                     "SAC_FREQ or set DATA_PARALLEL=fsdp")
    if honouring["DATA_PARALLEL"] and v["DATA_PARALLEL"] == REPLICATED:  # DDP replicates whole models
        tensor_parallel = sorted({config.layout(spec.key, name).tp for name in config.strategies
                                  for spec in config.models} - {1})
        if tensor_parallel:
            found.append(f"DATA_PARALLEL=ddp: DDP replicates whole models, and a layout asks for TP="
                         f"{','.join(map(str, tensor_parallel))}; use DATA_PARALLEL=fsdp (FSDP2 + DTensor TP) or TP=1")
    if honouring["ZERO_STAGE"] and v["ZERO_STAGE"] == 0 and v["PRECISION"] == "bf16":
        tensor_parallel = sorted({lay.tp for name in config.strategies for spec in config.models
                                  for lay in [config.layout(spec.key, name)] if lay.pp == 1} - {1})
        if tensor_parallel:  # measured by autotp's engine: a wrong gradient norm, so wrong clipping
            found.append(f"ZERO_STAGE=0 with PRECISION=bf16: DeepSpeed's bf16 optimizer without ZeRO gets AutoTP's "
                         f"gradient norm wrong, and a layout asks for TP={','.join(map(str, tensor_parallel))}; "
                         "set ZERO_STAGE=1 or 2")
    if v["ATTN_IMPL"] == "flash_attention_2" and config.platform == "cpu":
        found.append("ATTN_IMPL=flash_attention_2: flash attention needs a GPU (the flash-attn package); "
                     "use sdpa or eager on the CPU")
    return found
