"""Raw text to typed values: the kinds a knob can be, and the one problem line for a value that is not one.

A value is read strictly: int() alone would also take "３", "1_000" and "+3", float() "nan" and "1_0";
each of those is a slip the user should hear about, in one line naming the variable, its value and
the rule. Surrounding blanks never matter.
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from utils import ROOT
from utils.url_secrets import redact, secrets_in

INT_MAX = 2**31 - 1  # no count here comes near it; past 2**63 numpy and torch raise instead of training
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
INTEGER = re.compile(r"[0-9]+")
NUMBER = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?")


class ConfigError(Exception):
    """Raised with every problem found, one per line."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems

    def report(self, tool: str = "") -> None:
        """Every problem on stderr, one line each, the way every tool shows a bad configuration."""
        for problem in self.problems:
            print(f"{tool + ': ' if tool else ''}config error: {problem}", file=sys.stderr)


@dataclass(frozen=True)
class Knob:
    """The rule of one configuration variable: its kind and the values it allows."""

    kind: str  # int | float | enum | list | bool | dir | file | str
    choices: tuple[str, ...] = ()  # enum, list
    low: float = 0  # int, float: the smallest value
    high: float = INT_MAX  # int, float: the largest value
    bounds: str = "[]"  # float: "(]" excludes low (LR > 0), "[)" excludes high (BETA < 1)
    pattern: str = ""  # str: a regular expression the whole value must match
    rule: str = ""  # int: why the range; str: what the pattern means
    optional: bool = False  # int, float: an empty value is None ("not given"), not a problem
    conceals: bool = False  # str: a value the pattern refuses may hold a secret, so its problem line does not repeat it


POSITIVE = Knob("int", low=1)
COUNT = Knob("int")
NAME = Knob("str", pattern="[!-~]*", rule="printable ASCII without spaces (empty: the default)")  # passed on as is


def _range_rule(knob: Knob) -> str:
    """What an int or float knob accepts, as the problem line says it."""
    if knob.kind == "int":
        return f"must be {'empty or ' if knob.optional else ''}an integer from {knob.low} to {knob.high} " \
            "(digits 0-9 only)" + (f", {knob.rule}" if knob.rule else "")
    if knob.high == math.inf:
        span = f"{'>' if knob.bounds[0] == '(' else '>='} {knob.low:g}"
    else:
        span = f"in {knob.bounds[0]}{knob.low:g}, {knob.high:g}{knob.bounds[1]}"
    return f"must be {'empty or ' if knob.optional else ''}a number {span}, in digits 0-9 (e.g. 3e-4)" + \
        (f", {knob.rule}" if knob.rule else "")


def _number(value: str, knob: Knob):
    """An int or float knob's value, or None when it is not written plainly or is out of its range."""
    if not (INTEGER if knob.kind == "int" else NUMBER).fullmatch(value):
        return None
    number = int(value) if knob.kind == "int" else float(value)
    if not math.isfinite(number):  # "1e999" is written plainly yet overflows to inf
        return None
    above = number > knob.low if knob.bounds[0] == "(" else number >= knob.low
    below = number < knob.high if knob.bounds[1] == ")" else number <= knob.high
    return number if above and below else None


def list_items(name: str, raw: str, choices: tuple[str, ...] | list[str], problems: list[str]) -> list[str]:
    """A comma list of known names, each once: an empty item or a repeat is a slip, not a wish."""
    items = [item.strip() for item in raw.split(",")]
    unknown = [item for item in items if item and item not in choices]
    twice = [item for item in dict.fromkeys(items) if item and items.count(item) > 1]
    if items == [""]:
        why = "empty"
    elif unknown:
        why = "unknown " + ", ".join(unknown)
    elif twice:
        why = " and ".join(twice) + " twice"
    elif "" in items:
        why = "an empty item"
    else:
        return items
    problems.append(f"{name}={raw}: {why}; valid: a comma list of {', '.join(choices)}, each once")
    return []


NAME_MAX = 255  # bytes in one component of a path, on every file system TPrimat writes to (ext4, xfs, NFS, Lustre)


def _path(name: str, raw: str, value: str, problems: list[str]) -> str:
    """A path knob made absolute (relative = the repository root); an unset $VARIABLE in it is a problem."""
    expanded = os.path.expandvars(os.path.expanduser(value))
    unset = re.search(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expanded)
    if unset:
        problems.append(f"{name}={raw}: ${unset.group(1)} is not set in the environment; set it or write the "
                        "path out")
    path = Path(expanded)
    return str(path if path.is_absolute() else ROOT / path)


def _directory(name: str, raw: str, value: str, problems: list[str]) -> str:
    """A directory knob: required, and neither it nor a parent may be an existing file (it is created later)."""
    if not value:
        problems.append(f"{name}={raw}: must name a directory (relative = the repository root)")
        return ""
    path = Path(_path(name, raw, value, problems))
    longest = max((part for part in path.parts), key=lambda part: len(os.fsencode(part)), default="")
    if len(os.fsencode(longest)) > NAME_MAX:
        problems.append(f"{name}={raw[:60]}...: a folder name of {len(os.fsencode(longest))} bytes, more than the "
                        f"{NAME_MAX} a file system allows; use a shorter name")
        return str(path)
    blocker = next((p for p in (path, *path.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        problems.append(f"{name}={raw}: {blocker} is a file, not a directory; point {name} at a directory")
    return str(path)


def convert(name: str, raw: str, knob: Knob, problems: list[str]):
    """One raw string to its typed value, or a problem line (and None). A value holding a URL with a credential is
    refused whatever the knob (utils.url_secrets), its line showing the URL redacted."""
    value = raw.strip()
    if found := secrets_in(value):
        problems.append(f"{name}={redact(raw)}: {found[0][0]} is a secret: a URL must be without a password here "
                        "(give it in PGPASSWORD or a .pgpass file for PostgreSQL, or in secrets.env)")
        return None
    if knob.kind in ("int", "float"):
        if knob.optional and not value:
            return None
        number = _number(value, knob)
        if number is None:
            problems.append(f"{name}={raw}: {_range_rule(knob)}")
        return number
    if knob.kind == "enum":
        if value not in knob.choices:
            problems.append(f"{name}={raw}: not one of {', '.join(choice or '(empty)' for choice in knob.choices)}")
            return None
        return value
    if knob.kind == "list":
        return list_items(name, raw, knob.choices, problems) or None
    if knob.kind == "bool":
        if value.lower() in TRUE_WORDS:
            return True
        if value.lower() in FALSE_WORDS:
            return False
        problems.append(f"{name}={raw}: must be true or false (1 or 0)")
        return None
    if knob.kind == "dir":
        return _directory(name, raw, value, problems)
    if knob.kind == "file":
        return _path(name, raw, value, problems) if value else ""
    if knob.pattern and not re.fullmatch(knob.pattern, value):
        problems.append(f"{name}={'(not repeated: it may hold a secret)' if knob.conceals else raw}: must be {knob.rule}")
    return value


def shell_value(value) -> str:
    """A typed value as the shell and the tables write it: booleans 1/0, lists comma-joined, not given (None) empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)
