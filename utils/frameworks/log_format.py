"""The log format a framework registers (its entry's `log_format`), and the field readers formats share.

A framework whose result is read from its console log names a `LogFormat` in its folder (utils/frameworks/<name>/),
or a shared one (Megatron-LM's iteration line, utils/frameworks/megatron_log.py, is mega's and mbridge's). The
reading engine, evaluate/logs/, knows no framework: it asks each registered format whether a line is one of its
steps, which settings its lines print, and what its steps lack without TPrimat's own step timer. A format that
refines another (Primus's rendering of Megatron-LM's line) claims some of that one's steps as its own.

A step counts only where the framework printed it (RECORD_START); its fields are found by name, never by position,
and a value is taken only when the whole field is a number (a field cut off or glued to another rank's output is
refused). Standard library only, as the registry.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable, NamedTuple

# A record counts only where the framework printed it: at the start of a line, after nothing but a launcher's
# rank label (srun --label "7: ", torchrun --tee "[rank7]:" or "[default7]:") and the framework's own prefix
# (Megatron's timestamp, Primus's logger prefix, NeMo's logging prefix). The same text quoted by a traceback
# (an indented source line, a string, an exception message) is not a record.
# Primus v26.5 logs the last rank's Megatron-LM line, timestamp included, under its own prefix on rank 0's console
# (utils/upstream/table.py: primus-v26.5 "console prefix", "forwarded to rank 0").
MEGATRON_STAMP = r" ?\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\]"
RANK_LABEL = r"^(?:\d+: )?(?:\[(?:rank|default)\d+\]: ?)?"
RECORD_START = (RANK_LABEL +
                r"(?:" + MEGATRON_STAMP +
                r"|\[\d{8} \d\d:\d\d:\d\d\]\[rank-\d+/\d+\]\[(?:INFO|WARNING|DEBUG|ERROR)\s*\]\s*\[[^\]]*\]\s*:"
                r"(?:" + MEGATRON_STAMP + r")?"
                r"|\[NeMo [IWDEC] [^\]]*\])? {0,2}")
# Primus v26.5's compute field, "X (avg Y)" (utils/upstream/table.py: primus-v26.5 "compute segment").
WITH_AVERAGE = re.compile(r"^\s*(\S+) \(avg (\S+)\)\s*$")
NUMBER = re.compile(r"^([-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf(?:inity)?))\s*(GiB|GB|MiB|MB|%)?$",
                    re.IGNORECASE)
GIB = 2.0 ** 30


class Step(NamedTuple):
    """One step line as its format read it (a tuple: one is made for every step line of a log)."""

    record: dict  # utils.spec.result's per-step shape (new_record), plus fw_* raw figures
    total: int | None  # the run's planned steps as the line names them; None: the run's own, or its printed settings'
    gbs: int | None  # the global batch size the line names
    head: str  # the line up to its step number (a launcher's label, the framework's prefix and timestamp)
    rest: str  # what the line printed after its step number


@dataclass(frozen=True)
class LogFormat:
    """How one framework's log looks. Either `step` reads its step lines, or `refines` and `claims` take some of
    another format's steps as this one's (the same line, in another framework's rendering)."""

    markers: tuple[str, ...]  # every line it reads holds one of these (evaluate/logs/files.py decodes no other line)
    step: Callable[[str, bool], Step | None] | None = None  # (line, complete) -> its step; None: no step line
    refines: LogFormat | None = None
    claims: Callable[[Step], bool] | None = None
    vendor: Callable[[Step, str], tuple[str, str] | None] | None = None  # the GPU vendor a step line shows, and how
    printed: Callable[[str, dict], None] | None = None  # the settings its other lines print, into a run's settings
    # The settings a run's Megatron-LM argument dump (its values by argument name) implies beyond the arguments
    # evaluate/logs/settings.py reads one by one: (arguments) -> settings in the result's names
    arguments: Callable[[dict], dict] | None = None
    # A line of peak memory after a step: (line, complete) -> (that step, peak allocated GiB, peak reserved GiB)
    memory: Callable[[str, bool], tuple[int, float, float] | None] | None = None
    # A run without TPrimat's TPRIMAT_STEP lines: fill in its own figures (in place) and say what they are, or say
    # what its steps lack.
    untimed: Callable[[list[dict]], str] | None = None
    redrawn: bool = False  # its step line may be drawn again for one step (a progress bar): only going back restarts
    timer_first: bool = False  # TPrimat's TPRIMAT_STEP line may come before its own (a run of timer lines is its)

    def __post_init__(self) -> None:
        if (self.step is None) == (self.refines is None) or (self.refines is None) != (self.claims is None):
            raise ValueError("a log format either reads step lines (step) or claims another's (refines and claims)")


def new_record(step: int) -> dict:
    return {"step": step, "step_time_s": None, "loss": None, "lr": None, "grad_norm": None, "skipped": 0, "nan": 0,
            "mem_allocated_gib": None, "mem_reserved_gib": None}


def field_key(table: dict[str, str]) -> Callable[[str], str | None]:
    """A field's name (any case and spacing) -> its key in `table`, or None: a field not read."""
    return lru_cache(maxsize=512)(lambda raw_name: table.get(" ".join(raw_name.lower().split())))


def value(text: str) -> list[float] | None:
    """A field's numbers: "9.1E+00" -> [9.1]; "9004.1/9010.7" and "9004.1 (avg 9010.7)" -> [9004.1, 9010.7]; units
    dropped.

    None unless every piece is a whole number, so a value cut or glued to other output is refused.
    """
    try:
        return [float(text)]
    except ValueError:
        pass
    paired = WITH_AVERAGE.match(text)
    numbers = []
    for piece in paired.groups() if paired else text.split("/"):
        match = NUMBER.match(piece.strip())
        if not match:
            return None
        numbers.append(float(match.group(1)))
    return numbers


def count(number: float) -> int:
    """A count of NaN or skipped iterations; one that is no whole number >= 0 counts as one (flagged, not lost)."""
    return int(number) if math.isfinite(number) and number >= 0 and number.is_integer() else 1


def batch(number: float) -> int | None:
    """A global batch size: a whole number above 0, else none (a damaged field)."""
    return int(number) if math.isfinite(number) and number >= 1 and number.is_integer() else None


def record_fields(rest: str, complete: bool, kind_of) -> Iterable[tuple[str, list[float]]]:
    """(kind, numbers) for each known `name: value` between | separators.

    A line that was cut off (complete=False) loses its last field: its value may be partial.
    """
    segments = rest.split("|")
    if not complete:
        segments = segments[:-1]
    yield from fields(segments, kind_of)


def fields(segments: Iterable[str], kind_of) -> Iterable[tuple[str, list[float]]]:
    for segment in segments:
        name, sep, text = segment.rpartition(":")
        if not sep:
            continue
        kind = kind_of(name)
        if kind is None:
            continue
        numbers = value(text)
        if numbers is not None:
            yield kind, numbers
