"""mbridge's own Python on the CPU: Megatron-Bridge 0.6.2 and what it imports (requirements/mbridge.txt), installed
without dependencies into a Python 3.12 environment on first use (utils/machine/pyenvs.py, the same environment
tests/test_train_mbridge_build.py builds), since its pins (Python 3.12, torch 2.13, its megatron-core) are not the
host's .venv. Only a run that asks for it (FRAMEWORK=mbridge on the CPU) builds it: the default run set does not
include mbridge and does not pay for it.

A machine that cannot build it (no Python 3.12, no PyPI and no wheels in uv's cache) gets one line naming the fix,
which the launcher prints and exits 2 with (UsageError), before the run starts.
"""

from __future__ import annotations

from pathlib import Path

from utils.machine import pyenvs
from utils.config import ROOT
from utils.errors import UsageError

REQUIREMENTS = ROOT / "requirements" / "mbridge.txt"
PYTHON = "3.12"  # megatron-bridge 0.6 and megatron-core >= 0.17 need it
NAME = "mbridge"


def requirements() -> list[str]:
    return pyenvs.requirement_lines(REQUIREMENTS)


def planned(python: str | None = None) -> Path | None:
    """Where the environment's interpreter is (built or not) for this machine's Python 3.12; None without one."""
    python = python or pyenvs.find_python(PYTHON)
    return pyenvs.virtualenv_path(NAME, requirements(), python=python, no_deps=True) if python else None


def interpreter(say=print) -> Path:
    """The environment's interpreter, built on first use (minutes: torch and Megatron-Bridge from PyPI, or from uv's
    cache); UsageError, one line, where this machine cannot build it. `say` tells the user a build starts."""
    python = pyenvs.find_python(PYTHON)
    if python is None:
        raise UsageError(f"mbridge on the CPU runs Megatron-Bridge in a Python {PYTHON} environment and this machine "
                         f"has no Python {PYTHON}: install one (uv python install {PYTHON}, or pyenv install "
                         f"{PYTHON}), or leave mbridge out of FRAMEWORK")
    target = pyenvs.virtualenv_path(NAME, requirements(), python=python, no_deps=True)
    if not target.is_file():
        say(f"[tprimat] building mbridge's Python {PYTHON} environment from {REQUIREMENTS.relative_to(ROOT)} into "
            f"{target.parent.parent} (once per machine; minutes)")
    try:
        return pyenvs.virtualenv(NAME, requirements(), python=python, no_deps=True)
    except pyenvs.EnvError as err:
        first = str(err).splitlines()[0]
        raise UsageError(f"mbridge on the CPU needs its own environment ({REQUIREMENTS.relative_to(ROOT)}), which "
                         f"could not be built: {first}; build it once where PyPI is reachable (or its wheels are in "
                         f"uv's cache) and keep {pyenvs.root()} (TPRIMAT_ENVS), or leave mbridge out of "
                         "FRAMEWORK") from None


def environment(platform: str, build: bool = True) -> dict[str, str]:
    """The registry's hook (utils.frameworks.Framework.environment): on the CPU the interpreter is built (build) before
    the run set, so that one this machine cannot build stops it in one line; the run adds no variables (its launcher
    starts that interpreter)."""
    if platform == "cpu" and build:
        interpreter()
    return {}
