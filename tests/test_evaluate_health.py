"""evaluate.health: a node's health before the first run, against the fake pynvml and amdsmi (tests/fakes) and a fake
sysfs tree, one line per problem naming the GPU, the value, what it should be and the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from evaluate import health as health_cli
from tests.fixtures.train_matrix.shell import machine, prepared_data
from utils.machine import health_readers, node_health
from utils.spec import result

FAKES = Path(__file__).parent / "fakes"
REPO = Path(__file__).resolve().parents[1]
HEALTHY = {"name": "NVIDIA H100 80GB HBM3", "bus_id": "00000000:18:00.0", "memory_used_mib": 0, "temp_gpu_c": 35,
           "power_limit_w": 700, "power_default_limit_w": 700, "processes": []}


@pytest.fixture
def node(tmp_path, monkeypatch, gpus):
    """Describe the node's GPUs (the conftest's scenario) beside an empty sysfs tree."""
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    monkeypatch.setenv(node_health.SYSFS_ENV, str(sysfs))

    def describe(*specs: dict) -> Path:
        gpus(*specs)
        return sysfs
    return describe


def lines(health: node_health.Health) -> list[str]:
    return [problem.line for problem in health.problems]


def test_a_healthy_node_has_no_problem(node):
    node(HEALTHY, {**HEALTHY, "bus_id": "00000000:2A:00.0"})
    health = node_health.check("nvd")
    assert (health.method, health.gpus, health.problems) == ("nvml", 2, [])


def test_each_fault_is_one_line_naming_the_gpu_the_value_the_norm_and_the_fix(node):
    node(HEALTHY, {**HEALTHY, "bus_id": "00000000:2A:00.0", "ecc_uncorrected_volatile": 3, "power_limit_w": 500,
                   "pcie_width": 8, "nvlink_down": [3], "processes": [{"pid": 4242, "used_mib": 2048}],
                   "temp_gpu_c": 75, "remapped_rows": {"corrected": 0, "uncorrected": 1, "pending": True,
                                                       "failure": False}})
    found = lines(node_health.check("nvd"))
    assert all(line.startswith("GPU 1 (00000000:2A:00.0): ") for line in found), found
    text = "\n".join(found)
    assert "uncorrectable ECC errors (volatile) is 3, should be 0" in text
    assert "power limit is 500 W, should be the default 700 W: nvidia-smi -i 1 -pl 700" in text
    assert "PCIe link is Gen5 x8, should be Gen5 x16" in text
    assert "NVLink/xGMI is down (links 3)" in text
    assert "processes on the GPU is pid 4242 (2048 MiB)" in text
    assert "temperature at idle is 75 C" in text
    assert "memory rows pending remap/retirement is pending" in text
    assert len(found) == 7


def test_memory_held_without_a_listed_process_is_a_stale_holder(node):
    node({**HEALTHY, "memory_used_mib": 30000})
    (problem,) = node_health.check("nvd").problems
    assert problem.field == "memory in use before the first run" and problem.value == "30000 MiB"


def test_a_query_the_device_does_not_support_is_not_checked(node):
    node({**HEALTHY, "power_limit_w": 100, "pcie_width": 1, "ecc_uncorrected_volatile": 9,
          "not_supported": ["power_limit", "pcie", "ecc", "nvlink", "remapped_rows", "processes", "memory"]})
    health = node_health.check("nvd")
    assert health.problems == [] and health.gpus == 1


def test_amd_gpus_are_read_through_amdsmi(node):
    node({**HEALTHY, "name": "AMD Instinct MI300X", "bus_id": "00000000:05:00.0", "power_limit_w": 600,
          "power_default_limit_w": 750, "nvlink_down": [1], "pcie_gen": 4})
    health = node_health.check("amd")
    assert health.method == "amdsmi"
    assert [p.field for p in health.problems] == ["power limit", "PCIe link", "NVLink/xGMI"]
    assert health.problems[0].line == ("GPU 0 (0000:05:00.0): power limit is 600 W, should be the default 750 W: "
                                      "amd-smi set -g 0 --power-cap 750")


@pytest.fixture
def no_binding(node, monkeypatch):
    """The fake NVML and amdsmi fail to initialise (as without the driver's library); the fake tools answer."""
    node(HEALTHY)
    monkeypatch.setenv("TPRIMAT_FAKE_GPUS", "")
    monkeypatch.setenv("PATH", f"{REPO / 'tests' / 'fakebin'}{os.pathsep}{os.environ['PATH']}")
    return monkeypatch


def test_without_nvml_nvidia_smi_is_read_and_named(no_binding):
    no_binding.setenv("FAKE_NVIDIA_GPUS", "2")
    no_binding.setenv("FAKE_NVIDIA_POWER_LIMIT_W", "500.00")
    no_binding.setenv("FAKE_NVIDIA_PCIE_WIDTH", "8")
    no_binding.setenv("FAKE_NVIDIA_APPS", "00000000:19:00.0, 4242, 2048\n")
    health = node_health.check("nvd")
    assert (health.method, health.gpus) == ("nvidia-smi", 2)
    assert any(note.startswith("nvml: NVML") for note in health.notes)
    found = lines(health)
    assert "GPU 0 (00000000:18:00.0): power limit is 500 W, should be the default 700 W: nvidia-smi -i 0 -pl 700" \
        in found
    assert [line for line in found if "PCIe" in line][1].startswith("GPU 1 (00000000:19:00.0): PCIe link is Gen5 x8, "
                                                                     "should be Gen5 x16")
    assert "GPU 1 (00000000:19:00.0): processes on the GPU is pid 4242 (2048 MiB), should be none: end them (or wait " \
        "for the other job) first" in found
    assert len(found) == 5


def test_without_amdsmi_amd_smi_is_read_and_what_it_cannot_show_is_said(no_binding):
    no_binding.setenv("FAKE_AMD_GPUS", "2")
    no_binding.setenv("FAKE_AMD_ECC", "4")
    no_binding.setenv("FAKE_AMD_XGMI", "AMDSMI_XGMI_STATUS_ERROR")
    health = node_health.check("amd")
    assert (health.method, health.gpus) == ("amd-smi", 2)
    assert any("amd-smi shows neither the default power cap" in note for note in health.notes)
    by_gpu = {(p.index, p.bus_id, p.field, p.value) for p in health.problems}
    assert (1, "0000:0d:00.0", "uncorrectable ECC errors (aggregate)", 4) in by_gpu
    assert (0, "0000:0c:00.0", "NVLink/xGMI", "down (xGMI error status set)") in by_gpu
    assert (0, "0000:0c:00.0", "temperature at idle", "71 C") in by_gpu  # the fake's GPUs are busy: 71 C, 2 GB held
    assert not any(p.field == "PCIe link" for p in health.problems)


def test_gpus_no_way_could_read_are_said_so_and_not_called_healthy(no_binding, tmp_path, capsys):
    no_binding.setenv("PATH", str(tmp_path))  # neither nvidia-smi nor amd-smi
    assert health_cli.main(["--platform", "nvd", "--strict"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[tprimat] node health (nvd): GPUs not read (why below); no problem found\n")
    assert "no way to read the nvd GPUs worked: their health was not checked" in out


def test_nvidia_smi_nvlink_status_names_the_inactive_links():
    status = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
              "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)\n\t Link 0: 26.562 GB/s\n"
              "GPU 2: NVIDIA H100 PCIe (UUID: GPU-c)\n")
    assert health_readers._nvlinks_down(status) == {0: [1], 1: []}


def test_application_clocks_set_below_the_maximum_are_a_problem(node):
    node({**HEALTHY, "throttle": ["applications_clocks"]})
    (problem,) = node_health.check("nvd").problems
    assert problem.line == ("GPU 0 (00000000:18:00.0): application clocks is set below the maximum, should be the "
                            "maximum: nvidia-smi -i 0 -rac")


def test_an_older_nvidia_ml_py_is_read_through_the_calls_it_has(node, monkeypatch):
    node({**HEALTHY, "throttle": ["applications_clocks"],
          "remapped_rows": {"corrected": 0, "uncorrected": 1, "pending": True, "failure": False}})
    import pynvml  # the fake, first on sys.path
    monkeypatch.delattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons")  # before 12.535: the throttle-reasons name
    monkeypatch.delattr(pynvml, "nvmlDeviceGetRemappedRows")  # before row remapping was exposed
    assert [p.field for p in node_health.check("nvd").problems] == ["application clocks"]


def test_a_gpu_the_driver_has_lost_is_a_problem_not_a_gpu_of_unsupported_queries(node):
    node(HEALTHY, {**HEALTHY, "fail_after": 0})  # every query of GPU 1 answers GPU-is-lost
    (problem,) = node_health.check("nvd").problems
    assert problem.line == ("GPU 1: the GPU is lost (the driver cannot reach it), should be reachable: drain the node "
                            "and reset the GPU (nvidia-smi -i 1 -r, or a reboot), then rerun")


def test_a_gpu_whose_spare_rows_ran_out_is_to_be_replaced(node):
    node({**HEALTHY, "remapped_rows": {"corrected": 0, "uncorrected": 8, "pending": False, "failure": True}})
    (problem,) = node_health.check("nvd").problems
    assert (problem.field, problem.fix) == ("memory row remapping", "the GPU has run out of spare rows: replace it")


def test_the_cpu_governor_and_infiniband_ports_are_checked_from_sysfs(node):
    sysfs = node(HEALTHY)
    for cpu, governor in (("cpu0", "performance"), ("cpu1", "powersave")):
        path = sysfs / "devices/system/cpu" / cpu / "cpufreq"
        path.mkdir(parents=True)
        (path / "scaling_governor").write_text(f"{governor}\n")
    for device, state in (("mlx5_0", "4: ACTIVE"), ("mlx5_1", "1: DOWN")):
        port = sysfs / "class/infiniband" / device / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    found = lines(node_health.check("cpu"))
    assert found == [
        "node: InfiniBand/RoCE mlx5_1 port 1 is 1: DOWN (400 Gb/sec (4X NDR)), should be 4: ACTIVE: check its cable "
        "and switch port (ibstat mlx5_1); leave it out of NET_IB_HCA if it is not used",
        "node: CPU frequency governor is powersave on 1 CPU(s), should be performance: sudo cpupower frequency-set "
        "-g performance"]


def health_command(tmp_path: Path, gpus: list[dict], *args: str) -> subprocess.CompletedProcess:
    scenario = tmp_path / "gpus.json"
    scenario.write_text(json.dumps({"gpus": gpus}))
    env = {**os.environ, "PYTHONPATH": str(FAKES), "TPRIMAT_FAKE_GPUS": str(scenario),
           node_health.SYSFS_ENV: str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "evaluate.health", "--platform", "nvd", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def test_strict_on_the_command_line_exits_1_on_a_problem_and_0_when_healthy(tmp_path):
    sick = health_command(tmp_path, [{**HEALTHY, "ecc_uncorrected_aggregate": 2}], "--strict")
    assert sick.returncode == 1
    assert "GPU 0 (00000000:18:00.0): uncorrectable ECC errors (aggregate) is 2, should be 0" in sick.stderr
    assert "Traceback" not in sick.stderr
    assert health_command(tmp_path, [HEALTHY], "--strict").returncode == 0
    assert health_command(tmp_path, [{**HEALTHY, "ecc_uncorrected_aggregate": 2}]).returncode == 0  # warn only


def test_record_merges_the_findings_into_system_json(tmp_path):
    system = tmp_path / "system.json"
    system.write_text(json.dumps({"nodes": 1, "device_name": "NVIDIA H100 80GB HBM3"}))
    assert health_command(tmp_path, [{**HEALTHY, "power_limit_w": 350}], "--record", str(system)).returncode == 0
    recorded = json.loads(system.read_text())
    assert recorded["nodes"] == 1 and recorded["health"]["ok"] is False
    (problem,) = recorded["health"]["problems"]
    assert (problem["index"], problem["bus_id"], problem["field"]) == (0, "00000000:18:00.0", "power limit")
    assert problem["line"].startswith("GPU 0 (00000000:18:00.0): power limit is 350 W")
    system_schema = jsonschema.Draft202012Validator({**result.schema()["properties"]["system"],
                                                     "$defs": result.schema()["$defs"]})
    assert [error.message for error in system_schema.iter_errors(recorded)] == []  # every result carries it
    assert list(system_schema.iter_errors({"health": {**recorded["health"], "method": "guess"}}))  # and is held to it


def test_bad_arguments_are_one_line_and_exit_2(tmp_path):
    result = health_command(tmp_path, [HEALTHY], "--strickt")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("mode, code", [("strict", 2), ("warn", 0), ("off", 0)])
def test_the_matrix_checks_health_before_the_first_run_as_health_says(tmp_path, mode, code):
    fake = machine(tmp_path, nvidia=8)
    prepared_data(tmp_path / "data", "bc", models=("llama",))
    scenario = tmp_path / "gpus.json"
    scenario.write_text(json.dumps({"gpus": [{**HEALTHY, "power_limit_w": 400}] * 8}))
    result = fake.run("shell/train.sh", DRY_RUN="1", HEALTH=mode, MODELS="llama", FRAMEWORK="mega",
                      DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(FAKES), TPRIMAT_FAKE_GPUS=str(scenario))
    assert result.returncode == code, result.output
    assert ("power limit is 400 W" in result.output) is (mode != "off")
    if mode == "strict":
        assert "HEALTH=strict: this node has the problems listed above" in result.output
        assert "run 1/1" not in result.output
    if mode == "off":
        assert "node health: not checked (HEALTH=off)" in result.output
