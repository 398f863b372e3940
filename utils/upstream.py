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
from dataclasses import dataclass
from pathlib import Path

from utils.errors import UsageError, WorkError


@dataclass(frozen=True)
class Source:
    repo: str  # owner/name on GitHub
    ref: str  # the tag or commit the facts were read at (a stack row's pin)
    package: str | None = None  # the PyPI distribution==version whose installed files are the repository's
    prefix: str = ""  # the repository folder the installed package's files sit under ("src/" for src layouts)


@dataclass(frozen=True)
class Fact:
    name: str  # unique, short
    source: str  # a key of SOURCES
    path: str  # the file, relative to the repository root
    lines: tuple[int, int]  # first and last line, 1-based, inclusive
    sha256: str  # of those lines (module docstring)
    claim: str  # what TPrimat relies on, in TPrimat's words
    test: str  # tests/<file>.py::<test function> that holds TPrimat to it


SOURCES = {
    "primus-v26.5": Source("AMD-AGI/Primus", "ca7ddda370ae10afa1a714a357cdf3e98d64456f"),
    "torchtitan-0.3.0": Source("pytorch/torchtitan", "v0.3.0", package="torchtitan==0.3.0"),
    "torch-2.13.0": Source("pytorch/pytorch", "v2.13.0", package="torch==2.13.0"),
}

# One section per source; a fact is added where its source's section is.
FACTS: tuple[Fact, ...] = (
    # --- AMD-AGI/Primus release/v26.5 (ca7ddda3) -------------------------------------------------------------
    # --- pytorch/torchtitan v0.3.0 (requirements/torchtitan.txt) ----------------------------------------------
    Fact("torchtitan-0.3.0-trainer-imports-full-dtensor", "torchtitan-0.3.0", "torchtitan/trainer.py", (40, 40),
         "8ee9787acffd26cfb736172eda5640a385313b09426f6d4b3d0d911ebd59eb32",
         "the trainer that torchtitan.train (the run's entry point) imports imports torchtitan.distributed's "
         "full_dtensor, so importing the entry point is what shows whether the run can start",
         "tests/test_train_torchtitan.py::test_importing_torchtitans_entry_point_imports_what_needs_torch_2_13"),
    Fact("torchtitan-0.3.0-mesh-dims", "torchtitan-0.3.0", "torchtitan/distributed/full_dtensor.py", (23, 23),
         "bc07fd4409183ed53d1c6a48e86c3f8cc3e150d587f6650a30078f9beda89f5e",
         "full_dtensor imports DataParallelMeshDims from torch.distributed.fsdp at module level",
         "tests/test_utils_stacks.py::test_no_stack_lists_a_framework_its_published_torch_is_too_old_for"),
    Fact("torchtitan-0.3.0-block-mask", "torchtitan-0.3.0", "torchtitan/models/common/decoder.py", (274, 274),
         "092e86476bdb93e65eae007eafb68292aa561db2befed6bd10b2a64c64f30300",
         "the decoder's block mask is built with create_block_mask's separate_full_blocks argument",
         "tests/test_utils_stacks.py::test_no_stack_lists_a_framework_its_published_torch_is_too_old_for"),
    # --- pytorch/pytorch v2.13.0 (the Megatron-Bridge test environment's torch, requirements/mbridge.txt) -----
    Fact("torch-2.13-mesh-dims", "torch-2.13.0", "torch/distributed/fsdp/__init__.py", (53, 53),
         "61083ced4f3f57fd2dd20746b55e6968c58694c3887dd1b1a0e0a176d3e69e93",
         "torch 2.13 exports DataParallelMeshDims from torch.distributed.fsdp (torch 2.11 on a lent H100 did not)",
         "tests/test_utils_stacks.py::test_no_stack_lists_a_framework_its_published_torch_is_too_old_for"),
    Fact("torch-2.13-block-mask", "torch-2.13.0", "torch/nn/attention/flex_attention.py", (1838, 1847),
         "37979171e0ba37ce197182687e9b0cad1369fe4dabec930de51f9a20b2951f25",
         "create_block_mask takes separate_full_blocks in torch 2.13",
         "tests/test_utils_stacks.py::test_no_stack_lists_a_framework_its_published_torch_is_too_old_for"),
)


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


if __name__ == "__main__":
    from utils.cli import run
    run(main, "utils.upstream")
