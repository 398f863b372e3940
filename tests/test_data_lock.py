"""data.lock: one ./shell/run_data.sh per DATA_DIR at a time; a second waits, saying for whom, and Ctrl-C stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def locking_shell(data_dir: Path, then: str) -> subprocess.Popen:
    """A shell that takes DATA_DIR's lock as shell/data.sh does, says "locked", then runs `then`."""
    script = (f'exec {{fd}}<>"{data_dir}/.run_data.lock"; "{sys.executable}" -m data.lock --fd "$fd" --pid $$ '
              f'--data-dir "{data_dir}" || exit $?; echo locked; {then}')
    return subprocess.Popen(["bash", "-c", script], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def wait_for_line(stream, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if text in line:
            return
    raise AssertionError(f"no line with {text!r}")


def test_a_second_run_waits_for_the_first_naming_its_pid_then_goes_on(tmp_path):
    first = locking_shell(tmp_path, "sleep 60")
    wait_for_line(first.stdout, "locked")
    second = locking_shell(tmp_path, "true")
    wait_for_line(second.stderr, f"another run_data.sh is preparing {tmp_path} (pid {first.pid}); waiting")
    assert second.poll() is None
    os.killpg(first.pid, signal.SIGKILL)  # however the first ends, its lock goes with it
    first.wait()
    out, _ = second.communicate(timeout=30)
    assert second.returncode == 0 and out == "locked\n"
    assert (tmp_path / ".run_data.lock").read_text() == f"{second.pid}\n"


def test_ctrl_c_while_waiting_is_one_line_and_exit_130(tmp_path):
    first = locking_shell(tmp_path, "sleep 60")
    wait_for_line(first.stdout, "locked")
    second = locking_shell(tmp_path, "true")
    wait_for_line(second.stderr, "waiting")
    os.killpg(second.pid, signal.SIGINT)
    _, err = second.communicate(timeout=30)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert second.returncode == 130 and err == "data.lock: interrupted\n"
