"""Named parallelism strategies: the one table of TP/PP/DP(/EP) layouts per platform and model.

GA is not in the table: it is derived so that every strategy keeps the configured global batch
(GBS = MBS x DP x GA), which is what makes strategies comparable. Standard library only.

Users add strategies without touching code through a JSON file (STRATEGIES_FILE) of the same
shape as BUILTIN: {"name": {"platform or *": {"model or *": [TP, PP, DP]}}}, where a layout may add EP as a fourth
number, [TP, PP, DP, EP] (default 1: every rank holds every expert). EP is no factor of the GPU count: megatron-core
carves the expert-parallel ranks out of DP, so TP x PP x DP still covers every GPU (utils/config/layout.py's rules).
"""

from __future__ import annotations

import json
import re
import stat
from dataclasses import dataclass
from pathlib import Path

CUSTOM = "custom"  # the layout given by TP/PP/DP/GA themselves
IDENTICAL = "truly_identical"  # the layout compared across platforms "identical vs identical"

# name -> platform ("*" = every GPU platform) -> model ("*" = every model) -> (TP, PP, DP) or (TP, PP, DP, EP).
# GPU entries are for one 8-GPU node; the CPU entries are for its 2 worker processes.
BUILTIN: dict[str, dict[str, dict[str, tuple[int, ...]]]] = {
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
    ep: int = 1  # expert-parallel size: the experts split over EP of the DP ranks (megatron-core's decomposition)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def label(self) -> str:
        """The layout as the run list shows it: EP only where it splits the experts ("TP1 PP1 DP2 EP2 GA1")."""
        return f"TP{self.tp} PP{self.pp} DP{self.dp}" + (f" EP{self.ep}" if self.ep > 1 else "") + f" GA{self.ga}"


class StrategyError(ValueError):
    """A strategy file that cannot be used: every problem, one line each naming the fix."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


NAME = re.compile(r"[A-Za-z0-9_.-]+")  # STRATEGY is a comma list of these
MAX_FILE_BYTES = 1 << 20  # a STRATEGIES_FILE of thousands of layouts is a few hundred KiB; 50 MB took 11 s and 1.3 GB


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """json's object_pairs_hook: a key given twice would otherwise keep the last one silently."""
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"{key} appears twice in one object; keep one")
        seen[key] = value
    return seen


def _read(extra_file: Path):
    """The file's JSON, or StrategyError with the one line that says why not."""
    def fail(why: str) -> StrategyError:
        return StrategyError([f"STRATEGIES_FILE={extra_file}: {why}"])
    try:
        if not stat.S_ISREG(Path(extra_file).stat().st_mode):  # a device (/dev/zero) would be read forever
            raise fail("not a regular file (a device or pipe?); point it at a JSON file or leave it empty")
        with open(extra_file, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise fail(f"cannot read it ({err.strerror}); fix the path or leave STRATEGIES_FILE empty") from None
    if len(data) > MAX_FILE_BYTES:
        raise fail(f"larger than {MAX_FILE_BYTES >> 20} MiB, which no table of layouts is; is it the right file?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise fail(f"byte 0x{data[err.start]:02x} at offset {err.start} is not UTF-8; save it as UTF-8") from None
    if not text.strip():
        raise fail("empty; write {name: {platform: {model: [TP, PP, DP]}}} or leave STRATEGIES_FILE empty")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise fail(f"not valid JSON (line {err.lineno}: {err.msg})") from None
    except ValueError as err:
        raise fail(str(err)) from None


def load_table(extra_file: Path | None, platforms: tuple[str, ...], models: tuple[str, ...]
               ) -> dict[str, dict[str, dict[str, tuple[int, ...]]]]:
    """The built-in strategies plus the user's file (which may add names or replace built-in ones).

    The whole file is checked whether or not its strategies are chosen, and every problem is reported.
    """
    table = {name: dict(by_platform) for name, by_platform in BUILTIN.items()}
    if extra_file is None:
        return table
    user = _read(extra_file)
    problems: list[str] = []
    if not isinstance(user, dict):
        problems.append("expected an object of strategies by name")
        user = {}
    for name, by_platform in user.items():
        if name in ("all", CUSTOM):
            problems.append(f"a strategy cannot be named all or {CUSTOM} (they mean every strategy and TP/PP/DP/GA)")
        elif not NAME.fullmatch(name):
            problems.append(f"strategy name {name!r} must be letters, digits, _ . - (STRATEGY is a comma list)")
        if not isinstance(by_platform, dict):
            problems.append(f"strategy {name} must be an object {{platform: {{model: [TP, PP, DP]}}}}")
            continue
        table[name] = {}
        for platform, by_model in by_platform.items():
            if platform not in ("*", *platforms):
                problems.append(f"{name}.{platform}: unknown platform; valid: " + ", ".join(("*", *platforms)))
            if not isinstance(by_model, dict):
                problems.append(f"{name}.{platform} must map models to [TP, PP, DP]")
                continue
            table[name][platform] = {}
            for model, sizes in by_model.items():
                if model not in ("*", *models):
                    problems.append(f"{name}.{platform}.{model}: unknown model; valid: " + ", ".join(("*", *models)))
                # type() is int, not isinstance: JSON's true is a bool, and a bool is an int to isinstance
                if not (isinstance(sizes, list) and len(sizes) in (3, 4)
                        and all(type(v) is int and v > 0 for v in sizes)):
                    problems.append(f"{name}.{platform}.{model} must be [TP, PP, DP] or [TP, PP, DP, EP] of positive "
                                    f"integers, got {json.dumps(sizes)}")
                    continue
                table[name][platform][model] = tuple(sizes)
    if problems:
        raise StrategyError([f"STRATEGIES_FILE={extra_file}: {problem}" for problem in problems])
    return table


def lookup(table: dict, name: str, platform: str, model: str) -> tuple[int, int, int, int] | None:
    """(TP, PP, DP, EP) of a strategy for a platform and model (EP 1 where the table gives three), or None when the
    strategy has none."""
    by_platform = table[name]
    by_model = by_platform.get(platform) or (by_platform.get("*") if platform != "cpu" else None)
    found = None if by_model is None else by_model.get(model) or by_model.get("*")
    return None if found is None else (*found, 1)[:4]
