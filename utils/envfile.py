"""The one reader of KEY=VALUE files (config.env, secrets.env): the shell and Docker never parse them."""

from __future__ import annotations

import re
import stat
from pathlib import Path

from utils.cli import quoted

KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what a shell accepts as a variable name
MAX_BYTES = 1 << 20  # config.env is a few KiB; a link to /dev/zero must not be read forever


def parse_env_file(path: Path) -> tuple[dict[str, str], list[str]]:
    """KEY=VALUE lines with # comments and optional quotes; returns values and every problem found.

    A missing file is no problem (secrets.env is optional); one that cannot be read is one line. The text
    must be UTF-8 (a byte-order mark is allowed): a stray byte is reported with its line, and the rest of
    the file is still read so that every problem shows at once. A key set twice names both lines.
    """
    values: dict[str, str] = {}
    problems: list[str] = []
    first_line: dict[str, int] = {}
    try:
        data = _read(path)
    except FileNotFoundError:
        return values, problems
    except OSError as err:
        return values, [f"{path}: cannot read it ({err.strerror})"]
    except ValueError as err:
        return values, [f"{path}: {err}"]
    for number, raw in enumerate(data.removeprefix(b"\xef\xbb\xbf").splitlines(), 1):
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError as err:
            problems.append(f"{path.name}:{number}: byte 0x{raw[err.start]:02x} at column {err.start + 1} is not "
                            f"UTF-8; save {path.name} as UTF-8")
            text = raw.decode("utf-8", "replace").strip()
        if not text or text.startswith("#"):
            continue
        key, sep, rest = text.partition("=")
        key = key.removeprefix("export ").strip()
        if not sep or not KEY.fullmatch(key):
            problems.append(f"{path.name}:{number}: expected KEY=VALUE, got '{quoted(text)}'")
            continue
        value, problem = _value(rest.strip(), key)
        if problem:
            problems.append(f"{path.name}:{number}: {problem}")
        if key in first_line:
            problems.append(f"{path.name}:{number}: {key} is set twice (lines {first_line[key]} and {number}); "
                            "keep one")
        first_line.setdefault(key, number)
        values[key] = value
    return values, problems


def _read(path: Path) -> bytes:
    """The file's bytes; ValueError for what is no settings file: a device (/dev/zero behind a link would be read
    forever) or a pipe (would block), or larger than MAX_BYTES."""
    kind = path.stat().st_mode
    if not (stat.S_ISREG(kind) or stat.S_ISDIR(kind)):  # a folder: open() says so
        raise ValueError("a device or pipe (a link to one?), not a text file of KEY=VALUE lines")
    with open(path, "rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES // 1024} KiB, which no file of KEY=VALUE settings is; is it the "
                         "right file?")
    return data


def _value(rest: str, key: str) -> tuple[str, str]:
    """The value of what follows `=`: quoted verbatim, or up to a ' #' comment; and a problem or ''."""
    quote = rest[:1]
    if quote not in ("'", '"'):
        return _uncommented(rest), ""
    end = rest.find(quote, 1)
    if end < 0:  # read on as if unquoted, so that the one slip gives one line
        return _uncommented(rest[1:]), f"the quote {quote} of {key} is not closed"
    after = rest[end + 1:].strip()
    if after and not after.startswith("#"):
        return rest[1:end], f"text after the closing quote of {key}; put comments after ' #'"
    return rest[1:end], ""


def _uncommented(rest: str) -> str:
    """An unquoted value: everything before a ' #' comment."""
    return "" if rest.startswith("#") else rest.split(" #", 1)[0].split("\t#", 1)[0].strip()
