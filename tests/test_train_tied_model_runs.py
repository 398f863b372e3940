"""A model whose LM head is tied to its embedding (Llama 3.2 3B, tiny) trains for real on the CPU in mega, fsdp and
autotp at TP=2 (two processes over gloo, fp32, 6 steps on the bundled sample data through Llama 3's tokenizer, which
it shares): fsdp and autotp start from the same Hugging Face weights and agree to fp32 rounding, and mega, which
draws its own weights from the same seed, learns along the same curve."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.train.data_dir import make_data_dir
from tests.shell_harness import HANG_TIMEOUT_S
from tests.test_train_mega_runs import Run, trainer_env

ROOT = Path(__file__).resolve().parent.parent
STEPS = 6
KNOBS = dict(PRECISION="fp32", SL=64, TRAIN_ITERS=STEPS, WARMUP_STEPS=2, WARMUP_SKIP=1, LR=1e-3, MIN_LR=1e-4,
             MBS=2, TP=2, PP=1, DP=1, GA=1, ZERO_STAGE=1)
NATIVE_TOLERANCE = 1e-4  # measured: 0.0 here (1e-4 at SL 128 in bf16: the vocabulary-parallel loss's sums)
# mega's own initialisation is other random draws of the same distributions: measured at most 0.099 from fsdp's
# over these 6 steps (0.21 over the 30 steps of the default run, where the loss falls by 2)
BESIDE = 0.2


@pytest.fixture(scope="module")
def losses(tmp_path_factory) -> dict[str, list[float]]:
    data_dir = make_data_dir(tmp_path_factory.mktemp("data"), model_keys=("llama",))
    found = {}
    for framework in ("mega", "fsdp", "autotp"):
        directory = tmp_path_factory.mktemp(framework) / "run"
        out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                              f"train/train_{framework}.py", "--model", "llama32", "--run-dir", str(directory)],
                             cwd=ROOT, env=trainer_env(data_dir, {**KNOBS, "FRAMEWORK": framework}),
                             capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
        run = Run(directory, out.returncode, out.stdout + out.stderr)
        assert run.returncode == 0 and run.result["run"]["status"] == "ok", run.console[-3000:]
        assert run.result["model"]["parameters"] == 16_779_904  # its head counted once
        found[framework] = run.series("loss")
    return found


def test_fsdp_and_autotp_train_the_tied_model_alike(losses):
    assert losses["autotp"] == pytest.approx(losses["fsdp"], abs=NATIVE_TOLERANCE)


def test_mega_learns_the_tied_model_along_the_same_curve(losses):
    assert all(abs(m - f) < BESIDE for m, f in zip(losses["mega"], losses["fsdp"], strict=True)), losses
    assert all(curve[-1] < curve[0] - 0.05 for curve in losses.values()), losses  # measured: 0.12 (fsdp, autotp), 0.22 (mega)
