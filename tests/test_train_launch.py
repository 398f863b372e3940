"""train.launch.run: what one node of a run is started with and records (the launcher runs for real; DRY_RUN
stops it before training). How the run is judged afterwards is evaluate.judge's (tests/test_evaluate_judge.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.train_matrix.requests import run_request
from train.launch import run as launch
from train.launch import command as launch_command
from utils.cli import UsageError
from utils.config import ROOT
from utils.machine.platform_env import platform_env


@pytest.fixture
def amd_node(tmp_path, monkeypatch):
    """An 8-GPU AMD node (detection faked) whose environment has no network variables of its own."""
    for key in [k for k in os.environ if k.startswith(launch_command.NETWORK_PREFIXES + ("NET_", "SLURM"))]:
        monkeypatch.delenv(key)
    for key, value in {"TPRIMAT_DETECTED_PLATFORM": "amd", "TPRIMAT_DETECTED_GPUS": "8", "DATA_DIR": "/data",
                       "OUTPUT_DIR": str(tmp_path / "output"), "DRY_RUN": "1"}.items():
        monkeypatch.setenv(key, value)
    return monkeypatch


def dry_run(tmp_path, node_rank: int, platform: str = "amd") -> dict:
    """One node's launch.json of a dry run."""
    run_dir = tmp_path / "set" / "mega-llama"
    assert launch.main(["--platform", platform, "--framework", "mega", "--model", "llama", "--run-dir",
                        str(run_dir)]) == 0
    return json.loads((launch.node_dir(run_dir, node_rank) / "launch.json").read_text())


def test_each_node_of_a_multi_node_run_gets_and_records_the_network_settings(tmp_path, amd_node):
    for key, value in {"NNODES": "2", "DP": "16", "GA": "4", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1",
                       "NET_SOCKET_IFNAME": "ens1f0", "SLURMD_NODENAME": "gpu-02"}.items():
        amd_node.setenv(key, value)
    amd_node.setenv("NCCL_IB_GID_INDEX", "5")  # a cluster module's export beats AMD's default of 3
    record = dry_run(tmp_path, 1)
    expected = {"GLOO_SOCKET_IFNAME": "ens1f0", "NCCL_CROSS_NIC": "0", "NCCL_DEBUG": "INFO", "NCCL_IB_GID_INDEX": "5",
                "NCCL_SOCKET_IFNAME": "ens1f0"}
    assert record["network"] == expected
    assert expected.items() <= record["env"].items()  # set on the command itself, so a pasted command has them
    assert (record["node_rank"], record["hostname"], record["slurm_node"]) == (1, socket.gethostname(), "gpu-02")


def test_a_one_node_run_leaves_the_network_to_the_library(tmp_path, amd_node):
    record = dry_run(tmp_path, 0)
    assert record["network"] == {} and "slurm_node" not in record
    assert not any(key.startswith(("NCCL_", "GLOO_")) for key in record["env"] if key not in platform_env("amd"))
    assert record["hostname"] == socket.gethostname()


def test_cpu_workers_compute_on_one_thread_each_however_they_are_spread_over_nodes(tmp_path, amd_node):
    """torchrun pins one thread per worker only when a node runs several; a two-node CPU run (one worker
    per node) would otherwise compute on every core, and bf16 kernels round differently by thread count."""
    for key, value in {"TPRIMAT_DETECTED_PLATFORM": "cpu", "TPRIMAT_DETECTED_GPUS": "0", "NNODES": "2",
                       "GPUS_PER_NODE": "1", "DP": "2", "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1"}.items():
        amd_node.setenv(key, value)
    amd_node.delenv("OMP_NUM_THREADS", raising=False)
    assert dry_run(tmp_path / "default", 0, "cpu")["env"]["OMP_NUM_THREADS"] == "1"
    amd_node.setenv("OMP_NUM_THREADS", "4")  # a user's deliberate choice wins, and is recorded
    assert dry_run(tmp_path / "chosen", 0, "cpu")["env"]["OMP_NUM_THREADS"] == "4"


@pytest.mark.parametrize("command", ['python3 -m utils.machine.platform_env', 'python3 -m utils.machine.platform_env "$PLATFORM"'])
def test_the_by_hand_trainer_environment_works_in_a_fresh_shell(tmp_path, command):
    """The README's `eval "$(python3 -m utils.machine.platform_env)"`, with .venv activated and nothing else set, gives
    torchrun and train/train_mega.py the platform and worker count the launcher would use."""
    fresh = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    shell = subprocess.run(["bash", "-c", f'eval "$({command})"; env'], cwd=ROOT, env=fresh,
                           capture_output=True, text=True, check=True)
    got = dict(line.split("=", 1) for line in shell.stdout.splitlines() if "=" in line)

    def launcher(key: str) -> str:
        return subprocess.run([sys.executable, "-m", "utils.config", "get", key, "--quiet"], cwd=ROOT,
                              env=fresh, capture_output=True, text=True, check=True).stdout.strip()

    assert (got["PLATFORM"], got["GPUS_PER_NODE"]) == (launcher("PLATFORM"), launcher("GPUS_PER_NODE"))
    assert int(got["GPUS_PER_NODE"]) >= 1
    assert platform_env(got["PLATFORM"]).items() <= got.items()


# --- what every result records of the run's environment -----------------------------------------------

def launched(env: dict[str, str]) -> launch_command.Launch:
    return launch_command.Launch(["true"], env, "/")


def test_a_result_records_the_platform_environment_the_run_was_started_with(monkeypatch):
    for key in platform_env("amd", stack="primus-v25.11"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NVTE_CK_USES_BWD_V3", "1")  # a user's export reaches Primus as it would anyway
    environment = launch_command.run_environment(
        launched({"HSA_NO_SCRATCH_RECLAIM": "0", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}), "amd", stack="primus-v25.11")
    assert environment == {"HSA_NO_SCRATCH_RECLAIM": "0", "CUDA_DEVICE_MAX_CONNECTIONS": "1", "NVTE_CK_USES_BWD_V3": "1"}


def test_a_torch_native_run_records_its_frameworks_variables_and_a_users_value_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("DISABLE_ADDMM_HIP_LT", "1")  # a user's deliberate choice is launched and recorded as is
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    launch = launch_command.prepare(run_request("amd", "autotp", "llama"), tmp_path / "run", tmp_path)
    assert (launch.env["DISABLE_ADDMM_HIP_LT"], launch.env["DS_ACCELERATOR"]) == ("1", "cuda")
    recorded = launch_command.run_environment(launch, "amd", "autotp")
    assert (recorded["DISABLE_ADDMM_HIP_LT"], recorded["DS_ACCELERATOR"]) == ("1", "cuda")
    assert "DS_ACCELERATOR" not in launch_command.run_environment(launch, "amd", "mega")


def test_nemo_on_mock_data_needs_the_models_tokenizer_for_its_vocabulary(tmp_path):
    req = run_request("nvd", "nemo", "llama", MOCK_DATA="1", DATA_DIR=str(tmp_path / "data"))
    with pytest.raises(UsageError, match=r"NeMo's mock data takes its vocabulary from the model's tokenizer.*"
                                         r"prepare it first: ./shell/run_data.sh"):
        launch_command.prepare(req, tmp_path / "run", tmp_path)

