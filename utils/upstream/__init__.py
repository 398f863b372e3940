"""The upstream-fact table: every fact about a stack's own code that a GPU path relies on, tied to its source.

A fact (a key, a default, a log form, an environment variable, an assert, a version requirement) names the
repository, the tag or commit it was read at, the file, the line range, and the sha256 of those lines as read; never
the text itself (no upstream code or text is copied into TPrimat). `claim` says, in TPrimat's words, what TPrimat
relies on there, and `test` names the test that holds TPrimat's behaviour to it.

The hash is of the lines `first..last` (1-based, inclusive), each without its line ending, joined with "\\n", as
UTF-8. Where the package installs from the package index (megatron-core, megatron-bridge, torchtitan), `package`
names the pinned distribution and the fact is re-read from the installed files by the test environment that holds
it (`check --installed`); where it does not (Primus), the recorded location and hash are held here and
`check --checkout REPO=GIT_DIR` re-reads every entry from a fetched clone or bare repository at its ref:

    python3 -m utils.upstream check --checkout AMD-AGI/Primus=/path/to/Primus [--checkout ...]
    .venv-with-the-package/bin/python -m utils.upstream check --installed
    python3 -m utils.upstream hash (--checkout GIT_DIR --ref REF | --installed) PATH FIRST LAST

A changed pin re-reads its facts: a moved line is a new line range, a changed line a new hash and a new look at
whether TPrimat's behaviour still holds. Standard library only.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

from utils.errors import UsageError, WorkError
from utils.upstream.table import FACTS, SOURCES, Fact, Source

__all__ = ["FACTS", "SOURCES", "Fact", "Source", "line_hash", "read_checkout", "read_installed", "problems",
           "installed_facts", "main"]


def line_hash(text: str, first: int, last: int) -> str:
    """sha256 of lines first..last of a file's text (the table's convention)."""
    lines = text.splitlines()
    if not 1 <= first <= last <= len(lines):
        raise WorkError(f"lines {first}-{last} are outside the file ({len(lines)} lines)")
    return hashlib.sha256("\n".join(lines[first - 1:last]).encode()).hexdigest()


def read_checkout(git_dir: str, ref: str, path: str) -> str:
    """A file at a ref of a clone or bare repository (no work tree needed)."""
    out = subprocess.run(["git", "-C", git_dir, "show", f"{ref}:{path}"], capture_output=True, text=True)
    if out.returncode != 0:
        raise WorkError(f"{path} at {ref} is not in {git_dir}: {out.stderr.strip()[:200]}")
    return out.stdout


def read_installed(source: Source, path: str) -> str:
    """A file of the installed distribution that the source pins (the version must be the pinned one)."""
    name, _, version = (source.package or "").partition("==")
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise WorkError(f"{name} is not installed in {sys.executable}") from None
    if dist.version != version:
        raise WorkError(f"{name} {dist.version} is installed, the table's facts are of {version}")
    file = Path(str(dist.locate_file(path.removeprefix(source.prefix))))
    if not file.is_file():
        raise WorkError(f"{file} is not in {name} {version}")
    return file.read_text()


def problems(facts: tuple[Fact, ...], read) -> list[str]:
    """Each fact whose lines no longer hash as recorded: `read(source, path)` gives a file's text."""
    found = []
    for fact in facts:
        try:
            digest = line_hash(read(SOURCES[fact.source], fact.path), *fact.lines)
        except WorkError as err:
            found.append(f"{fact.name}: {err}")
            continue
        if digest != fact.sha256:
            found.append(f"{fact.name}: {fact.path}:{fact.lines[0]}-{fact.lines[1]} at {SOURCES[fact.source].ref} "
                         f"hashes {digest[:12]}, the table has {fact.sha256[:12]}: read it again")
    return found


def installed_facts() -> tuple[Fact, ...]:
    """The facts of every packaged source whose pinned distribution this Python has installed."""
    have = set()
    for key, source in SOURCES.items():
        name, _, version = (source.package or "").partition("==")
        try:
            if name and importlib.metadata.version(name) == version:
                have.add(key)
        except importlib.metadata.PackageNotFoundError:
            pass
    return tuple(fact for fact in FACTS if fact.source in have)


def _checkouts(pairs: list[str]) -> dict[str, str]:
    found = {}
    for pair in pairs:
        repo, sep, git_dir = pair.partition("=")
        if not sep or not git_dir:
            raise UsageError(f"--checkout {pair!r}: give OWNER/NAME=GIT_DIR")
        if repo not in {source.repo for source in SOURCES.values()}:
            raise UsageError(f"--checkout {repo!r}: the table has no facts of that repository")
        found[repo] = git_dir
    return found


def main(argv: list[str] | None = None) -> int:
    from utils.cli import Parser

    parser = Parser(prog="python3 -m utils.upstream", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="re-read every fact of the given checkouts (or installed packages)")
    check.add_argument("--checkout", action="append", default=[], metavar="OWNER/NAME=GIT_DIR")
    check.add_argument("--installed", action="store_true", help="the facts of the pinned packages this Python has")
    hashed = sub.add_parser("hash", help="the table's hash of a line range, to record a new fact")
    hashed.add_argument("--checkout", metavar="GIT_DIR")
    hashed.add_argument("--ref")
    hashed.add_argument("--package", metavar="NAME==VERSION")
    hashed.add_argument("path")
    hashed.add_argument("first", type=int)
    hashed.add_argument("last", type=int)
    args = parser.parse_args(argv)
    if args.command == "hash":
        if args.checkout and args.ref:
            text = read_checkout(args.checkout, args.ref, args.path)
        elif args.package:
            text = read_installed(Source("", "", args.package), args.path)
        else:
            raise UsageError("hash: give --checkout GIT_DIR --ref REF, or --package NAME==VERSION")
        print(line_hash(text, args.first, args.last))
        return 0
    checkouts = _checkouts(args.checkout)
    if not checkouts and not args.installed:
        raise UsageError("check: give --checkout OWNER/NAME=GIT_DIR (one per repository) or --installed")
    facts = tuple(fact for fact in FACTS if SOURCES[fact.source].repo in checkouts)
    found = problems(facts, lambda source, path: read_checkout(checkouts[source.repo], source.ref, path))
    if args.installed:
        packaged = installed_facts()
        found += problems(packaged, read_installed)
        facts += packaged
    for line in found:
        print(line, file=sys.stderr)
    print(f"{len(facts) - len(found)} of {len(facts)} upstream facts read as recorded")
    return 1 if found else 0
