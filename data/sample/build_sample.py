"""Rebuild sample.jsonl.gz, the bundled corpus, from the Canterbury corpus texts in Brotli's source release.

    pip download --no-deps --no-binary :all: brotli==1.2.1   # brotli-1.2.1.tar.gz
    python3 -m data.sample.build_sample brotli-1.2.1.tar.gz

Kept here so that the bundled file can be checked and reproduced byte for byte (see README.md).
Each book loses its Project Gutenberg release notes, prose paragraphs are unwrapped, verse keeps
its lines (long verse paragraphs are cut at line ends), and paragraphs are grouped into documents of at least WORDS_PER_DOCUMENT words.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

WORDS_PER_DOCUMENT = 300
OUTPUT = Path(__file__).resolve().parent / "sample.jsonl.gz"


@dataclass(frozen=True)
class Book:
    member: str  # file in tests/testdata of the Brotli source release
    title: str
    author: str
    verse: bool  # keep line breaks
    start: str  # regex of the first line kept
    end: str | None  # regex of the first line dropped


BOOKS = [
    Book("alice29.txt", "Alice's Adventures in Wonderland", "Lewis Carroll", False, r"^\s+CHAPTER I\s*$", None),
    Book("lcet10.txt", "Workshop on Electronic Texts: Proceedings (Library of Congress, 1992)", "James Daly (ed.)",
         False, r"^\s+WORKSHOP ON ELECTRONIC TEXTS\s*$", r"^\*End of The Project Gutenberg"),
    Book("plrabn12.txt", "Paradise Lost", "John Milton", True, r"^Book I\s*$", None),
    Book("asyoulik.txt", "As You Like It", "William Shakespeare", True, r"^\s*AS YOU LIKE IT\s*$", None),
]


def paragraphs(text: str, book: Book) -> list[str]:
    lines = text.replace("\r\n", "\n").split("\n")
    first = next(i for i, line in enumerate(lines) if re.match(book.start, line))
    last = next((i for i, line in enumerate(lines) if book.end and re.match(book.end, line)), len(lines))
    blocks = re.split(r"\n\s*\n", "\n".join(lines[first:last]))
    out = []
    for block in blocks:
        rows = [row.strip() for row in block.split("\n") if row.strip()]
        if rows:
            out.append(("\n" if book.verse else " ").join(rows))
    return out


def split_long(para: str) -> list[str]:
    """A verse paragraph (a whole book of Paradise Lost) cut at line ends into document-sized pieces."""
    pieces, current = [], []
    for line in para.split("\n"):
        current.append(line)
        if sum(len(row.split()) for row in current) >= WORDS_PER_DOCUMENT:
            pieces.append("\n".join(current))
            current = []
    return pieces + (["\n".join(current)] if current else [])


def documents(paras: list[str]) -> list[str]:
    docs, current = [], []
    for para in (piece for p in paras for piece in split_long(p)):
        current.append(para)
        if sum(len(p.split()) for p in current) >= WORDS_PER_DOCUMENT:
            docs.append("\n\n".join(current))
            current = []
    if current:
        docs.append("\n\n".join(current))
    return docs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sdist", type=Path, help="brotli-1.2.1.tar.gz")
    args = parser.parse_args()
    with tarfile.open(args.sdist) as tar, gzip.GzipFile(OUTPUT, "wb", mtime=0) as raw:
        for book in BOOKS:
            text = tar.extractfile(f"brotli-1.2.1/tests/testdata/{book.member}").read().decode("ascii")
            for doc in documents(paragraphs(text, book)):
                record = {"text": doc, "title": book.title, "author": book.author,
                          "source": f"brotli-1.2.1/tests/testdata/{book.member}"}
                raw.write((json.dumps(record, ensure_ascii=False) + "\n").encode())


if __name__ == "__main__":
    main()
