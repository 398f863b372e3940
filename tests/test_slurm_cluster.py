"""shell/slurm.sh on a real two-node Slurm cluster started on this machine (tests/slurm/cluster.py).

Skipped, with the reason, where Slurm cannot run (tests/slurm/install.sh installs it as root).
Most tests run a stand-in for shell/train.sh that records what each node was started with, so they
check submission, the rendezvous, exit codes and every bounded wait in seconds; the last one runs
the real CPU benchmark across both nodes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.shell_harness import HANG_TIMEOUT_S, REPO, FakeMachine, Result
from tests.slurm.cluster import SlurmCluster, free_ports, unavailable_reason
from tests.test_train_mega_runs import BASE, LAYOUTS, trained

SLURM_KNOBS = {"SLURM_PARTITION": "", "SLURM_ACCOUNT": "", "SLURM_QOS": "", "SLURM_TIME": "00:10:00",
               "SLURM_CONTAINER": "none", "SLURM_CONTAINER_IMAGE": "", "SLURM_PENDING_TIMEOUT": "60",
               "TPRIMAT_SLURM_POLL_S": "1"}
TWO_NODES = {"PLATFORM": "cpu", "RUNTIME": "host", "NNODES": "2", "GPUS_PER_NODE": "1", "DP": "2", "GA": "1"}
# The stand-in matrix: says where it runs, leaves a mark in the run set, exits as told.
RECORDING_MATRIX = """#!/bin/bash
echo "rank=$NODE_RANK of $NNODES rendezvous=$MASTER_ADDR:$MASTER_PORT node=$SLURMD_NODENAME"
touch "$RUN_SET_DIR/ran-on-node$NODE_RANK"
sleep "${STANDIN_SLEEP:-0}"
if [[ "$NODE_RANK" == 1 ]]; then exit "${STANDIN_EXIT_NODE1:-0}"; fi
"""


@pytest.fixture(scope="module")
def cluster():
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no Slurm test cluster: {reason}")
    started = SlurmCluster().start()
    yield started
    started.stop()
    shutil.rmtree(started.base, ignore_errors=True)


@pytest.fixture
def login_node(tmp_path, cluster) -> FakeMachine:
    """A repository copy whose shell/train.sh is the stand-in, with the cluster's clients on PATH."""
    node = FakeMachine(tmp_path)
    (node.root / "shell" / "train.sh").write_text(RECORDING_MATRIX)
    node.env = cluster.env(node.env)
    node.env.update(SLURM_KNOBS, **TWO_NODES, MASTER_PORT=str(free_ports(1)[0]))
    return node


def run_sets(node: FakeMachine) -> list[Path]:
    return sorted(Path(node.env["OUTPUT_DIR"]).glob("*-cpu"))


def queue(cluster: SlurmCluster) -> str:
    return subprocess.run(["squeue", "-h", "-o", "%i %T %r"], env=cluster.env(), capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_job_runs_once_on_each_node_around_the_first_nodes_address(login_node):
    result = login_node.run("shell/slurm.sh")
    assert result.returncode == 0, result.output
    [run_set] = run_sets(login_node)
    port = login_node.env["MASTER_PORT"]
    assert f"0: rank=0 of 2 rendezvous=127.0.0.1:{port} node=n1" in result.stdout
    assert f"1: rank=1 of 2 rendezvous=127.0.0.1:{port} node=n2" in result.stdout
    assert {p.name for p in run_set.glob("ran-on-node*")} == {"ran-on-node0", "ran-on-node1"}
    record = json.loads((run_set / "slurm.json").read_text())
    assert record["nodes"] == ["n1", "n2"] and record["master_addr"] == "127.0.0.1"
    job_id = result.stdout.splitlines()[0]
    assert (run_set / f"slurm-{job_id}.out").exists() and (run_set / "job.sbatch").exists()


def test_the_exit_code_is_the_jobs(login_node):
    result = login_node.run("shell/slurm.sh", STANDIN_EXIT_NODE1="3")
    assert result.returncode == 3, result.output
    assert "FAILED (NonZeroExitCode), exit code 3" in result.stderr


def test_a_job_larger_than_the_cluster_fails_at_once_with_the_schedulers_reason(login_node, cluster):
    started = time.monotonic()
    result = login_node.run("shell/slurm.sh", NNODES="3", DP="3")
    assert result.returncode == 1
    assert "can never start as submitted: the scheduler says PartitionConfig" in result.stderr
    assert time.monotonic() - started < 30
    assert queue(cluster) == ""  # cancelled, not left waiting


def test_a_job_that_waits_longer_than_the_pending_limit_is_cancelled_with_the_reason(login_node, cluster, tmp_path):
    blocker = subprocess.run(["sbatch", "--parsable", "--nodes=2", "--exclusive", f"--output={tmp_path}/blocker.out",
                              "--wrap", "sleep 120"],
                             env=cluster.env(), capture_output=True, text=True, check=True).stdout.strip()
    try:
        started = time.monotonic()
        result = login_node.run("shell/slurm.sh", SLURM_PENDING_TIMEOUT="3")
        assert result.returncode == 1
        assert "after 3 s (SLURM_PENDING_TIMEOUT)" in result.stderr
        assert "PENDING (Resources)" in result.stderr or "PENDING (Priority)" in result.stderr
        assert time.monotonic() - started < 30
        assert queue(cluster).split()[0] == blocker  # only the blocker is left
    finally:
        subprocess.run(["scancel", blocker], env=cluster.env(), check=True)


def test_detach_returns_with_the_job_id_and_follow_picks_the_job_up_again(login_node):
    detached = login_node.run("shell/slurm.sh", DETACH="1", STANDIN_SLEEP="2", STANDIN_EXIT_NODE1="4")
    assert detached.returncode == 0, detached.output
    job_id = detached.stdout.strip()
    assert f"follow it: ./shell/slurm.sh --follow {job_id}" in detached.stderr
    followed = login_node.run("shell/slurm.sh", "--follow", job_id)
    assert followed.returncode == 4, followed.output
    assert "1: rank=1 of 2" in followed.stdout


def test_ctrl_c_cancels_the_job_it_submitted(login_node, cluster):
    proc = subprocess.Popen(["bash", str(login_node.root / "shell/slurm.sh")], cwd=login_node.root,
                            env={**login_node.env, "STANDIN_SLEEP": "300"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not any(run_set.joinpath("ran-on-node1").exists() for run_set in run_sets(login_node)):
        assert time.monotonic() < deadline and proc.poll() is None, "the job never started"
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted: cancelled job" in stderr
    deadline = time.monotonic() + 30
    while queue(cluster) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert queue(cluster) == ""


def test_following_a_job_slurm_does_not_know_fails_at_once(login_node):
    started = time.monotonic()
    result = login_node.run("shell/slurm.sh", "--follow", "987654")
    assert result.returncode == 1 and "job 987654: Slurm does not know it" in result.stderr
    assert time.monotonic() - started < 20


def test_a_node_that_dies_ends_the_command_with_node_fail(login_node, cluster):
    proc = subprocess.Popen(["bash", str(login_node.root / "shell/slurm.sh")], cwd=login_node.root,
                            env={**login_node.env, "STANDIN_SLEEP": "300"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not any(run_set.joinpath("ran-on-node1").exists() for run_set in run_sets(login_node)):
            assert time.monotonic() < deadline and proc.poll() is None, "the job never started"
            time.sleep(0.5)
        cluster.kill_node("n2")
        started = time.monotonic()
        stdout, stderr = proc.communicate(timeout=120)
        result = Result(proc.returncode, stdout, stderr, [])
        assert result.returncode != 0
        assert "NODE_FAIL" in result.stderr, result.output
        assert time.monotonic() - started < 90
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.revive_node("n2")


# --- The real benchmark across both nodes ----------------------------------------------------------

# One run: Megatron on the tiny Llama (the CPU's FRAMEWORK=all would add fsdp and autotp, which cross two nodes
# through the same launcher and rendezvous) with the settings of test_train_mega_runs.py's learn_llama: that run, on
# one node with two workers (DP=2, as TWO_NODES), is the reference, trained once for both files.
ONE_NODE = {**BASE, **LAYOUTS["learn_llama"]}
TINY_RUN = {"FRAMEWORK": "mega", "MODELS": "llama", "HF_HUB_OFFLINE": "1",
            **{key: str(ONE_NODE[key]) for key in ("TRAIN_ITERS", "WARMUP_STEPS", "WARMUP_SKIP", "MBS", "SL", "LR",
                                                  "MIN_LR")}}


def test_the_cpu_benchmark_trains_one_model_across_both_nodes_like_one_node_with_two_workers(cluster, tmp_path,
                                                                                            tmp_path_factory):
    from tests.fixtures.train.data_dir import make_data_dir

    data = make_data_dir(tmp_path / "data", ("llama",))
    env = cluster.env({**os.environ, **SLURM_KNOBS, **TWO_NODES, **TINY_RUN, "DATA_DIR": str(data),
                       "OUTPUT_DIR": str(tmp_path / "output"), "MASTER_PORT": str(free_ports(1)[0])})
    # run_train.sh hands NNODES>1 to shell/slurm.sh: test_slurm_script.py's login-node dry run
    result = subprocess.run([str(REPO / "shell/run_train.sh")], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=HANG_TIMEOUT_S)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [run_set] = (tmp_path / "output").glob("*-cpu")

    run = json.loads((run_set / "mega-llama" / "result.json").read_text())
    assert run["run"]["status"] == "ok" and run["system"]["nodes"] == 2 and run["parallelism"]["nnodes"] == 2
    assert run["system"]["node_names"] == ["n1", "n2"]  # in node-rank order, from the job's slurm.json
    assert run["effective"]["dp"] == 2 and run["parallelism"]["num_gpus"] == 2  # one process group over both nodes
    records = {rank: json.loads((run_set / "mega-llama" / where / "launch.json").read_text())
               for rank, where in ((0, "."), (1, "node1"))}
    for rank, record in records.items():
        assert {"--nnodes=2", f"--node_rank={rank}", "--master_addr=127.0.0.1"} <= set(record["command"])
        assert (record["node_rank"], record["slurm_node"]) == (rank, ["n1", "n2"][rank])
    assert json.loads((run_set / "slurm.json").read_text())["nodes"] == ["n1", "n2"]
    assert (run_set / "report.md").exists() and (run_set / "compare.png").exists()
    assert (run_set / "system.json").exists()

    one_node = trained(tmp_path_factory, "learn_llama")
    assert one_node.returncode == 0, one_node.console[-3000:]
    assert (ONE_NODE["DP"], one_node.result["training"]["seed"]) == (2, run["training"]["seed"])
    reference = one_node.result
    # The same data in the same order from the same weights. Not compared to the last digit: kernels'
    # rounding may differ between the job's processes and these (seen once on a CI machine: 4e-5 at step
    # 2 while this machine gives equal digits; AVX2 against AVX-512 kernels moves them 6e-5), whereas
    # another data order moves them 3e-3 at step 1 and 2e-2 at step 2, other initial weights 8e-3.
    assert run["series"]["loss"] == pytest.approx(reference["series"]["loss"], rel=0, abs=2e-4)
