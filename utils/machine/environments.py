"""Package folders installed from PyPI on first use and kept across checkouts: an overlay (packages installed without
their dependencies, put on PYTHONPATH in front of this interpreter's own) for a framework the host's .venv lacks
(torchtitan on the CPU: train/torchtitan/environment.py), and what the tests' environments share
(tests/fixtures/envs.py).

An environment is keyed by its name, the interpreter it is built for and the text of what it installs, and kept
under TPRIMAT_TEST_ENVS (default ~/.cache/tprimat/test-envs, the folder the tests have always used, so that a run and
the tests share one build): a fresh clone reuses the one an earlier checkout built, and a changed pin builds a new
one beside it. uv installs when it is at hand (.venv's, or on PATH) and pip otherwise. A half-built environment never
counts: the folder is renamed into place only once complete, and a lock beside it makes a second process wait for
the first one's build instead of racing it. Its packages' bytecode is compiled once (COMPILED marks it): where
PYTHONDONTWRITEBYTECODE is set, every process would otherwise compile torch, NeMo or torchtitan again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

TIMEOUT_S = 1200
ROOT_ENV = "TPRIMAT_TEST_ENVS"
COMPILED = ".tprimat-compiled"  # in an environment whose packages' bytecode is compiled
COMPLETE = ".tprimat-complete"  # in an overlay whose install finished


class BuildError(RuntimeError):
    """An environment could not be built (no PyPI, a pin that does not resolve); the message ends with the
    installer's last lines."""


def root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or Path.home() / ".cache" / "tprimat" / "test-envs")


def uv() -> str | None:
    """uv beside this interpreter (.venv/bin/uv, from requirements/dev.txt), else on PATH, else None."""
    here = Path(sys.executable).parent / "uv"
    return str(here) if here.is_file() else shutil.which("uv")


def run_step(step: list[str], what: str) -> None:
    """One installer command; BuildError with its last lines when it fails."""
    try:
        out = subprocess.run(step, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BuildError(f"could not build {what}: {' '.join(step[:3])} ... took over {TIMEOUT_S} s") from None
    if out.returncode != 0:
        raise BuildError(f"could not build {what} ({' '.join(step[:3])} ...; needs PyPI):\n{out.stderr[-2000:]}")


def key(name: str, python: str, lines: list[str], no_deps: bool) -> str:
    text = "\n".join([name, os.path.realpath(python), str(no_deps), *lines])
    return f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def requirement_lines(path: Path) -> list[str]:
    """A requirements file's requirements, comments and blank lines left out."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


@contextlib.contextmanager
def building(target: Path) -> Iterator[None]:
    """Hold the lock of one environment while it is checked and built: other processes wait here."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def compiled(target: Path, python: Path | str) -> None:
    """Compile every package's bytecode under `target` with the interpreter that imports it, once (uv compiles only
    when asked); a file that does not compile (a template, another Python's code) is left as it is."""
    if (target / COMPILED).is_file():
        return
    subprocess.run([str(python), "-m", "compileall", "-q", "-j", "0", str(target)], capture_output=True,
                   timeout=TIMEOUT_S)
    (target / COMPILED).write_text("")


def overlay_path(name: str, requirements: list[str]) -> Path:
    """Where the overlay of `requirements` for this interpreter lies, built or not."""
    return root() / key(name, sys.executable, requirements, True)


def overlay(name: str, requirements: list[str]) -> Path:
    """A folder of packages installed without their dependencies, to put on PYTHONPATH in front of this
    interpreter's own (e.g. another megatron-core over .venv's torch); built on first use, BuildError when it
    cannot be."""
    target = overlay_path(name, requirements)
    with building(target):
        if not (target / COMPLETE).is_file():
            _build_overlay(name, target, requirements)
        compiled(target, sys.executable)
    return target


def _build_overlay(name: str, target: Path, requirements: list[str]) -> None:
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    installer = uv()
    if installer:
        step = [installer, "pip", "install", "--quiet", "--python", sys.executable, "--no-deps", "--target",
                str(partial), *requirements]
    else:
        step = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(partial),
                *requirements]
    run_step(step, f"the {name} overlay")
    (partial / COMPLETE).write_text("\n".join(requirements) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
