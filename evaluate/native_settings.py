"""The torch-native frameworks' own settings (utils.spec.request.Native: compile, SAC, attention, DP implementation, ZeRO
stage) as a result records them, for the report, the fairness check and the judge.

A torch-native trainer reads them back from the built model into its result's `effective`, under the request's
names and values (data_parallel "fsdp"|"ddp", compile true|false, compile_mode, attn_impl, zero_stage; the
checkpointed layers as checkpointed_layers, 0-based, or sac_every N with 0 off): so the judge compares them with
config.json's `native` key by key, and runs compared as the same workload show where they differ. A framework
reports only the settings that apply to it (no ZeRO stage under fsdp).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, NamedTuple

from utils.frameworks import torch_native
from utils.spec.request import Native
from utils.spec.result_types import Section, typed


class NativeSetting(NamedTuple):
    """How one setting reads in the report, and why a difference in it matters to a comparison."""

    label: str
    why: str


SETTINGS = {
    "data_parallel": NativeSetting("DP", "FSDP2 shards parameters, gradients and optimizer state; DDP replicates "
                                         "them: other memory and other collectives"),
    "compile": NativeSetting("compile", "torch.compile fuses kernels: other step time and rounding"),
    "compile_mode": NativeSetting("compile mode", "another compile mode makes other kernels (CUDA graphs, autotuning)"),
    "sac_every": NativeSetting("SAC", "activation checkpointing recomputes layers: less memory for more time"),
    "attn_impl": NativeSetting("attention", "another attention kernel: other memory, time and rounding"),
    "zero_stage": NativeSetting("ZeRO", "a higher ZeRO stage shards more state: less memory for more collectives"),
}
KEYS = tuple(field.name for field in dataclasses.fields(Native))


def recorded(result: Mapping | Section) -> dict:
    """The torch-native settings a result records (its framework's read-back), {} for the other frameworks."""
    r = typed(result)
    if not torch_native(r.framework):
        return {}
    effective = r.effective.extra if r.effective else {}  # the read-back settings: none is a name of the schema's
    found = {key: effective[key] for key in KEYS if effective.get(key) is not None}
    if "sac_every" not in found and isinstance(effective.get("checkpointed_layers"), list):
        found["sac_every"] = sac_every(effective["checkpointed_layers"], r.model.num_layers)
    if found.get("compile") is False:
        found.pop("compile_mode", None)  # a mode without compiling is no setting
    return {key: found[key] for key in KEYS if key in found}


def checkpointed(every: int, num_layers: int) -> list[int]:
    """The layers (0-based) SAC_FREQ=1/every checkpoints: every every-th one; none for 0."""
    return [i for i in range(num_layers) if every and (i + 1) % every == 0]


def sac_every(layers: list[int], num_layers: int) -> int | list[int]:
    """The N of SAC_FREQ=1/N that checkpoints exactly these layers of the model (0: none), else the layers
    themselves (no 1/N does)."""
    return next((every for every in range(num_layers + 1) if layers == checkpointed(every, num_layers)), layers)


def readback_problems(native: Native, result: Mapping | Section) -> list[str]:
    """Where a torch-native run's read-back differs from the request's `native` section (the settings both carry);
    SAC as the layers it checkpoints (1/4 of a 2-layer proxy checkpoints none, as 0 does)."""
    r = typed(result)
    problems, layers = [], r.model.num_layers
    for key, value in recorded(r).items():
        wanted = getattr(native, key)
        if key == "sac_every":
            value, wanted = (v if isinstance(v, list) else checkpointed(v, layers) for v in (value, wanted))
        if value != wanted:
            problems.append(f"{key} is {value!r} in the framework, {wanted!r} requested"
                            + (" (checkpointed layers, 0-based)" if key == "sac_every" else ""))
    return problems


def shown(key: str, value: object) -> str:
    """One setting in words: "SAC 1/4" (SAC_FREQ's notation: every 4th layer), "compile on"."""
    label = SETTINGS[key].label
    if key == "sac_every" and isinstance(value, list):
        return f"{label} layers {','.join(map(str, value))}"
    if key == "sac_every":
        return f"{label} {f'1/{value}' if value else 'off'}"
    if isinstance(value, bool):
        return f"{label} {'on' if value else 'off'}"
    return f"{label} {value}"


# A Megatron path's run on megatron-core's own layers (features.layer_spec, TRANSFORMER_IMPL=local): other kernels than
# a Transformer Engine run of the same framework, so the two are two configurations, never repeats or peers
LOCAL_LAYERS = "local layers, no Transformer Engine"


def described(result: Mapping | Section) -> str:
    """Every recorded torch-native setting in words; "not recorded" for a torch-native run whose result has none; for
    another framework LOCAL_LAYERS where it ran megatron-core's local layers, else "-"."""
    r = typed(result)
    if not torch_native(r.framework):
        return LOCAL_LAYERS if (r.features or {}).get("layer_spec") == "local" else "-"
    return ", ".join(shown(key, value) for key, value in recorded(r).items()) or "not recorded"
