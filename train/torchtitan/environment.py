"""torchtitan's environment on the CPU: requirements/torchtitan.txt (plus what a CPU host's .venv lacks) installed once
without dependencies into an overlay over .venv's torch (utils/machine/pyenvs.py), put on the run's PYTHONPATH.

The host's .venv (requirements/host.txt) has no torchtitan: it runs on the CPU only when FRAMEWORK names it, so the
CPU's default run set never pays for it. The overlay is built on first use (train.matrix builds it before the run
set; needs PyPI) and reused offline afterwards; the tests build the same one. Without PyPI and without a built
overlay, the run is refused in one line naming the fix. On GPUs the image carries torchtitan (amd.Dockerfile,
nvd.Dockerfile): nothing is added.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from utils.machine import pyenvs
from utils.config import ROOT
from utils.errors import UsageError

NAME = "torchtitan"
REQUIREMENTS = ROOT / "requirements" / "torchtitan.txt"
# What the vendor images carry and a CPU host's .venv lacks: triton (torchtitan imports it at start), and tensorboard's
# protobuf and absl-py.
CPU_HOST_EXTRAS = ("triton==3.9.0", "protobuf==7.36.2", "absl-py==2.5.1")


def requirements() -> list[str]:
    return pyenvs.requirement_lines(REQUIREMENTS) + list(CPU_HOST_EXTRAS)


def folder(build: bool = True) -> Path:
    """The overlay's folder: built on first use (build), else where it lies or would lie (a dry run's command)."""
    if not build:
        return pyenvs.overlay_path(NAME, requirements())
    target = pyenvs.overlay_path(NAME, requirements())
    if not (target / pyenvs.COMPLETE).is_file():
        print(f"[tprimat] building torchtitan's CPU environment into {target} (first use: installs "
              f"{REQUIREMENTS.relative_to(ROOT)} from PyPI)", file=sys.stderr, flush=True)
    try:
        return pyenvs.overlay(NAME, requirements())
    except pyenvs.EnvError as err:
        last = next((line for line in reversed(str(err).splitlines()) if line.strip()), str(err))
        raise UsageError(f"torchtitan on the CPU needs its environment ({REQUIREMENTS.relative_to(ROOT)} in {target}), "
                         f"which is not built and could not be installed ({last.strip()}); run it once where PyPI "
                         f"answers, or set {pyenvs.ROOT_ENV} to a folder holding a built one") from None


def environment(platform: str, build: bool = True) -> dict[str, str]:
    """The variables the run adds: on the CPU, the overlay ahead of what PYTHONPATH already holds; none on GPUs."""
    if platform != "cpu":
        return {}
    inherited = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([str(folder(build)), *([inherited] if inherited else [])])}
