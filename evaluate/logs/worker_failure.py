"""What a log says when torchrun lost a worker: which rank, on which host, by which signal or exit code, and the
last lines the log holds from before it, for the first lines of a failed run's error excerpt.

torchrun (torch.distributed.elastic) ends a run whose worker died with a report framed by lines of '=': a
"Failures:" list (the ranks it stopped, or <NO_OTHER_FAILURES>) and a "Root Cause (first observed failure):"
entry, each with host, rank (local_rank), exitcode (negative: minus the signal; newer versions add its name) and
a traceback line. Its own Python traceback (ChildFailedError) and its logger's lines ("E1125 04:48:14.269000
17802 torch/distributed/elastic/...") come just before. The log's last line is then the closing '=' line, which
says nothing; this module turns the report into one line per failed rank, the first observed one first, and adds
the lines the workers printed last: those of the failed rank where the log prefixes lines per rank ("[rank1]:",
torchrun --tee's "[default1]:"), else the last worker lines of any rank, said so.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from pathlib import Path

from evaluate.logs.files import clean_tail
from utils.cli import quoted

TAIL_BYTES = 64 << 10  # torchrun's report and the lines before it fit in this much of a log's end
TAIL_LINES = 200
WORKER_LINES = 5  # lines of what the workers printed last, in the excerpt
ENTRY = re.compile(r"^\s*\[\d+\]:\s*$")
FIELD = re.compile(r"^\s*(host|rank|exitcode|error_file|traceback)\s*:\s*(.*?)\s*$")
RANK = re.compile(r"^(\d+)(?:\s*\(local_rank:\s*(\d+)\))?")
EXIT = re.compile(r"^(-?\d+)")
# torchrun's own lines: its logger, its traceback, its report's frame and start-up banner.
AGENT = re.compile(r"^(?:[IWE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ .*torch/distributed/|Traceback |\s+|"
                   r"torch\.distributed\.elastic\.|\S+ FAILED$|[=*-]{10,}$|Setting OMP_NUM_THREADS)")
PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:\s?(.*)$")
# A Python exception's last line ("AssertionError: ...", "torch.OutOfMemoryError: ..."), a rank prefix allowed.
RAISED = re.compile(r"^\s*(?:\[(?:rank|default)\d+\]:\s*)?((?:\w+\.)*\w*(?:Error|Exception)(?::.*)?)$")


@dataclass(frozen=True)
class Failure:
    """One rank torchrun reports as failed."""

    rank: int | None
    local_rank: int | None
    host: str
    exit_code: int | None
    root_cause: bool
    detail: str  # its traceback line when that says more than the signal

    def line(self) -> str:
        who = "rank ?" if self.rank is None else f"rank {self.rank}" + (
            f" (local rank {self.local_rank})" if self.local_rank is not None else "")
        if self.exit_code is not None and self.exit_code < 0:
            how = f"was killed by {_signal_name(-self.exit_code)}"
        else:
            how = f"exited with code {self.exit_code if self.exit_code is not None else '?'}"
        first = "first failure: " if self.root_cause else ""
        detail = f" ({quoted(self.detail)})" if self.detail else ""
        return f"{first}{who} on host {self.host or '?'} {how}{detail}"


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} (signal {number})"
    except ValueError:
        return f"signal {number}"


def _entry(fields: dict[str, str], root_cause: bool) -> Failure:
    rank = RANK.match(fields.get("rank", ""))
    code = EXIT.match(fields.get("exitcode", ""))
    detail = fields.get("traceback", "")
    if detail.startswith(("Signal ", "To enable traceback", "<N/A>")):
        detail = ""  # the signal is said already; the rest is torchrun's advice
    return Failure(int(rank.group(1)) if rank else None,
                   int(rank.group(2)) if rank and rank.group(2) is not None else None,
                   fields.get("host", ""), int(code.group(1)) if code else None, root_cause, detail)


def failures(lines: list[str]) -> list[Failure]:
    """The failed ranks of torchrun's last report in the lines, the first observed failure first."""
    found: list[Failure] = []
    fields: dict[str, str] | None = None
    root_cause = entry_root = False
    for line in lines + [""]:
        if line.startswith("Root Cause"):
            root_cause = True
        elif line.startswith("Failures:"):
            root_cause = False
        if (ENTRY.match(line) or not line.strip() or line.startswith(("Root Cause", "---", "==="))) and fields:
            found.append(_entry(fields, entry_root))
            fields = None
        if ENTRY.match(line):
            fields, entry_root = {}, root_cause
        elif fields is not None and (match := FIELD.match(line)):
            fields[match.group(1)] = match.group(2)
    return sorted(found, key=lambda failure: not failure.root_cause)


def _worker_lines(lines: list[str], rank: int | None) -> tuple[list[str], str]:
    """The last lines the workers printed before torchrun's report, and whose they are."""
    prefixed = [(int(m.group(1)), m.group(2)) for m in map(PREFIX.match, lines) if m]
    if rank is not None and any(who == rank for who, _ in prefixed):
        return [text for who, text in prefixed if who == rank][-WORKER_LINES:], f"rank {rank}'s last lines"
    end = next((i for i in range(len(lines) - 1, -1, -1) if ENTRY.match(lines[i])), len(lines))
    while end > 0 and (AGENT.match(lines[end - 1]) or lines[end - 1].startswith(("Failures:", "Root Cause", "["))):
        end -= 1
    kept = [line for line in lines[:end] if line.strip() and not AGENT.match(line)]
    return kept[-WORKER_LINES:], "the workers' last lines (any rank)"


def summary(lines: list[str]) -> str | None:
    """The excerpt's head for a run torchrun reports a worker failure in: one line per failed rank, then the
    last lines printed before it; None when the lines hold no such report."""
    found = failures(lines)
    if not found:
        return None
    printed, whose = _worker_lines(lines, found[0].rank)
    head = [failure.line() for failure in found]
    if printed:
        head.append(f"{whose}:")
        head += [f"  {quoted(line)}" for line in printed]
    return "\n".join(head)


def cause(excerpt: str) -> str:
    """The one line a failed run is shown by: the last exception its workers raised, where the excerpt names one
    (torchrun's own ChildFailedError aside, which only says a worker failed), else the excerpt's last line."""
    lines = excerpt.strip().splitlines()
    raised = [m.group(1).strip() for m in map(RAISED.match, lines) if m and "ChildFailedError" not in m.group(1)]
    return (raised or lines or ["no error excerpt"])[-1]


def log_tail_lines(path: Path) -> list[str]:
    """A log's last lines, cleaned as the extraction cleans them; [] when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - TAIL_BYTES))
            return clean_tail(handle.read(), TAIL_LINES)
    except OSError:
        return []
