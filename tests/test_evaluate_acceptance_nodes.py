"""Node acceptance on a multi-node run set: every node other than 0 records its checks beside the run set's
system.json, every result carries them (system.other_nodes), the gate makes each node's figures again from their
evidence, and the report and the health warnings name each node."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from evaluate import acceptance_checks, compare, extract, machine_checks
from tests.test_evaluate_acceptance import FAKEBIN, FLOORS, node, rank_record, with_acceptance
from train import matrix
from utils.machine import acceptance
from utils.machine.hardware import find_device
from utils.runset import node_system_path
from utils.spec.models import get_model

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
    monkeypatch.setenv("PATH", f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_GPUS", "8")
    monkeypatch.setenv("TPRIMAT_ACCEPTANCE_MEASURED", str(node(tmp_path, gpu=3)))
    monkeypatch.setenv("TPRIMAT_PYTHON", sys.executable)

    class Cfg(dict):
        platform, models = "nvd", [get_model("llama")]
    cfg = Cfg(ACCEPTANCE="warn", DRY_RUN=False, NODE_RANK=1, MBS=1, SL=2048, GPUS_PER_NODE=8,
              ACCEPT_GEMM_FLOOR=0.46, ACCEPT_MEMORY_FLOOR=0.38, ACCEPT_BUSBW_FLOOR=0.22)
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
