"""evaluate.judge: a run's result once it has ended, the read-back of what it trained on, and the record of
its environment and network (moved here from the launcher with the judging)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from evaluate import judge
from tests.fixtures import breakdown_results
from tests.fixtures.train_matrix.requests import run_request
from utils.spec.request import Request
from utils.cli import SignalFlag
from utils.spec.result import schema_errors

REPO = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "fixtures" / "results" / "extract"
LOGS = Path(__file__).parent / "fixtures" / "logs"
PREFIX = "/data/bc_llama_text_document"  # the request's data prefix (DATA_DIR=/data)
ENDED = {"exit_code": 0, "started_at": "2026-11-22T12:00:00+00:00", "ended_at": "2026-11-22T12:30:00+00:00",
         "warnings": [], "stopped_by": None, "environment": {"HSA_NO_SCRATCH_RECLAIM": "1"}}


def readback(reported, mock_data=False) -> list[str]:
    """judge.readback_problems about the data path of a sound NeMo result reporting `reported`."""
    req = run_request("nvd", "nemo", "llama")
    req = dataclasses.replace(req, data=dataclasses.replace(req.data, mock_data=mock_data))
    assert req.data.prefix == PREFIX
    result = json.loads((GOLDEN / "nemo.json").read_text())
    result["training"].update(dataset_fingerprint="d" * 64, tokenizer_fingerprint="t" * 64)
    result["effective"]["data_path"] = reported
    return [p for p in judge.readback_problems(req, result) if p.startswith("data_path")]


def test_nemos_data_path_list_is_compared_with_the_request():
    """train/nemo/readback.py prints data_path as the list of the blend's prefixes."""
    assert readback([PREFIX]) == []
    assert readback(["/data/c4_llama_text_document"]) == [
        f"data_path: the framework read /data/c4_llama_text_document, requested {PREFIX}"]
    assert readback([PREFIX, "/data/c4_llama_text_document"])  # a blend with other data is other data


def test_megatron_and_primus_printed_lists_are_compared_without_their_blend_weights():
    assert readback(f"['{PREFIX}']") == []
    assert readback(f"['1.0', '{PREFIX}']") == []
    assert readback(f"{PREFIX}_v2") == [f"data_path: the framework read {PREFIX}_v2, requested {PREFIX}"]


def test_the_trainers_single_path_is_compared_whole():
    """train/train_mega.py reports the one prefix GPTDataset opened, which may contain spaces."""
    assert readback(PREFIX) == []
    spaced = "/my data/bc_llama_text_document"
    assert readback(spaced) == [f"data_path: the framework read {spaced}, requested {PREFIX}"]


def test_a_mock_data_run_has_no_data_path_to_compare():
    assert readback(None) == [] and readback(["/elsewhere"], mock_data=True) == []


# --- what every result records of the run's environment and network -----------------------------------

def test_a_result_records_the_platform_environment_the_run_was_started_with():
    environment = {"HSA_NO_SCRATCH_RECLAIM": "0", "CUDA_DEVICE_MAX_CONNECTIONS": "1", "NVTE_CK_USES_BWD_V3": "1"}
    result = {"effective": {"tp": 1}}
    judge.record_environment(1, result, environment, [])
    assert result["effective"]["environment"] == environment


def test_the_trainers_own_record_of_its_environment_is_kept():
    result = {"effective": {"environment": {"HSA_NO_SCRATCH_RECLAIM": "0"}}}
    judge.record_environment(1, result, {"HSA_NO_SCRATCH_RECLAIM": "1"}, [])
    assert result["effective"]["environment"] == {"HSA_NO_SCRATCH_RECLAIM": "0"}


@pytest.mark.parametrize("network, nnodes, warned", [("IB", 2, False), ("Socket", 2, True), ("Socket", 1, False)])
def test_the_network_the_trainer_ran_on_is_read_from_every_nodes_log(tmp_path, network, nnodes, warned):
    """mega's trainer records its own settings; NCCL's INFO line in a node's log adds the transport to them."""
    first, second = tmp_path / "train.log", tmp_path / "node1.log"
    first.write_text("gpu-01:11:12 [0] NCCL INFO Using network IB\n")
    second.write_text(f"gpu-02:13:14 [8] NCCL INFO Using network {network}\n")
    result = {"effective": {}}
    notes = judge.record_environment(nnodes, result, {}, [first, second])
    assert result["effective"]["collective_rdma"] is (network == "IB")
    assert bool(notes) is warned
    if warned:
        assert "TCP sockets" in notes[0] and "/dev/infiniband" in notes[0]


def test_a_run_that_died_before_its_first_step_still_records_its_workload_identity(tmp_path):
    req = run_request("amd", "prim", "qwen")
    run_dir = tmp_path / "prim-qwen"
    run_dir.mkdir()
    (run_dir / "train.log").write_text("RuntimeError: HIP error: no ROCm-capable device is detected\n")
    ended = judge.Ended(1, "2026-11-22T12:00:00+00:00", "2026-11-22T12:00:05+00:00", [], None, {})
    result = judge.start_failure_result(req, run_dir, ended, "exit code 1; no training step in the log")
    assert result["run"]["status"] == "failed" and result["run"]["steps_completed"] == 0
    training = result["training"]
    assert (training["fairness_profile"], training["init_method_std"], training["padded_vocab_size"],
            training["eod_mask_loss"], training["lr_warmup_convention"]) == ("spec", 0.02, 152064, False, "megatron")
    assert schema_errors(result) == []


# --- The command the launcher runs -------------------------------------------------------------------------

def ended_run(tmp_path, log: str, config: str = "config-nemo.json", **ended) -> Path:
    """A run directory as the launcher leaves it once the run has ended: config.json, train.log, launch.json."""
    run_dir = tmp_path / "set" / "nemo-llama"
    run_dir.mkdir(parents=True)
    shutil.copy(LOGS / config, run_dir / "config.json")
    shutil.copy(LOGS / log, run_dir / "train.log")
    (run_dir / "launch.json").write_text(json.dumps({"run_id": "fixture", "node_rank": 0, **ENDED, **ended}))
    return run_dir


def judged(run_dir: Path) -> tuple[int, dict]:
    code = judge.main([str(run_dir)])
    return code, json.loads((run_dir / "result.json").read_text())


def test_the_judge_writes_the_result_of_a_run_and_its_environment(tmp_path):
    code, result = judged(ended_run(tmp_path, "nemo.log"))
    assert code == 0
    assert (result["run"]["status"], result["run"]["steps_completed"]) == ("ok", 12)
    assert result["effective"]["environment"] == ENDED["environment"]
    assert schema_errors(result) == []


def test_a_stopped_run_is_incomplete_and_says_by_what(tmp_path):
    code, result = judged(ended_run(tmp_path, "nemo.log", exit_code=143, stopped_by=15))
    assert code == 0 and result["run"]["status"] == "incomplete"
    assert result["run"]["error_excerpt"].startswith("interrupted by SIGTERM after step 12 of 12")


def test_settings_the_framework_did_not_apply_fail_the_run(tmp_path, capsys):
    run_dir = ended_run(tmp_path, "nemo.log")
    config = json.loads((run_dir / "config.json").read_text())
    config["training"]["seq_len"] = 4096
    (run_dir / "config.json").write_text(json.dumps(config))
    code, result = judged(run_dir)
    assert code == 0 and result["run"]["status"] == "failed"
    assert "[tprimat] fixture: effective settings: seq_len is 2048 in the framework, 4096 requested" in \
        capsys.readouterr().err


def test_a_run_with_no_step_gets_a_result_that_says_why(tmp_path):
    code, result = judged(ended_run(tmp_path, "no_iterations.log", exit_code=1))
    assert code == 0 and result["run"]["status"] == "failed"
    assert result["run"]["error_excerpt"].startswith("exit code 1; no training step in the log")
    assert Request.read(tmp_path / "set" / "nemo-llama" / "config.json").identity.run_id == result["run"]["id"]


def test_the_judge_stops_waiting_for_other_nodes_when_told(tmp_path):
    hurry = SignalFlag()
    hurry.set()
    (tmp_path / "node1").mkdir()
    (tmp_path / "node1" / "train.log").write_text("")
    assert judge.other_node_logs(tmp_path, 2, hurry, timeout_s=60) == [tmp_path / "node1" / "train.log"]


def test_a_stop_signal_during_the_wait_for_other_nodes_ends_it_at_once(tmp_path):
    """The handler runs on the thread that waits: setting the flag there must not deadlock against the wait."""
    hurry = SignalFlag()
    previous = signal.signal(signal.SIGUSR1, hurry.set)
    try:
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1))
        timer.start()
        started = time.monotonic()
        assert judge.other_node_logs(tmp_path, 2, hurry, timeout_s=60) == []
        assert time.monotonic() - started < 5
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize("missing", ["config.json", "launch.json"])
def test_a_run_directory_without_its_records_is_refused_in_one_line(tmp_path, missing):
    run_dir = ended_run(tmp_path, "nemo.log")
    (run_dir / missing).unlink()
    done = subprocess.run([sys.executable, "-m", "evaluate.judge", str(run_dir)], cwd=REPO, capture_output=True,
                          text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("evaluate.judge: error: ")
    assert missing in done.stderr and not (run_dir / "result.json").exists()


def test_a_stop_signal_cuts_the_wait_for_other_nodes_short_and_the_result_is_still_written(tmp_path):
    run_dir = ended_run(tmp_path, "nemo.log")
    config = json.loads((run_dir / "config.json").read_text())
    config["parallelism"]["nnodes"] = 2  # node 1 never records its end
    (run_dir / "config.json").write_text(json.dumps(config))
    judging = subprocess.Popen([sys.executable, "-m", "evaluate.judge", str(run_dir)], cwd=REPO, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert "waiting up to 300 s for node 1" in judging.stdout.readline()
    judging.send_signal(signal.SIGTERM)
    out, err = judging.communicate(timeout=60)
    assert judging.returncode == 0, err
    assert "node(s) 1: stopped waiting; extracting from the logs there are" in err
    assert json.loads((run_dir / "result.json").read_text())["run"]["steps_completed"] == 12


# --- The torch-native frameworks (fsdp, autotp): their own settings read back, and a trainer that recorded nothing -

def native_readback(effective: dict, **env: str) -> list[str]:
    """judge.readback_problems of an fsdp result (tests/fixtures/breakdown_results.py) reading back `effective`."""
    req = run_request("nvd", "fsdp", "llama", **env)
    return judge.readback_problems(req, breakdown_results.result("fsdp", "fsdp-llama", effective=effective).result)


def test_a_torch_native_runs_own_settings_are_compared_with_the_request():
    built = {"data_parallel": "fsdp", "compile": True, "compile_mode": "default", "attn_impl": "sdpa",
             "checkpointed_layers": [3, 7, 11, 15, 19, 23, 27, 31]}  # Llama 3.1 8B's 32 layers, every 4th
    assert native_readback(built, COMPILE="1", SAC_FREQ="1/4", FRAMEWORK="fsdp") == []
    assert native_readback({**built, "compile": False, "attn_impl": "eager"}, COMPILE="1", SAC_FREQ="1/4",
                           FRAMEWORK="fsdp") == ["effective settings: compile is False in the framework, True requested",
                                                 "effective settings: attn_impl is 'eager' in the framework, 'sdpa' "
                                                 "requested"]
    assert native_readback(built, FRAMEWORK="fsdp") == [
        "effective settings: compile is True in the framework, False requested",
        "effective settings: sac_every is [3, 7, 11, 15, 19, 23, 27, 31] in the framework, [] requested "
        "(checkpointed layers, 0-based)"]


def test_autotps_zero_stage_is_compared_with_the_request():
    """train/autotp/engine.py reads back DeepSpeed's ZeRO stage, no compile and no checkpointed layers."""
    req = run_request("nvd", "autotp", "llama", ZERO_STAGE="1")
    built = {"zero_stage": 1, "compile": False, "compile_mode": None, "checkpointed_layers": [], "attn_impl": "sdpa"}
    autotp = breakdown_results.result("autotp", "autotp-llama", effective=built).result
    assert judge.readback_problems(req, autotp) == []
    autotp["effective"]["zero_stage"] = 0
    assert judge.readback_problems(req, autotp) == ["effective settings: zero_stage is 0 in the framework, 1 requested"]


def test_settings_a_torch_native_framework_does_not_report_are_not_compared():
    """fsdp has no ZeRO stage: the request carries one (unused), its result none."""
    assert native_readback({"attn_impl": "sdpa"}) == []


def test_a_torch_native_trainer_that_recorded_nothing_gets_a_result_that_says_why(tmp_path):
    run_dir = tmp_path / "set" / "fsdp-llama"
    run_dir.mkdir(parents=True)
    run_request("cpu", "fsdp", "llama").write(run_dir / "config.json")
    (run_dir / "train.log").write_text("Traceback (most recent call last):\nRuntimeError: out of memory\n")
    (run_dir / "launch.json").write_text(json.dumps({"run_id": "fsdp-llama", "node_rank": 0, **ENDED,
                                                     "exit_code": 1}))
    code, result = judged(run_dir)
    assert code == 0 and result["framework"] == "fsdp" and result["run"]["status"] == "failed"
    assert result["run"]["error_excerpt"].startswith(
        "exit code 1; the fsdp trainer recorded no account of its run (trainer.json) and its log is no format "
        "evaluate.extract reads\n")
    assert "RuntimeError: out of memory" in result["run"]["error_excerpt"]
