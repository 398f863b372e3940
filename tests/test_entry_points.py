"""Every entry point answers --help with its usage and exit 0, and refuses an unknown argument with exit 2.

The entry points are discovered, not listed, so that a new one without help fails here: every shell
script under shell/ and train/ but the library shell/lib.sh, and every Python module of the data,
train, evaluate and utils packages that runs as a program (`if __name__ == "__main__":`, or a
package's __main__.py). They run where any side effect trips a wire: python3, pip, docker, the GPU
tools and Slurm's commands on PATH, and the Python environments they would use, are fakes that record
their call and fail. Help and a refused argument must need none of them: no environment built, no
container, no configuration read.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shell_harness import HANG_TIMEOUT_S, REPO

LIBRARIES = {"shell/lib.sh"}  # sourced by the scripts, never run
SHELL_SCRIPTS = sorted({str(path.relative_to(REPO)) for folder in ("shell", "train")
                        for path in (REPO / folder).glob("*.sh")} - LIBRARIES)
PACKAGES = ("data", "train", "evaluate", "utils", "bench")
PYTHON_TOOLS = sorted([".".join(path.relative_to(REPO).with_suffix("").parts) for package in PACKAGES
                       for path in (REPO / package).rglob("*.py")
                       if re.search(r"^if __name__ == .__main__.:", path.read_text(), re.MULTILINE)]
                      + [".".join(path.parent.relative_to(REPO).parts)  # a package run as a program (utils.config)
                         for package in PACKAGES for path in (REPO / package).rglob("__main__.py")])
# Every program a script could start before it has looked at its arguments.
WIRED = ("python", "python3", "pip", "pip3", "docker", "nvidia-smi", "rocm-smi", "amd-smi", "sbatch", "srun",
         "scontrol", "squeue", "scancel", "torchrun")
UNKNOWN = "--no-such-option"


@pytest.fixture(scope="module")
def wired(tmp_path_factory) -> dict[str, str]:
    """An environment whose every side effect trips a wire; TRIPWIRE_LOG collects who tripped which."""
    root = tmp_path_factory.mktemp("wired")
    wires = root / "bin"
    venv_bin = root / "venv" / "bin"
    for folder in (wires, venv_bin):
        folder.mkdir(parents=True)
    for name in WIRED:
        wire = wires / name
        wire.write_text('#!/bin/sh\necho "$(basename "$0") $*" >>"${TRIPWIRE_LOG}"\nexit 97\n')
        wire.chmod(0o755)
    for name in ("python", "shellcheck"):
        (venv_bin / name).symlink_to(wires / "python")
    return {"PATH": f"{wires}:/usr/bin:/bin", "HOME": str(root), "TRIPWIRE_LOG": str(root / "tripped.log"),
            "TPRIMAT_VENV": str(root / "venv"), "HF_HUB_OFFLINE": "1"}


def run(argv: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The finished command and the wires it tripped."""
    log = Path(env["TRIPWIRE_LOG"])
    log.write_text("")
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    return result, log.read_text().splitlines()


def test_discovery_finds_the_documented_entry_points():
    for script in ("shell/run_train.sh", "shell/run_data.sh", "shell/run_wrap.sh", "shell/run_purge.sh",
                   "shell/build.sh", "shell/entry.sh", "shell/platform.sh", "shell/test.sh", "shell/slurm.sh",
                   "train/launch.sh"):
        assert script in SHELL_SCRIPTS
    assert len([s for s in SHELL_SCRIPTS if s.startswith("train/train_")]) == 22  # 11 platform x framework, 2 models
    for module in ("train.launch.run", "train.plan", "train.launch.summary", "train.train_mega", "train.train_fsdp",
                   "train.train_autotp", "utils.config",
                   "utils.machine.platform_env", "utils.machine.netenv", "evaluate.extract", "data.stage", "bench.default"):
        assert module in PYTHON_TOOLS


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("script", SHELL_SCRIPTS)
def test_a_shell_script_prints_its_usage_and_starts_nothing(script, flag, wired):
    result, tripped = run(["bash", script, flag], wired)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: "), result.stdout
    assert len(result.stdout.splitlines()) > 1  # what it does, not only its synopsis
    assert tripped == [] and result.stderr == ""


@pytest.mark.parametrize("script", [s for s in SHELL_SCRIPTS if s != "shell/test.sh"])
def test_a_shell_script_refuses_an_unknown_argument_in_one_line_and_starts_nothing(script, wired):
    result, tripped = run(["bash", script, UNKNOWN], wired)
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.splitlines()) == 1 and UNKNOWN in result.stderr, result.stderr
    assert tripped == []


def test_the_test_script_has_pytest_refuse_an_unknown_argument_before_the_long_work():
    """./shell/test.sh hands its arguments to pytest, which judges them as soon as .venv is there."""
    venv = REPO / ".venv"
    for requirements in ("host.txt", "dev.txt"):
        stamp = venv / f".tprimat-{requirements}.sha256"
        wanted = hashlib.sha256((REPO / "requirements" / requirements).read_bytes()).hexdigest()
        if not stamp.exists() or stamp.read_text().strip() != wanted:
            pytest.skip(f"{venv} is not up to date with requirements/{requirements}: run ./shell/test.sh once")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "TPRIMAT_VENV": str(venv)}
    result = subprocess.run(["bash", "shell/test.sh", UNKNOWN], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=HANG_TIMEOUT_S)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and f"unrecognized arguments: {UNKNOWN}" in result.stderr
    assert result.stdout == ""  # neither shellcheck nor a test ran


@pytest.mark.parametrize("module", PYTHON_TOOLS)
def test_a_python_tool_prints_its_usage(module, wired):
    result, tripped = run([sys.executable, "-m", module, "--help"], wired)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: "), result.stdout
    assert tripped == []


@pytest.mark.parametrize("module", PYTHON_TOOLS)
def test_a_python_tool_refuses_an_unknown_argument(module, wired):
    result, tripped = run([sys.executable, "-m", module, UNKNOWN], wired)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error:" in result.stderr and "Traceback" not in result.stderr
    assert tripped == []


def test_a_tool_started_with_a_python_that_lacks_a_library_says_which_and_how_in_one_line():
    blocked = ("import runpy, sys; sys.modules['huggingface_hub'] = None; sys.argv = ['data/fetch.py', 'tokenizer']; "
               "runpy.run_module('data.fetch', run_name='__main__', alter_sys=True)")
    result = subprocess.run([sys.executable, "-c", blocked], cwd=REPO, capture_output=True, text=True,
                            timeout=HANG_TIMEOUT_S, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"python3 -m data.fetch: this Python ({sys.executable}) has no huggingface_hub: run the tool in the project's "
        "environment: source .venv/bin/activate (./shell/run_train.sh or ./shell/test.sh creates it) or ./shell/entry.sh"]


def test_a_bug_in_a_tool_still_shows_its_traceback():
    result = subprocess.run([sys.executable, "-c", "import utils.cli; utils.cli.install_excepthook(); raise KeyError('a bug')"], cwd=REPO,
                            capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    assert result.returncode == 1 and "Traceback" in result.stderr and "KeyError: 'a bug'" in result.stderr
