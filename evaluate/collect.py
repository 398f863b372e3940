"""Read results (and the system.json of their run set) from run directories, result files and zips.

A zip written by evaluate.wrap and the directory it was made from give the same results in the
same order: both are read as a tree of relative paths.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Sequence

from utils.runset import SYSTEM_FILE

RESULT_NAME = "result.json"


@dataclass
class Loaded:
    """One result with where it came from."""

    where: str  # input and relative path, for messages
    result: dict
    system: dict  # the result's own system description, else the nearest system.json above it ({} when none)

    @property
    def name(self) -> str:
        """Input-independent name: platform/run id (e.g. nvd/mega-llama-r2)."""
        run = self.result.get("run") or {}
        return f"{self.result.get('platform', '?')}/{run.get('id', '?')}"

    @property
    def nodes(self) -> int | None:
        """Nodes the run used: its parallelism.nnodes (schema 1.1), else its system's node count; None unknown."""
        return (self.result.get("parallelism") or {}).get("nnodes") or self.system.get("nodes")


class CollectError(Exception):
    """An input that cannot be read (one line, naming it)."""


def _tree(source: Path) -> dict[PurePosixPath, bytes] | None:
    """Relative path -> content of every result.json/system.json under a directory or in a zip."""
    wanted = (RESULT_NAME, SYSTEM_FILE)
    if source.is_dir():
        return {PurePosixPath(p.relative_to(source).as_posix()): p.read_bytes()
                for p in sorted(source.rglob("*.json")) if p.name in wanted}
    if zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as archive:
            return {PurePosixPath(n): archive.read(n) for n in sorted(archive.namelist())
                    if PurePosixPath(n).name in wanted}
    return None


def _json(where: str, data: bytes) -> dict:
    try:
        value = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CollectError(f"{where}: not valid JSON ({err})") from None
    if not isinstance(value, dict):
        raise CollectError(f"{where}: expected a JSON object")
    return value


def load(inputs: Sequence[str | Path]) -> list[Loaded]:
    """Every result under the inputs (directories, output.zip files, or result JSON files), in order."""
    loaded: list[Loaded] = []
    for item in map(Path, inputs):
        if not item.exists():
            raise CollectError(f"{item}: no such file or directory")
        tree = _tree(item)
        if tree is None:  # a single result file
            result = _json(str(item), item.read_bytes())
            loaded.append(Loaded(str(item), result, result.get("system") or {}))
            continue
        systems = {path.parent: _json(f"{item}:{path}", data) for path, data in tree.items() if path.name == SYSTEM_FILE}
        for path, data in tree.items():
            if path.name != RESULT_NAME:
                continue
            result = _json(f"{item}:{path}", data)
            nearest = next((systems[parent] for parent in path.parents if parent in systems), {})
            loaded.append(Loaded(f"{item}:{path}", result, result.get("system") or nearest))
    return loaded
