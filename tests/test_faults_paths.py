"""The folders a user points TPrimat at, as they really are: read-only, or named with spaces and non-ASCII letters.
Through the commands a user types (shell/data.sh, ./shell/run_train.sh, compare, validate, wrap): a read-only folder
is one line naming it, never a traceback or a shell's own error; a path with spaces and accents works end to end.

Tests run as root, whom permissions do not stop: a read-only folder is a real read-only bind mount, made in a mount
namespace of the test's own (`unshare -m`); where unshare is not allowed those tests are skipped, saying so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "tests" / "fixtures" / "results" / "amd"  # six results of one run set, and its system.json
ODD = "my runs é/ü ß 東京"  # spaces, accents and CJK in one path
TIMEOUT_S = 300  # a hang's safety net, never a speed check


def user_env(tmp_path: Path, **knobs: str) -> dict[str, str]:
    """A CPU host's environment for the shell commands: this checkout's Python, no network, caches in tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPRIMAT_")}
    env.update(PLATFORM="cpu", RUNTIME="host", TPRIMAT_PYTHON=sys.executable, HF_HUB_OFFLINE="1",
               XDG_CACHE_HOME=str(tmp_path / "cache"), DATA_DIR=str(tmp_path / "data"),
               OUTPUT_DIR=str(tmp_path / "output"), DATASET="sample", MODELS="llama", DATA_SAMPLES="300")
    env.update(knobs)
    return env


def unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode == 0


needs_unshare = pytest.mark.skipif(not unshare_works(), reason="no mount namespace here (unshare -m refused): a "
                                   "read-only folder cannot be made for root")


def read_only(folder: Path, *command: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """COMMAND with `folder` a read-only bind mount of itself, in a mount namespace of its own."""
    mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", mount, str(folder), *command],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def one_line(out: subprocess.CompletedProcess, code: int) -> str:
    assert out.returncode == code, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    return out.stderr.strip().splitlines()[-1]


@needs_unshare
def test_data_preparation_into_a_read_only_data_dir_is_one_line_naming_it(tmp_path):
    (tmp_path / "data").mkdir()
    out = read_only(tmp_path / "data", "bash", "shell/data.sh", env=user_env(tmp_path))
    assert out.stderr.strip().splitlines() == [
        f"data.lock: error: cannot write {tmp_path / 'data' / '.run_data.lock'}: the file system is read-only; set "
        "DATA_DIR to a folder on a writable file system"]
    assert out.returncode == 1


@needs_unshare
def test_the_matrix_into_a_read_only_output_dir_stops_before_any_run_in_one_line(tmp_path):
    (tmp_path / "output").mkdir()
    out = read_only(tmp_path / "output", "./shell/run_train.sh",
                    env=user_env(tmp_path, DRY_RUN="1", MOCK_DATA="1", FRAMEWORK="mega"))
    assert one_line(out, 2) == (f"[tprimat] error: OUTPUT_DIR={tmp_path / 'output'}: cannot create the run set there: "
                                "Read-only file system")


@needs_unshare
def test_compare_and_wrap_into_a_read_only_folder_are_one_line_and_validate_only_reads(tmp_path):
    run_set = tmp_path / "output" / "20250501-120000-amd"
    shutil.copytree(RESULTS, run_set)
    tools = [sys.executable, "-m"]
    compare = read_only(tmp_path / "output", *tools, "evaluate.compare", str(run_set), "-o", str(run_set),
                        env=user_env(tmp_path))
    assert one_line(compare, 1) == (f"evaluate.compare: error: cannot write {run_set / 'compare.png'}: the file "
                                    "system is read-only; set OUTPUT_DIR to a folder on a writable file system")
    wrap = read_only(tmp_path / "output", *tools, "evaluate.wrap", str(tmp_path / "output"), "--output",
                     str(tmp_path / "output" / "output.zip"), env=user_env(tmp_path))
    assert one_line(wrap, 1) == (f"evaluate.wrap: error: cannot write {tmp_path / 'output' / 'output.zip'}: the file "
                                 "system is read-only; set OUTPUT_DIR to a folder on a writable file system")
    validate = read_only(tmp_path / "output", *tools, "evaluate.validate", str(run_set), env=user_env(tmp_path))
    assert validate.returncode == 0, validate.stderr[-2000:]
    assert sorted(p.name for p in run_set.iterdir()) == sorted(p.name for p in RESULTS.iterdir())


def test_a_dry_run_matrix_into_a_path_with_spaces_and_accents_writes_every_run(tmp_path):
    output = tmp_path / ODD
    out = subprocess.run(["./shell/run_train.sh"], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S,
                         env=user_env(tmp_path, OUTPUT_DIR=str(output), DRY_RUN="1", MOCK_DATA="1",
                                      FRAMEWORK="mega,fsdp"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (run_set,) = output.iterdir()
    assert sorted(p.parent.name for p in run_set.glob("*/launch.json")) == ["fsdp-llama", "mega-llama"]
    assert f"'{run_set / 'mega-llama'}'" in out.stdout  # the command shown is one a user can paste


def test_compare_validate_and_wrap_read_and_write_a_path_with_spaces_and_accents(tmp_path):
    output = tmp_path / ODD
    run_set = output / "20250501-120000-amd"
    shutil.copytree(RESULTS, run_set)
    env = user_env(tmp_path, OUTPUT_DIR=str(output))
    tool = [sys.executable, "-m"]
    for argv in (["evaluate.compare", str(run_set), "-o", str(run_set)], ["evaluate.validate", str(run_set)]):
        done = subprocess.run([*tool, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert done.returncode == 0, done.stderr[-2000:]
    assert "![comparison](compare.png)" in (run_set / "report.md").read_text()
    archive = tmp_path / "ü out.zip"
    done = subprocess.run([*tool, "evaluate.wrap", str(output), "--output", str(archive)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    with zipfile.ZipFile(archive) as packed:
        names = packed.namelist()
        assert all(info.flag_bits & 0x800 for info in packed.infolist())  # names marked UTF-8 for every unzip
    assert f"{output.name}/20250501-120000-amd/report.md" in names
    assert f"{output.name}/20250501-120000-amd/mega-llama-r1/result.json" in names
