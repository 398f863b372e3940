"""Named parallelism strategies: the one table of TP/PP/DP layouts per platform and model.

GA is not in the table: it is derived so that every strategy keeps the configured global batch
(GBS = MBS x DP x GA), which is what makes strategies comparable. Standard library only.

Users add strategies without touching code through a JSON file (STRATEGIES_FILE) of the same
shape as BUILTIN: {"name": {"platform or *": {"model or *": [TP, PP, DP]}}}.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CUSTOM = "custom"  # the layout given by TP/PP/DP/GA themselves
IDENTICAL = "truly_identical"  # the layout compared across platforms "identical vs identical"

# name -> platform ("*" = every GPU platform) -> model ("*" = every model) -> (TP, PP, DP).
# GPU entries are for one 8-GPU node; the CPU entries are for its 2 worker processes.
BUILTIN: dict[str, dict[str, dict[str, tuple[int, int, int]]]] = {
    "minimal_communication": {
        "*": {"*": (1, 1, 8)},
        "cpu": {"*": (1, 1, 2)},
    },
    "balanced": {
        "*": {"llama": (2, 1, 4), "qwen": (2, 2, 2)},
        "cpu": {"*": (2, 1, 1)},
    },
    "truly_identical": {
        "*": {"llama": (4, 1, 2), "qwen": (4, 2, 1)},
        "cpu": {"*": (2, 1, 1)},
    },
    "memory_optimized": {
        "*": {"*": (4, 2, 1)},
        "cpu": {"*": (1, 2, 1)},
    },
    "maximum_performance": {
        "nvd": {"llama": (4, 1, 2), "qwen": (4, 2, 1)},
        "amd": {"*": (1, 1, 8)},  # the MI300X's 192 GB holds a whole 8B replica per GPU
        "cpu": {"*": (1, 1, 2)},
    },
}


@dataclass(frozen=True)
class Layout:
    """How one run splits the model and the batch over its GPUs."""

    tp: int
    pp: int
    dp: int
    ga: int

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


class StrategyError(ValueError):
    """A strategy table or file that cannot be used; the message names the problem and the fix."""


def load_table(extra_file: Path | None = None) -> dict[str, dict[str, dict[str, tuple[int, int, int]]]]:
    """The built-in strategies plus the user's file (which may add names or replace built-in ones)."""
    table = {name: dict(by_platform) for name, by_platform in BUILTIN.items()}
    if extra_file is None:
        return table
    try:
        user = json.loads(Path(extra_file).read_text())
    except OSError as err:
        raise StrategyError(f"STRATEGIES_FILE={extra_file}: cannot read it ({err.strerror}); "
                            "fix the path or leave STRATEGIES_FILE empty") from None
    except json.JSONDecodeError as err:
        raise StrategyError(f"STRATEGIES_FILE={extra_file}: not valid JSON (line {err.lineno}: {err.msg})") from None
    if not isinstance(user, dict):
        raise StrategyError(f"STRATEGIES_FILE={extra_file}: expected an object of strategies by name")
    for name, by_platform in user.items():
        if name == CUSTOM or not isinstance(by_platform, dict):
            raise StrategyError(f"STRATEGIES_FILE={extra_file}: strategy {name!r} must be an object "
                                f"{{platform: {{model: [TP, PP, DP]}}}} and not be named {CUSTOM!r}")
        parsed: dict[str, dict[str, tuple[int, int, int]]] = {}
        for platform, by_model in by_platform.items():
            if not isinstance(by_model, dict):
                raise StrategyError(f"STRATEGIES_FILE={extra_file}: {name}.{platform} must map models to [TP, PP, DP]")
            parsed[platform] = {}
            for model, triple in by_model.items():
                if (not isinstance(triple, list) or len(triple) != 3
                        or not all(isinstance(v, int) and v > 0 for v in triple)):
                    raise StrategyError(f"STRATEGIES_FILE={extra_file}: {name}.{platform}.{model} must be "
                                        f"[TP, PP, DP] of positive integers, got {triple!r}")
                parsed[platform][model] = (triple[0], triple[1], triple[2])
        table[name] = parsed
    return table


def lookup(table: dict, name: str, platform: str, model: str) -> tuple[int, int, int] | None:
    """(TP, PP, DP) of a strategy for a platform and model, or None when the strategy has none."""
    by_platform = table[name]
    by_model = by_platform.get(platform) or (by_platform.get("*") if platform != "cpu" else None)
    if by_model is None:
        return None
    return by_model.get(model) or by_model.get("*")
