"""Python environments installed from PyPI beside the host's .venv, each built once per machine and kept across
checkouts: a framework whose pins differ from the host's, which its folder under train/ names and builds on first
use, and what tests install (a stack's recipe builders, the megatron-core versions the images carry;
tests/fixtures/envs.py).

An environment is keyed by its name, the interpreter it is built with and the text of what it installs, and kept
under TPRIMAT_ENVS (default ~/.cache/tprimat/test-envs: the tests built the first ones, and the folder keeps its name
so that those stay found): a fresh clone reuses the one an earlier checkout built, and a changed pin builds a new
one beside it. uv installs when it is at hand (.venv's, or on PATH) and pip otherwise. A half-built environment never
counts: the folder is renamed into place only once complete, and a lock beside it makes a second process wait for
the first one's build instead of racing it. Its packages' bytecode is compiled once (COMPILED marks it; an
environment an older checkout built without it is compiled on its first use): where PYTHONDONTWRITEBYTECODE is set,
every process would otherwise compile torch and the frameworks again, seconds each time. A build that fails
(no network, no wheel for this machine) raises EnvError with the installer's last words. Standard library only.
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

TIMEOUT_S = 1200
COMPILED = ".tprimat-compiled"  # in an environment whose packages' bytecode is compiled
ROOT_ENV = "TPRIMAT_ENVS"
COMPLETE = ".tprimat-complete"  # in an overlay whose install finished


class EnvError(Exception):
    """An environment could not be built: the step that failed and what the installer said."""


def root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or Path.home() / ".cache" / "tprimat" / "test-envs")


def uv() -> str | None:
    """uv beside this interpreter (.venv/bin/uv, from requirements/dev.txt), else on PATH, else None."""
    here = Path(sys.executable).parent / "uv"
    return str(here) if here.is_file() else shutil.which("uv")


def find_python(minor: str) -> str | None:
    """An interpreter of Python `minor` ("3.12") that runs: pyenv's, else python<minor> on PATH, else the one uv
    finds; None where there is none."""
    candidates = []
    if shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "which", f"python{minor}"], capture_output=True, text=True)
        candidates.append(out.stdout.strip() if out.returncode == 0 else None)
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates += sorted((str(path) for path in pyenv_root.glob(f"{minor}.*/bin/python{minor}")), reverse=True)
    candidates.append(shutil.which(f"python{minor}"))
    if installer := uv():
        out = subprocess.run([installer, "python", "find", minor], capture_output=True, text=True)
        candidates.append(out.stdout.strip() if out.returncode == 0 else None)
    wanted = tuple(int(part) for part in minor.split("."))
    for python in filter(None, candidates):
        check = f"import sys; assert sys.version_info[:2] == {wanted}"
        if subprocess.run([python, "-c", check], capture_output=True).returncode == 0:
            return python
    return None


def _run(step: list[str], what: str) -> None:
    try:
        out = subprocess.run(step, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EnvError(f"could not build {what}: {' '.join(step[:3])} ... took over {TIMEOUT_S} s") from None
    if out.returncode != 0:
        said = [line.strip() for line in out.stderr.splitlines() if line.strip()]
        raise EnvError(f"could not build {what} ({' '.join(step[:3])} ...: "
                       f"{said[-1] if said else f'exit {out.returncode}'})\n{out.stderr[-2000:]}")


def key(name: str, python: str, lines: list[str], no_deps: bool) -> str:
    text = "\n".join([name, os.path.realpath(python), str(no_deps), *lines])
    return f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def requirement_lines(path: Path) -> list[str]:
    """A requirements file's requirements, comments and blank lines left out."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def pinned(path: Path, name: str) -> str:
    """The version a requirements file pins for one distribution (its `name==version` line)."""
    return next(line.split("==", 1)[1] for line in requirement_lines(path) if line.lower().startswith(f"{name}=="))


@contextlib.contextmanager
def _building(target: Path):
    """Hold the lock of one environment while it is checked and built: other processes wait here."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def virtualenv_path(name: str, requirements: list[str], python: str = sys.executable, no_deps: bool = False) -> Path:
    """Where virtualenv() keeps that environment's interpreter, built or not."""
    return root() / key(name, python, requirements, no_deps) / "bin" / "python"


def virtualenv(name: str, requirements: list[str], python: str = sys.executable, no_deps: bool = False) -> Path:
    """The interpreter of a virtual environment holding `requirements` (pip requirement strings), built with
    `python` on first use; EnvError where the build fails."""
    interpreter = virtualenv_path(name, requirements, python, no_deps)
    target = interpreter.parent.parent
    with _building(target):
        if not interpreter.is_file():
            _build_virtualenv(name, target, requirements, python, no_deps)
        _compiled(target, interpreter)
    return interpreter


def _compiled(target: Path, python: Path | str) -> None:
    """Compile every package's bytecode under `target` with the interpreter that imports it, once (uv compiles only
    when asked, and an environment built before this was asked is compiled here); a file that does not compile
    (a template, another Python's code) is left as it is."""
    if (target / COMPILED).is_file():
        return
    subprocess.run([str(python), "-m", "compileall", "-q", "-j", "0", str(target)], capture_output=True,
                   timeout=TIMEOUT_S)
    (target / COMPILED).write_text("")


def _build_virtualenv(name: str, target: Path, requirements: list[str], python: str, no_deps: bool) -> None:
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    what = f"the {name} environment"
    installer = uv()
    extra = ["--no-deps"] if no_deps else []
    if installer:
        _run([installer, "venv", "--quiet", "--python", python, str(partial)], what)
        _run([installer, "pip", "install", "--quiet", "--python", str(partial / "bin" / "python"), *extra,
              *requirements], what)
    else:
        _run([python, "-m", "venv", str(partial)], what)
        _run([str(partial / "bin" / "python"), "-m", "pip", "install", "--quiet", *extra, *requirements], what)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)  # uv and venv write no absolute path that the rename breaks for `python -m`


def overlay_path(name: str, requirements: list[str]) -> Path:
    """Where overlay() keeps that folder, built or not."""
    return root() / key(name, sys.executable, requirements, True)


def overlay(name: str, requirements: list[str]) -> Path:
    """A folder of packages installed without their dependencies, to put on PYTHONPATH in front of this
    interpreter's own (e.g. another megatron-core over .venv's torch); EnvError where the install fails."""
    target = overlay_path(name, requirements)
    with _building(target):
        if not (target / COMPLETE).is_file():
            _build_overlay(name, target, requirements)
        _compiled(target, sys.executable)
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
    _run(step, f"the {name} overlay")
    (partial / COMPLETE).write_text("\n".join(requirements) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
