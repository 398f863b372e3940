"""A worker rank that dies mid-run (SIGKILL: the OOM killer, a user, a failing node) ends the run failed, and the
result's error excerpt names what happened: the first rank torchrun saw fail, its host, the signal or exit code,
the other ranks torchrun reports, and the last lines printed before it; never torchrun's closing line of '='."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from evaluate.logs import worker_failure
from tests.shell_harness import HANG_TIMEOUT_S
from tests.test_train_mega_runs import BASE, ROOT, trainer_env

ROOT_CAUSE_SIGKILL = """\
rank 1 step 7
=======================================================
train/train_mega.py FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-25_04:48:14
  host      : node-a
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 17807)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 17807
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_04:48:14
  host      : node-b
  rank      : 9 (local_rank: 1)
  exitcode  : -9 (pid: 17808)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 17808
=======================================================""".splitlines()


def test_the_first_observed_failure_is_named_first_with_its_rank_host_and_signal():
    head = worker_failure.summary(ROOT_CAUSE_SIGKILL).splitlines()
    assert head[0] == "first failure: rank 9 (local rank 1) on host node-b was killed by SIGKILL (signal 9)"
    assert head[1] == "rank 0 (local rank 0) on host node-a was killed by SIGTERM (signal 15)"
    assert head[2:] == ["the workers' last lines (any rank):", "  rank 1 step 7"]


def test_a_rank_that_exited_with_an_error_code_is_named_with_the_code_and_its_traceback_line():
    lines = ["Failures:", "  <NO_OTHER_FAILURES>", "Root Cause (first observed failure):", "[0]:",
             "  host      : gpu-07", "  rank      : 3 (local_rank: 3)", "  exitcode  : 1 (pid: 4242)",
             "  error_file: /tmp/err.json", "  traceback : RuntimeError: CUDA error: an illegal memory access",
             "=" * 60]
    assert worker_failure.summary(lines).splitlines()[0] == (
        "first failure: rank 3 (local rank 3) on host gpu-07 exited with code 1 "
        "(RuntimeError: CUDA error: an illegal memory access)")


def test_where_the_log_prefixes_lines_per_rank_the_failed_rank_s_own_last_lines_are_quoted():
    lines = ["[rank0]: step 5 done", "[rank1]: step 5 done", "[rank1]: loading shard 7 \x1b[31mslow",
             "[rank0]: waiting in all-reduce"] + ROOT_CAUSE_SIGKILL[1:]
    lines = [line.replace("rank      : 9 (local_rank: 1)", "rank      : 1 (local_rank: 1)") for line in lines]
    head = worker_failure.summary(lines).splitlines()
    assert head[2:] == ["rank 1's last lines:", "  step 5 done", "  loading shard 7 \\x1b[31mslow"]


# The shape of an excerpt torchrun's report ends: the worker's exception quoted, then torchrun's own traceback and frame
# (a Megatron-Bridge run on an H200 that stopped in its first layer, cut short).
RAISED_THEN_FRAMED = """\
first failure: rank 0 (local rank 0) on host localhost exited with code 1
rank 0's last lines:
    File "megatron/core/transformer/torch_norm.py", line 48, in __new__
  AssertionError: persist_layer_norm not supported by torch LayerNorm when instantiating TransformerLayer
exit code 1; no training step in the log
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================"""


def test_a_failed_run_is_shown_by_the_exception_its_worker_raised_not_torchruns_frame():
    assert worker_failure.cause(RAISED_THEN_FRAMED) == (
        "AssertionError: persist_layer_norm not supported by torch LayerNorm when instantiating TransformerLayer")
    assert worker_failure.cause("[rank3]: torch.OutOfMemoryError: CUDA out of memory\nshutting down") == (
        "torch.OutOfMemoryError: CUDA out of memory")
    assert worker_failure.cause("killed by SIGKILL\n=====") == "====="  # no exception: the last line, as it is
    assert worker_failure.cause("") == "no error excerpt"


def test_a_log_without_a_torchrun_report_gives_no_summary():
    assert worker_failure.summary(["iteration 1/ 4 | lm loss: 1.0", "RuntimeError: boom"]) is None


def _worker_pid(rank: int, output_dir: Path) -> int | None:
    """The pid of the mega trainer worker of this rank (not torchrun's agent) of this test's run (its OUTPUT_DIR:
    another checkout's tests may train beside it on the same machine), from /proc."""
    for entry in os.listdir("/proc"):
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
            environment = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"train_mega.py" in command and b"torch.distributed.run" not in command \
                and f"RANK={rank}".encode() in environment and f"OUTPUT_DIR={output_dir}".encode() in environment:
            return int(entry)
    return None


def test_a_worker_killed_mid_run_ends_the_run_failed_naming_the_rank_its_signal_and_host(tmp_path):
    env = {**trainer_env(tmp_path / "no-data", {**BASE, "MOCK_DATA": 1, "TRAIN_ITERS": 40, "WARMUP_STEPS": 1,
                                                "DP": 2, "MBS": 1}), "OUTPUT_DIR": str(tmp_path)}
    run_dir = tmp_path / "run"
    launch = subprocess.Popen([sys.executable, "-m", "train.launch.run", "--platform", "cpu", "--framework", "mega",
                               "--model", "llama", "--run-dir", str(run_dir)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + HANG_TIMEOUT_S
    log = run_dir / "train.log"
    while not (log.exists() and "iteration        3/" in log.read_text(errors="replace")):
        assert launch.poll() is None and time.monotonic() < deadline, "the run ended before its third step"
        time.sleep(0.2)
    victim = _worker_pid(0, tmp_path)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    console = launch.communicate(timeout=HANG_TIMEOUT_S)[0]
    assert launch.returncode == 1, console[-3000:]
    run = json.loads((run_dir / "result.json").read_text())["run"]
    excerpt = run["error_excerpt"].splitlines()
    assert run["status"] == "failed"
    assert excerpt[0].startswith("first failure: rank 0 (local rank 0) on host ")
    assert excerpt[0].endswith(" was killed by SIGKILL (signal 9)")
    assert not any(set(line.strip()) <= {"="} for line in excerpt)
