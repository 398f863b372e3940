"""What the upstream-fact table is made of: a source (a repository at a pin) and a fact read there
(utils/upstream/__init__.py says how a fact is hashed and re-read). Standard library only."""

from __future__ import annotations

from dataclasses import dataclass


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
