"""The launcher when the disk refuses its own writes (train.log, config.json, launch.json): one line naming the file
and the fix, exit 1 and a failed run, never a traceback, never a run left blocked on a full pipe, and nothing
half-written under a final name.

The file-size limit (RLIMIT_FSIZE, `ulimit -f`: EFBIG) is the real refusal here, since tests run as root, whom
permissions do not stop; a train.log that cannot even be created (a disk out of space or inodes) is simulated at the
errno level by an open() that raises ENOSPC for it."""

from __future__ import annotations

import builtins
import errno
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from tests.test_evaluate_judge import ended_run, judged
from train.launch import run as launch
from utils.machine import telemetry

REPO = Path(__file__).resolve().parent.parent


# The launcher's supervision of a run printing 400 KiB (far past the 64 KiB its log may hold and the 64 KiB a pipe
# buffers) and lasting long enough for the telemetry sampler to start, its outcome printed as JSON:
# python -c SUPERVISED LOG_PATH.
PRINTER = ("import time\nfor i in range(4000): print('line %05d ' % i + 'x' * 90)\ntime.sleep(2)\n"
           "print('the run got to its end')")
SUPERVISED = f"""
import json, sys
from pathlib import Path
from train.launch.command import Launch
from train.launch.process import run_supervised
outcome = run_supervised(Launch(argv=[sys.executable, "-c", {PRINTER!r}], env={{}}, cwd="."), Path(sys.argv[1]), "cpu",
                         200)
print(json.dumps({{"exit_code": outcome.exit_code, "log_error": outcome.log_error}}))
"""


def test_a_train_log_the_disk_stops_taking_mid_run_neither_blocks_the_run_nor_hides_its_console(tmp_path):
    log, limit = tmp_path / "train.log", 64 * 1024
    # The timeout is a hang's safety net: a run blocked on its full console pipe never ends.
    out = subprocess.run([sys.executable, "-c", SUPERVISED, str(log)], cwd=REPO, capture_output=True, text=True,
                         timeout=120, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    outcome = json.loads(out.stdout.splitlines()[-1])
    expected = (f"cannot write {log}: the file reached the file-size limit (ulimit -f is 64 KiB); raise the limit "
                "(ulimit -f unlimited) or use a folder on a file system that allows larger files")
    assert outcome == {"exit_code": 0, "log_error": expected}
    assert out.stderr.strip().splitlines() == [
        f"[tprimat] error: {expected}; the run goes on, its console on the terminal only, and counts as failed"]
    assert "the run got to its end" in out.stdout  # the terminal still had the whole console
    assert log.stat().st_size == limit and log.read_text().startswith("line 00000 ")
    assert telemetry.read(tmp_path / telemetry.FILE).complete  # the sampler ran to the run's end all the same


def test_the_judge_fails_a_run_whose_log_is_incomplete_and_names_the_refused_write(tmp_path):
    line = "cannot write /out/run/train.log: the disk is full (0.0 KiB free); free space there or set OUTPUT_DIR to " \
           "a folder on a larger disk"
    code, result = judged(ended_run(tmp_path, "nemo.log", log_error=line))
    assert code == 0
    assert result["run"]["status"] == "failed"
    assert result["run"]["error_excerpt"].splitlines()[0] == f"train.log is incomplete: {line}"


def launcher_env(tmp_path: Path) -> dict[str, str]:
    """A CPU node's environment for one run on synthetic tokens (no data to prepare), health check off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPRIMAT_")}
    env.update(PLATFORM="cpu", TPRIMAT_DETECTED_PLATFORM="cpu", TPRIMAT_DETECTED_GPUS="0", MOCK_DATA="1",
               OUTPUT_DIR=str(tmp_path / "output"), DATA_DIR=str(tmp_path / "data"), HF_HUB_OFFLINE="1",
               TRAIN_ITERS="4", WARMUP_STEPS="1", WARMUP_SKIP="1")
    return env


def test_a_config_json_past_the_file_size_limit_ends_the_launcher_in_one_line_and_exit_1(tmp_path):
    run_dir = tmp_path / "set" / "mega-llama"
    limit = 2048  # bytes: below config.json's few KiB
    out = subprocess.run([sys.executable, "-m", "train.launch.run", "--platform", "cpu", "--framework", "mega",
                          "--model", "llama", "--run-dir", str(run_dir)], cwd=REPO, capture_output=True, text=True,
                         env={**launcher_env(tmp_path), "DRY_RUN": "1"},
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == (
        f"[tprimat] error: cannot write {run_dir / 'config.json'}: the file reached the file-size limit (needs more "
        "than the 2.0 KiB written, ulimit -f is 2 KiB); raise the limit (ulimit -f unlimited) or use a folder on a "
        "file system that allows larger files")
    assert sorted(p.name for p in run_dir.iterdir()) == []


def samplers_writing(path: Path) -> list[int]:
    """Processes whose command line names `path` (a telemetry sampler still running for it)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(path).encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:  # ended while we looked
            continue
    return pids


def test_a_train_log_that_cannot_be_created_starts_nothing_and_records_the_run_failed(tmp_path, monkeypatch):
    for key, value in launcher_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    run_dir = tmp_path / "set" / "mega-llama"
    run_dir.parent.mkdir()
    (run_dir.parent / "system.json").write_text("{}")  # the run set's probe, done: nothing here probes the machine
    real_open = builtins.open

    def full_disk(path, *args, **kwargs):
        if str(path).endswith("train.log"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", full_disk)
    code = launch.main(["--platform", "cpu", "--framework", "mega", "--model", "llama", "--run-dir", str(run_dir)])
    monkeypatch.undo()
    assert code == 1
    record = json.loads((run_dir / "launch.json").read_text())
    assert record["status"] == "failed"
    assert record["error"].startswith(f"cannot write {run_dir / 'train.log'}: the disk is full (")
    assert "exit_code" not in record  # nothing was started
    assert not (run_dir / "train.log").exists() and not (run_dir / "result.json").exists()
    assert samplers_writing(run_dir / telemetry.FILE) == []  # the sampler started for the run was stopped


def test_a_launch_json_the_disk_refuses_is_one_line_exit_1_and_no_partial_file(tmp_path, monkeypatch, capsys):
    for key, value in launcher_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("DRY_RUN", "1")
    run_dir = tmp_path / "set" / "mega-llama"
    real_open = builtins.open

    def read_only(path, *args, **kwargs):
        if str(path).endswith("launch.json.tmp"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", read_only)
    code = launch.main(["--platform", "cpu", "--framework", "mega", "--model", "llama", "--run-dir", str(run_dir)])
    monkeypatch.undo()
    assert code == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        f"[tprimat] error: cannot write {run_dir / 'launch.json'}: the file system is read-only; use a folder on a "
        "writable file system")
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json"]
