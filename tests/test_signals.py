"""Stopping ./shell/run_train.sh: every signal that ends the command ends everything it started.

The whole chain runs for real (run_train.sh -> shell/train.sh -> the launcher -> the framework) on a
faked AMD node whose Primus is the stand-in of tests/fixtures/train_matrix: with FAKE_PRIMUS_HANG its
trainer starts a worker and hangs after two steps, the moment a test sends its signal. A stop must
end the command with 128+signal, record the run as interrupted (launch.json with its end, result.json),
leave no process of the command alive, start nothing after it, and print no traceback.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.fixtures.train_matrix.shell import PRIMUS, alive, machine, read
from tests.shell_harness import FAKEBIN, HANG_TIMEOUT_S, REPO

SHORT_RUN = {"TRAIN_ITERS": "6", "WARMUP_STEPS": "1", "WARMUP_SKIP": "2"}
READY_S = 120  # a bound on waiting for a readiness marker, never a speed check


class Command:
    """./shell/run_train.sh started as a terminal starts a command: the leader of its own process group."""

    def __init__(self, tmp_path: Path, script: str = "shell/run_train.sh", **env: str):
        self.fake = machine(tmp_path, amd=8)
        self.tmp = tmp_path
        self.env = {**self.fake.env, "FRAMEWORK": "prim", "MODELS": "llama,qwen", "FAKE_PRIMUS_HANG": "llama",
                    "MOCK_DATA": "1",
                    "TPRIMAT_PYTHON": str(FAKEBIN / "fake-gpu-python"), "FAKE_REAL_PYTHON": sys.executable,
                    **SHORT_RUN, **env}
        self.proc = subprocess.Popen(["bash", str(self.fake.root / script)], cwd=self.fake.root, env=self.env,
                                     text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    def wait_for(self, found, what: str):
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            value = found()
            if value:
                return value
            assert self.proc.poll() is None, f"the command ended before {what}: {''.join(self.lines)}"
            time.sleep(0.1)
        pytest.fail(f"never reached: {what}")

    def hanging_run(self) -> tuple[Path, int]:
        """The run directory of the hanging run and its worker's process id, once the worker is started."""
        def worker():
            for log in (self.tmp / "output").glob("*/prim-llama/train.log"):
                if "fake worker" in log.read_text():
                    return log.parent, int(log.read_text().split("fake worker ")[1].split()[0])
            return None
        return self.wait_for(worker, "the worker of the hanging run")

    def said(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def finish(self) -> str:
        try:
            self.proc.wait(timeout=HANG_TIMEOUT_S)
            self.reader.join(timeout=HANG_TIMEOUT_S)  # until every writer has closed the pipe
            return "".join(self.lines)
        finally:
            self.kill_leftovers()

    def leftovers(self) -> list[str]:
        """Processes still running that name this test's directory (the repository copy, the output)."""
        listing = subprocess.run(["pgrep", "-af", str(self.tmp)], capture_output=True, text=True).stdout
        return [line for line in listing.splitlines() if line.strip()]

    def kill_leftovers(self) -> None:
        for line in self.leftovers():
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass


def assert_stopped_cleanly(command: Command, output: str, run_dir: Path, worker: int) -> None:
    record = read(run_dir / "launch.json")
    assert record["status"] == "interrupted" and "ended_at" in record, record
    assert read(run_dir / "result.json")["run"]["status"] == "incomplete"
    assert "Traceback" not in output, output
    assert not alive(worker)
    deadline = time.monotonic() + 10  # init reaps what the command's last process leaves
    while command.leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert command.leftovers() == []
    assert not (run_dir.parent / "prim-qwen").exists(), "a run started after the stop"
    assert not any((run_dir.parent / name).exists() for name in ("compare.png", "report.md")), "compared after the stop"
    assert "[tprimat] results: " not in output


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_a_signal_to_the_command_s_process_group_stops_everything_and_records_the_run(tmp_path, sig):
    """Ctrl-C, a Ctrl-\\, an SSH disconnect or a kill of the job: what a terminal or a job control sends."""
    command = Command(tmp_path)
    run_dir, worker = command.hanging_run()
    os.killpg(command.proc.pid, sig)
    output = command.finish()
    assert command.proc.returncode == 128 + sig, output
    assert_stopped_cleanly(command, output, run_dir, worker)
    assert f"interrupted by {sig.name} during prim-llama: nothing more starts" in output


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_command_alone_stops_everything_it_started(tmp_path, sig):
    """`kill PID` of ./shell/run_train.sh (a scheduler, a supervisor): its children are not left running."""
    command = Command(tmp_path)
    run_dir, worker = command.hanging_run()
    os.kill(command.proc.pid, sig)
    output = command.finish()
    assert command.proc.returncode == 128 + sig, output
    assert_stopped_cleanly(command, output, run_dir, worker)


def test_sigkill_of_the_command_alone_still_stops_and_records_what_it_started(tmp_path):
    """SIGKILL cannot be caught: the stage notices its parent's death (PR_SET_PDEATHSIG) and stops as on SIGTERM."""
    command = Command(tmp_path)
    run_dir, worker = command.hanging_run()
    os.kill(command.proc.pid, signal.SIGKILL)
    output = command.finish()  # the pipe closes once every writer has ended
    assert command.proc.returncode == -signal.SIGKILL
    assert_stopped_cleanly(command, output, run_dir, worker)


def stubborn_primus(tmp_path: Path) -> Path:
    """The Primus stand-in with SIGTERM ignored by its launcher script and everything it starts."""
    copy = tmp_path / "stubborn"
    shutil.copytree(PRIMUS.parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    script = copy / "primus" / "primus-cli"  # the v26.5 launcher of the AMD default stack
    shebang, rest = script.read_text().split("\n", 1)
    script.write_text(f"{shebang}\ntrap '' TERM\n{rest}")
    return copy / "primus"


def test_a_second_ctrl_c_kills_at_once_and_still_records_the_run(tmp_path):
    command = Command(tmp_path, PRIMUS_PATH=str(stubborn_primus(tmp_path)))
    run_dir, worker = command.hanging_run()
    os.killpg(command.proc.pid, signal.SIGINT)
    time.sleep(1.5)  # a second Ctrl-C is a second keypress, not the same one seen twice
    os.killpg(command.proc.pid, signal.SIGINT)
    started = time.monotonic()
    output = command.finish()
    assert command.proc.returncode == 130, output
    assert time.monotonic() - started < 15  # not the launcher's 20 s grace after the first
    assert_stopped_cleanly(command, output, run_dir, worker)


def test_the_summary_waits_for_the_launcher_to_record_the_stop(tmp_path):
    command = Command(tmp_path)
    run_dir, _ = command.hanging_run()
    os.killpg(command.proc.pid, signal.SIGINT)
    output = command.finish()
    (row,) = [line.split() for line in output.splitlines() if line.startswith("prim-llama ")]
    assert row[1] == "interrupted", output
    assert "killed?" not in output
    assert " ".join(row[5:]) == "interrupted by SIGINT after step 2 of 6"


def test_ctrl_c_during_the_system_probe_stops_before_any_run(tmp_path):
    probe_hangs = tmp_path / "bin"
    probe_hangs.mkdir()
    marker = tmp_path / "probe-started"
    # only evaluate.probe asks for the driver version; the platform detection asks for the product name
    (probe_hangs / "rocm-smi").write_text(
        "#!/usr/bin/env bash\n"
        f'if [[ "$*" == *--showdriverversion* ]]; then touch {marker}; exec sleep 600; fi\n'
        f'exec {FAKEBIN}/rocm-smi "$@"\n')
    (probe_hangs / "rocm-smi").chmod(0o755)
    command = Command(tmp_path, PATH=f"{probe_hangs}:{FAKEBIN}:{os.environ['PATH']}")
    command.wait_for(marker.exists, "the system probe")
    os.killpg(command.proc.pid, signal.SIGINT)
    output = command.finish()
    assert command.proc.returncode == 130, output
    assert "Traceback" not in output
    assert list((tmp_path / "output").glob("*/prim-*/launch.json")) == [], "a run started after the stop"
    assert command.leftovers() == []


def test_a_python_tool_interrupted_says_so_in_one_line_and_exits_130(tmp_path):
    """utils' excepthook: Ctrl-C in any `python3 -m` tool (evaluate.compare, data preparation) is no bug."""
    tool = tmp_path / "tool.py"
    tool.write_text("import os, signal, time, utils.cli\nutils.cli.install_excepthook()\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(60)\n")
    result = subprocess.run([sys.executable, str(tool)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    assert result.returncode == 130
    assert result.stderr.splitlines() == ["tool.py: interrupted"]


def test_ctrl_c_during_validation_starts_no_comparison(tmp_path):
    marker = tmp_path / "validating"
    slow = tmp_path / "python"  # evaluate.validate that takes its time
    slow.write_text("#!/usr/bin/env bash\n"
                    f'if [[ " $* " == *" evaluate.validate "* ]]; then touch {marker}; sleep 600; fi\n'
                    f'exec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    command = Command(tmp_path, MODELS="llama", FAKE_PRIMUS_HANG="", FAKE_REAL_PYTHON=str(slow))
    command.wait_for(marker.exists, "evaluate.validate")
    os.killpg(command.proc.pid, signal.SIGINT)
    output = command.finish()
    assert command.proc.returncode == 130, output
    assert "Traceback" not in output and "validation found problems" not in output
    assert output.rstrip().splitlines()[-1].startswith("[tprimat] warning: interrupted by SIGINT: nothing more starts")
    assert not list((tmp_path / "output").glob("*/compare.png")), "compared after the stop"


def test_a_second_ctrl_c_while_the_stop_is_recorded_cuts_only_the_wait_for_other_nodes(tmp_path):
    """Node 0 of a two-node run waits for the other node's log after its run ended; a second Ctrl-C then
    must not kill the launcher before it has written what it has."""
    command = Command(tmp_path, NNODES="2", DP="16", GA="4", LAUNCHER="local")
    run_dir, worker = command.hanging_run()
    os.killpg(command.proc.pid, signal.SIGINT)
    command.wait_for(lambda: command.said("waiting up to 300 s for node 1"), "the wait for node 1")
    os.killpg(command.proc.pid, signal.SIGINT)
    started = time.monotonic()
    output = command.finish()
    assert command.proc.returncode == 130, output
    assert time.monotonic() - started < 30
    assert_stopped_cleanly(command, output, run_dir, worker)
