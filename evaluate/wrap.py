"""Pack OUTPUT_DIR into output.zip to take home: results, logs, system.json, plots and reports.

    python3 -m evaluate.wrap OUTPUT_DIR --output output.zip

Never packs secrets.env, caches (__pycache__, .cache, dataset index caches) or virtual
environments, and refuses to write a zip when a file holds the value of HF_TOKEN (the file is
named, the value never printed). The zip is written under a temporary name, then renamed.
"""

from __future__ import annotations

import argparse
import os
import sys
import zipfile
from pathlib import Path

from utils.secrets import load_secrets
from utils.files import atomic_open

EXCLUDED_NAMES = {"secrets.env", "__pycache__", ".cache", ".venv", "venv", ".git", ".pytest_cache",
                  "index-cache", "cache"}
EXCLUDED_SUFFIXES = (".pyc", ".tmp")
CHUNK = 8 << 20


class SecretFound(Exception):
    """A file to be packed contains a secret value."""


def excluded(path: Path, root: Path) -> str | None:
    """Why a path under root stays out of the zip, or None when it goes in."""
    for part in path.relative_to(root).parts:
        if part in EXCLUDED_NAMES or part.endswith(".env"):
            return "secret, cache or environment"
    if path.is_symlink():
        return "symbolic link"
    if path.is_dir() and (path / "pyvenv.cfg").exists():
        return "virtual environment"
    if path.name.endswith(EXCLUDED_SUFFIXES):
        return "temporary or compiled file"
    return None


def files_to_pack(root: Path, skip: Path | None = None) -> tuple[list[Path], list[str]]:
    """(files to pack, "path (why)" for each thing left out), walking without entering excluded folders."""
    keep, left_out = [], []
    for directory, subdirs, files in os.walk(root):
        base = Path(directory)
        for name in sorted(subdirs):
            why = excluded(base / name, root)
            if why:
                subdirs.remove(name)
                left_out.append(f"{(base / name).relative_to(root)}/ ({why})")
        subdirs.sort()
        for name in sorted(files):
            path = base / name
            why = excluded(path, root)
            if skip is not None and path.resolve() == skip.resolve():
                continue
            if why:
                left_out.append(f"{path.relative_to(root)} ({why})")
            else:
                keep.append(path)
    return keep, left_out


def _contains(path: Path, needle: bytes) -> bool:
    overlap = len(needle) - 1
    tail = b""
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            if needle in tail + chunk:
                return True
            tail = chunk[-overlap:] if overlap else b""
    return False


def wrap(root: Path, output: Path, secrets: list[str]) -> tuple[list[Path], list[str]]:
    """Write the zip; raises SecretFound naming the first file that holds a secret value."""
    files, left_out = files_to_pack(root, skip=output)
    for path in files:
        for value in secrets:
            if _contains(path, value.encode()):
                raise SecretFound(f"{path} contains the value of a secret (HF_TOKEN): remove it, then wrap again")
    with atomic_open(output, "wb") as out, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            archive.write(path, Path(root.name) / path.relative_to(root))
    return files, left_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m evaluate.wrap", description=__doc__.split("\n\n")[0])
    parser.add_argument("output_dir", type=Path, metavar="OUTPUT_DIR", help="the folder of run directories to pack")
    parser.add_argument("--output", "-o", type=Path, default=Path("output.zip"), help="zip to write (default output.zip)")
    args = parser.parse_args(argv)
    root = args.output_dir.resolve()
    if not root.is_dir():
        print(f"evaluate.wrap: {args.output_dir} is not a directory; run ./shell/run_train.sh first or set OUTPUT_DIR",
              file=sys.stderr)
        return 2
    secrets = [v for v in load_secrets().values() if len(v) >= 8]
    try:
        files, left_out = wrap(root, args.output.resolve(), secrets)
    except SecretFound as err:
        print(f"evaluate.wrap: {err}", file=sys.stderr)
        return 1
    if not files:
        print(f"evaluate.wrap: nothing to pack under {args.output_dir}", file=sys.stderr)
        return 1
    size = args.output.stat().st_size
    print(f"{args.output}: {len(files)} file(s), {size / 2 ** 20:.1f} MiB")
    for line in left_out:
        print(f"  left out: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
