"""Make sure a finished run left nothing behind before the next one starts.

Leftover workers of a previous run hold GPU memory and make the next run fail with out-of-memory
or "No supported gpu backend found". The launcher starts each run in its own session, so its
processes are found by session id; GPU memory is read through utils.machine.vendor_tools (nvidia-smi /
rocm-smi) and compared with what was in use before the run started. Every wait is bounded and ends
in a warning that names what is still there.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from utils.machine.vendor_tools import gpu_processes, memory_used_mib

MEMORY_SLACK_MIB = 1024  # drivers and caches move by a few hundred MiB between runs
POLL_S = 1.0


@dataclass(frozen=True)
class Process:
    pid: int
    command: str

    def __str__(self) -> str:
        return f"{self.pid} ({self.command})"


def _stat_fields(pid: str) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (which may contain spaces)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def session_processes(sid: int) -> list[Process]:
    """Live (non-zombie) processes of a session."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        # fields: state ppid pgrp session ...
        if fields is None or int(fields[3]) != sid or fields[0] == "Z":
            continue
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found.append(Process(int(entry), command[:120] or "?"))
    return found


def end_session(sid: int, grace_s: float) -> list[Process]:
    """Wait up to grace_s for a session's processes to exit, then SIGTERM, then SIGKILL; what survives."""
    deadline = time.monotonic() + grace_s
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            for proc in session_processes(sid):
                try:
                    os.kill(proc.pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + min(grace_s, 10.0)
        while time.monotonic() < deadline:
            if not session_processes(sid):
                return []
            time.sleep(POLL_S / 4)
    return session_processes(sid)


def wait_gpu_idle(platform: str, baseline: list[float] | None, timeout_s: float) -> str | None:
    """Wait until every GPU is back to its memory use before the run; a warning when it is not."""
    if baseline is None:
        return None
    deadline = time.monotonic() + timeout_s
    while True:
        used = memory_used_mib(platform)
        if used is None:
            return f"could not read GPU memory with the {platform} tool; not waiting for it to be idle"
        busy = [f"GPU {i}: {now:.0f} MiB (was {before:.0f})"
                for i, (now, before) in enumerate(zip(used, baseline)) if now > before + MEMORY_SLACK_MIB]
        if not busy:
            return None
        if time.monotonic() >= deadline:
            holders = gpu_processes(platform)
            return (f"GPU memory still in use {timeout_s:.0f} s after the run: " + "; ".join(busy)
                    + (". Held by: " + "; ".join(holders) if holders else ". No process listed by the tool"))
        time.sleep(POLL_S)
