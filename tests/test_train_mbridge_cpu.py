"""FRAMEWORK=mbridge on the CPU: Megatron-Bridge 0.6.2's own pretrain() trains a tiny Llama, held against mega.

One run, started as a user starts it (python3 -m train.launch.run, what train/launch.sh runs), in mbridge's own
Python 3.12 environment (train/mbridge/environment.py, built on first use from requirements/mbridge.txt; the build
test shares it): TPrimat's request as Megatron-Bridge's recipe settings, the recipe, validate() and the runtime
update, setup(), its training loop and logger, 2 ranks over gloo, with only the steps that cannot run without a GPU
stood in for (train/mbridge/cpu_stand_ins.py). The judge reads its result from Megatron-Bridge's own log.

The workload is test_train_mega_runs.py's learn_llama run (shared: trained once per session for every file that
reads it): the same tiny Llama, prepared data, seed, batch (DP 2 x MBS 2, SL 64), 8 steps and LR schedule (warm-up
2, cosine to MIN_LR). The two do not start from the same weights: mega draws each full weight from one generator
(train/mega/model.py, the same weights for every layout), megatron-core inside Megatron-Bridge draws each shard from
its model-parallel RNG tracker, so the two models are two draws of one initialisation (normal, std 0.02). Hence:

- FIRST_STEP_TOLERANCE: before any update a model's loss is ln(vocabulary) = 11.76 plus about half the variance of
  its logits, which the initialisation's distribution sets, not its draw; what is left is the draw's noise over one
  batch's 256 tokens (measured: 11.780 against mega's 11.767);
- STEP_TOLERANCE: then the same optimizer, LR schedule and data move both the same way; two draws and bf16 rounding
  keep them apart by a few hundredths (measured at most 0.037), while a step of learning is about 0.1 here, so a
  schedule off by one step or a wrong LR would show;
- FALL_TOLERANCE: what each learned over the run (first loss minus last) agrees within 20% (measured 0.580 and
  0.590).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.train.data_dir import make_data_dir
from tests.shell_harness import HANG_TIMEOUT_S
from evaluate import validate
from evaluate.collect import Loaded
from tests.test_train_mega_moe import LAYOUTS as MEGA_MOE, trained as trained_moe
from tests.test_train_mega_runs import BASE, LAYOUTS, LEARN_STEPS, trained, trainer_env
from train.mbridge.recipe import TE_MOE_KERNELS
from utils.spec.fairness import moe_settings
from utils.spec.models import get_model
from train.mbridge.environment import REQUIREMENTS
from utils.machine import pyenvs
from utils.config.selection import resolve_frameworks
from utils.spec import stacks

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = {**BASE, **{key: value for key, value in LAYOUTS["learn_llama"].items() if key != "PYTHONWARNINGS"}}
FIRST_STEP_TOLERANCE = 0.03  # absolute, on losses near 11.77: two draws of one initialisation, one batch
STEP_TOLERANCE = 0.06  # absolute, every step: the same training from two draws (a step of learning is ~0.1)
FALL_TOLERANCE = 0.2  # relative: what the run learned, first loss minus last
ITERATION = re.compile(r"iteration\s+(\d+)/\s*(\d+) \|.*\| lm loss: ([0-9.E+-]+) \|")
STOOD_IN = ("initialize.py:89-91", "initialize.py:869", "megatron/training/models/dist_utils.py:303,306")


@dataclass
class Launched:
    directory: Path
    returncode: int
    console: str
    wall_s: float

    @property
    def result(self) -> dict:
        return json.loads((self.directory / "result.json").read_text())

    @property
    def log(self) -> str:
        return (self.directory / "train.log").read_text()


def launch(directory: Path, data_dir: Path, model: str = "llama", workload: dict = WORKLOAD, **env) -> Launched:
    """python3 -m train.launch.run for mbridge on the CPU, as train/launch.sh starts it, with the workload's knobs."""
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "train.launch.run", "--platform", "cpu", "--framework", "mbridge",
                          "--model", model, "--run-dir", str(directory)], cwd=ROOT, capture_output=True, text=True,
                         env={**trainer_env(data_dir, workload), "OUTPUT_DIR": str(directory.parent), **env},
                         timeout=HANG_TIMEOUT_S)
    return Launched(directory, out.returncode, out.stdout + out.stderr, time.monotonic() - started)


def launched(tmp_path_factory, model: str, **workload) -> Launched:
    """mbridge's run of the model on the CPU, on its prepared data, as a user starts it; it must succeed."""
    if pyenvs.find_python("3.12") is None:
        pytest.skip("no Python 3.12 on this machine (Megatron-Bridge 0.6 needs it): install one, e.g. pyenv 3.12.1")
    root = tmp_path_factory.mktemp("mbridge")
    data = make_data_dir(root / "data", model_keys=(get_model(model).data_key,))
    found = launch(root / f"mbridge-{model}", data, model, **workload)
    print(f"mbridge {model} on the CPU: {found.wall_s:.0f} s from the launcher's start to its judged result")
    assert found.returncode == 0, found.console[-4000:]
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Launched:
    return launched(tmp_path_factory, "llama")


@pytest.fixture(scope="module")
def mega(tmp_path_factory):
    return trained(tmp_path_factory, "learn_llama")


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory) -> Launched:
    """The tiny Qwen3 MoE on mega's MoE workload (test_train_mega_moe.py's dp2: DP 2 x MBS 2, SL 64, 4 steps)."""
    return launched(tmp_path_factory, "qwen3moe", workload={**BASE, **MEGA_MOE["dp2"]})


@pytest.fixture(scope="module")
def mega_moe(tmp_path_factory):
    return trained_moe(tmp_path_factory, "dp2")


def test_megatron_bridge_trains_on_the_cpu_with_only_its_gpu_steps_stood_in(run):
    """Megatron-Bridge's own loop ran every step; each rank says which steps were stood in for, by upstream line."""
    result = run.result
    assert (result["run"]["status"], result["framework"], result["platform"]) == ("ok", "mbridge", "cpu")
    log = run.log
    assert "Starting training loop at iteration 0" in log
    assert [int(m.group(1)) for m in ITERATION.finditer(log)] == list(range(1, LEARN_STEPS + 1))
    stood_in = [line for line in log.splitlines() if line.startswith("[tprimat] no GPU: stood in for")]
    assert len(stood_in) == 2 * len(STOOD_IN)  # each of the two ranks
    assert all(any(where in line for line in stood_in) for where in STOOD_IN)
    assert log.count("no nvidia_resiliency_ext: pretrain.py's import answered by an inert stand-in") == 2


def test_its_steps_are_read_from_megatron_bridges_own_log_through_evaluate_extract(run, tmp_path):
    losses = [float(m.group(3)) for m in ITERATION.finditer(run.log)]
    result = run.result
    assert result["run"]["steps_completed"] == LEARN_STEPS and result["series"]["loss"] == losses
    out = subprocess.run([sys.executable, "-m", "evaluate.extract", str(run.directory / "train.log"), "--run-dir",
                          str(run.directory), "-o", str(tmp_path / "extracted.json")], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads((tmp_path / "extracted.json").read_text())["series"]["loss"] == losses


def test_the_read_back_is_the_finalized_configuration_and_the_request(run):
    readback = json.loads((run.directory / "mbridge_readback.json").read_text())
    assert readback["set"]["dist.distributed_backend"] == "gloo"
    assert readback["set"]["train.train_iters"] == LEARN_STEPS
    effective = run.result["effective"]
    assert {key: effective[key] for key in ("tp", "pp", "dp", "mbs", "gbs", "seq_len", "steps", "layer_spec")} == \
        {"tp": 1, "pp": 1, "dp": 2, "mbs": 2, "gbs": 4, "seq_len": 64, "steps": LEARN_STEPS, "layer_spec": "local"}
    assert effective["precision"] == run.result["training"]["precision"]
    assert readback["effective"]["num_layers"] == run.result["model"]["num_layers"]


def test_its_result_describes_the_environment_it_trained_in_not_the_launchers(run):
    """The run's own Python (requirements/mbridge.txt: its torch, Megatron-Bridge) probed into its system.json."""
    software = run.result["system"]["software"]
    pins = pyenvs.requirement_lines(REQUIREMENTS)
    assert f"torch=={software['torch']}" in pins and f"megatron-bridge=={software['megatron_bridge']}" in pins


def test_its_loss_curve_is_megas_on_the_same_workload(run, mega):
    ours, theirs = run.result["series"]["loss"], mega.result["series"]["loss"]
    assert mega.result["run"]["status"] == "ok" and len(ours) == len(theirs) == LEARN_STEPS
    assert ours[0] == pytest.approx(theirs[0], abs=FIRST_STEP_TOLERANCE)
    assert ours == pytest.approx(theirs, abs=STEP_TOLERANCE)
    assert ours[0] - ours[-1] == pytest.approx(theirs[0] - theirs[-1], rel=FALL_TOLERANCE)


def test_its_learning_rate_schedule_is_megas_as_megatron_lm_prints_it(run, mega):
    """Megatron-LM's iteration line prints the rate after the scheduler stepped, the next step's: mega's step k+1."""
    ours, theirs = run.result["series"]["lr"], mega.result["series"]["lr"]
    assert ours[:-1] == pytest.approx(theirs[1:], rel=1e-6)


def test_the_default_cpu_run_leaves_mbridge_out_and_naming_it_runs_it():
    notes: list[str] = []
    host = stacks.default("cpu")
    assert "mbridge" not in resolve_frameworks(["all"], "cpu", notes, host)
    assert resolve_frameworks(["mega", "mbridge"], "cpu", notes, host) == ["mega", "mbridge"] and notes == []


def test_a_machine_that_cannot_build_its_environment_is_told_the_fix_in_one_line(tmp_path):
    """No PyPI and nothing in uv's cache: the launcher refuses before the run starts, exit 2, one line."""
    if pyenvs.find_python("3.12") is None or pyenvs.uv() is None:
        pytest.skip("needs Python 3.12 and uv, as the environment's build does")
    data = make_data_dir(tmp_path / "data", model_keys=("llama",), documents=20)
    offline = {"TPRIMAT_ENVS": str(tmp_path / "envs"), "UV_OFFLINE": "1", "UV_CACHE_DIR": str(tmp_path / "uv"),
               "PIP_NO_INDEX": "1"}
    launched = launch(tmp_path / "runs" / "mbridge-llama", data, **offline)
    errors = [line for line in launched.console.splitlines() if line.startswith("[tprimat] error:")]
    assert launched.returncode == 2, launched.console[-3000:]
    assert len(errors) == 1 and "could not be built" in errors[0] and "build it once where PyPI is reachable" \
        in errors[0] and "Traceback" not in launched.console
    assert not (tmp_path / "runs" / "mbridge-llama" / "config.json").exists()


def test_megatron_bridge_trains_the_tiny_moe_model_and_reads_back_its_experts_and_routing(moe_run):
    """Megatron-Bridge's Qwen3 30B-A3B recipe on the tiny variant (8 experts, top-2) trains every step; the result's
    effective.moe is the finalized container's, megatron-core's local layers without Transformer Engine's MoE
    kernels, and the judge's MoE checks pass."""
    result = moe_run.result
    steps = MEGA_MOE["dp2"].get("TRAIN_ITERS", BASE["TRAIN_ITERS"])
    assert (result["run"]["status"], result["run"]["steps_completed"]) == ("ok", steps)
    assert [int(m.group(1)) for m in ITERATION.finditer(moe_run.log)] == list(range(1, steps + 1))
    assert result["effective"]["moe"] == {**moe_settings(get_model("qwen3moe", "tiny").moe),
                                          **dict.fromkeys(TE_MOE_KERNELS, False), "expert_model_parallel_size": 1}
    assert (result["effective"]["ep"], result["effective"]["dp"]) == (1, 2)
    assert [f.message for f in validate.check_result(Loaded("mbridge-qwen3moe", result, {})) if f.fatal] == []


def test_its_moe_losses_and_schedule_are_megas_on_the_same_workload(moe_run, mega_moe):
    """Two draws of one initialisation again, now of the router and the experts too: measured at most 0.035 apart
    over the 4 steps (11.960 against mega's 11.926 first), within STEP_TOLERANCE; the learning rate is mega's a step
    later, as for the dense model."""
    ours, theirs = moe_run.result["series"], mega_moe.result["series"]
    assert mega_moe.result["run"]["status"] == "ok" and len(ours["loss"]) == len(theirs["loss"])
    assert ours["loss"] == pytest.approx(theirs["loss"], abs=STEP_TOLERANCE)
    assert ours["lr"][:-1] == pytest.approx(theirs["lr"][1:], rel=1e-6)
