"""Running one run's command, with its console teed to train.log and clean stops, then having it judged.

The run starts in a session of its own and dies with the launcher (PR_SET_PDEATHSIG). A stop signal
(SIGHUP, SIGINT, SIGQUIT, SIGTERM) ends the whole session with SIGTERM, a second one a second or more
later with SIGKILL; after a stop the run's console goes on into train.log only. The node's telemetry sampler
(utils/machine/telemetry.py) runs beside the session, from before the run starts until it has ended. Node 0 then has the run
judged by `python3 -m evaluate.judge RUN_DIR` (result.json), whose wait for the other nodes a stop
signal cuts short, never its record of the run.

A train.log the disk refuses (utils.files.disk_problem) is no traceback: one it cannot open stops the run before it
starts (DiskError); one it stops writing mid-run is said once, the console goes on to the terminal only (the run is
never blocked on a full pipe) and the outcome carries the line, so that the judge fails the run with it.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from utils import run_files
from train.launch import settle
from train.launch.command import Launch
from utils import ROOT
from utils.machine import telemetry
from utils.cli import STOP_SIGNALS, SignalFlag, now_iso, say, warn
from utils.files import disk_problem, writing
from utils.machine.vendor_tools import memory_used_mib

PR_SET_PDEATHSIG = 1
LEFTOVER_GRACE_S = 30.0  # a finished run's processes get this long to exit before they are killed
GPU_IDLE_TIMEOUT_S = 120.0
STOP_GRACE_S = 20.0  # after a stop signal: SIGTERM to the run, SIGKILL after this long (or at a second signal)


@dataclass
class Outcome:
    exit_code: int
    stopped_by: int | None  # the stop signal that ended the run, if one did
    started_at: str
    ended_at: str
    wall_s: float
    warnings: list[str]
    log_error: str | None = None  # why train.log is incomplete: the line of the write the disk refused

    @property
    def interrupted(self) -> bool:
        return self.stopped_by is not None


class LogCopy:
    """The run's console into train.log (unbuffered: what was written is on disk, and a refused write leaves
    nothing pending) until the disk refuses a write; `error` is then that write's line."""

    def __init__(self, path: Path, log_file) -> None:
        self.path, self.file = path, log_file
        self.error: str | None = None

    def write(self, chunk: bytes) -> None:
        if self.error is not None:
            return
        try:
            view = memoryview(chunk)
            while view:  # an unbuffered write may take part of the chunk; the next one raises the disk's error
                view = view[self.file.write(view):]
        except OSError as err:
            self.error = disk_problem(err, self.path) or f"cannot write {self.path}: {err.strerror}"
            say(f"[tprimat] error: {self.error}; the run goes on, its console on the terminal only, and counts as "
                "failed")


def _copy_output(source, log: LogCopy, quiet: SignalFlag) -> None:
    """Raw bytes to the log and, until the run is stopped or the terminal is gone, to the terminal as they
    come (progress bars keep their carriage returns)."""
    out = sys.stdout.buffer
    while chunk := source.read1(65536):
        log.write(chunk)
        if quiet.is_set():
            continue
        try:
            out.write(chunk)
            out.flush()
        except OSError:  # the terminal hung up
            quiet.set()


def _die_with_parent() -> None:
    """In the run's first process: SIGTERM when the launcher dies, even by SIGKILL (torchrun then stops
    its workers), rather than training on unsupervised into a closed pipe."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def run_supervised(launch: Launch, log_path: Path, platform: str, telemetry_ms: int | None = None) -> Outcome:
    """Run the command in its own session; a stop signal ends the whole session, a second one kills it. With
    telemetry_ms, the node's sampler (utils.machine.telemetry) writes telemetry.jsonl beside the log from before the run
    starts until its processes have ended, whether it succeeded, failed or was stopped. DiskError, nothing
    started, when train.log cannot be opened."""
    baseline = memory_used_mib(platform)
    env = {**os.environ, **launch.env}
    sampler = telemetry.start(log_path.parent / telemetry.FILE, platform, telemetry_ms, env) if telemetry_ms else None
    try:
        return _supervise(launch, log_path, platform, env, baseline)
    finally:
        if telemetry_ms:
            trouble = telemetry.stop(sampler)
            if trouble:
                warn(f"{trouble}: the result's telemetry is incomplete")


def _supervise(launch: Launch, log_path: Path, platform: str, env: dict[str, str], baseline) -> Outcome:
    started, t0 = now_iso(), time.monotonic()
    with writing(log_path):
        log_file = open(log_path, "ab", buffering=0)
    log = LogCopy(log_path, log_file)
    with log_file:
        try:
            child = subprocess.Popen(launch.argv, cwd=launch.cwd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
        except OSError as err:
            message = f"cannot start {launch.argv[0]} in {launch.cwd}: {err.strerror}"
            log.write(f"[tprimat] {message}\n".encode())
            print(f"[tprimat] error: {message}", file=sys.stderr, flush=True)
            return Outcome(127, None, started, now_iso(), time.monotonic() - t0, [message], log.error)
        stops: list[tuple[float, int]] = []
        quiet = SignalFlag()

        def stop(signum, _frame) -> None:
            # The run's own report of the stop (torchrun's traceback) goes to train.log only. One signal
            # can arrive twice (sent to a process group and passed on by a parent): only one a second or
            # more after the first escalates to SIGKILL.
            quiet.set()
            if signum == signal.SIGHUP:  # the terminal is gone: what is left to say goes nowhere
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.dup2(devnull, sys.stderr.fileno())
            stops.append((time.monotonic(), signum))
            escalate = stops[-1][0] - stops[0][0] >= 1.0
            try:
                os.killpg(child.pid, signal.SIGKILL if escalate else signal.SIGTERM)
            except ProcessLookupError:
                pass

        previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
        copier = threading.Thread(target=_copy_output, args=(child.stdout, log, quiet), daemon=True)
        copier.start()
        try:
            while True:
                try:
                    code = child.wait(timeout=STOP_GRACE_S if stops else None)
                    break
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, signal.SIGKILL)
            warnings = []
            survivors = settle.end_session(child.pid, 2.0 if stops else LEFTOVER_GRACE_S)
            if survivors:
                warnings.append("processes of the run still alive after SIGKILL: " + "; ".join(map(str, survivors)))
            copier.join(timeout=10)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    ended, wall = now_iso(), time.monotonic() - t0
    busy = settle.wait_gpu_idle(platform, baseline, GPU_IDLE_TIMEOUT_S)
    if busy:
        warnings.append(busy)
    for note in warnings:
        warn(note)
    return Outcome(128 - code if code < 0 else code, stops[0][1] if stops else None, started, ended, wall, warnings,
                   log.error)


def hold_stops() -> None:
    """Once the run has ended: a stop signal (a second Ctrl-C) no longer ends the launcher, which still
    records the run; judge() passes it on."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda _signum, _frame: None)


def _ignore_stops() -> None:
    """In the judge until it installs its own handlers: a stop arriving while it starts is no traceback."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def judge(run_dir: Path) -> str:
    """The run's status as `python3 -m evaluate.judge RUN_DIR` writes it into result.json (ok | failed |
    incomplete), from the run directory's config.json and launch.json. The judge runs in this process group,
    and a stop signal that reaches only the launcher is passed on to it (it cuts the judge's wait for the
    other nodes short); "failed" when it wrote no result."""
    child: subprocess.Popen | None = None

    def pass_on(signum, _frame) -> None:
        if child is not None:
            try:
                os.kill(child.pid, signum)
            except ProcessLookupError:
                pass

    for sig in STOP_SIGNALS:
        signal.signal(sig, pass_on)
    child = subprocess.Popen([sys.executable, "-m", "evaluate.judge", str(run_dir)], cwd=ROOT,
                             preexec_fn=_ignore_stops)
    code = child.wait()
    try:
        status = json.loads((run_dir / run_files.RESULT).read_text())["run"]["status"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        warn(f"evaluate.judge (exit code {code}) left no readable result in {run_dir} ({err}): the run counts as failed")
        return "failed"
    if code != 0 and status == "ok":  # the trainer's own result, which the judge did not finish checking
        warn(f"evaluate.judge failed (exit code {code}): the run counts as failed")
        return "failed"
    return status
