"""Pack OUTPUT_DIR into output.zip to take home: results, logs, system.json, plots and reports.

    python3 -m evaluate.wrap OUTPUT_DIR --output output.zip

Never packs secrets.env, caches (__pycache__, .cache, dataset index caches) or virtual
environments, and refuses to write a zip when a file, its name, or anything compressed or archived
in it (gzip, bzip2, xz, zip, tar, nested) holds the value of a secret: every value of secrets.env and
HF_TOKEN's from the environment too (the file is named, the value never printed). A file it cannot
look into (zstd, 7z, rar, encrypted or corrupt) is refused too. The zip is written under a temporary
name, then renamed.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import io
import json
import lzma
import mmap
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path

from evaluate import secret_forms as forms
from evaluate.collect import RESULT_NAME
from evaluate.gate import gated
from evaluate.history.sql import DEFAULT_NAME
from utils.cli import quoted, run
from utils.files import atomic_open
from utils.secrets import SecretsError, known_values

EXCLUDED_NAMES = {"secrets.env", "__pycache__", ".cache", ".venv", "venv", ".git", ".pytest_cache",
                  "index-cache", "cache"}
EXCLUDED_SUFFIXES = (".pyc", ".tmp")
# the default results store (evaluate.history) and SQLite's files beside it
STORE_FILES = {DEFAULT_NAME + tail for tail in ("", "-wal", "-shm", "-journal")}
CHUNK = 8 << 20
MIN_SECRET_LENGTH = 8  # a shorter value would match by chance; such a value is named, not searched for
MAX_DEPTH = 8  # archives within archives deeper than this are refused, not followed
SPOOL = 64 << 20  # a zip inside another file is copied aside to be opened: in memory up to this size
OPENERS = {"gzip": lambda raw: gzip.GzipFile(fileobj=raw), "bzip2": bz2.BZ2File, "xz": lzma.LZMAFile,
           "lzma": forms.lzma_alone_reader, "zlib": forms.zlib_reader}
# Formats the standard library cannot open: their contents cannot be searched, so they are not packed.
UNSEARCHABLE = ((b"\x28\xb5\x2f\xfd", "zstd"), (b"7z\xbc\xaf\x27\x1c", "7z"), (b"Rar!\x1a\x07", "rar"),
                (b"\x04\x22\x4d\x18", "lz4"), (b"\x1f\x9d", "Unix .Z"), (b"\x89LZO", "lzo"))
Needles = list[tuple[str, bytes]]  # (which secret, bytes to look for)


class SecretFound(Exception):
    """A file to be packed contains a secret value."""


class Unsearchable(Exception):
    """A file to be packed holds data whose contents cannot be searched for secrets."""


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
    if path.name in STORE_FILES:  # a live database copied mid-write is no backup: export it instead
        return "results store (python3 -m evaluate.history export --format jsonl takes it home)"
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
            if why is None and skip is not None and path == skip:  # a link (a loop too) is left out before this
                continue
            if why:
                left_out.append(f"{path.relative_to(root)} ({why})")
            else:
                keep.append(path)
    return keep, left_out


def needles(values: list[tuple[str, str]]) -> Needles:
    """The bytes each secret value is searched for as: itself and, where JSON writes it otherwise, its JSON form."""
    found = []
    for label, value in values:
        for form in dict.fromkeys([value, json.dumps(value)[1:-1]]):
            found.append((label, form.encode()))
        found += [(label, form) for form in forms.forms(value.encode())]
    return found


def mask(text: str, secrets: Needles) -> str:
    """text with every secret value replaced by its name, so that a message may quote a file name."""
    for label, value in sorted(secrets, key=lambda secret: -len(secret[1])):  # a value within another: the longer first
        text = text.replace(value.decode(errors="replace"), f"[{label}]")
    return text


class _Watched(io.RawIOBase):
    """A stream read once, its first bytes given back first, every byte searched for secrets as it passes."""

    def __init__(self, head: bytes, rest, secrets: Needles):
        self.head, self.rest, self.secrets = head, rest, secrets
        self.overlap = max(len(value) for _, value in secrets) - 1
        self.tail = b""
        self.found: str | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.head:
            data, self.head = self.head[:len(buffer)], self.head[len(buffer):]
        else:
            data = self.rest.read(len(buffer))
        window = self.tail + data
        self.found = self.found or next((label for label, value in self.secrets if value in window), None)
        self.tail = window[-self.overlap:] if self.overlap else b""
        buffer[:len(data)] = data
        return len(data)


def _kind(head: bytes) -> str | None:
    """The compression or archive format the first 512 bytes of a stream show, if any."""
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh") and head[3:4].isdigit():
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head[257:262] == b"ustar" or forms.is_tar(head):
        return "tar"
    if forms.is_lzma_alone(head):
        return "lzma"
    if forms.is_zlib(head):
        return "zlib"
    return next((name for magic, name in UNSEARCHABLE if head.startswith(magic)), None)


def _search(stream, secrets: Needles, where: str, depth: int = 0) -> str | None:
    """Which secret the stream holds, in its bytes or in what they decompress or unpack to (depth 0: a file,
    read in place); raises Unsearchable."""
    try:
        head = stream.read(512)
        kind = _kind(head)
        if kind and kind not in (*OPENERS, "zip", "tar"):
            raise Unsearchable(f"{where} is {kind}-compressed, which TPrimat cannot look into for secrets")
        if kind and depth >= MAX_DEPTH:
            raise Unsearchable(f"{where} nests archives more than {MAX_DEPTH} deep")
        if kind in (None, "zip"):  # what may hold a stream further in: searched again from each one's signature
            with _seekable(head, stream, depth) as whole:
                return _search_whole(whole, kind, secrets, where, depth)
        watched = _Watched(head, stream, secrets)
        reader = io.BufferedReader(watched, CHUNK)
        inner = None
        if kind in OPENERS:
            with OPENERS[kind](reader) as opened:
                inner = _search(opened, secrets, where, depth + 1)
        elif kind == "tar":
            with tarfile.open(fileobj=reader, mode="r|") as archive:
                for member in archive:
                    if watched.found or inner:
                        break
                    if member.isfile():
                        inner = _search(archive.extractfile(member), secrets, f"{where} ({member.name})", depth + 1)
        while not (watched.found or inner) and reader.read(CHUNK):
            pass
        return watched.found or inner
    except (OSError, EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile, tarfile.TarError,
            NotImplementedError) as err:
        raise Unsearchable(f"{where} cannot be read to the end ({type(err).__name__}): corrupt, cut short or in a "
                           "form TPrimat cannot look into for secrets") from None


@contextmanager
def _seekable(head: bytes, stream, depth: int):
    """The whole stream as a seekable file: the file itself at depth 0, else a copy (in memory up to SPOOL)."""
    if depth == 0:
        stream.seek(0)
        yield stream
        return
    with tempfile.SpooledTemporaryFile(SPOOL) as copy:
        copy.write(head)
        shutil.copyfileobj(stream, copy, CHUNK)
        copy.seek(0)
        yield copy


def _search_whole(whole, kind: str | None, secrets: Needles, where: str, depth: int) -> str | None:
    """_search for plain data or a zip (a seekable file): its bytes as they pass, a zip's members, then every
    stream or zip entry inside it (evaluate/secret_forms.py: a gzip after a script, the first of two zips)."""
    watched = _Watched(b"", whole, secrets)
    reader = io.BufferedReader(watched, CHUNK)
    while not watched.found and reader.read(CHUNK):
        pass
    if watched.found:
        return watched.found
    if kind == "zip":
        whole.seek(0)
        with zipfile.ZipFile(whole) as archive:
            for info in archive.infolist():
                inside = f"{where} ({info.filename})"
                if info.flag_bits & 0x1:
                    raise Unsearchable(f"{inside} is encrypted, so TPrimat cannot look into it for secrets")
                with archive.open(info) as member:
                    if found := _search(member, secrets, inside, depth + 1):
                        return found
    whole.seek(0, os.SEEK_END)
    if not whole.tell():
        return None
    whole.seek(0)
    data = mmap.mmap(whole.fileno(), 0, access=mmap.ACCESS_READ) if _has_fileno(whole) else whole.read()
    for offset, inner, opened in forms.embedded(data, 0 if kind == "zip" else 1):
        inside = f"{where} ({inner} at byte {offset})"
        if isinstance(opened, str):
            raise Unsearchable(f"{inside} is {opened}, so TPrimat cannot look into it for secrets")
        if depth + 1 >= MAX_DEPTH:
            raise Unsearchable(f"{where} nests archives more than {MAX_DEPTH} deep")
        try:
            found = _search(io.BufferedReader(opened(), CHUNK), secrets, inside, depth + 1)
        except Unsearchable:
            found = _search_prefix(opened, secrets)  # a signature by chance, or a stream cut short: what decodes
        if found:
            return found
    return None


def _search_prefix(opened, secrets: Needles) -> str | None:
    """Which secret the part of a stream that decodes holds (a stream cut short, or bytes that only look like one)."""
    watched = _Watched(b"", opened(), secrets)
    try:
        while not watched.found and watched.read(CHUNK):
            pass
    except (OSError, EOFError, zlib.error, lzma.LZMAError, ValueError):
        pass
    return watched.found


def _has_fileno(handle) -> bool:
    try:
        handle.fileno()
    except (OSError, AttributeError, io.UnsupportedOperation):
        return False
    return True


def find_secret(path: Path, name: str, secrets: Needles) -> str | None:
    """Which secret a file holds (in its name as packed, its bytes, or anything compressed or archived in it)."""
    in_name = next((label for label, value in secrets if value in name.encode()), None)
    if in_name or not secrets:
        return in_name
    with open(path, "rb") as handle:
        return _search(handle, secrets, str(path))


def wrap(root: Path, output: Path, secrets: Needles) -> tuple[list[Path], list[str]]:
    """Write the zip; raises SecretFound or Unsearchable, naming the first file it cannot pack."""
    files, left_out = files_to_pack(root, skip=output)
    for path in files:
        label = find_secret(path, f"{root.name}/{path.relative_to(root)}", secrets)
        if label:
            raise SecretFound(f"{path} contains the value of {label}: remove it, then wrap again")
    with atomic_open(output, "wb") as out, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            archive.write(path, Path(root.name) / path.relative_to(root))
    return files, left_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m evaluate.wrap", description=__doc__.split("\n\n")[0])
    parser.add_argument("output_dir", type=Path, metavar="OUTPUT_DIR", help="the folder of run directories to pack")
    parser.add_argument("--output", "-o", type=Path, default=Path("output.zip"),
                        help="zip to write (default output.zip)")
    args = parser.parse_args(argv)
    root = args.output_dir.resolve()
    if not root.is_dir():
        print(f"evaluate.wrap: {args.output_dir} is not a directory; run ./shell/run_train.sh first or set OUTPUT_DIR",
              file=sys.stderr)
        return 2
    try:
        values = known_values()
    except SecretsError as err:
        print(f"evaluate.wrap: {err}", file=sys.stderr)
        return 2
    for label, value in values:
        if len(value) < MIN_SECRET_LENGTH:
            print(f"evaluate.wrap: note: {label} is shorter than {MIN_SECRET_LENGTH} characters: not searched for",
                  file=sys.stderr)
    secrets = needles([(label, value) for label, value in values if len(value) >= MIN_SECRET_LENGTH])
    try:
        files, left_out = wrap(root, args.output.resolve(), secrets)
    except SecretFound as err:
        print(f"evaluate.wrap: {mask(str(err), secrets)}", file=sys.stderr)
        return 1
    except Unsearchable as err:
        print(f"evaluate.wrap: {mask(str(err), secrets)}: remove it (or unpack it), then wrap again", file=sys.stderr)
        return 1
    if not files:
        print(f"evaluate.wrap: nothing to pack under {args.output_dir}", file=sys.stderr)
        return 1
    size = args.output.stat().st_size
    print(f"{args.output}: {len(files)} file(s), {size / 2 ** 20:.1f} MiB")
    for line in left_out:
        print(f"  left out: {mask(line, secrets)}")
    for line in foreign_results(root, files):
        print(f"  note: {mask(line, secrets)}")
    return 0


def foreign_results(root: Path, files: list[Path]) -> list[str]:
    """A line for each packed result.json that evaluate.compare and validate will leave out or count failed (the
    gate, evaluate/gate.py), and why."""
    lines = []
    for path in files:
        if path.name == RESULT_NAME:
            found = gated([path])
            lines += [f"{quoted(str(path.relative_to(root)), 300)}: {bad.problem}; packed as it is, compare will "
                      "leave it out" for bad in found.rejected]
            lines += [f"{quoted(str(path.relative_to(root)), 300)}: fails validate ({quoted(item.failures[0])}); "
                      "packed as it is, compare counts it failed" for item in found.results
                      if item.overturned]
    return lines


if __name__ == "__main__":
    run(main, "evaluate.wrap")
