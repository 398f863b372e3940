"""utils.machine.telemetry: the node's sampler, against the fake pynvml and amdsmi (tests/fakes), the fake vendor tools
(tests/fakebin) and a fake RAPL sysfs tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from utils.machine import telemetry, telemetry_backends
from utils.machine.telemetry_tools import parse_amd_smi_metric, parse_nvidia_smi_line

FAKES = Path(__file__).parent / "fakes"
FAKEBIN = Path(__file__).parent / "fakebin"
H100 = {"name": "NVIDIA H100 80GB HBM3", "power_w": 650.0, "energy_start_j": 5000.0, "sm_clock_mhz": 1755,
        "sm_clock_max_mhz": 1980, "mem_clock_mhz": 2619, "mem_clock_max_mhz": 2619, "temp_gpu_c": 61,
        "temp_mem_c": 70, "util_gpu_pct": 99, "util_mem_pct": 45, "memory_used_mib": 60000,
        "throttle": ["sw_power_cap"]}
MI300X = {**H100, "name": "AMD Instinct MI300X", "sm_clock_mhz": 2000, "sm_clock_max_mhz": 2100,
          "mem_clock_mhz": 1300, "mem_clock_max_mhz": 1300, "throttle": ["ppt_pwr"]}


def test_nvml_samples_every_field_a_gpu_reports(gpus):
    gpus(H100, {**H100, "throttle": []})
    backend = telemetry.open_backend("nvd", 1000)
    first, second = backend.read()
    assert backend.method == "nvml" and backend.power_sensor
    assert backend.devices[0] == {"index": 0, "name": "NVIDIA H100 80GB HBM3", "bus_id": "00000000:18:00.0",
                                  "sm_clock_max_mhz": 1980, "mem_clock_max_mhz": 2619}
    assert first["power_w"] == 650.0 and first["energy_j"] >= 5000.0
    assert (first["sm_clock_mhz"], first["mem_clock_mhz"], first["temp_gpu_c"], first["temp_mem_c"]) == \
        (1755, 2619, 61, 70)
    assert (first["util_gpu_pct"], first["util_mem_pct"], first["memory_used_mib"]) == (99, 45, 60000.0)
    assert first["throttle"] == ["sw_power_cap"] and second["throttle"] == []


def test_a_query_the_gpu_does_not_support_is_left_out_never_zero(gpus):
    gpus({**H100, "not_supported": ["energy", "temp_mem", "throttle", "power"]})
    sample = telemetry.open_backend("nvd", 1000).read()[0]
    assert not {"energy_j", "temp_mem_c", "throttle", "power_w"} & sample.keys()
    assert sample["sm_clock_mhz"] == 1755


def test_an_idle_gpu_is_not_throttled(gpus):
    gpus({**H100, "throttle": ["gpu_idle"]})
    assert telemetry.open_backend("nvd", 1000).read()[0]["throttle"] == []


def test_amdsmi_samples_the_gpu_and_names_its_violations(gpus):
    gpus(MI300X)
    backend = telemetry.open_backend("amd", 1000)
    sample = backend.read()[0]
    assert backend.method == "amdsmi" and backend.devices[0]["name"] == "AMD Instinct MI300X"
    assert backend.devices[0]["sm_clock_max_mhz"] == 2100
    assert sample["power_w"] == 650 and sample["energy_j"] == pytest.approx(5000.0, abs=20)
    assert (sample["sm_clock_mhz"], sample["temp_gpu_c"], sample["temp_mem_c"]) == (2000, 61, 70)
    assert sample["throttle"] == ["ppt_power_cap"]


def test_amdsmi_leaves_out_what_the_gpu_does_not_support(gpus):
    gpus({**MI300X, "not_supported": ["energy", "temp_mem"]})
    sample = telemetry.open_backend("amd", 1000).read()[0]
    assert "energy_j" not in sample and "temp_mem_c" not in sample and sample["power_w"] == 650


def test_without_nvml_the_sampler_reads_nvidia_smi(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_GPUS", "2")
    monkeypatch.setenv("FAKE_NVIDIA_THROTTLE", "0x0000000000000024")
    backend = telemetry.open_backend("nvd", 100)
    try:
        samples = backend.read()
    finally:
        backend.close()
    assert backend.method == "nvidia-smi" and [d["bus_id"] for d in backend.devices] == \
        ["00000000:18:00.0", "00000000:19:00.0"]
    assert [s["index"] for s in samples] == [0, 1]
    assert samples[0]["power_w"] == 350.0 and "temp_mem_c" not in samples[0]  # [N/A]
    assert samples[0]["throttle"] == ["sw_power_cap", "sw_thermal"]


def test_without_amdsmi_the_sampler_reads_amd_smi(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_AMD_GPUS", "1")
    backend = telemetry.open_backend("amd", 100)
    sample = backend.read()[0]
    assert backend.method == "amd-smi" and backend.devices == [{"index": 0, "sm_clock_max_mhz": 2100.0,
                                                                "mem_clock_max_mhz": 1300.0}]
    assert (sample["power_w"], sample["energy_j"], sample["memory_used_mib"]) == (750.0, 123456.5, 2048.0)
    assert "temp_mem_c" not in sample


def test_the_tools_output_is_read_by_name_and_unsupported_values_left_out():
    line = "3, 412.50, 1980, 2619, 55, [N/A], 97, 41, 70000, 0x0000000000000001"
    assert parse_nvidia_smi_line(line) == {"index": 3, "power_w": 412.5, "sm_clock_mhz": 1980.0,
                                           "mem_clock_mhz": 2619.0, "temp_gpu_c": 55.0, "util_gpu_pct": 97.0,
                                           "util_mem_pct": 41.0, "memory_used_mib": 70000.0, "throttle": []}
    assert parse_nvidia_smi_line("No devices were found") is None
    older = json.dumps({"gpu_data": [{"gpu": 0, "power": {"socket_power": 300}, "temperature": {"hotspot": "N/A"}}]})
    assert parse_amd_smi_metric(older) == [{"index": 0, "power_w": 300.0, "_maxima": {}}]


def test_no_backend_on_the_node_is_said_in_the_record(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("FAKE_NVIDIA_GPUS", raising=False)
    assert telemetry.sample(tmp_path / "t.jsonl", "nvd", 1000) == 0
    record = telemetry.read(tmp_path / "t.jsonl")
    assert record.method is None and record.complete and not record.power_sensor
    assert "nvidia-ml-py (pynvml) is not installed" in record.note and "nvidia-smi exited 9" in record.note


def rapl(root: Path, energy_uj: int, max_uj: int = 1_000_000) -> Path:
    package = root / "intel-rapl:0"
    package.mkdir(parents=True, exist_ok=True)
    (package / "name").write_text("package-0\n")
    (package / "max_energy_range_uj").write_text(f"{max_uj}\n")
    (package / "energy_uj").write_text(f"{energy_uj}\n")
    (root / "intel-rapl:0:0").mkdir(exist_ok=True)  # a sub-domain (core): not a package
    return package


def test_the_cpu_package_energy_counter_is_unwrapped_at_its_range(tmp_path, monkeypatch):
    package = rapl(tmp_path, 900_000)
    monkeypatch.setenv(telemetry_backends.POWERCAP_ENV, str(tmp_path))
    backend = telemetry.open_backend("cpu", 1000)
    assert backend.method == "rapl+psutil" and backend.power_sensor and backend.note is None
    assert [d["name"] for d in backend.devices] == ["package-0"]
    (package / "energy_uj").write_text("950000\n")
    first = backend.read()[0]
    (package / "energy_uj").write_text("50000\n")  # wrapped: 100000 uJ later
    time.sleep(0.05)
    second = backend.read()[0]
    assert first["energy_j"] == pytest.approx(0.05) and second["energy_j"] == pytest.approx(0.15)
    assert second["power_w"] > 0 and "util_gpu_pct" in second and "sm_clock_mhz" in second


def test_a_cpu_without_a_readable_power_sensor_says_so_and_has_no_power(tmp_path, monkeypatch):
    monkeypatch.setenv(telemetry_backends.POWERCAP_ENV, str(tmp_path / "absent"))
    backend = telemetry.open_backend("cpu", 1000)
    sample = backend.read()[0]
    assert (backend.method, backend.power_sensor) == ("psutil", False)
    assert backend.note.startswith("no power sensor readable")
    assert "power_w" not in sample and "energy_j" not in sample and "util_gpu_pct" in sample


def sampler_env(scenario: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(FAKES), "TPRIMAT_FAKE_GPUS": str(scenario)}


def test_the_sampler_process_records_from_start_to_a_clean_stop(gpus, tmp_path):
    out = tmp_path / "telemetry.jsonl"
    process = telemetry.start(out, "nvd", 100, sampler_env(gpus(H100, H100)))
    time.sleep(1.0)
    assert telemetry.stop(process) is None and process.returncode == 0
    record = telemetry.read(out)
    assert record.complete and record.method == "nvml" and record.interval_ms == 100
    times = [s["time_s"] for s in record.samples if s["index"] == 0]
    assert len(times) >= 3 and times == sorted(times)
    assert {s["index"] for s in record.samples} == {0, 1}


def test_a_sampler_that_dies_leaves_an_incomplete_record_naming_why(gpus, tmp_path):
    out = tmp_path / "telemetry.jsonl"
    process = telemetry.start(out, "nvd", 100, sampler_env(gpus({**H100, "fail_after": 3})))
    process.wait(timeout=30)
    assert "stopped during the run (exit code 1)" in telemetry.stop(process)
    record = telemetry.read(out)
    assert not record.complete and len(record.samples) == 2  # the third sample's energy query found the GPU lost
    assert "NVMLError_GpuIsLost" in record.error


def test_a_line_cut_short_by_a_kill_makes_the_record_incomplete_not_unreadable(tmp_path):
    out = tmp_path / "telemetry.jsonl"
    out.write_text('{"kind": "start", "host": "n0", "method": "nvml", "interval_ms": 1000, "devices": []}\n'
                   '{"kind": "sample", "time_s": 1.0, "index": 0, "power_w": 100.0}\n{"kind": "sam')
    record = telemetry.read(out)
    assert (len(record.samples), record.unreadable_lines, record.complete) == (1, 1, False)


def test_an_interval_under_100_ms_is_refused_in_one_line():
    done = subprocess.run([sys.executable, "-m", "utils.machine.telemetry", "--out", "/dev/null", "--platform", "cpu",
                           "--interval-ms", "50"], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "--interval-ms 50: give 100 or more" in done.stderr
