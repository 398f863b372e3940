"""Reading logs for evaluate.logs.parse: block by block, only the lines that may matter decoded, and the tail kept.

A log of any size is read in BLOCK-sized pieces; a line is decoded (UTF-8, damaged bytes replaced, ANSI
colours dropped, carriage-return rewrites split) only when it holds one of MARKERS, and every other line
is only counted. The last bytes of the last log are kept for error excerpts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import BinaryIO, Iterable, Sequence

from evaluate.logs.formats import distinct, readers
from evaluate.logs.records import STEP_MARKER, stamped_step
from evaluate.logs.settings import EFFECTIVE_MARKER
from evaluate.logs.stream import Stream

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
# Bytes that a line must contain to be worth decoding (these and the registered formats' markers: Megatron-LM's
# "iteration" also marks the evaluation report); every other line is only counted.
MARKERS = tuple(dict.fromkeys((
    b" ...", b"Mock", EFFECTIVE_MARKER.encode(), STEP_MARKER.encode(), b"Traceback",
    b"out of memory", b"OutOfMemoryError", b"microbatches", b"number of parameters", b"Config(", b"(UUID: GPU-",
    b"Card Series", b"Card series", b"MARKET_NAME", b"CCL version", b"Using network", b"vocab",
    *(marker.encode() for fmt in distinct() for marker in fmt.markers))))
STEP_MARKERS = tuple(marker.encode() for reader in readers() for marker in reader.format.markers)
TAIL_LINES = 20
TAIL_BYTES = 64 << 10
BLOCK = 8 << 20


def _candidate_starts(block: bytes) -> list[int]:
    """Offsets of the lines in a block that contain a marker (found with bytes.find, not per line)."""
    starts = set()
    for marker in MARKERS:
        position = block.find(marker)
        while position != -1:
            starts.add(block.rfind(b"\n", 0, position) + 1)
            position = block.find(marker, block.find(b"\n", position))
    return sorted(starts)


def _feed(stream: Stream, raw: bytes, number: int, complete: bool) -> None:
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:
        text = ANSI.sub("", text)
    pieces = text.split("\r")
    last = len(pieces) - 1
    for index, piece in enumerate(pieces):
        stream.line(number, piece, complete or index < last)


def read_lines(paths: Sequence[Path | BinaryIO], stream: Stream) -> tuple[int, bool, bytes]:
    """Feed every marked line of every log (a file, or one already open: a zip member) to the stream, block by
    block (memory stays bounded).

    Returns (lines read, whether a log ended mid-line, the last bytes of the last log).
    """
    lines, truncated, tail = 0, False, b""
    for path in paths:
        carry, tail = b"", b""
        with open(path, "rb") if isinstance(path, Path) else path as handle:
            while block := handle.read(BLOCK):
                block = carry + block
                cut = block.rfind(b"\n") + 1
                block, carry = block[:cut], block[cut:]
                counted = 0
                for start in _candidate_starts(block):
                    end = block.find(b"\n", start)
                    lines += block.count(b"\n", counted, start)
                    counted = start
                    _feed(stream, block[start:end], lines + 1, True)
                lines += block.count(b"\n", counted)
                tail = (tail + block)[-TAIL_BYTES:]
        if carry:  # the last line has no line end: the log was cut off
            lines += 1
            truncated = True
            if any(marker in carry for marker in MARKERS):
                _feed(stream, carry, lines, False)
            tail = (tail + carry)[-TAIL_BYTES:]
    return lines, truncated, tail


def clean_tail(tail: bytes, lines: int = TAIL_LINES) -> list[str]:
    """The last non-empty lines, without colours or progress-bar rewrites (for error excerpts)."""
    out = []
    for raw in tail.split(b"\n")[-lines - 1:]:
        text = ANSI.sub("", raw.decode("utf-8", "replace")).split("\r")
        kept = next((piece.rstrip() for piece in reversed(text) if piece.strip()), "")
        if kept:
            out.append(kept)
    return out[-lines:]



def step_end_times(path: Path) -> dict[int, float]:
    """Each step's end (time.time() seconds, to the second) from the log's timestamped step lines (Megatron's,
    Primus's, NeMo's prefixes), cleaned as the extraction cleans them; {} where the log has none."""
    with open(path, "rb") as handle:
        return stamped_ends(handle)


def stamped_ends(lines: Iterable[bytes]) -> dict[int, float]:
    """step_end_times of a log's lines, however read (a file, a zip member: evaluate.telemetry_checks)."""
    found: dict[int, float] = {}
    for raw in lines:
        if not any(marker in raw for marker in STEP_MARKERS):
            continue
        for piece in ANSI.sub("", raw.decode("utf-8", "replace")).split("\r"):
            if (stamped := stamped_step(piece)) is not None:
                found[stamped[0]] = stamped[1]
    return found
