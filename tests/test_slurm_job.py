"""The in-job half (shell/slurm_job.sh) against a stand-in scontrol: the rendezvous address, the
allocation record, the platform check, and how each node starts the matrix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.shell_harness import FakeMachine

ALLOCATION = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_NUM_NODES": "2",
              "SLURM_JOB_PARTITION": "batch", "NNODES": "2", "MASTER_PORT": "29555", "SLURM_CONTAINER": "none"}


def with_scontrol(node: FakeMachine, tmp_path: Path, node_addr: str) -> str:
    """PATH with an scontrol that knows nodes gpu07 and gpu08 (gpu07's NodeAddr given)."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f"""#!/bin/bash
case "$1 $2" in
  "show hostnames") [[ "$3" == "gpu[07-08]" ]] && printf 'gpu07\\ngpu08\\n' ;;
  "show node") [[ "$4" == gpu07 ]] && echo "NodeName=gpu07 Arch=x86_64 CoresPerSocket=48 NodeAddr={node_addr} NodeHostName=gpu07 State=ALLOCATED" ;;
  *) exit 1 ;;
esac
""")
    scontrol.chmod(0o755)
    return f"{bin_dir}:{node.env['PATH']}"


def prepare(node: FakeMachine, tmp_path: Path, node_addr: str, **env: str):
    run_set = tmp_path / "run-set"
    run_set.mkdir(exist_ok=True)
    script = tmp_path / "prepare.sh"
    script.write_text(f'source {node.root}/shell/slurm_job.sh\ntp_job_prepare\necho "MASTER_ADDR=$MASTER_ADDR"\n')
    result = node.run(str(script), PATH=with_scontrol(node, tmp_path, node_addr), RUN_SET_DIR=str(run_set),
                      PLATFORM="cpu", **{**ALLOCATION, **env})
    return result, run_set


def test_rendezvous_is_the_first_nodes_address_and_the_allocation_is_recorded(tmp_path):
    result, run_set = prepare(FakeMachine(tmp_path), tmp_path, "10.8.0.7")
    assert result.returncode == 0, result.output
    assert "MASTER_ADDR=10.8.0.7" in result.stdout
    assert json.loads((run_set / "slurm.json").read_text()) == {
        "job_id": 77, "partition": "batch", "nnodes": 2, "nodes": ["gpu07", "gpu08"], "master_addr": "10.8.0.7",
        "master_port": 29555, "container": "none"}


def test_a_node_address_given_as_a_name_is_resolved_to_an_ip(tmp_path):
    result, _ = prepare(FakeMachine(tmp_path), tmp_path, "localhost")
    assert "MASTER_ADDR=127.0.0.1" in result.stdout, result.output


def test_an_address_that_does_not_resolve_stops_the_job_with_the_fix(tmp_path):
    result, _ = prepare(FakeMachine(tmp_path), tmp_path, "gpu07-ib.invalid")
    assert result.returncode == 1
    assert "NodeAddr gpu07-ib.invalid does not resolve" in result.stderr


def test_nodes_of_another_platform_than_submitted_stop_the_job_and_name_the_right_one(tmp_path):
    result, _ = prepare(FakeMachine(tmp_path, nvidia=8), tmp_path, "10.8.0.7")
    assert result.returncode == 2
    assert "submit with PLATFORM=nvd" in result.stderr


def test_an_allocation_of_another_size_than_nnodes_stops_the_job(tmp_path):
    result, _ = prepare(FakeMachine(tmp_path), tmp_path, "10.8.0.7", SLURM_JOB_NUM_NODES="3")
    assert result.returncode == 2 and "got 3 nodes, NNODES=2" in result.stderr


@pytest.fixture
def node_with_recording_matrix(tmp_path) -> FakeMachine:
    """A repository copy whose shell/train.sh only records what it was started with."""
    node = FakeMachine(tmp_path)
    (node.root / "shell" / "train.sh").write_text(
        '#!/bin/bash\necho "rank=$NODE_RANK of $NNODES runtime=$TPRIMAT_RUNTIME python=${TPRIMAT_PYTHON:-venv}"\n')
    return node


@pytest.mark.parametrize("runtime, python", [("host", "venv"), ("pyxis", "python3")])
def test_each_node_runs_the_matrix_as_its_slurm_node_id(node_with_recording_matrix, tmp_path, runtime, python):
    result = node_with_recording_matrix.run("shell/slurm_job.sh", "node", runtime, SLURM_NODEID="1",
                                            SLURM_NNODES="2", NODE_RANK="0", NNODES="2", RUN_SET_DIR=str(tmp_path))
    assert result.returncode == 0, result.output
    assert f"rank=1 of 2 runtime={runtime} python={python}" in result.stdout
    assert (tmp_path / "slurm-node1.exit").read_text() == "0\n"


def test_node_mode_refuses_an_unknown_runtime(node_with_recording_matrix, tmp_path):
    result = node_with_recording_matrix.run("shell/slurm_job.sh", "node", "docker", SLURM_NODEID="0",
                                            SLURM_NNODES="2", RUN_SET_DIR=str(tmp_path))
    assert result.returncode == 2 and "host, pyxis" in result.stderr


@pytest.mark.parametrize("recorded, srun_code, job_code", [
    ({1: "2"}, 143, 2),  # node 1 failed by itself, node 0 was stopped by Slurm (SIGTERM)
    ({0: "0", 1: "0"}, 1, 1),  # no node failed by itself: srun's code stands
    ({}, 137, 137),  # nothing recorded (both stopped): srun's code stands
])
def test_the_job_exits_with_the_code_of_the_node_that_failed_by_itself(tmp_path, recorded, srun_code, job_code):
    node = FakeMachine(tmp_path)
    for rank, code in recorded.items():
        (tmp_path / f"slurm-node{rank}.exit").write_text(f"{code}\n")
    script = tmp_path / "after-srun.sh"
    script.write_text(f'source {node.root}/shell/slurm_job.sh\n(exit {srun_code}) || tp_job_failed "$?"\n')
    result = node.run(str(script), RUN_SET_DIR=str(tmp_path), NNODES="2")
    assert result.returncode == job_code, result.output


def test_the_job_script_is_not_meant_to_be_run_by_hand(tmp_path):
    result = FakeMachine(tmp_path).run("shell/slurm_job.sh")
    assert result.returncode == 2 and "usage" in result.stderr
