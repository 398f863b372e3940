"""Exit-code discipline shared by every command-line tool: 0 ok, 2 bad input, 1 failure of the work.

A tool raises UsageError or WorkError with one line naming the problem and the fix; `run` turns it
into that line on stderr and the exit code, never a traceback. A write the machine refuses (full,
over quota or the file-size limit, read-only, no permission: utils.files.disk_problem) is a failure of
the work with its own fix, whatever stage hits it. Ctrl-C (SIGINT) and SIGTERM end a tool the same way:
its cleanup runs (partial files removed), one line, exit 130 or 143. `Parser` gives a bad command
line the same one line (argparse's own prints the whole usage before it).
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import NoReturn

from utils import ROOT
from utils.errors import UsageError, WorkError
from utils.files import disk_problem, rust_os_error


# The signals that stop a run, a matrix or a tool (shell/lib.sh's TP_STOP_SIGNALS are the same four): each is
# passed on to the children and ends the process with 128+signal.
STOP_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)




def now_iso() -> str:
    """The present as TPrimat records times (launch.json, results): ISO 8601, UTC, whole seconds."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


QUOTE_CHARS = 200  # the most of one input line a message quotes


def quoted(text: str, limit: int = QUOTE_CHARS) -> str:
    """Text read from an input, safe to put in a one-line message: every character that is not printable (control
    characters, line breaks, escape sequences, bytes that were not text and decoded as U+FFFD) escaped as Python
    writes it, and cut after `limit` characters, saying how many more there were."""
    shown = "".join(c if c.isprintable() and c != "\ufffd" else c.encode("unicode_escape").decode("ascii")
                    for c in text[:limit])
    return shown + (f" [... {len(text) - limit:,} more characters]" if len(text) > limit else "")


# What Markdown acts on in the middle of a line: emphasis (an underscore only at a word's edge), code, links and
# images (their brackets), HTML, table cells, strike-through and math. Line-start syntax (headings, lists) cannot
# occur: quoted() leaves no line break.
MARKDOWN_SPECIALS = re.compile(r"([\\`*\[\]<>|~$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
IDENTIFIER = re.compile(r"[\w.:/+=@%,-]*")  # a name, version, hash or path: nothing Markdown or a terminal acts on


def markdown_text(text: str, limit: int = QUOTE_CHARS) -> str:
    """Text read from a file, safe inside a line of Markdown: quoted() (no control character, no line break, cut
    at limit) and every character Markdown acts on in a line escaped (MARKDOWN_SPECIALS). A name, version, hash
    or path without spaces is left as it is."""
    if IDENTIFIER.fullmatch(text) and len(text) <= limit:
        return text
    return MARKDOWN_SPECIALS.sub(r"\\\1", quoted(text, limit))


def say(line: str) -> None:
    """One line on stderr; after a hangup the terminal may be gone, and the exit status still says what happened."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


def warn(message: str) -> None:
    """A TPrimat warning line, as every stage prints it."""
    say(f"[tprimat] warning: {message}")


class SignalFlag:
    """A flag a signal handler sets (pass `flag.set` as the handler) and the program polls. A plain attribute:
    a handler runs on the main thread between two bytecodes, and threading.Event.set() there deadlocks when that
    thread already holds the Event's lock: inside its wait(), or inside set() when a second signal follows the
    first (a second Ctrl-C hung the judge that way)."""

    POLL_S = 0.1

    def __init__(self) -> None:
        self.raised = False

    def set(self, *_signal) -> None:
        self.raised = True

    def is_set(self) -> bool:
        return self.raised

    def wait(self, seconds: float) -> None:
        """Sleep up to `seconds`, less once set."""
        deadline = time.monotonic() + seconds
        while not self.raised and time.monotonic() < deadline:
            time.sleep(self.POLL_S)


def positive_number(text: str) -> float:
    """An argparse type: a finite number above 0 (NaN, infinity, 1e400 and 0 are refused in one line)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quoted(text, 40)} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{quoted(text, 40)}: give a finite number above 0")
    return value


def _path_problem(path: Path) -> str | None:
    """What makes a path one no file can have: a component longer than the file system allows, a link loop."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno in (errno.ENAMETOOLONG, errno.ELOOP):
            return f"{quoted(str(path), 120)}: {err.strerror}"
    return None


def output_file(text: str) -> Path:
    """An argparse type: a file to write, checked up front (not a folder, a path a file can have)."""
    path = Path(text)
    if problem := _path_problem(path):
        raise argparse.ArgumentTypeError(problem)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{quoted(text, 120)} is a folder: give the file to write")
    return path


def output_dir(text: str) -> Path:
    """An argparse type: a folder to write into, checked up front (not a file, a path a folder can have)."""
    path = Path(text)
    if problem := _path_problem(path):
        raise argparse.ArgumentTypeError(problem)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{quoted(text, 120)} is a file, not a folder: give a folder to write into")
    return path


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, `TOOL: error: PROBLEM; see ... --help`, exit 2."""

    def error(self, message: str) -> NoReturn:
        tool = self.prog.removeprefix("python3 -m ").split()[0]
        self.exit(2, f"{tool}: error: {message}; see {self.prog} --help\n")


class Terminated(BaseException):
    """SIGTERM, raised where the tool is so that its cleanup runs as for Ctrl-C."""


_STOPS: list[int] = []  # signals received; see stop_if_signalled


def _stop(signum, frame) -> NoReturn:
    _STOPS.append(signum)
    raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


def _unraisable(info) -> None:
    """A stop swallowed where exceptions cannot propagate is raised again by stop_if_signalled: no traceback here."""
    if not isinstance(info.exc_value, (KeyboardInterrupt, Terminated)):
        sys.__unraisablehook__(info)


def stop_if_signalled() -> None:
    """Raise again a stop whose exception was swallowed: one arriving while a worker is forked is raised inside
    an at-fork hook (logging's), which ignores it. Call before work is committed."""
    if _STOPS:
        raise KeyboardInterrupt() if _STOPS[0] == signal.SIGINT else Terminated()


def worker_signals() -> None:
    """Initializer of worker processes: Ctrl-C reaches the whole process group, and only the parent reports it
    (after the workers finish their block); a SIGTERM sent to a worker simply ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


# An OSError of these is a path the user gave that no file can have or reach (a component over 255 bytes, a link
# loop, a folder where a file belongs): one line, exit 2, whichever tool meets it.
BAD_PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP, errno.EISDIR, errno.EEXIST})


def run(main: Callable[[list[str] | None], int], tool: str) -> None:
    """Call main() and exit with its code, mapping the errors above to one line each."""
    install_excepthook()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stop)
    sys.unraisablehook = _unraisable
    try:
        code = main(None)
    except UsageError as err:
        print(f"{tool}: error: {err}", file=sys.stderr)
        code = 2
    except WorkError as err:
        print(f"{tool}: error: {err}", file=sys.stderr)
        code = 1
    except BrokenPipeError:  # the reader went away (`... list | head`): what it wanted was printed, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that exit's flush raises no second time
        code = 141  # 128 + SIGPIPE, as a shell reports a command killed by a closed pipe
    except OSError as err:
        line = disk_problem(err)
        if line is None and err.errno in BAD_PATH_ERRNOS:  # a path given, not the work, is wrong: bad input
            line, code = f"{quoted(str(err.filename or ''), 120)}: {err.strerror}", 2
        elif line is None:
            raise
        else:
            code = 1
        print(f"{tool}: error: {line}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"{tool}: interrupted", file=sys.stderr)
        code = 130
    except Exception as err:  # a Rust library's write (tokenizers' save): "File too large (os error 27)"
        refused = rust_os_error(err)
        line = disk_problem(refused) if refused else None
        if line is None:
            raise
        print(f"{tool}: error: {line}", file=sys.stderr)
        code = 1
    except Terminated:
        print(f"{tool}: terminated", file=sys.stderr)
        code = 143
    sys.exit(code)


# The packages of TPrimat itself: a module of theirs that is missing is a bug, not the wrong Python.
PROJECT_PACKAGES = frozenset({"bench", "data", "evaluate", "train", "utils", "tests"})


def install_excepthook() -> None:
    """Make a missing third-party library (the wrong Python) and Ctrl-C one line each instead of a traceback.

    Called by the entry points (the bench, data, evaluate and train packages, utils' own tools through `run`)
    before they import a third-party library; importing utils alone changes nothing. A bug keeps its traceback."""
    if sys.excepthook is not _missing_library_hook:
        global _previous_hook
        _previous_hook = sys.excepthook
        sys.excepthook = _missing_library_hook


def _missing_library_hook(kind, value, traceback) -> None:
    """sys.excepthook: a ModuleNotFoundError of a third-party library is the wrong Python, not a bug;
    neither is a KeyboardInterrupt."""
    if issubclass(kind, KeyboardInterrupt):
        print(f"{_tool()}: interrupted", file=sys.stderr)
        sys.exit(130)
    name = (getattr(value, "name", None) or "").partition(".")[0]
    if not issubclass(kind, ModuleNotFoundError) or not name or name in PROJECT_PACKAGES:
        _previous_hook(kind, value, traceback)
        return
    print(f"{_tool()}: this Python ({sys.executable}) has no {name}: run the tool in the project's "
          "environment: source .venv/bin/activate (./shell/run_train.sh or ./shell/test.sh creates it) or ./shell/entry.sh",
          file=sys.stderr)
    sys.exit(2)


def _tool() -> str:
    """The running tool as the user typed it (python3 -m data.fetch), else the script's name."""
    script = Path(sys.argv[0] or "tprimat")
    try:
        return "python3 -m " + ".".join(script.resolve().relative_to(ROOT).with_suffix("").parts)
    except ValueError:
        return script.name


_previous_hook = sys.excepthook
