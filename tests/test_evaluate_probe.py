"""evaluate.probe: the system description, from vendor tools when present and empty when not."""

import json
import stat
import textwrap

import pytest

from evaluate import probe

NVIDIA_SMI = """\
#!/bin/sh
case "$*" in
  *--query-gpu=*) printf 'NVIDIA H100 80GB HBM3, 81559, 550.54.15, 1980, 1980, 700.00\\n'
                  printf 'NVIDIA H100 80GB HBM3, 81559, 550.54.15, 1755, 1980, 700.00\\n' ;;
  *) printf '| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.8 |\\n' ;;
esac
"""
ROCM_SMI = """\
#!/bin/sh
printf '%s\\n' '{"card0": {"Card Series": "AMD Instinct MI300X", "GFX Version": "gfx942",
  "VRAM Total Memory (B)": "206141652992", "Max Graphics Package Power (W)": "750.0",
  "sclk clock speed:": "(2100Mhz)"}, "system": {"Driver version": "6.8.5"}}'
"""
AMD_SMI = """\
#!/bin/sh
case "$1" in
  list) printf 'GPU: 0\\n    BDF: 0000:0c:00.0\\nGPU: 1\\n    BDF: 0000:22:00.0\\n' ;;
  static) printf 'ASIC:\\n    MARKET_NAME: AMD Instinct MI325X\\n' ;;
esac
"""


@pytest.fixture
def fake_path(tmp_path, monkeypatch):
    """A PATH holding only the fake tools a test writes (so the machine's own tools are not seen)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))

    def install(name, script):
        path = bin_dir / name
        path.write_text(textwrap.dedent(script))
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return install


def test_nvidia_gpus_come_from_nvidia_smi(fake_path):
    fake_path("nvidia-smi", NVIDIA_SMI)
    gpu = probe.gpu_info()
    assert (gpu["vendor"], gpu["name"], gpu["count"], gpu["driver"], gpu["cuda"]) == \
        ("nvidia", "NVIDIA H100 80GB HBM3", 2, "550.54.15", "12.8")
    assert gpu["memory_gib"] == pytest.approx(81559 / 1024, abs=0.01)
    assert gpu["devices"][1]["clock_sm_mhz"] == 1755 and gpu["devices"][1]["power_cap_w"] == 700


def test_amd_gpus_come_from_rocm_smi(fake_path):
    fake_path("rocm-smi", ROCM_SMI)
    gpu = probe.gpu_info()
    assert (gpu["vendor"], gpu["name"], gpu["count"], gpu["driver"]) == ("amd", "AMD Instinct MI300X", 1, "6.8.5")
    assert gpu["memory_gib"] == pytest.approx(191.98, abs=0.01)
    assert gpu["devices"][0]["power_cap_w"] == 750 and gpu["devices"][0]["clock_sm_mhz"] == 2100


def test_amd_smi_answers_when_rocm_smi_is_absent(fake_path):
    fake_path("amd-smi", AMD_SMI)
    gpu = probe.gpu_info()
    assert (gpu["vendor"], gpu["name"], gpu["count"]) == ("amd", "AMD Instinct MI325X", 2)


def test_a_failing_vendor_tool_is_not_a_gpu(fake_path):
    fake_path("nvidia-smi", "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert probe.nvidia_gpus() is None


def test_cpu_only_machine_leaves_gpu_fields_empty(fake_path, tmp_path, capsys):
    out = tmp_path / "system.json"
    assert probe.main(["-o", str(out)]) == 0
    system = json.loads(out.read_text())
    assert system["gpu"] == {"vendor": None, "name": None, "count": 0, "memory_gib": None, "driver": None,
                             "cuda": None, "rocm": None, "devices": []}
    assert system["host"]["cpu_threads"] >= 1 and system["host"]["kernel"]
    assert system["software"]["torch"] and system["software"]["python"]
    assert "no GPU (CPU only" in capsys.readouterr().out


def test_infiniband_adapters_are_read_from_sys(tmp_path):
    port = tmp_path / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    assert probe.interconnect_info(tmp_path) == {"infiniband": [{"device": "mlx5_0", "rates": ["400 Gb/sec (4X NDR)"]}]}


def test_node_count_comes_from_nnodes():
    assert probe.probe({"NNODES": "2"})["nodes"] == 2
