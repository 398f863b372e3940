"""Small file helpers shared by every tool: hashing, and writing under a temporary name renamed when complete."""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterable, Iterator

TMP_SUFFIX = ".tmp"  # fixed, so that a rerun finds and removes what a killed run left behind


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file's bytes, read in 4 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_listing(entries: Iterable[tuple[str, str]]) -> str:
    """One fingerprint for a set of files: sha256 over a "name NUL sha256 LF" line per (name, file hash), in
    the order given (callers sort), so that renaming, adding or changing any file changes it."""
    return hashlib.sha256("".join(f"{name}\0{sha}\n" for name, sha in entries).encode()).hexdigest()


def tmp_path(path: Path) -> Path:
    """Where `path` is written before it is complete."""
    return path.with_name(path.name + TMP_SUFFIX)


def unique_tmp_path(path: Path) -> Path:
    """A temporary sibling of `path` no other process writes at the same time (its pid in the name), for files
    that several processes may write at once (a cache every rank refreshes)."""
    return path.with_name(f"{path.name}.{os.getpid()}{TMP_SUFFIX}")


@contextmanager
def atomic_open(path: Path, mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open a temporary sibling of `path`; rename it onto `path` only if the block succeeds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(path)
    try:
        with open(tmp, mode, **kwargs) as handle:
            yield handle
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path: Path, data: dict) -> None:
    """Atomically write pretty, key-sorted JSON (byte-stable for the same data)."""
    with atomic_open(path, encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True, ensure_ascii=False)
        handle.write("\n")


def read_json(path: Path) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
