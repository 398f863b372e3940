"""The mega trainer's result names the hardware that really trained: no amd/nvd label on CPU work."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.fixtures.train.judged import judged_result
from tests.shell_harness import HANG_TIMEOUT_S, REPO
from tests.test_train_mega_runs import trainer_env


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a torch that sees no GPU, as on a CPU machine")
def test_a_gpu_platform_whose_torch_sees_no_gpu_stops_before_the_model_is_built(tmp_path):
    env = trainer_env(tmp_path / "no-data", {"PLATFORM": "nvd", "TP": 1, "PP": 1, "DP": 1, "GA": 1, "MOCK_DATA": 1})
    env.update(TPRIMAT_DETECTED_PLATFORM="nvd", TPRIMAT_DETECTED_GPUS="1", PRECISION="bf16", MODEL_SIZE="tiny")
    run = subprocess.run([sys.executable, "train/train_mega.py", "--model", "llama", "--run-dir", str(tmp_path / "run")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"PLATFORM=nvd: torch {torch.__version__} sees no GPU; run in the container runtime" in run.stderr
    assert "Traceback" not in run.stderr
    result = judged_result(tmp_path / "run")
    assert result["run"]["status"] == "failed" and result["run"]["steps_completed"] == 0
