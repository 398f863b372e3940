"""The log formats the framework registry names (each entry's `log_format`: utils.frameworks.log_format), loaded
once and ordered for the engine: a format that reads step lines once, under the first framework registering it,
with the formats refining it asked first."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from typing import Iterable

from utils.frameworks import TABLE, resolve
from utils.frameworks.log_format import LogFormat


@dataclass(frozen=True)
class Reader:
    """A format that reads step lines, under the framework name its steps are credited to."""

    name: str
    format: LogFormat
    claimers: tuple[tuple[str, LogFormat], ...]  # the formats refining it, by name: the first that claims a step


def load(name: str, path: str) -> LogFormat:
    """"package.module:NAME" -> that LogFormat. One that cannot be loaded (a framework kept outside the repository
    names a module that is missing or broken) is one line and exit 2, before any log is read."""
    try:
        found = resolve(path)
        why = None if isinstance(found, LogFormat) else "names no utils.frameworks.log_format.LogFormat"
    except AttributeError:
        why = "names no utils.frameworks.log_format.LogFormat"
    except ImportError as err:
        why = f"cannot be imported ({err})"
    if why:
        print(f"config error: framework {name}'s log_format {path} {why}; fix its entry", file=sys.stderr)
        raise SystemExit(2)
    return found


@cache
def by_name() -> dict[str, LogFormat]:
    """Every framework whose log has a format -> that format, in the registry's order."""
    return {name: load(name, entry.log_format) for name, entry in TABLE.items() if entry.log_format}


def _once(pairs: Iterable[tuple[str, LogFormat]]) -> tuple[tuple[str, LogFormat], ...]:
    """Each format once, under the first name registering it."""
    first: dict[int, tuple[str, LogFormat]] = {}
    for name, fmt in pairs:
        first.setdefault(id(fmt), (name, fmt))
    return tuple(first.values())


@cache
def readers() -> tuple[Reader, ...]:
    named = _once(by_name().items())
    return tuple(Reader(name, fmt, tuple((other, o) for other, o in named if o.refines is fmt))
                 for name, fmt in named if fmt.step is not None)


@cache
def distinct() -> tuple[LogFormat, ...]:
    """Every registered format once (the settings lines of each are asked once per line)."""
    return tuple(fmt for _, fmt in _once(by_name().items()))


@cache
def settings_readers() -> tuple:
    """The formats' readers of the settings their lines print, each once."""
    return tuple(fmt.printed for fmt in distinct() if fmt.printed)


@cache
def argument_readers() -> tuple:
    """The formats' readers of what an argument dump implies, each once."""
    return tuple(fmt.arguments for fmt in distinct() if fmt.arguments)


@cache
def timer_first() -> str | None:
    """The framework whose steps TPrimat's timer line may print first (a run of timer lines only is its)."""
    return next((name for name, fmt in _once(by_name().items()) if fmt.timer_first), None)


def compatible(given: str, detected: str) -> bool:
    """Whether a log detected as one framework's may be another's, as given: the same format, or one refining the
    other (Primus's log holds Megatron-LM's lines)."""
    a, b = by_name().get(given), by_name().get(detected)
    return a is not None and b is not None and (a is b or a.refines is b or b.refines is a)
