"""utils.machine.vendor_tools: the one reader of nvidia-smi, rocm-smi and amd-smi, against the fakes (tests/fakebin)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.shell_harness import FAKEBIN, REPO
from utils.machine import vendor_tools


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """The fakes first on PATH, no GPU of either vendor and no AMD driver node until a test says so."""
    monkeypatch.setenv("PATH", f"{FAKEBIN}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", "/dev/null")
    monkeypatch.setenv("FAKE_NVIDIA_GPUS", "0")
    monkeypatch.setenv("FAKE_AMD_GPUS", "0")
    monkeypatch.setenv("TPRIMAT_KFD", str(tmp_path / "no-kfd"))
    return monkeypatch


@pytest.mark.parametrize("variable, platform", [("FAKE_NVIDIA_GPUS", "nvd"), ("FAKE_AMD_GPUS", "amd")])
def test_the_vendor_and_its_gpus_are_what_its_tool_lists(machine, variable, platform):
    machine.setenv(variable, "4")
    assert vendor_tools.detect_platform() == platform
    assert vendor_tools.gpu_count(platform) == 4


def test_a_machine_without_gpus_is_the_cpu(machine):
    assert vendor_tools.detect_platform() == "cpu"
    assert vendor_tools.gpu_count("nvd") == vendor_tools.gpu_count("amd") == vendor_tools.gpu_count("cpu") == 0


def test_the_amd_driver_node_alone_means_amd(machine, tmp_path):
    (tmp_path / "kfd").touch()
    assert vendor_tools.detect_platform({"TPRIMAT_KFD": str(tmp_path / "kfd")}) == "amd"


def test_rocm_smi_counts_when_amd_smi_is_absent(machine, tmp_path):
    only = tmp_path / "only"
    only.mkdir()
    (only / "rocm-smi").symlink_to(FAKEBIN / "rocm-smi")
    machine.setenv("PATH", f"{only}:/usr/bin:/bin")
    machine.setenv("FAKE_AMD_GPUS", "8")
    assert vendor_tools.amd_count() == 8


@pytest.mark.parametrize("platform, variable, used", [("nvd", "FAKE_NVIDIA_MEM_USED", "30000"),
                                                      ("amd", "FAKE_AMD_MEM_USED", str(30000 * 2**20))])
def test_memory_in_use_is_read_per_gpu(machine, platform, variable, used):
    machine.setenv("FAKE_NVIDIA_GPUS", "2")
    machine.setenv("FAKE_AMD_GPUS", "2")
    machine.setenv(variable, used)
    assert vendor_tools.memory_used_mib(platform) == [30000.0] * 2
    assert vendor_tools.memory_used_mib("cpu") is None


def test_without_the_tool_memory_is_unknown_and_no_process_is_named(machine):
    assert vendor_tools.memory_used_mib("nvd") is None and vendor_tools.gpu_processes("nvd") == []


def test_the_processes_holding_gpus_are_the_tools_lines(machine):
    machine.setenv("FAKE_NVIDIA_GPUS", "1")
    machine.setenv("FAKE_NVIDIA_APPS", "4242, python3, 30000 MiB\n\n")
    assert vendor_tools.gpu_processes("nvd") == ["4242, python3, 30000 MiB"]


@pytest.mark.parametrize("args, out", [(["platform"], "amd"), (["count"], "3"), (["count", "nvd"], "0")])
def test_the_command_line_answers_the_shell(machine, args, out):
    machine.setenv("FAKE_AMD_GPUS", "3")
    run = subprocess.run([sys.executable, "-m", "utils.machine.vendor_tools", *args], cwd=REPO, capture_output=True,
                         text=True, check=True)
    assert run.stdout == out + "\n"


def test_a_bad_question_is_one_line_and_exit_2():
    run = subprocess.run([sys.executable, "-m", "utils.machine.vendor_tools", "platform", "nvd"], cwd=REPO,
                         capture_output=True, text=True)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1 and "Traceback" not in run.stderr


def test_a_tool_that_does_not_answer_is_unavailable_naming_why(machine, tmp_path):
    with pytest.raises(vendor_tools.Unavailable, match="^nvidia-smi exited 9: NVIDIA-SMI has failed"):
        vendor_tools.tool_output("nvidia-smi", "-L")
    machine.setenv("PATH", str(tmp_path))
    with pytest.raises(vendor_tools.Unavailable, match="^amd-smi metric: amd-smi is not on PATH$"):
        vendor_tools.tool_output("amd-smi", "metric", "--json", name="amd-smi metric")
    assert vendor_tools.run_tool("amd-smi", "list") is None


def test_the_tools_values_are_read_in_one_place():
    assert vendor_tools.smi_rows(" 0, 412.50 , [N/A]\n\n1, 1, [Not Supported]\n") == \
        [["0", "412.50", "[N/A]"], ["1", "1", "[Not Supported]"]]
    assert [vendor_tools.smi_number(text) for text in ("412.50", " 7 ", "[N/A]", "[Not Supported]")] == \
        [412.5, 7.0, None, None]
    assert [vendor_tools.amd_smi_value(v) for v in ({"value": 71, "unit": "C"}, 32, "N/A", True, None)] == \
        [71.0, 32.0, None, None, None]
    assert vendor_tools.amd_smi_gpus('{"gpu_data": [{"gpu": 0}]}') == vendor_tools.amd_smi_gpus('[{"gpu": 0}]')
