"""Node acceptance on a multi-node run set: every node other than 0 records its checks beside the run set's
system.json, every result carries them (system.other_nodes), the gate makes each node's figures again from their
evidence, and the report and the health warnings name each node."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from evaluate import acceptance_checks, compare, extract, machine_checks
from tests.test_evaluate_acceptance import FLOORS, REPO, fake_h100_node, rank_record, with_acceptance
from train import matrix
from utils.machine import acceptance
from utils.machine.hardware import find_device
from utils.runset import node_system_path

DEVICE = "NVIDIA H100 80GB HBM3"
SICK = {"index": 1, "field": "ecc_uncorrected", "value": 3, "expected": 0, "fix": "replace GPU 1",
        "line": "GPU 1: 3 uncorrected ECC errors; replace GPU 1"}


def second_node(gpu_tflops: float = 700.0) -> dict:
    """What node 1 records: its acceptance (eight H100s on node-b) and its health (one sick GPU)."""
    ranks = [{**rank_record(r, tflops=gpu_tflops), "host": "node-b"} for r in range(8)]
    section = acceptance.judge(ranks, find_device(DEVICE), FLOORS, {})
    section["checked_at"] = "2026-11-28T12:00:05+00:00"
    return {"acceptance": section, "health": {"method": "nvml", "ok": False, "problems": [SICK]}}


def test_a_node_other_than_0_records_its_acceptance_in_its_folder_of_the_run_set(tmp_path, monkeypatch):
    cfg = fake_h100_node(tmp_path, monkeypatch, slow={"gpu": 3}, ACCEPTANCE="warn", NODE_RANK=1, NNODES=2)
    run_set = tmp_path / "set"
    run_set.mkdir()
    check = next(check for check in matrix.node_checks(cfg) if check.knob == "ACCEPTANCE")
    matrix.check_node(cfg, run_set, matrix.Stop(), check)
    recorded = json.loads(node_system_path(run_set, 1).read_text())["acceptance"]
    assert node_system_path(run_set, 1) == run_set / "node1" / "system.json"
    assert recorded["verdict"] == "fail" and recorded["gpus"][3]["verdict"] == "fail"
    assert not (run_set / "system.json").exists()  # node 0's, written by node 0


@pytest.fixture
def two_nodes(tmp_path) -> Path:
    """The fixture NVIDIA run set of with_acceptance, with node 1's checks recorded beside its system.json."""
    run_set = with_acceptance(tmp_path)
    node_system_path(run_set, 1).parent.mkdir()
    node_system_path(run_set, 1).write_text(json.dumps(second_node()))
    return run_set


def test_every_result_carries_the_other_nodes_checks_in_rank_order(two_nodes):
    run_dir = next(path.parent for path in two_nodes.glob("*/result.json"))
    system = extract.find_system(run_dir, None, [])
    assert [(n["node_rank"], n["acceptance"]["verdict"]) for n in system["other_nodes"]] == [(1, "pass")]
    assert system["acceptance"]["gpus"][0]["host"] == "node-a"


def test_an_edited_figure_of_another_node_fails_the_result_naming_that_node(two_nodes):
    system = extract.find_system(next(two_nodes.glob("*/result.json")).parent, None, [])
    assert acceptance_checks.problems(system) == []
    system["other_nodes"][0]["acceptance"]["gpus"][2]["gemm"]["bf16"]["tflops"] = 950.0
    [(check, line)] = acceptance_checks.problems(system)
    assert check == "acceptance evidence" and line.startswith("node 1: acceptance: GPU 2 bf16 GEMM 950.0 TFLOP/s")


def test_the_health_warnings_and_the_report_name_each_node(two_nodes, tmp_path):
    system = extract.find_system(next(two_nodes.glob("*/result.json")).parent, None, [])
    assert [p.message for p in machine_checks.node_health(system)] == ["node 1: GPU 1: 3 uncorrected ECC errors; replace GPU 1"]
    for path in two_nodes.glob("*/result.json"):
        result = json.loads(path.read_text())
        result["system"]["other_nodes"] = system["other_nodes"]
        path.write_text(json.dumps(result))
    text = compare.compare([two_nodes], tmp_path / "out")
    assert "**NVIDIA node-b (2026-11-28T12:00:05+00:00)**" in text


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_nodes_measure_the_all_reduce_across_them_over_gloo_and_the_gate_makes_it_again(tmp_path):
    """Two "nodes" of one worker each on this machine, each started as the matrix starts the stage on its node."""
    port, run_set = free_port(), tmp_path / "set"
    nodes = [subprocess.Popen([sys.executable, "-m", "evaluate.acceptance", "--platform", "cpu", "--models",
                               "llama3.1-8b-tiny", "--tokens", "128", "--workers", "1", "--floors", "0.46,0.38,0.22",
                               "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                               "--master-port", str(port), "--record", str(node_system_path(run_set, rank))],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    outputs = [node.communicate(timeout=240)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    across = [json.loads(node_system_path(run_set, rank).read_text())["acceptance"]["across_nodes"] for rank in (0, 1)]
    assert [(a["nodes"], a["verdict"], {row["ranks"] for row in a["collectives"]}) for a in across] == \
        [(2, "no specification", {2})] * 2
    assert "all_reduce bus bandwidth GB/s across 2 nodes (2 ranks): 64 KiB" in outputs[0]
    section = json.loads(node_system_path(run_set, 0).read_text())["acceptance"]
    assert acceptance.recompute_problems(section) == []
    section["across_nodes"]["collectives"][2]["busbw_gb_s"] *= 2
    [line] = acceptance.recompute_problems(section)
    assert line.startswith("acceptance: all_reduce of 8388608 bytes: algbw")


def test_the_report_shows_the_all_reduce_across_the_nodes_under_node_0(two_nodes, tmp_path):
    rows = [{"op": "all_reduce", "bytes": 256 << 20, "ranks": 16, "seconds": 0.01}]
    across = {"nodes": 2, "collectives": acceptance.collective_figures(rows), "verdict": "no specification",
              "why": "no figure of the links between nodes"}
    for path in two_nodes.glob("*/result.json"):
        result = json.loads(path.read_text())
        result["system"]["acceptance"]["across_nodes"] = across
        path.write_text(json.dumps(result))
    text = compare.compare([two_nodes], tmp_path / "out")
    busbw = across["collectives"][0]["busbw_gb_s"]
    assert busbw == pytest.approx((256 << 20) / 0.01 / 1e9 * 2 * 15 / 16)  # nccl-tests' all-reduce factor 2(n-1)/n
    assert "- all_reduce across 2 nodes (16 ranks), bus bandwidth GB/s: 256 MiB 50.3; no specification" in text
