"""The host's Python: which interpreter builds .venv (a named one, python3.12, pyenv's, python3), one line when it
is too old for the pins, a .venv of another Python rebuilt, and uv (else pip) installing it; on faked machines."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.shell_harness import HANG_TIMEOUT_S, REPO, FakeMachine


def minimum_python() -> str:
    """TPRIMAT_MIN_PYTHON, from the one place that holds it."""
    return subprocess.run(["bash", "-c", 'source shell/lib.sh && echo "${TPRIMAT_MIN_PYTHON}"'], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_minimum_python_is_the_strictest_requires_python_of_the_pins():
    requirements = {}
    for name in ("host.txt", "dev.txt"):
        for line in (REPO / "requirements" / name).read_text().splitlines():
            if pin := re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line):
                requirements[pin[1]] = pin[2]
    needs = []
    for package, version in requirements.items():
        installed = Version(importlib.metadata.version(package))
        assert installed in SpecifierSet(f"=={version}"), f"{package} {installed} in .venv is not the pinned {version}"
        needs.append(SpecifierSet(importlib.metadata.metadata(package)["Requires-Python"] or ""))
    oldest = min(v for v in (Version(f"3.{minor}") for minor in range(30)) if all(v in need for need in needs))
    assert minimum_python() == str(oldest)


@pytest.mark.parametrize("script", ["shell/run_train.sh", "shell/run_data.sh", "shell/run_wrap.sh",
                                    "shell/run_purge.sh", "shell/entry.sh", "shell/test.sh"])
def test_a_host_python_too_old_for_the_pins_is_named_in_one_line_before_anything_is_built(tmp_path, script):
    old = tmp_path / "python3.10"
    old.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "Python 3.10.13"; exit 0; }\n'
                   f'exec {sys.executable} "$@"\n')  # an old version, yet able to run utils.config
    old.chmod(0o755)
    node = FakeMachine(tmp_path)
    venv = tmp_path / "new-venv"
    result = node.run(script, TPRIMAT_HOST_PYTHON=str(old), TPRIMAT_VENV=str(venv))
    assert result.returncode == 2, result.output
    error = result.stderr.splitlines()[-1]
    assert error.startswith("[tprimat] error: ") and "Python 3.10.13" in error
    assert f"Python {minimum_python()} or newer" in error and "TPRIMAT_HOST_PYTHON=" in error
    assert not venv.exists() and "creating the Python environment" not in result.stderr



def lib(call: str, tmp_path, **env: str) -> subprocess.CompletedProcess:
    """A shell/lib.sh function called on its own, PATH and pyenv's root under tmp_path unless env says otherwise."""
    base = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "PYENV_ROOT": str(tmp_path / "pyenv")}
    return subprocess.run(["bash", "-c", f"source shell/lib.sh && {call}"], cwd=REPO, env={**base, **env},
                          capture_output=True, text=True, timeout=HANG_TIMEOUT_S)


def fake_python(path, version: str):
    """An interpreter that answers --version and sys.version_info as `version` (major.minor.patch)."""
    major, minor = version.split(".")[:2]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "Python {version}"; exit 0; }}\necho {major}.{minor}\n')
    path.chmod(0o755)
    return path


def test_the_host_python_is_named_else_python3_12_on_path_else_pyenvs_else_python3(tmp_path):
    assert lib("tp_host_python", tmp_path).stdout.strip() == "python3"
    pyenv = fake_python(tmp_path / "pyenv" / "versions" / "3.12.9" / "bin" / "python3.12", "3.12.9")
    assert lib("tp_host_python", tmp_path).stdout.strip() == str(pyenv)
    # A pyenv shim on PATH fails where 3.12 is not selected: its own root's 3.12 is taken instead.
    shims = tmp_path / "other-pyenv" / "shims"
    fake_python(shims / "python3.12", "3.12.9")
    other = fake_python(tmp_path / "other-pyenv" / "versions" / "3.12.2" / "bin" / "python3.12", "3.12.2")
    assert lib("tp_host_python", tmp_path, PATH=f"{shims}:/usr/bin:/bin").stdout.strip() == str(other)
    fake_python(tmp_path / "bin" / "python3.12", "3.12.4")
    assert lib("tp_host_python", tmp_path).stdout.strip() == "python3.12"
    assert lib("tp_host_python", tmp_path, TPRIMAT_HOST_PYTHON="/opt/py/bin/python3.13").stdout.strip() == \
        "/opt/py/bin/python3.13"


@pytest.mark.parametrize("venv_python, host_python, rebuilt", [
    ("3.11.7", "3.12.1", True),  # a .venv of before: its pins were resolved for another Python
    ("3.12.1", "3.12.4", False),  # the same minor version
    ("3.12.1", "3.11.2", False),  # a host too old for the pins never removes a .venv (it is refused on creation)
])
def test_a_venv_of_another_python_than_the_hosts_is_rebuilt_with_a_line_saying_why(
        tmp_path, venv_python, host_python, rebuilt):
    venv = tmp_path / "venv"
    fake_python(venv / "bin" / "python", venv_python)
    (venv / "pyvenv.cfg").write_text(f"version = {venv_python}\n")
    host = fake_python(tmp_path / "host" / "python3", host_python)
    out = lib("tp_venv_matches_host_python", tmp_path, TPRIMAT_VENV=str(venv), TPRIMAT_HOST_PYTHON=str(host))
    assert out.returncode == (1 if rebuilt else 0)
    assert out.stderr == (f"[tprimat] rebuilding {venv}: it runs Python {venv_python[:4]}, the host's is {host} "
                          f"({host_python[:4]})\n" if rebuilt else "")


def uv_pin() -> str:
    return next(line.split()[0] for line in (REPO / "requirements" / "dev.txt").read_text().splitlines()
                if line.startswith("uv=="))


@pytest.mark.parametrize("pip_answers, installer", [(0, "uv"), (1, "pip")])
def test_the_venv_is_installed_with_dev_txts_uv_else_with_pip(tmp_path, pip_answers, installer):
    venv = tmp_path / "venv"
    calls = tmp_path / "calls"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\necho "$*" >>{calls}\nexit {pip_answers}\n')
    (venv / "bin" / "python").chmod(0o755)
    out = lib("tp_venv_installer", tmp_path, TPRIMAT_VENV=str(venv))
    assert out.returncode == 0 and out.stdout == f"{installer}\n"
    assert calls.read_text().split() == ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", uv_pin()]
    assert (f"{uv_pin()} could not be installed" in out.stderr) == (installer == "pip")


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_the_venv_s_packages_are_installed_without_compiling_all_their_bytecode(tmp_path, installer):
    """All of it took 74 CPU seconds for 15,800 modules, most never imported: tp_write_bytecode writes what is used."""
    venv = tmp_path / "venv"
    calls = tmp_path / "calls"
    (venv / "bin").mkdir(parents=True)
    for tool in ("uv", "python"):
        (venv / "bin" / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >>{calls}\n')
        (venv / "bin" / tool).chmod(0o755)
    out = lib(f"tp_venv_install {installer} -r requirements/host.txt", tmp_path, TPRIMAT_VENV=str(venv))
    assert out.returncode == 0, out.stderr
    [call] = calls.read_text().splitlines()
    assert call.startswith({"uv": "uv pip install ", "pip": "python -m pip install "}[installer])
    assert "--compile-bytecode" not in call.split()
    assert ("--no-compile" in call.split()) == (installer == "pip")


@pytest.mark.parametrize("requirements, writer", [("requirements/host.txt", "-m utils.machine.bytecode"),
                                                  ("requirements/dev.txt", "-W ignore -m compileall -q -j 0 /site")])
def test_the_runs_get_the_bytecode_of_what_they_import_and_the_tests_all_of_it(tmp_path, requirements, writer):
    """The runs import about 4,400 of .venv's modules, the tests far more; a failure is a warning, never the end."""
    venv = tmp_path / "venv"
    calls = tmp_path / "calls"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\ncase "$*" in -c*) echo /site; exit 0;; esac\n'
                                         f'echo "$PWD $*" >>{calls}\nexit 1\n')
    (venv / "bin" / "python").chmod(0o755)
    out = lib(f"tp_write_bytecode {requirements}", tmp_path, TPRIMAT_VENV=str(venv))
    assert out.returncode == 0, out.stderr
    assert calls.read_text().splitlines() == [f"{REPO} {writer}"]
    assert "the bytecode was not all written" in out.stderr


def test_torch_extensions_are_built_once_per_machine_pins_python_and_cpu_in_the_users_cache(tmp_path):
    """DeepSpeed's CPU op (autotp) is compiled for this CPU: another clone with the same host pins and Python finds it
    built in the user's cache; another host Python is another folder; an unwritable cache keeps it inside .venv."""
    def folder(**env: str) -> str:
        return lib("tp_torch_extensions_dir", tmp_path, XDG_CACHE_HOME=str(tmp_path / "cache"), **env).stdout.strip()
    here = folder()
    assert re.fullmatch(re.escape(str(tmp_path / "cache" / "tprimat" / "torch_extensions")) + r"/[0-9a-f]{16}", here)
    assert folder() == here and folder(TPRIMAT_HOST_PYTHON="/opt/py/bin/python3.13") != here
    (tmp_path / "file").write_text("")
    assert lib("tp_torch_extensions_dir", tmp_path, XDG_CACHE_HOME=str(tmp_path / "file"),
               TPRIMAT_VENV=str(tmp_path / "venv")).stdout.strip() == str(tmp_path / "venv" / "torch_extensions")
