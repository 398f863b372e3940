"""The framework registry: each framework TPrimat runs is one entry, and every table about frameworks comes from it.

An entry (a `Framework` in a folder of this package, named for the framework) declares what the rest of TPrimat asks
of it: its names, where it runs, the modules its image must import, how its command is built (TPrimat's own trainer
under torchrun, or a function of its package under train/ that builds the command and generated files), its log's
format (read when its trainer writes no result: utils.frameworks.log_format), its memory model, the layouts and
precisions it can run, the framework-specific knobs it honours and its own name for each model it has a recipe for.
The configuration (FRAMEWORK=, all), the plan's skips, the launcher, the judge, the probe, the platform environment,
the result schema's enum, the prediction and the report's labels all read it.

A new framework is a folder here, its `FRAMEWORK` entry in its __init__ and its log format beside it, one line in
ENTRY_MODULES, and its package under train/ (docs/ARCHITECTURE.md, "Where new things go"). A framework kept outside
the repository registers by naming its entry module in TPRIMAT_FRAMEWORKS (comma list of importable modules, each
with a `FRAMEWORK` entry); every process of a run set inherits it. Standard library only: utils.config reads it
before any environment exists.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from utils.spec.models import FEATURES, get_model
from utils.spec.precision import FP8_RECIPES, PRECISIONS

# This package's entries, in the run list's order.
ENTRY_MODULES = ("mega", "prim", "nemo", "mbridge", "fsdp", "autotp", "torchtitan")
EXTRA_ENV = "TPRIMAT_FRAMEWORKS"  # entry modules of frameworks kept outside the repository
PARALLELISMS = ("tp", "pp")  # what a layout splits a model by (sequence parallelism follows TP: utils.spec.fairness)
LOG_FORMAT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # "package.module:NAME" of a log format
MEMORY_MODELS = ("megatron", "fsdp2", "deepspeed")  # the layouts of memory utils.predict.memory models: megatron-core's,
# FSDP2's (or DDP's), DeepSpeed's (AutoTP with ZeRO)


@dataclass(frozen=True)
class Framework:
    name: str  # FRAMEWORK's value and the run directory's first word
    display_name: str  # in reports and figures
    platforms: tuple[str, ...]  # where it runs (amd, nvd, cpu)
    warmup_convention: str  # its LR warm-up (utils.spec.fairness.WORKLOAD's lr_warmup_convention)
    probe_modules: tuple[str, ...]  # what its trainer imports beyond torch, checked in the image by the probe
    # "package.module:NAME" of a context manager the probe imports each of probe_modules within, as the trainer
    # imports them (mbridge: the Transformer Engine stand-in of a local-spec run); None: plain imports
    probe_context: str | None = None
    # where it also runs, but only when FRAMEWORK names it: FRAMEWORK=all (the default run) leaves it out there
    # (mbridge on the CPU, in an environment of its own that only such a run builds)
    on_request: tuple[str, ...] = ()
    # How its command is built: `trainer`, a script of TPrimat's own run under torchrun with the run's config.json
    # (it records its run: steps.jsonl, evals.jsonl, trainer.json; the judge writes the result), or `command`,
    # "package.module:function" under train/ building the Launch and generated files of a framework with its own
    # launcher (the judge then extracts the result from its log).
    trainer: str | None = None
    command: str | None = None
    # Its log's format, "package.module:NAME" of a utils.frameworks.log_format.LogFormat (its folder's, or a shared
    # one), read when its trainer recorded no account (a framework with its own launcher records none); None: no
    # reader, a trainer that recorded nothing fails its run
    log_format: str | None = None
    in_this_python: bool = True  # its trainer runs under this Python's torchrun, so the launcher checks that stack
    memory_model: str = "megatron"  # one of MEMORY_MODELS
    # fsdp2: every microbatch's backward reduce-scatters its gradients into the sharded ones (torchtitan 0.3.0's
    # train_step); False: the microbatches before the last accumulate unsharded gradients (fsdp's no_sync)
    synced_microbatches: bool = False
    parallelisms: frozenset[str] = frozenset(PARALLELISMS)  # what it can split a model by; a layout using
    # another one skips it (train.plan.skip_reason)
    precisions: tuple[str, ...] = ("bf16", "fp32")  # what it can train in (utils.spec.precision); another skips it
    fp8_recipes: tuple[str, ...] = ()  # the FP8_RECIPE values it has a switch for, with "fp8" in precisions
    # Whose switches its precisions are: "megatron-core" (TransformerConfig's fp8/fp4 recipe fields, so a stack's
    # megatron-core version decides which recipes exist there: utils.spec.precision.megatron_core_lacks); "primus":
    # Primus's Megatron-LM, whose release decides (utils.spec.precision.primus_lacks); None: its own
    precision_api: str | None = None
    knobs: tuple[str, ...] = ()  # the framework-specific knobs it honours (utils/config/native.py's section)
    # Its own name for each model it trains from a shipped recipe or config (utils.spec.models' key -> that name);
    # None: it builds any model of utils.spec.models from the spec. A model missing from the table skips it.
    model_names: Mapping[str, object] | None = None
    no_model: Mapping[str, str] = field(default_factory=dict)  # why it has no name for a model (key -> why)
    # Whether it builds a mixture-of-experts model (utils.spec.models' MoESpec) from the spec, where model_names is
    # None: one that does not skips a MoE model, saying so (one with model_names skips it by having no name for it)
    builds_moe: bool = False
    # The model features (utils.spec.models.FEATURES: sliding windows, attention sinks, ...) it builds from the spec,
    # where model_names is None: a model with another one skips it, saying which
    features: frozenset[str] = frozenset()
    moe_tp_refusal: str = ""  # why it cannot split a MoE model over TP > 1 ranks, if it cannot (the plan skips it)
    # Whether it splits a MoE model's experts over EP > 1 ranks (megatron-core's expert_model_parallel_size); one that
    # does not skips a layout with EP > 1 (train.plan), saying why where no_expert_parallel does
    expert_parallel: bool = False
    no_expert_parallel: str = ""
    env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # platform -> its stack's variables
    # What it always does whatever it is told (utils.spec.fairness.FIXED's kinds), added to the effective settings
    # of a result extracted from its log where the log does not say them; a trainer of TPrimat's reads its own back.
    fixed: tuple[str, ...] = ()
    # Knob values it cannot run at TP > 1 (knob -> (value, why)): the plan skips such a run with the reason, and the
    # trainer refuses it as its own guard.
    tp_refuses: Mapping[str, tuple[object, str]] = field(default_factory=dict)
    # Whether it ends a run at TARGET_LOSS (TPrimat's trainers, NeMo through TPrimat's callback); False: it trains
    # every step and its time to target is read from the validation series (evaluate/logs/evaluations.py)
    stops_at_target: bool = True
    # The oldest torch its pinned version imports on, and why (the upstream lines: utils/upstream/table.py): a stack whose
    # published torch is older does not list it (tests/test_utils_stacks.py), and the plan skips it there with this
    # reason; where a stack's torch is not published, the probe's import in the image decides (train.plan)
    torch_floor: tuple[str, str] | None = None
    # The megatron-core layer implementations it can build (utils.spec.fairness.TRANSFORMER_IMPLS); TRANSFORMER_IMPL
    # names one for a GPU run, and one it lacks skips it (train.plan). (): it builds no megatron-core layers.
    transformer_impls: tuple[str, ...] = ()
    # The reference every other framework is held against (at most one entry; else the registry's first): the
    # comparison's ratio denominator, and what a CPU run set trains instead of a framework that needs a GPU
    baseline: bool = False
    # What a comparison cannot make equal between it and the frameworks whose loop is Megatron-LM's, which the
    # report says where its results sit beside theirs ("" where it is one of them, or has nothing to add)
    beside_megatron: str = ""
    # "package.module:function" (platform -> the variables its run adds, building on first use what the run needs;
    # utils.errors.UsageError when it cannot be built): an environment of its own where the platform's Python lacks
    # its package (on the CPU: torchtitan's overlay, mbridge's Python 3.12), or what its runs need built once into
    # the platform's Python (autotp on the CPU: DeepSpeed's collective op). train.matrix builds it before the run set,
    # beside the data preparation, so that one it cannot build stops the run set in one line; None: nothing to build
    environment: str | None = None
    # "package.module:function" (stack row -> why it cannot run from this stack here, or None): what the probe checks
    # beyond the modules its image imports, before a GPU run (a framework that runs from a checkout: prim)
    stack_check: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if (self.trainer is None) == (self.command is None):
            problems.append(f"exactly one of trainer and command (got {self.trainer!r}, {self.command!r})")
        if self.log_format is not None and not LOG_FORMAT.match(self.log_format):
            problems.append(f"log_format {self.log_format!r} is not \"package.module:NAME\" of a log format")
        if self.command and self.log_format is None:
            problems.append("a framework with its own launcher writes no result: name its log_format")
        if self.memory_model not in MEMORY_MODELS:
            problems.append(f"memory_model {self.memory_model!r} is not one of {', '.join(MEMORY_MODELS)}")
        problems += [f"unknown parallelism {name!r}" for name in sorted(self.parallelisms - set(PARALLELISMS))]
        problems += [f"unknown precision {name!r}" for name in self.precisions if name not in PRECISIONS]
        problems += [f"unknown FP8 recipe {name!r}" for name in self.fp8_recipes if name not in FP8_RECIPES]
        problems += [f"no_model names {key}, which model_names has" for key in self.no_model
                     if self.model_names is None or key in self.model_names]
        problems += [f"unknown model feature {name!r}" for name in sorted(self.features - set(FEATURES))]
        problems += [f"tp_refuses names {knob}, not one of its knobs" for knob in self.tp_refuses
                     if knob not in self.knobs]
        if self.expert_parallel and self.no_expert_parallel:
            problems.append("no_expert_parallel says why it has no expert parallelism, but expert_parallel is on")
        if bool(self.fp8_recipes) != ("fp8" in self.precisions):
            problems.append("fp8 in precisions needs its fp8_recipes, and fp8_recipes need fp8")
        if problems:
            raise ValueError(f"framework entry {self.name!r}: " + "; ".join(problems))
        object.__setattr__(self, "env", MappingProxyType({k: MappingProxyType(dict(v)) for k, v in self.env.items()}))
        object.__setattr__(self, "tp_refuses", MappingProxyType(dict(self.tp_refuses)))
        object.__setattr__(self, "no_model", MappingProxyType(dict(self.no_model)))

    @property
    def own_trainer(self) -> bool:
        """TPrimat's own trainer runs it and records its steps, evaluations and end itself (steps.jsonl, evals.jsonl,
        trainer.json), which the judge makes the result of; otherwise the judge extracts them from the log."""
        return self.trainer is not None

    @property
    def torch_native(self) -> bool:
        """It honours the torch-native section's knobs (COMPILE, SAC_FREQ, ...), and results record them."""
        return bool(self.knobs)

    def layers_refusal(self, impl: str | None, platform: str) -> str:
        """Why it cannot build megatron-core's `impl` layers (TRANSFORMER_IMPL) on a GPU platform, or ""."""
        if platform == "cpu" or not impl or not self.transformer_impls or impl in self.transformer_impls:
            return ""
        honoured = ", ".join(name for name, other in TABLE.items() if impl in other.transformer_impls)
        return f"{self.name} builds no {impl} layers (TRANSFORMER_IMPL={impl} applies to {honoured})"

    def tp_refusal(self, knobs: Mapping[str, object], tp: int) -> str:
        """Why it cannot run these knob values at this TP (tp_refuses), or ""."""
        for knob, (value, why) in self.tp_refuses.items():
            if tp > 1 and knobs.get(knob) == value:
                shown = "1" if value is True else value  # as config.env spells it
                return f"{self.name} cannot run {knob}={shown} at TP={tp}: {why}"
        return ""

    def ep_refusal(self, ep: int) -> str:
        """Why it cannot split the experts over EP ranks (expert_parallel, no_expert_parallel), or ""."""
        if ep == 1 or self.expert_parallel:
            return ""
        having = ", ".join(name for name, other in TABLE.items() if other.expert_parallel)
        why = f": {self.no_expert_parallel}" if self.no_expert_parallel else ""
        return f"{self.name} has no expert parallelism (EP={ep}){why}; the frameworks with it: {having or 'none'}"

    def torch_refusal(self, torch: str | None) -> str:
        """Why its pinned version cannot import on this torch (torch_floor), or "": also "" for an unpublished one."""
        if self.torch_floor is None or torch is None or release(torch) >= release(self.torch_floor[0]):
            return ""
        return f"{self.name} needs torch {self.torch_floor[0]} or later ({self.torch_floor[1]}), not {torch}"

    def model_name(self, model: str) -> object | None:
        """Its own name for a model key; the key itself when it builds any model from the spec; None: none."""
        return model if self.model_names is None else self.model_names.get(model)

    def model_refusal(self, model: str, tp: int = 1) -> str:
        """Why it cannot train a model (a key of utils.spec.models) at TP=tp, or "": it has no name for it, or the
        model has a feature it does not build, or is a mixture of experts and it builds none, or none at that TP."""
        if self.model_name(model) is None:
            why = self.no_model.get(model, f"utils/frameworks/{self.name}/: its model_names has none")
            return f"{self.name} has no name for {model} ({why})"
        spec = get_model(model)
        lacking = [name for name in spec.features if name not in self.features]
        if self.model_names is None and lacking:
            having = ", ".join(name for name, other in TABLE.items()
                               if other.model_names is None and set(lacking) <= other.features)
            return (f"{self.name} does not build {', '.join(lacking)} (utils/frameworks/{self.name}/: its features), "
                    f"which {model} has; the frameworks that build it: {having or 'none'}")
        if spec.moe is not None:
            if self.model_names is None and not self.builds_moe:
                having = ", ".join(name for name, other in TABLE.items() if other.builds_moe)
                return (f"{self.name} builds no mixture-of-experts model such as {model} (utils/frameworks/"
                        f"{self.name}/: builds_moe is off); the frameworks that build one: {having}")
            if tp > 1 and self.moe_tp_refusal:
                return f"{self.name} runs {model} at TP=1 only (TP={tp}): {self.moe_tp_refusal}"
            if tp > 1 and self.transformer_impls and spec.linear_bias:  # megatron-core's experts
                return (f"{self.name} runs {model} at TP=1 only (TP={tp}): megatron-core refuses biases on experts "
                        "split over TP ranks (TransformerConfig: expert_tensor_parallel_size must be 1)")
        return ""


def resolve(path: str) -> object:
    """What an entry names by "package.module:NAME" (its command, log format, stack check), imported on first use so
    that the registry itself stays standard library only."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def release(version: str) -> tuple[int, int, int]:
    """A version's first three numbers ("2.12.0a0+git" -> (2, 12, 0); "2.13" -> (2, 13, 0)), to order torch releases
    with the standard library."""
    numbers = [int(part) for part in re.match(r"\d*(?:\.\d+)*", version).group().split(".") if part]
    return tuple((numbers + [0, 0, 0])[:3])


def _outside_entry(module: str) -> Framework:
    """The entry of a framework kept outside the repository. The registry is built when this package is imported,
    by every tool before its own argument checks, so a module TPRIMAT_FRAMEWORKS names that is missing or broken is
    one line and exit 2 here (bad input, nothing started), not a traceback from each importer."""
    try:
        entry = getattr(importlib.import_module(module), "FRAMEWORK", None)
        why = None if isinstance(entry, Framework) else "has no FRAMEWORK entry (a utils.frameworks.Framework)"
    except ModuleNotFoundError as err:
        why = f"cannot be imported: no module named {err.name!r}"
    except Exception as err:  # noqa: BLE001 - whatever its code raises, it is the user's module, not TPrimat
        why = f"fails to import: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    if why:
        print(f"config error: {EXTRA_ENV} names the module {module}, which {why}; fix it, put its folder on "
              f"PYTHONPATH, or take it out of {EXTRA_ENV}", file=sys.stderr)
        raise SystemExit(2)
    return entry


def _collect() -> dict[str, Framework]:
    names = [f"{__name__}.{name}" for name in ENTRY_MODULES]
    extra = [name.strip() for name in os.environ.get(EXTRA_ENV, "").split(",") if name.strip()]
    table: dict[str, Framework] = {}
    for module in names + extra:
        entry = _outside_entry(module) if module in extra else importlib.import_module(module).FRAMEWORK
        if entry.name in table:
            raise ValueError(f"framework {entry.name!r} is registered twice ({module})")
        table[entry.name] = entry
    baselines = [name for name, entry in table.items() if entry.baseline]
    if len(baselines) > 1:
        raise ValueError(f"at most one framework entry is the baseline, not {', '.join(baselines)}")
    return table


TABLE = _collect()
NAMES = tuple(TABLE)
BASELINE = next((name for name, entry in TABLE.items() if entry.baseline), NAMES[0])  # the registry's first where none
# is marked
NATIVE = tuple(name for name, entry in TABLE.items() if entry.torch_native)


def on(platform: str) -> tuple[str, ...]:
    """The frameworks one platform runs, in the table's order."""
    return tuple(name for name, entry in TABLE.items() if platform in entry.platforms)


def runnable(platform: str) -> tuple[str, ...]:
    """The frameworks a FRAMEWORK= list may name on one platform: on(platform) and those that run there on request
    (on_request), in the table's order."""
    return tuple(name for name, entry in TABLE.items() if platform in entry.platforms + entry.on_request)


def torch_native(name: str) -> bool:
    """Whether a framework honours the torch-native knobs (COMPILE, SAC_FREQ, ...)."""
    return TABLE[name].torch_native


def vendor_frameworks(platform: str) -> tuple[str, ...]:
    """The frameworks only this platform's vendor ships (nemo and mbridge on nvd, prim on amd), in the table's order;
    which of them a run set gets is its stack's (utils.config.selection)."""
    return tuple(name for name, entry in TABLE.items() if entry.platforms == (platform,))
