"""torchtitan runs TPrimat's held-out validation (train/torchtitan/trainer.py): after every EVAL_INTERVAL-th step and
the last, on the prepared validation split, with its own model and loss, and stops at TARGET_LOSS.

Its own entry point runs here through tests/fixtures/train/torchtitan_on_cpu.py (the CPU's stand-ins, and steps that
train nothing): every evaluation sees the initial model on the same samples, so their losses are equal, and near
ln(vocabulary) for an untrained model.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluate import extract
from tests.fixtures.train.data_dir import make_data_dir
from tests.fixtures.train import torchtitan_overlay
from tests.fixtures.train.torchtitan_overlay import request
from train.launch.command import REQUEST_FILE
from train.torchtitan.settings import SETTINGS_ENV, SETTINGS_FILE, settings

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "tests" / "fixtures" / "train" / "torchtitan_on_cpu.py"


@pytest.fixture(scope="module")
def torchtitan_path():
    return torchtitan_overlay.installed()


def train(torchtitan_path: Path, tmp_path: Path, **env: str) -> Path:
    """One tiny torchtitan run of 6 steps, EVAL_INTERVAL=2, on prepared sample data; its run directory."""
    data = make_data_dir(tmp_path / "data", model_keys=("llama",), documents=200)
    req = request(DATA_DIR=str(data), DATASET="sample", MODEL_SIZE="tiny", SL="128", TRAIN_ITERS="6",
                  WARMUP_STEPS="1", WARMUP_SKIP="1", TP="1", PP="1", DP="1", GA="2", GPUS_PER_NODE="1",
                  EVAL_INTERVAL="2", EVAL_TOKENS="256", VALIDATION_PERCENT="20", TPRIMAT_DETECTED_GPUS="1", **env)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    req.write(run_dir / REQUEST_FILE)
    (run_dir / SETTINGS_FILE).write_text(json.dumps(settings(req, str(run_dir))))
    environment = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{torchtitan_path}", "PYTHONWARNINGS": "ignore",
                   SETTINGS_ENV: str(run_dir / SETTINGS_FILE), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1", "--standalone",
                          str(RUNNER), "--module", "train.torchtitan", "--config", "tprimat"],
                         cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600)
    (run_dir / "train.log").write_text(out.stdout + out.stderr)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return run_dir


def result_of(run_dir: Path) -> dict:
    assert extract.main([str(run_dir / "train.log"), "--run-dir", str(run_dir), "-o", str(run_dir / "result.json"),
                         "--framework", "torchtitan"]) == 0
    return json.loads((run_dir / "result.json").read_text())


def test_it_evaluates_after_every_interval_and_the_last_step_on_the_same_samples(torchtitan_path, tmp_path):
    run_dir = train(torchtitan_path, tmp_path)
    points = [json.loads(line) for line in (run_dir / "evals.jsonl").read_text().splitlines()]
    assert [p["step"] for p in points] == [2, 4, 6] and [p["tokens"] for p in points] == [512, 1024, 1536]
    losses = {p["loss"] for p in points}
    assert len(losses) == 1 and abs(losses.pop() - math.log(128256)) < 1.0  # untrained, the same samples each time
    assert all(p["wall_s"] >= p["train_time_s"] + p["eval_time_s"] for p in points)
    evaluation = result_of(run_dir)["evaluation"]
    assert evaluation["points"]["step"] == [2, 4, 6]
    split = evaluation["split"]
    assert (split["megatron_split"], split["percent"]) == ("80,20,0", 20)
    assert split["documents"] > 0 and split["fingerprint"].startswith("sha256:")
    assert evaluation["points"]["wall_s"] == pytest.approx([p["wall_s"] for p in points], abs=1e-3)


def test_target_loss_ends_the_run_at_the_first_evaluation_that_reaches_it(torchtitan_path, tmp_path):
    run_dir = train(torchtitan_path, tmp_path, TARGET_LOSS="99")
    result = result_of(run_dir)
    assert (result["run"]["status"], result["run"]["steps_completed"]) == ("ok", 2)
    to_target = result["time_to_train"]
    assert (to_target["reached"], to_target["step"], to_target["stopped_at_target"]) == (True, 2, True)
    assert to_target["wall_s"] is not None
