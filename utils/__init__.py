"""What every TPrimat tool shares; importing it also turns a missing library, or Ctrl-C, into one line.

Most tools (`python3 -m data.fetch ...`, `evaluate.validate`, the trainer) need the project's
environment, while utils.config, train.plan and the probe run on any Python 3. A tool started with
a Python that lacks a pinned library would otherwise end in a traceback: it ends instead with one
line naming the library and the way into the environment, exit 2. A tool stopped by Ctrl-C (SIGINT)
says "interrupted" in one line and exits 130, as a shell does, instead of printing a traceback.
Standard library only.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = frozenset({"data", "evaluate", "train", "utils", "tests"})


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
sys.excepthook = _missing_library_hook
