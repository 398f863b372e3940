"""evaluate.probe: the system description, from vendor tools when present and empty when not."""

import importlib.util
import json
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from utils import frameworks
from utils.frameworks.prim import checkout

from utils.machine import probe, vendor_tools

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
    assert vendor_tools.nvidia_gpus() is None


def test_cpu_only_machine_leaves_gpu_fields_empty(fake_path, tmp_path, capsys):
    out = tmp_path / "system.json"
    assert probe.main(["-o", str(out)]) == 0
    system = json.loads(out.read_text())
    assert system["gpu"] == {"vendor": None, "name": None, "count": 0, "memory_gib": None, "driver": None,
                             "cuda": None, "rocm": None, "devices": []}
    assert system["host"]["cpu_threads"] >= 1 and system["host"]["kernel"]
    assert system["software"]["torch"] and system["software"]["python"]
    assert "no GPU (CPU only" in capsys.readouterr().out


def test_without_gpu_device_files_the_probe_reads_torchs_build_without_importing_torch(monkeypatch):
    """Importing torch was 1.5 s of every probe on a CPU machine: its CUDA and HIP versions come from the
    torch/version.py its build wrote, and NCCL's, which only an imported torch can name, stays null there."""
    import torch

    repo = Path(probe.__file__).resolve().parents[2]
    code = ("import json, sys; from utils.machine import probe; system = probe.probe(); "
            "print(json.dumps([system['software'], 'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})
    software, imported = json.loads(out.stdout)
    assert not probe.gpu_device_files() and imported is False
    assert (software["torch_cuda"], software["torch_hip"]) == (torch.version.cuda, torch.version.hip)
    assert software["nccl"] is None and software["rccl"] is None
    monkeypatch.setattr(probe, "GPU_DEVICE_FILES", (str(Path(torch.__file__)),))  # a GPU node: torch is asked
    assert probe.gpu_device_files() and probe.software_info()["torch_cuda"] == torch.version.cuda


def sys_file(root, relative, text):
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_infiniband_and_roce_adapters_are_read_from_sys(tmp_path):
    sys_file(tmp_path, "ib/mlx5_0/ports/1/rate", "400 Gb/sec (4X NDR)\n")
    sys_file(tmp_path, "ib/mlx5_0/ports/1/link_layer", "InfiniBand\n")
    sys_file(tmp_path, "ib/mlx5_1/ports/1/rate", "200 Gb/sec (4X HDR)\n")
    sys_file(tmp_path, "ib/mlx5_1/ports/1/link_layer", "Ethernet\n")  # RoCE
    sys_file(tmp_path, "net/eth0/speed", "25000\n")
    assert probe.interconnect_info(tmp_path / "ib", tmp_path / "net") == {
        "infiniband": [{"device": "mlx5_0", "rates": ["400 Gb/sec (4X NDR)"], "link_layers": ["InfiniBand"]},
                       {"device": "mlx5_1", "rates": ["200 Gb/sec (4X HDR)"], "link_layers": ["Ethernet"]}],
        "interfaces": []}


def test_without_rdma_adapters_the_physical_network_interfaces_are_the_interconnect(tmp_path):
    for name, speed, state in (("ens1f0", "100000", "up"), ("eno1", "-1", "down"), ("docker0", "-1", "up")):
        sys_file(tmp_path, f"net/{name}/speed", speed + "\n")
        sys_file(tmp_path, f"net/{name}/operstate", state + "\n")
    for name in ("ens1f0", "eno1"):
        (tmp_path / "net" / name / "device").mkdir()
    (tmp_path / "net" / "lo").mkdir()
    assert probe.interconnect_info(tmp_path / "no-ib", tmp_path / "net")["interfaces"] == [
        {"name": "eno1", "state": "down", "speed_mbps": None, "physical": True},
        {"name": "ens1f0", "state": "up", "speed_mbps": 100000, "physical": True}]


def test_a_container_sees_its_virtual_interfaces_but_never_loopback(tmp_path):
    sys_file(tmp_path, "net/eth0/operstate", "up\n")  # a veth: no device link, speed unreadable
    (tmp_path / "net" / "lo").mkdir()
    assert probe.interconnect_info(tmp_path / "no-ib", tmp_path / "net")["interfaces"] == [
        {"name": "eth0", "state": "up", "speed_mbps": None, "physical": False}]


def test_unreadable_sys_leaves_the_interconnect_empty(tmp_path):
    assert probe.interconnect_info(tmp_path / "missing", tmp_path / "missing") == {"infiniband": [], "interfaces": []}


def test_node_count_comes_from_nnodes():
    assert probe.probe({"NNODES": "2"})["nodes"] == 2


def test_node_names_come_from_the_slurm_jobs_record_in_node_rank_order(tmp_path, fake_path):
    fake_path("scontrol", "#!/bin/sh\nprintf 'wrong\\n'\n")
    (tmp_path / "slurm.json").write_text(json.dumps({"job_id": 7, "nnodes": 2, "nodes": ["gpu-b7", "gpu-a3"]}))
    env = {"NNODES": "2", "RUN_SET_DIR": str(tmp_path), "SLURM_JOB_NODELIST": "gpu-a3,gpu-b7"}
    assert probe.node_names(env, 2) == ["gpu-b7", "gpu-a3"]


def test_node_names_are_expanded_from_the_jobs_node_list_by_scontrol(tmp_path, fake_path):
    fake_path("scontrol", """\
        #!/bin/sh
        [ "$*" = "show hostnames gpu-[01-02]" ] && printf 'gpu-01\\ngpu-02\\n'
        """)
    env = {"RUN_SET_DIR": str(tmp_path), "SLURM_JOB_NODELIST": "gpu-[01-02]"}
    assert probe.node_names(env, 2) == ["gpu-01", "gpu-02"]
    # a one-node run inside the two-node allocation ran on this host alone
    assert probe.node_names(env, 1) == [socket.gethostname()]


def test_one_node_is_this_host_and_a_multi_node_run_started_by_hand_names_none(fake_path):
    assert probe.probe({"NNODES": "1"})["node_names"] == [socket.gethostname()]
    assert probe.node_names({"SLURM_JOB_NODELIST": "gpu-[01-02]"}, 2) == []  # no scontrol on PATH


def test_a_stack_check_of_unknown_frameworks_is_refused_in_one_line(capsys):
    assert probe.main(["--require-stack", "amd", "--frameworks", "mega,jax"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "--frameworks 'mega,jax'" in line and ", ".join(frameworks.NAMES) in line


def test_every_framework_names_the_modules_its_trainer_needs():
    assert set(probe.FRAMEWORK_MODULES) == set(frameworks.NAMES)
    assert "deepspeed" in probe.FRAMEWORK_MODULES["autotp"] and "transformers" in probe.FRAMEWORK_MODULES["fsdp"]


def test_this_machines_python_reports_what_it_sees_and_is_refused_for_gpu_training():
    """Asked for prim's one module (Transformer Engine, which a CPU host lacks): the import is quick to fail."""
    facts = probe.facts_of(sys.executable, ["prim"])
    assert facts["modules"] == {"transformer_engine": probe.NOT_INSTALLED}
    assert facts["gpus"] == 0 and facts["hip"] is None  # a CPU-only torch, as a GPU node's .venv would hold
    problem = probe.stack_problem("amd", ["prim"], sys.executable)
    assert problem.startswith(f"{sys.executable} cannot train prim on AMD GPUs: torch {facts['torch']} is not a ROCm build")
    assert "no transformer_engine" in problem


@pytest.mark.parametrize("release, launcher, other", [("v26.5", "primus-cli", "examples/run_pretrain.sh"),
                                                     ("v25.11", "examples/run_pretrain.sh", "primus-cli")])
def test_a_primus_checkout_is_the_one_that_holds_its_release_s_launcher(tmp_path, release, launcher, other):
    for name, holds in (("right", launcher), ("wrong", other)):
        (tmp_path / name / holds).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name / holds).write_text("")
    missing = [checkout.missing(release, str(tmp_path / name)) for name in ("right", "wrong")]
    assert missing[0] is None
    assert missing[1] == f"no Primus {release} checkout at {tmp_path / 'wrong'} (PRIMUS_PATH; it holds {launcher})"


def test_megatron_core_is_reported_as_the_version_that_imports_first_pre_release_included(tmp_path):
    """Primus's Megatron-LM checkout on PYTHONPATH, in front of the installed wheel, is what runs."""
    core = tmp_path / "megatron" / "core"
    core.mkdir(parents=True)
    (tmp_path / "megatron" / "__init__.py").write_text("")
    (core / "__init__.py").write_text("")
    (core / "package_info.py").write_text('MAJOR = 0\nMINOR = 15\nPATCH = 0\nPRE_RELEASE = "rc8"\n')
    repo = Path(probe.__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", "from utils.machine.probe import software_info; "
                          "print(software_info()['megatron_core'])"], cwd=repo, capture_output=True, text=True,
                         env={"PYTHONPATH": f"{tmp_path}:{repo}", "PATH": "/usr/bin:/bin"}, check=True)
    assert out.stdout.strip() == "0.15.0rc8"


@pytest.fixture
def broken_package(tmp_path, monkeypatch) -> str:
    """A package that is installed (find_spec finds it) and fails at import, as torchtitan 0.3 does on torch 2.12."""
    package = tmp_path / "brokenpkg"
    package.mkdir()
    (package / "__init__.py").write_text("from torch.distributed.fsdp import NoSuchMeshDims\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "brokenpkg"


def test_a_module_that_is_found_but_fails_at_import_is_named_with_its_error(broken_package):
    assert importlib.util.find_spec(broken_package) is not None  # what the probe asked before, and got yes
    assert probe.import_problem(broken_package).startswith("ImportError: cannot import name 'NoSuchMeshDims'")
    assert probe.import_problem("no_such_module_anywhere") == probe.NOT_INSTALLED
    assert probe.import_problem("json") == ""


def test_a_framework_whose_module_fails_at_import_is_refused_with_the_error_and_its_torch_floor(tmp_path,
                                                                                               monkeypatch):
    facts = {"torch": "2.12.0+rocm7.15", "hip": "7.15", "cuda": None, "gpus": 8,
             "modules": {"torchtitan.train": "ImportError: cannot import name 'DataParallelMeshDims'",
                         "megatron.core": "", "transformers": "", "deepspeed": probe.NOT_INSTALLED}}
    monkeypatch.setenv("FAKE_STACK_FACTS", json.dumps(facts))
    monkeypatch.setenv("FAKE_REAL_PYTHON", sys.executable)
    fake = str(Path(__file__).parent / "fakebin" / "fake-gpu-python")
    refusals = probe.import_refusals(["torchtitan", "fsdp", "autotp"], fake)
    assert refusals == {"torchtitan": (
        f"torchtitan does not import in {fake} (torch 2.12.0+rocm7.15): torchtitan.train: ImportError: cannot import "
        f"name 'DataParallelMeshDims'; {frameworks.TABLE['torchtitan'].torch_refusal('2.12.0+rocm7.15')}")}


def test_local_layers_need_no_transformer_engine_for_mega_and_mbridge_only():
    assert "transformer_engine" not in probe.required_modules(["mega", "mbridge"], "local")
    assert "transformer_engine" in probe.required_modules(["mega", "nemo"], "local")
    assert "transformer_engine" in probe.required_modules(["mega"])
