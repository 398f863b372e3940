"""Where and what to run (config.env's first section): the platform and its detection, the runtime,
the stack (utils/spec/stacks.py), the frameworks, the models (with MODEL_LAYERS, their fewer-layer proxies) and
the strategies, with the rules that concern them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from utils import frameworks
from utils.config.parse import Knob, list_items
from utils.spec import stacks
from utils.spec.models import MODEL_KEYS, get_model
from utils.spec.strategies import CUSTOM, StrategyError, load_table
from utils.machine.vendor_tools import PLATFORMS, detect_platform, gpu_count

if TYPE_CHECKING:
    from utils.config.resolved import Config

FRAMEWORKS = frameworks.NAMES
# What the platform check says a machine lacks when PLATFORM names a vendor it does not have.
MISSING_VENDOR = {"amd": "AMD GPU (no /dev/kfd; rocm-smi and amd-smi list none)",
                  "nvd": "NVIDIA GPU (nvidia-smi -L lists none)"}

KNOBS = {
    "PLATFORM": Knob("enum", ("auto",) + PLATFORMS),
    "RUNTIME": Knob("enum", ("auto", "docker", "host")),
    "STACK": Knob("str"),  # checked against the stack table (resolve_stack)
    "FRAMEWORK": Knob("list", FRAMEWORKS + ("all",)),
    "MODELS": Knob("list", MODEL_KEYS),
    "MODEL_SIZE": Knob("enum", ("auto", "full", "tiny")),
    "MODEL_LAYERS": Knob("str", pattern=r"([1-9][0-9]{0,5})?",
                         rule="a layer count from 1 (a proxy of each model: its first N layers at full width), "
                              "or empty for each model's own depth"),
    "STRATEGY": Knob("str"),  # checked against the strategy table, which STRATEGIES_FILE extends
    "STRATEGIES_FILE": Knob("file"),
}


def detect(env: dict) -> tuple[str, int]:
    """This machine's platform and GPU count (utils.machine.vendor_tools); TPRIMAT_DETECTED_PLATFORM and
    TPRIMAT_DETECTED_GPUS, once exported (shell_exports), spare the tools a second question."""
    if env.get("TPRIMAT_DETECTED_PLATFORM"):
        return env["TPRIMAT_DETECTED_PLATFORM"], int(env.get("TPRIMAT_DETECTED_GPUS") or 0)
    platform = detect_platform(env)
    return platform, gpu_count(platform)


def resolve_model_size(values: dict, platform: str) -> None:
    """MODEL_SIZE=auto: tiny on the CPU, full on GPUs."""
    if values["MODEL_SIZE"] == "auto":
        values["MODEL_SIZE"] = "tiny" if platform == "cpu" else "full"


def strategy_table(extra_file: str, problems: list[str]) -> dict:
    """The strategy table with STRATEGIES_FILE's additions; the file's mistakes join the other problems."""
    try:
        return load_table(Path(extra_file) if extra_file else None, PLATFORMS, MODEL_KEYS)
    except StrategyError as err:
        problems.extend(err.problems)
        return {}


def resolve_strategies(value: str, table: dict, problems: list[str]) -> list[str]:
    """STRATEGY: empty -> custom (TP/PP/DP/GA), a name, a comma list, or all."""
    if not value.strip():
        return [CUSTOM]
    names = list_items("STRATEGY", value, ["all", *table, CUSTOM], problems)
    if "all" in names and names != ["all"]:
        problems.append(f"STRATEGY={value}: all already names every strategy; write all alone or list names")
    return list(table) if names == ["all"] else names


def resolve_stack(value: str, platform: str, problems: list[str]) -> stacks.Stack:
    """STACK: empty -> the platform's newest row; else a comma list of row names, at most one per platform, of
    which the platform's is used (a platform the list leaves out gets its newest)."""
    names = list_items("STACK", value, stacks.NAMES, problems) if value.strip() else []
    by_platform: dict[str, list[str]] = {}
    for name in names:
        by_platform.setdefault(stacks.get(name).platform, []).append(name)
    for other, named in by_platform.items():
        if len(named) > 1:
            problems.append(f"STACK={value}: {' and '.join(named)} are both {other} stacks; name one per platform "
                            f"(valid {other} stacks: {', '.join(row.name for row in stacks.of(other))})")
    chosen = by_platform.get(platform, [])
    return stacks.get(chosen[0]) if chosen else stacks.default(platform)


def runs_on(framework: str, stack: stacks.Stack) -> bool:
    """Whether a framework runs on a stack: it is in the stack's row, or no row of that platform lists it (a
    framework kept outside the repository, TPRIMAT_FRAMEWORKS, runs on whatever stack is chosen) and the stack's
    torch is not older than the framework's floor (utils.frameworks.Framework.torch_floor)."""
    if framework in stack.frameworks:
        return True
    entry = frameworks.TABLE.get(framework)
    return (not any(framework in row.frameworks for row in stacks.of(stack.platform))
            and not (entry and entry.torch_refusal(stack.torch)))


def stack_frameworks(stack: stacks.Stack) -> list[str]:
    """FRAMEWORK=all on a stack: its frameworks that are registered (a row may name one whose entry has not landed,
    or was taken out), then the registered ones no row of the platform lists (kept outside the repository,
    TPRIMAT_FRAMEWORKS)."""
    available = frameworks.on(stack.platform)
    return [name for name in stack.frameworks if name in frameworks.TABLE] + \
        [name for name in available if name not in stack.frameworks and runs_on(name, stack)]


def resolve_frameworks(requested: list[str], platform: str, notes: list[str],
                       stack: stacks.Stack | None = None) -> list[str]:
    """FRAMEWORK (with all: the stack's frameworks) mapped onto what the platform runs (utils.frameworks):
    prim<->nemo; on the CPU a vendor's framework is left out (the others run there) unless it runs there on request
    and is named (mbridge). A named framework the stack lacks stays in the list: the plan skips it, naming the stack
    that has it (train.plan.skip_reason)."""
    stack = stack or stacks.default(platform)
    available = frameworks.runnable(platform)
    resolved: list[str] = []
    for name in requested:
        if name == "all":
            resolved.extend(stack_frameworks(stack))
            continue
        if name in available:
            resolved.append(name)
        elif platform == "cpu":
            asked = [other for other in available if other not in frameworks.on(platform)]
            also = f" (and, named, {', '.join(asked)})" if asked else ""
            notes.append(f"FRAMEWORK={name}: {name} needs a GPU; the CPU runs {', '.join(frameworks.on(platform))}"
                         f"{also}, {frameworks.BASELINE} instead")
            resolved.append(frameworks.BASELINE)
        else:
            own = vendor_counterpart(platform, stack)
            notes.append(f"FRAMEWORK={name}: {name} does not run on {platform}; its counterpart {own} runs instead")
            resolved.append(own)
    return list(dict.fromkeys(resolved))


def vendor_counterpart(platform: str, stack: stacks.Stack) -> str:
    """The vendor's own framework on this stack (prim on AMD; mbridge on NVIDIA's 26.x rows, nemo on 25.x), the
    first of the platform's when the stack has none of them."""
    own = frameworks.vendor_frameworks(platform)
    return next((name for name in own if name in stack.frameworks), own[0])


def model_layers(values: dict) -> int | None:
    """MODEL_LAYERS as a layer count; None when empty (each model keeps its own depth)."""
    return int(values["MODEL_LAYERS"]) if values["MODEL_LAYERS"] else None


def layer_problems(values: dict) -> list[str]:
    """MODEL_LAYERS deeper than a model: one line per model (a proxy keeps 1 to all of its layers)."""
    layers = model_layers(values)
    found = []
    for spec in (get_model(key, values["MODEL_SIZE"]) for key in values["MODELS"]):
        if layers is not None and layers > spec.num_layers:
            found.append(f"MODEL_LAYERS={layers}: {spec.display_name} has {spec.num_layers} layers; give 1 to "
                         f"{spec.num_layers} for a proxy of {spec.key}, empty for every model's own depth, or "
                         "leave it out of MODELS")
    return found


def problems(config: Config) -> list[str]:
    """MODEL_LAYERS beyond a model's depth; a GPU platform this machine does not have, unless nothing runs here
    (a dry run, or Slurm's nodes)."""
    found = layer_problems(config.values)
    platform, detected = config.platform, config.detected_platform
    if platform == "cpu" or platform == detected or config["DRY_RUN"] or config.launch == "slurm":
        return found
    return found + [f"PLATFORM={platform}: this machine has no {MISSING_VENDOR[platform]}; detected {detected}. "
                    "Unset PLATFORM to use what is here, or run on a matching node"]
