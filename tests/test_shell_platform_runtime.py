"""Platform detection, runtime choice and the exact docker invocations, on faked machines (the host's Python:
tests/test_shell_host_python.py)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest

from tests.fixtures.train_matrix.shell import machine, run_dirs
from tests.shell_harness import HANG_TIMEOUT_S, REPO, SECRET_VALUE, FakeMachine
from utils.spec import stacks

NVD = stacks.default("nvd")


def nvidia_node(tmp_path, **kw):
    return FakeMachine(tmp_path, nvidia=8, **kw)


def amd_node(tmp_path, **kw):
    return FakeMachine(tmp_path, amd=8, **kw)


# --- detection -------------------------------------------------------------------------------------

@pytest.mark.parametrize("machine, platform, count", [
    (nvidia_node, "nvd", "8"),
    (amd_node, "amd", "8"),
    (FakeMachine, "cpu", "0"),
])
def test_platform_script_detects_vendor_and_counts_gpus(tmp_path, machine, platform, count):
    node = machine(tmp_path)
    assert node.run("shell/platform.sh").stdout.strip() == platform
    assert node.run("shell/platform.sh", "--count").stdout.strip() == count


def test_platform_variable_overrides_detection(tmp_path):
    node = FakeMachine(tmp_path)
    assert node.run("shell/platform.sh", PLATFORM="amd").stdout.strip() == "amd"
    assert node.run("shell/platform.sh", "--detect", PLATFORM="amd").stdout.strip() == "cpu"


def test_amd_detected_through_rocm_smi_alone(tmp_path):
    from tests.shell_harness import FAKEBIN
    node = amd_node(tmp_path)
    only = tmp_path / "only"
    only.mkdir()
    (only / "rocm-smi").symlink_to(FAKEBIN / "rocm-smi")
    path = f"{only}:/usr/bin:/bin"
    assert node.run("shell/platform.sh", PATH=path).stdout.strip() == "amd"
    assert node.run("shell/platform.sh", "--count", PATH=path).stdout.strip() == "8"


def test_scripts_work_from_any_directory(tmp_path):
    node = nvidia_node(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert node.run("shell/platform.sh", cwd=elsewhere).stdout.strip() == "nvd"


# --- runtime choice and docker invocations ---------------------------------------------------------

def docker_run_call(result):
    runs = result.calls_of("docker", "run")
    assert len(runs) == 1, result.output
    return runs[0]


def test_nvidia_node_with_engine_builds_image_and_runs_stage_in_container(tmp_path):
    node = nvidia_node(tmp_path, engine=True)
    result = node.run("shell/run_train.sh")
    assert result.returncode == 0, result.output
    assert "runtime: docker" in result.stderr
    build = result.calls_of("docker", "build")[0]
    assert build[build.index("--tag") + 1] == f"tprimat:nvd-{NVD.name}"
    assert build[build.index("--build-arg") + 1] == f"BASE_IMAGE={NVD.image}"
    assert build[build.index("--file") + 1] == str(node.root / "nvd.Dockerfile")
    assert any(arg.startswith("tprimat.hash=") for arg in build)
    run = docker_run_call(result)
    for flag in ("--gpus", "all", "--ipc=host", "--network=host", "--shm-size=64g", "--rm"):
        assert flag in run
    assert run[run.index("--ulimit") + 1] == "memlock=-1"
    assert "--env-file" not in run  # docker would read secrets.env by rules of its own
    volumes = [run[i + 1] for i, arg in enumerate(run) if arg == "--volume"]
    for path in (node.root, tmp_path / "data", tmp_path / "output", tmp_path / "hf"):
        assert f"{path}:{path}" in volumes
    assert run[-3:] == [f"tprimat:nvd-{NVD.name}", "bash", "shell/train.sh"]
    assert "--env" in run and "PLATFORM=nvd" in run and "TPRIMAT_RUNTIME=docker" in run


def test_amd_node_gets_amd_device_flags(tmp_path):
    node = amd_node(tmp_path, engine=True)
    result = node.run("shell/run_data.sh")
    assert result.returncode == 0, result.output
    run = docker_run_call(result)
    for flag in ("--device=/dev/kfd", "--device=/dev/dri", "--ipc=host", "--cap-add=SYS_PTRACE",
                 "seccomp=unconfined", "--shm-size=64g"):
        assert flag in run
    assert run[run.index("--group-add") + 1] == "video"
    assert "--gpus" not in run
    assert run[-3:] == [f"tprimat:amd-{stacks.default('amd').name}", "bash", "shell/data.sh"]


def test_amd_containers_may_lock_memory_as_rdma_registration_needs(tmp_path):
    run = docker_run_call(amd_node(tmp_path, engine=True).run("shell/run_train.sh"))
    assert run[run.index("--ulimit") + 1] == "memlock=-1"


@pytest.mark.parametrize("machine", [nvidia_node, amd_node])
def test_a_host_with_rdma_devices_passes_them_into_the_container(tmp_path, machine):
    node = machine(tmp_path, engine=True)
    devices = tmp_path / "infiniband"
    devices.mkdir()
    result = node.run("shell/run_train.sh", TPRIMAT_INFINIBAND=str(devices))
    assert f"--device={devices}:/dev/infiniband" in docker_run_call(result)


@pytest.mark.parametrize("machine", [nvidia_node, amd_node])
def test_without_rdma_devices_a_multi_node_container_run_says_it_will_use_tcp_sockets(tmp_path, machine):
    node = machine(tmp_path, engine=True)
    one = node.run("shell/run_train.sh")
    assert not any(arg.startswith("--device=") and "infiniband" in arg for arg in docker_run_call(one))
    assert "RDMA" not in one.stderr  # one node: the network between nodes does not matter
    two = node.run("shell/run_train.sh", NNODES="2", DP="16", GA="4", LAUNCHER="local")
    (warning,) = [line for line in two.stderr.splitlines() if "warning:" in line and "RDMA" in line]
    assert str(tmp_path / "no-infiniband") in warning and "TCP sockets" in warning


def test_up_to_date_image_is_reused(tmp_path):
    node = nvidia_node(tmp_path, engine=True)
    first = node.run("shell/run_train.sh")
    label = next(a for a in first.calls_of("docker", "build")[0] if a.startswith("tprimat.hash="))
    again = node.run("shell/run_train.sh", FAKE_DOCKER_IMAGE_HASH=label.split("=", 1)[1])
    assert again.calls_of("docker", "build") == []
    assert "up to date" in again.stderr


@pytest.mark.parametrize("changed", ["nvd.Dockerfile", "requirements/nvd.txt", "requirements/torchtitan.txt"])
def test_a_changed_dockerfile_or_file_it_copies_triggers_rebuild(tmp_path, changed):
    node = nvidia_node(tmp_path, engine=True)
    first = node.run("shell/run_train.sh")
    label = next(a for a in first.calls_of("docker", "build")[0] if a.startswith("tprimat.hash="))
    same = node.run("shell/run_train.sh", FAKE_DOCKER_IMAGE_HASH=label.split("=", 1)[1])
    with open(node.root / changed, "a") as file:
        file.write("# changed\n")
    again = node.run("shell/run_train.sh", FAKE_DOCKER_IMAGE_HASH=label.split("=", 1)[1])
    assert (len(same.calls_of("docker", "build")), len(again.calls_of("docker", "build"))) == (0, 1)


def test_detached_run_is_named_and_says_how_to_follow(tmp_path):
    node = nvidia_node(tmp_path, engine=True)
    result = node.run("shell/run_train.sh", DETACH="1")
    assert result.returncode == 0, result.output
    run = docker_run_call(result)
    assert run[run.index("--name") + 1] == "tprimat-train"
    assert "--detach" in run and "--rm" not in run
    assert "docker logs -f tprimat-train" in result.stderr
    assert "docker stop tprimat-train" in result.stderr


def test_second_detached_start_is_refused_naming_the_container(tmp_path):
    node = nvidia_node(tmp_path, engine=True)
    result = node.run("shell/run_train.sh", DETACH="1", FAKE_DOCKER_RUNNING="tprimat-train")
    assert result.returncode == 2
    assert "tprimat-train is already running" in result.stderr
    assert result.calls_of("docker", "run") == []


def test_failed_build_shows_its_last_lines_and_the_retry_command(tmp_path):
    node = nvidia_node(tmp_path, engine=True)
    result = node.run("shell/run_train.sh", FAKE_DOCKER_BUILD_FAIL="1")
    assert result.returncode == 1
    assert "failed to solve" in result.stderr
    assert "./shell/build.sh" in result.stderr
    assert "Traceback" not in result.output


def test_gpu_node_without_engine_falls_back_to_host_and_says_why(tmp_path):
    node = nvidia_node(tmp_path)
    result = node.run("shell/run_purge.sh")
    assert result.returncode == 0, result.output
    assert "runtime: host (no Docker engine answers" in result.stderr
    assert result.calls_of("docker", "run") == []


def test_docker_runtime_forced_without_engine_is_a_clear_error(tmp_path):
    node = nvidia_node(tmp_path)
    result = node.run("shell/run_train.sh", RUNTIME="docker")
    assert result.returncode == 2
    assert "RUNTIME=docker: no Docker engine answers" in result.stderr
    assert "Traceback" not in result.output


def test_cpu_machine_runs_on_host(tmp_path):
    node = FakeMachine(tmp_path)
    result = node.run("shell/run_purge.sh")
    assert result.returncode == 0, result.output
    assert "runtime: host" in result.stderr
    assert result.calls_of("docker") == []


def test_forcing_amd_on_a_machine_without_amd_gpus_is_refused(tmp_path):
    node = FakeMachine(tmp_path)
    result = node.run("shell/run_train.sh", PLATFORM="amd")
    assert result.returncode == 2
    assert "PLATFORM=amd: this machine has no AMD GPU" in result.stderr
    assert "Traceback" not in result.output


def test_bad_configuration_stops_before_anything_starts(tmp_path):
    node = nvidia_node(tmp_path, engine=True)
    result = node.run("shell/run_train.sh", TP="3", MIN_LR="1", LR="0.1")
    assert result.returncode == 2
    problems = [line for line in result.stderr.splitlines() if line.startswith("config error:")]
    assert any(line.startswith("config error: TP=3") for line in problems)
    assert any(line.startswith("config error: MIN_LR=1") for line in problems)
    assert result.calls_of("docker", "build") == [] and result.calls_of("docker", "run") == []


def test_gated_data_without_secrets_names_the_file_to_create(tmp_path):
    node = nvidia_node(tmp_path, engine=True, secrets=False)
    result = node.run("shell/run_data.sh")
    assert result.returncode == 2
    assert "cp secrets.env.example secrets.env" in result.stderr
    assert result.calls_of("docker", "run") == []


@pytest.mark.parametrize("machine", [nvidia_node, amd_node])
def test_no_secret_value_appears_in_any_output_or_argument(tmp_path, machine):
    node = machine(tmp_path, engine=True)
    for script in ("shell/run_data.sh", "shell/run_train.sh", "shell/run_wrap.sh"):
        result = node.run(script, DETACH="1")
        assert SECRET_VALUE not in result.output
        assert SECRET_VALUE not in node.log.read_text()
    check = node.run("shell/platform.sh")
    assert SECRET_VALUE not in check.output


def test_images_never_receive_secrets():
    for dockerfile in ("amd.Dockerfile", "nvd.Dockerfile"):
        instructions = [line for line in (REPO / dockerfile).read_text().splitlines()
                        if not line.lstrip().startswith("#")]
        assert not any("secrets.env" in line or "HF_TOKEN" in line for line in instructions)
    patterns = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    assert patterns == ["*", "!requirements/"]


# --- DRY_RUN with the docker runtime ---------------------------------------------------------------

@pytest.mark.parametrize("gpus, platform, vendor, stack", [({"nvidia": 8}, "nvd", "nemo", "nemo-25.04"),
                                                           ({"amd": 8}, "amd", "prim", "primus-v26.5")])
def test_a_docker_dry_run_plans_on_the_host_with_the_standard_library_and_builds_pulls_and_starts_nothing(
        tmp_path, gpus, platform, vendor, stack):
    fake = machine(tmp_path, engine=True, **gpus)
    for key in ("TPRIMAT_PYTHON", "PRIMUS_PATH"):  # no project environment; no Primus checkout on the host
        del fake.env[key]
    stdlib_only = tmp_path / "bin" / "python3"
    stdlib_only.parent.mkdir()
    stdlib_only.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # -S: no site-packages
    stdlib_only.chmod(0o755)
    result = fake.run("shell/run_train.sh", DRY_RUN="1", PATH=f"{stdlib_only.parent}:{fake.env['PATH']}",
                      TPRIMAT_VENV=str(tmp_path / "no-venv"), FRAMEWORK=f"mega,{vendor}", STACK=stack)
    assert result.returncode == 0, result.output
    assert {call[1] for call in result.calls_of("docker")} <= {"info", "image"}  # never build, pull or run
    assert not (tmp_path / "no-venv").exists()
    assert re.search(rf"a real run would start: docker run .*tprimat:{platform}-{stack} bash shell/train\.sh",
                     result.stderr)
    dirs = run_dirs(tmp_path / "output")
    assert sorted(d.name for d in dirs) == sorted(f"{f}-{m}" for f in ("mega", vendor) for m in ("llama", "qwen"))
    for run_dir in dirs:
        framework, model = run_dir.name.split("-")
        assert f"{run_dir.name}  " in result.stdout  # the run list
        assert re.search(rf"command: .*{re.escape(str(run_dir))}", result.stdout)  # the run's own command
        assert re.search(rf"from the host: docker run .*tprimat:{platform}-{stack} bash "
                         rf"train/launch\.sh {platform} {framework} {model} --run-dir {re.escape(str(run_dir))} ",
                         result.stderr)  # and the container that would wrap it
    assert result.stdout.count("command: ") == 4
    if vendor == "prim":
        assert "primus_experiment.yaml not written" in result.stderr


# Primus v26.5's run environment for Megatron on AMD (tests/test_utils_platform_env.py); NVIDIA's Transformer
# Engine attention backends written out.
PLATFORM_ENVIRONMENT = {"amd": {"HSA_NO_SCRATCH_RECLAIM": "1", "NVTE_CK_USES_BWD_V3": "1", "GPU_MAX_HW_QUEUES": "2",
                                "CUDA_DEVICE_MAX_CONNECTIONS": "1", "NVTE_CK_IS_V3_ATOMIC_FP32": "1"},
                        "nvd": {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "1"}}


@pytest.mark.parametrize("gpus, platform", [({"nvidia": 8}, "nvd"), ({"amd": 8}, "amd")])
def test_a_dry_run_of_a_multi_node_gpu_node_shows_rdma_devices_memlock_and_the_run_environment(tmp_path, gpus, platform):
    fake = machine(tmp_path, engine=True, **gpus)
    devices = tmp_path / "infiniband"
    devices.mkdir()
    result = fake.run("shell/run_train.sh", DRY_RUN="1", NNODES="2", DP="16", GA="4", LAUNCHER="local",
                      MASTER_ADDR="10.0.0.1", TPRIMAT_INFINIBAND=str(devices),
                      FRAMEWORK="mega,nemo" if platform == "nvd" else "mega,prim", STACK="nemo-25.04,primus-v26.5")
    assert result.returncode == 0, result.output
    (container,) = [line for line in result.stderr.splitlines() if "a real run would start: docker run" in line]
    assert f"--device={devices}:/dev/infiniband" in container and "--ulimit memlock=-1" in container
    dirs = run_dirs(tmp_path / "output")
    assert len(dirs) == 4
    for run_dir in dirs:
        env = json.loads((run_dir / "launch.json").read_text())["env"]
        assert PLATFORM_ENVIRONMENT[platform].items() <= env.items(), run_dir.name
        assert env["NCCL_DEBUG"] == "INFO"  # the collective library names the transport it chose
    commands = [line for line in result.stdout.splitlines() if "command: " in line]
    assert len(commands) == 4
    assert all("NCCL_DEBUG=INFO" in line and all(f"{k}={v}" in line for k, v in PLATFORM_ENVIRONMENT[platform].items())
               for line in commands)


def _run_in_a_terminal(node, script):
    """Run a script with a pseudo-terminal as its stdin and stdout, as a user at a prompt does."""
    node.log.write_text("")
    subprocess.run(["script", "-qec", f"bash {node.root / script}", "/dev/null"], cwd=node.root,
                   env={**node.env, "TERM": "dumb"}, capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    return [shlex.split(line) for line in node.log.read_text().splitlines()
            if line.startswith("docker run")]


def test_the_interactive_shell_gets_a_terminal_in_its_container(tmp_path):
    node = nvidia_node(tmp_path, engine=True)
    (run,) = _run_in_a_terminal(node, "shell/entry.sh")
    assert "--interactive" in run and "--tty" in run


def test_a_stage_started_from_a_terminal_gets_none_so_docker_passes_signals_on(tmp_path):
    node = nvidia_node(tmp_path, engine=True)
    (run,) = _run_in_a_terminal(node, "shell/run_train.sh")
    assert "--tty" not in run  # docker's client proxies signals only to a container without a TTY
