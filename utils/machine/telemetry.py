"""The node's telemetry during a run: one sampler per node, started by the launcher around the trainer.

    python3 -m utils.machine.telemetry --out RUN_DIR/telemetry.jsonl --platform nvd [--interval-ms 1000]

Why a process of its own (not a thread in the launcher): the vendors' libraries are native code, and a
crash or a hang inside one must not take the launcher down, which would end the run (the run dies with its
launcher). The sampler is started outside the run's session, so it samples until the launcher stops it
(SIGTERM), also after a failed or interrupted run; it dies with the launcher (PR_SET_PDEATHSIG).

How the node is read (NVML or amdsmi, else the vendors' tools; RAPL and psutil on the CPU), and what a device
that does not support a query records (nothing): utils/machine/telemetry_backends.py (the libraries opened by
utils/machine/gpu_libraries.py, as for node health). The file's first line names the method; without a readable
power sensor it says so and no power is recorded.

telemetry.jsonl, one JSON object a line, flushed as written, time_s on time.time()'s clock (steps.jsonl's):
  {"kind": "start", "time_s", "host", "method", "interval_ms", "power_sensor", "note",
   "devices": [{"index", "name", "bus_id", "sm_clock_max_mhz", "mem_clock_max_mhz"}]}
  {"kind": "sample", "time_s", "index", "power_w", "energy_j", "sm_clock_mhz", "mem_clock_mhz", "temp_gpu_c",
   "temp_mem_c", "util_gpu_pct", "util_mem_pct", "memory_used_mib", "throttle": [reason, ...]}
  {"kind": "error", "time_s", "message"}   the sampler stopped on an error it cannot sample past
  {"kind": "end", "time_s", "samples"}     a clean stop
A file without an "end" line is an incomplete record (the sampler died or was killed).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TextIO

from utils import run_files
from utils import ROOT
from utils.cli import Parser, quoted, run
from utils.files import json_problem
from utils.machine.gpu_libraries import GpuError
from utils.machine.telemetry_backends import Backend, SamplerError, amdsmi_lib, cpu, nvml
from utils.machine.telemetry_tools import amd_smi, nvidia_smi
from utils.machine.vendor_tools import Unavailable

FILE = run_files.TELEMETRY
STOP_WAIT_S = 10.0  # the launcher waits this long for the sampler's clean stop, then kills it
PR_SET_PDEATHSIG = 1
SAMPLER_NICENESS = 10  # below the run's priority: the sampler waits for a free core, the run never waits for it


def open_backend(platform: str, interval_ms: int) -> Backend:
    """The first backend that can read this node; Unavailable naming why none could."""
    if platform == "cpu":
        return cpu()
    tries: list[Callable[[], Backend]] = \
        [nvml, lambda: nvidia_smi(interval_ms)] if platform == "nvd" else [amdsmi_lib, amd_smi]
    reasons = []
    for attempt in tries:
        try:
            return attempt()
        except Unavailable as err:
            reasons.append(str(err))
    raise Unavailable("; ".join(reasons))


# --- the sampler process ----------------------------------------------------------------------------------

def _write(out: TextIO, record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


class StopFlag:
    """Set by a stop signal; wait() sleeps until the deadline or the signal, whichever comes first, waking once (the
    signal's byte on a pipe ends the select). Polling a flag every 100 ms instead doubled the sampler's CPU time
    (1.0 against 0.48 ms per second, bench/telemetry.py), and each wake-up can displace a thread of a training
    that uses every core."""

    def __init__(self) -> None:
        self.raised = False
        self._read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self.set)

    def set(self, *_signal: Any) -> None:
        self.raised = True

    def wait(self, seconds: float) -> None:
        if seconds > 0 and not self.raised:
            select.select([self._read], [], [], seconds)


def sample(out_path: Path, platform: str, interval_ms: int) -> int:
    """Sample until SIGTERM/SIGINT/SIGHUP (exit 0 with an end line) or an error it cannot sample past (exit 1, an
    error line and no end line: the record is incomplete). A stop only sets a flag, so no line is cut short."""
    stopping = StopFlag()
    head = {"kind": "start", "host": socket.gethostname(), "interval_ms": interval_ms}
    count = 0
    with open(out_path, "a", encoding="utf-8") as out:
        try:
            backend = open_backend(platform, interval_ms)
        except Unavailable as err:
            _write(out, {**head, "time_s": time.time(), "method": None, "power_sensor": False, "devices": [],
                         "note": f"no telemetry backend on this {platform} node: {err}"})
            _write(out, {"kind": "end", "time_s": time.time(), "samples": 0})
            return 0
        _write(out, {**head, "time_s": time.time(), "method": backend.method, "power_sensor": backend.power_sensor,
                     "note": backend.note, "devices": backend.devices})
        due = time.monotonic()
        try:
            while not stopping.raised:
                taken = time.time()
                for reading in backend.read():
                    _write(out, {"kind": "sample", "time_s": round(taken, 3), **reading})
                    count += 1
                if not backend.paced:
                    due += interval_ms / 1000.0
                    stopping.wait(due - time.monotonic())
            _write(out, {"kind": "end", "time_s": time.time(), "samples": count})
            return 0
        except (SamplerError, GpuError) as err:
            _write(out, {"kind": "error", "time_s": time.time(), "message": str(err)})
            return 1
        except Exception as err:  # noqa: BLE001 - whatever broke, the record says so and the run goes on
            _write(out, {"kind": "error", "time_s": time.time(), "message": f"{type(err).__name__}: {err}"})
            return 1
        finally:
            try:
                backend.close()
            except Exception:  # noqa: BLE001 - closing a library that failed is best effort
                pass


# --- the launcher's side ----------------------------------------------------------------------------------

def _sampler_process() -> None:
    """In the sampler: die with the launcher, and yield the CPU to the run (a wake-up a second must never displace
    a training thread on a node whose cores the run keeps busy)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    os.nice(SAMPLER_NICENESS)


def start(out_path: Path, platform: str, interval_ms: int, env: dict[str, str]) -> subprocess.Popen | None:
    """Start the node's sampler (its own session, so a stop of the run's session leaves it sampling the stop);
    None, with the reason written as the record, when it cannot start."""
    try:
        return subprocess.Popen([sys.executable, "-m", "utils.machine.telemetry", "--out", str(out_path), "--platform",
                                 platform, "--interval-ms", str(interval_ms)], cwd=ROOT,
                                env=env, stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_sampler_process)
    except OSError as err:
        with open(out_path, "a", encoding="utf-8") as out:
            _write(out, {"kind": "error", "time_s": time.time(), "message": f"sampler not started: {err.strerror}"})
        return None


def stop(process: subprocess.Popen | None) -> str | None:
    """Stop the sampler cleanly (SIGTERM, then SIGKILL after STOP_WAIT_S); what went wrong, if anything."""
    if process is None:
        return "the telemetry sampler did not start"
    if process.poll() is not None:
        return f"the telemetry sampler had stopped during the run (exit code {process.returncode})"
    process.terminate()
    try:
        process.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return f"the telemetry sampler did not stop within {STOP_WAIT_S:.0f} s and was killed"
    return None


# --- reading it back --------------------------------------------------------------------------------------

@dataclass
class Record:
    """One node's telemetry.jsonl, read back."""

    path: Path
    host: str | None = None
    method: str | None = None
    interval_ms: int | None = None
    power_sensor: bool = False
    note: str | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    ended: bool = False
    end_s: float | None = None  # when the sampler stopped cleanly
    unreadable_lines: int = 0
    bad_lines: list[str] = field(default_factory=list)  # the first malformed lines, each "PATH line N: problem"
    bad_count: int = 0

    @property
    def complete(self) -> bool:
        return self.ended and self.error is None and self.unreadable_lines == 0


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8", errors="replace") as source:
        yield from source


# The numbers of a sample (see the module's docstring): each absent, null, or a finite number of 0 or more.
SAMPLE_NUMBERS = ("power_w", "energy_j", "sm_clock_mhz", "mem_clock_mhz", "util_gpu_pct", "util_mem_pct",
                  "memory_used_mib")
BAD_LINES_KEPT = 3  # a record names this many of its malformed lines


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def line_problem(item: Any) -> str | None:
    """Why a JSON line is no record of the sampler's: the wrong shape, or a number that is none (a string, NaN,
    below 0)."""
    if not isinstance(item, dict) or not isinstance(item.get("kind"), str):
        return "not a record (no kind)"
    if item["kind"] == "start":
        devices = item.get("devices")
        if devices is not None and not (isinstance(devices, list) and all(
                isinstance(d, dict) and type(d.get("index")) is int for d in devices)):
            return f"devices is {quoted(repr(devices), 60)}, not a list of devices with an index"
        if item.get("interval_ms") is not None and not (type(item["interval_ms"]) is int and item["interval_ms"] > 0):
            return f"interval_ms is {quoted(repr(item['interval_ms']), 60)}, not a whole number above 0"
    elif item["kind"] == "sample":
        if not _is_number(item.get("time_s")):
            return f"time_s is {quoted(repr(item.get('time_s')), 60)}, not a time"
        if type(item.get("index")) is not int:
            return f"index is {quoted(repr(item.get('index')), 60)}, not a device's index"
        for key in SAMPLE_NUMBERS + ("temp_gpu_c", "temp_mem_c"):
            value = item.get(key)
            if value is not None and not (_is_number(value) and (value >= 0 or key.startswith("temp"))):
                return f"{key} is {quoted(repr(value), 60)}, not a finite number of 0 or more"
        throttle = item.get("throttle")
        if throttle is not None and not (isinstance(throttle, list) and all(isinstance(t, str) for t in throttle)):
            return f"throttle is {quoted(repr(throttle), 60)}, not a list of reasons"
    return None


def read(path: Path, lines: Iterable[str] | None = None) -> Record:
    """A node's record (its lines, else the file's: evaluate.validate reads them from a zip too); a line cut short
    by a kill is counted, never fatal; a line of the wrong shape (a string for a number, NaN, a sample without its
    time, nested too deep) is named in bad_lines and left out."""
    record = Record(path)
    for number, line in enumerate(_lines(path) if lines is None else lines, 1):
        try:
            item = json.loads(line)
        except ValueError:
            record.unreadable_lines += 1
            continue
        except RecursionError:
            item = None
        problem = "nested too deep" if item is None else json_problem(item) if isinstance(item, (dict, list)) \
            else None
        problem = problem or line_problem(item)
        if problem:
            if len(record.bad_lines) < BAD_LINES_KEPT:
                record.bad_lines.append(f"{path} line {number}: {problem}")
            record.bad_count += 1
            continue
        kind = item["kind"]
        if kind == "start":
            record.host, record.method = item.get("host"), item.get("method")
            record.interval_ms = item.get("interval_ms")
            record.power_sensor, record.note = bool(item.get("power_sensor")), item.get("note")
            record.devices = list(item.get("devices") or [])
        elif kind == "sample":
            record.samples.append(item)
        elif kind == "error":
            record.error = item.get("message")
        elif kind == "end":
            record.ended, record.end_s = True, item.get("time_s")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m utils.machine.telemetry", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the JSON-lines file to append to")
    parser.add_argument("--platform", required=True, choices=("amd", "nvd", "cpu"))
    parser.add_argument("--interval-ms", type=int, default=1000, help="milliseconds between samples (>= 100)")
    args = parser.parse_args(argv)
    if args.interval_ms < 100:
        parser.error(f"--interval-ms {args.interval_ms}: give 100 or more")
    return sample(args.out, args.platform, args.interval_ms)


if __name__ == "__main__":
    run(main, "utils.machine.telemetry")
