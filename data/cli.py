"""Exit-code discipline shared by the data tools: 0 ok, 2 bad input, 1 failure of the work.

A tool raises UsageError or WorkError with one line naming the problem and the fix; `run` turns it
into that line on stderr and the exit code, never a traceback. A full disk is a failure of the
work with its own fix, whatever stage hits it. `Parser` gives a bad command line the same one line
(argparse's own prints the whole usage before it).
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, `TOOL: error: PROBLEM; see ... --help`, exit 2."""

    def error(self, message: str) -> NoReturn:
        tool = self.prog.removeprefix("python3 -m ").split()[0]
        self.exit(2, f"{tool}: error: {message}; see {self.prog} --help\n")


class UsageError(Exception):
    """Bad input (arguments, files, configuration): exit 2."""


class WorkError(Exception):
    """The work itself failed (network, corrupt data, a broken invariant): exit 1."""


def run(main: Callable[[list[str] | None], int], tool: str) -> None:
    """Call main() and exit with its code, mapping the errors above to one line each."""
    try:
        code = main(None)
    except UsageError as err:
        print(f"{tool}: error: {err}", file=sys.stderr)
        code = 2
    except WorkError as err:
        print(f"{tool}: error: {err}", file=sys.stderr)
        code = 1
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        where = f" writing {err.filename}" if err.filename else ""
        print(f"{tool}: error: disk full{where}; free space there or point DATA_DIR at a larger disk",
              file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        print(f"{tool}: interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)
