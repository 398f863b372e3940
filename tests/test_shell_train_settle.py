"""train.launch.settle (GPU memory read by utils.machine.vendor_tools): between runs, the previous run's processes are gone
and GPU memory is back to idle."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.fixtures.train_matrix.shell import alive
from tests.shell_harness import FAKEBIN
from train.launch import settle
from utils.machine import vendor_tools


@pytest.fixture
def fake_gpus(monkeypatch):
    """nvidia-smi / rocm-smi fakes first on PATH, 8 GPUs each, no memory in use."""
    monkeypatch.setenv("PATH", f"{FAKEBIN}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_GPUS", "8")
    monkeypatch.setenv("FAKE_AMD_GPUS", "8")
    monkeypatch.setenv("FAKE_LOG", "/dev/null")
    return monkeypatch


@pytest.mark.parametrize("platform, variable, used", [("nvd", "FAKE_NVIDIA_MEM_USED", "30000"),
                                                      ("amd", "FAKE_AMD_MEM_USED", str(30000 * 2**20))])
def test_gpu_memory_is_read_per_gpu(fake_gpus, platform, variable, used):
    assert vendor_tools.memory_used_mib(platform) == [0.0] * 8
    fake_gpus.setenv(variable, used)
    assert vendor_tools.memory_used_mib(platform) == [30000.0] * 8


def test_idle_gpus_need_no_wait(fake_gpus):
    started = time.monotonic()
    assert settle.wait_gpu_idle("nvd", [0.0] * 8, timeout_s=30) is None
    assert time.monotonic() - started < 5


def test_memory_still_held_ends_in_a_warning_naming_the_holders(fake_gpus):
    fake_gpus.setenv("FAKE_NVIDIA_MEM_USED", "30000")
    fake_gpus.setenv("FAKE_NVIDIA_APPS", "4242, python3, 30000 MiB\n")
    warning = settle.wait_gpu_idle("nvd", [0.0] * 8, timeout_s=1)
    assert "GPU 0: 30000 MiB (was 0)" in warning and "4242, python3, 30000 MiB" in warning


def test_memory_used_before_the_run_does_not_count(fake_gpus):
    fake_gpus.setenv("FAKE_NVIDIA_MEM_USED", "30000")
    assert settle.wait_gpu_idle("nvd", [29800.0] * 8, timeout_s=1) is None


def test_without_a_vendor_tool_there_is_nothing_to_wait_for(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert vendor_tools.memory_used_mib("nvd") is None
    assert settle.wait_gpu_idle("nvd", vendor_tools.memory_used_mib("nvd"), timeout_s=30) is None
    assert vendor_tools.memory_used_mib("cpu") is None


def test_a_session_that_ignores_sigterm_is_killed():
    stubborn = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 600 & wait"], start_new_session=True)
    time.sleep(0.5)
    members = settle.session_processes(stubborn.pid)
    assert len(members) == 2 and any("sleep 600" in p.command for p in members)
    assert settle.end_session(stubborn.pid, grace_s=0.5) == []
    stubborn.wait(timeout=10)
    assert not any(alive(p.pid) for p in members)


def test_a_session_already_gone_ends_at_once():
    done = subprocess.Popen(["true"], start_new_session=True)
    done.wait()
    started = time.monotonic()
    assert settle.end_session(done.pid, grace_s=30) == []
    assert time.monotonic() - started < 2
