"""The one reader of KEY=VALUE files (config.env, secrets.env): the shell and Docker never parse them."""

from __future__ import annotations

from pathlib import Path


def parse_env_file(path: Path) -> tuple[dict[str, str], list[str]]:
    """KEY=VALUE lines with # comments and optional quotes; returns values and syntax problems."""
    values: dict[str, str] = {}
    problems: list[str] = []
    if not path.exists():
        return values, problems
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        key, sep, rest = text.partition("=")
        key = key.removeprefix("export ").strip()
        if not sep or not key.replace("_", "").isalnum():
            problems.append(f"{path.name}:{number}: expected KEY=VALUE, got {text!r}")
            continue
        rest = rest.strip()
        if rest[:1] in ("'", '"') and rest[0] in rest[1:]:
            value = rest[1:rest.index(rest[0], 1)]
        else:
            value = "" if rest.startswith("#") else rest.split(" #", 1)[0].split("\t#", 1)[0].strip()
        values[key] = value
    return values, problems
