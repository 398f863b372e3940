"""Small file helpers shared by every tool: hashing, writing under a temporary name renamed when complete, and
the one line a write gets when the disk, not TPrimat, stopped it.

A write the machine refuses (full disk or quota, the file-size limit, a read-only file system, no permission, a
file where a folder should be) is no bug to show a traceback for: `disk_problem` names the path, what it needed
if known, the space left and the fix; `atomic_open` raises it as a DiskError (utils.cli.run: exit 1) after
removing its temporary file, so nothing half-written is left under either name.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import resource
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterable, Iterator

from utils.errors import WorkError

TMP_SUFFIX = ".tmp"  # fixed, so that a rerun finds and removes what a killed run left behind
# The folders a user points TPrimat's writes at (a data folder may lie in the cache): a disk message names the one
# the path is under.
WRITE_KNOBS = ("OUTPUT_DIR", "DATA_DIR", "XDG_CACHE_HOME")
# errno -> (what happened, the fix; {elsewhere} is "set KNOB to a folder" or "use a folder").
DISK_ERRNOS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("the disk is full", "free space there or {elsewhere} on a larger disk"),
    errno.EDQUOT: ("the disk quota is used up", "free space in the quota or {elsewhere} on another disk"),
    errno.EFBIG: ("the file reached the file-size limit", "raise the limit (ulimit -f unlimited) or {elsewhere} "
                  "on a file system that allows larger files"),
    errno.EROFS: ("the file system is read-only", "{elsewhere} on a writable file system"),
    errno.EACCES: ("permission denied", "make it writable for this user or {elsewhere} you own"),
    errno.EPERM: ("operation not permitted", "make it writable for this user or {elsewhere} you own"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "remove that file or {elsewhere} elsewhere"),
}


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


class DiskError(WorkError):
    """A write the machine refused (see DISK_ERRNOS); the message is the whole line."""


def _size_text(size: int) -> str:
    """A size as a person reads it: KiB below a MiB."""
    return f"{size / 2 ** 10:,.1f} KiB" if size < 2 ** 20 else f"{size / 2 ** 20:,.1f} MiB"


def _elsewhere(path: Path, knob: str | None) -> str:
    """How to write elsewhere: through `knob`, else the WRITE_KNOBS folder (from the environment) `path` lies under."""
    if knob:
        return f"set {knob} to a folder"
    for knob in WRITE_KNOBS:
        folder = os.environ.get(knob)
        if folder and Path(os.path.abspath(path)).is_relative_to(os.path.abspath(os.path.expanduser(folder))):
            return f"set {knob} to a folder"
    return "use a folder"


def _free(path: Path) -> int | None:
    """Bytes free to this user on the disk holding `path` (its nearest existing folder), None if unknown."""
    for folder in Path(os.path.abspath(path)).parents:
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            continue
    return None


def disk_problem(err: OSError, path: str | os.PathLike | None = None, needed: int | None = None,
                 written: int | None = None, knob: str | None = None) -> str | None:
    """One line for a write the machine refused (naming `path`, else the error's file), or None when `err` is
    some other error. `needed`: bytes the whole write needs, when known; `written`: bytes it had written; `knob`:
    the setting that moves the write elsewhere, when the path does not show it (TMPDIR)."""
    if err.errno not in DISK_ERRNOS:
        return None
    what, fix = DISK_ERRNOS[err.errno]
    where = Path(path if path is not None else err.filename or "?")
    sizes = []
    if needed is not None:
        sizes.append(f"needs {_size_text(needed)}")
    elif written:
        sizes.append(f"needs more than the {_size_text(written)} written")
    if err.errno in (errno.ENOSPC, errno.EDQUOT) and (free := _free(where)) is not None:
        sizes.append(f"{_size_text(free)} free")
    if err.errno == errno.EFBIG:
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY:
            sizes.append(f"ulimit -f is {limit // 1024} KiB")
    size = f" ({', '.join(sizes)})" if sizes else ""
    return f"cannot write {where}: {what}{size}; {fix.format(elsewhere=_elsewhere(where, knob))}"


RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def rust_os_error(err: BaseException) -> OSError | None:
    """The OSError a Rust library (tokenizers' save, safetensors) reported as a plain Exception "... (os error N)"."""
    found = RUST_OS_ERROR.search(str(err))
    if found is None or isinstance(err, OSError):
        return None
    number = int(found.group(1))
    return OSError(number, os.strerror(number))


@contextmanager
def writing(path: str | os.PathLike, needed: int | None = None, partial: Path | None = None) -> Iterator[None]:
    """Writes to `path` (through `partial`, its temporary file or folder, if any) in the block: one the machine
    refuses (DISK_ERRNOS) raises DiskError naming `path`. An error naming another file (an input) passes on."""
    try:
        yield
    except OSError as err:
        mine = err.filename is None or _within(Path(os.fspath(err.filename)), Path(path), partial)
        line = disk_problem(err, path, needed, _size(partial) if partial else None) if mine else None
        if line is None:
            raise
        raise DiskError(line) from None
    except Exception as err:  # noqa: BLE001 - only a Rust library's refused write is turned into its line
        refused = rust_os_error(err)
        line = disk_problem(refused, path, needed, _size(partial) if partial else None) if refused else None
        if line is None:
            raise
        raise DiskError(line) from None


def _within(where: Path, path: Path, partial: Path | None) -> bool:
    """Whether an error's file is the write's: `path`, a folder on the way to it, or anything in `partial`."""
    return where in path.parents or where.is_relative_to(path) or (
        partial is not None and where.is_relative_to(partial))


def _size(path: Path) -> int | None:
    """Bytes in a partial file; None for a folder or nothing."""
    return path.stat().st_size if path.is_file() else None


def _remove(path: Path) -> None:
    """Remove a partial file if there is one (on a read-only disk or under a file there is none to remove)."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


@contextmanager
def atomic_open(path: Path, mode: str = "w", needed: int | None = None, **kwargs) -> Iterator[IO]:
    """Open a temporary sibling of `path`; rename it onto `path` only if the block succeeds. A write the machine
    refuses raises DiskError naming `path` (`needed`: its size, when known), the temporary file removed."""
    tmp = tmp_path(path)
    try:
        with writing(path, needed, partial=tmp):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, mode, **kwargs) as handle:
                yield handle
            os.replace(tmp, path)
    finally:
        _remove(tmp)


def write_json(path: Path, data: dict) -> None:
    """Atomically write pretty, key-sorted JSON (byte-stable for the same data)."""
    with atomic_open(path, encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True, ensure_ascii=False)
        handle.write("\n")


def read_json(path: Path) -> dict:
    """A JSON object from a file TPrimat wrote (a manifest, a cache, system.json); ValueError naming the problem
    when it is none (a list, a string, null, NaN, nested too deep, not a regular file, far too large)."""
    value = parse_json(read_bounded(path))
    if not isinstance(value, dict):
        raise ValueError(f"a JSON {type(value).__name__}, not an object")
    return value


# What a reader of TPrimat's JSON (results, system.json, side files) takes: no writer of TPrimat's nests deeper than
# a dozen levels, writes NaN or infinity (json.dump(allow_nan=False)) or a result near this size, so a file beyond
# them is foreign or hostile, and reading it must neither exhaust the stack nor the memory.
MAX_JSON_DEPTH = 64
MAX_JSON_BYTES = 1 << 30


def json_problem(value) -> str | None:
    """Why a parsed JSON value is none TPrimat reads: nested deeper than MAX_JSON_DEPTH, or a number that is not
    finite (NaN, Infinity or one too large for a float, 1e400); None when sound. Iterative: no recursion."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"nested more than {MAX_JSON_DEPTH} levels deep"
        items = node.values() if isinstance(node, dict) else node
        for item in items:
            if type(item) is float and (item != item or item in (float("inf"), float("-inf"))):
                return "a number that is not finite (NaN or infinity)"
            if isinstance(item, (dict, list)):
                stack.append((item, depth + 1))
    return None


def parse_json(data: bytes | str):
    """The JSON value of data; ValueError naming the problem when it is not text, not JSON, too deep, too large or
    holds a number that is not finite."""
    if len(data) > MAX_JSON_BYTES:
        raise ValueError(f"larger than {MAX_JSON_BYTES >> 20} MiB, far more than any TPrimat file")
    try:
        value = json.loads(data)
    except UnicodeDecodeError:
        raise ValueError("not text (bytes that are not UTF-8)") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except RecursionError:
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep") from None
    if isinstance(value, float) and not (value == value and abs(value) != float("inf")):
        raise ValueError("a number that is not finite (NaN or infinity)")
    problem = json_problem(value) if isinstance(value, (dict, list)) else None
    if problem:
        raise ValueError(problem)
    return value


def read_bounded(path: Path, limit: int = MAX_JSON_BYTES) -> bytes:
    """A regular file's bytes, at most limit of them: ValueError for anything else (a device, a FIFO, a folder, a
    file far larger than TPrimat writes), so a link to /dev/zero is one line, not a hang."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opened without O_NONBLOCK would wait for a writer
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit >> 20} MiB, far more than any TPrimat file")
    return data
