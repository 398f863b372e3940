"""The fsdp trainer (train/train_fsdp.py), trained for real on the CPU: torchrun, two processes over gloo, the
tiny models on the bundled sample data (tests/fixtures/train/data_dir.py), fp32.

Four runs of 8 steps, each shared by several tests: FSDP2 over DP=2 with every second layer checkpointed, its
rerun, DTensor TP=2 with sequence and loss parallelism (DP=1, the same samples per step) and every second layer
checkpointed, and Qwen under DDP with its layers compiled (compile under sequence parallelism is refused:
tests/test_train_native_tensor_parallel.py).
"""

from __future__ import annotations

import functools
import math
import subprocess
import sys
from pathlib import Path

import pytest

from evaluate import validate
from evaluate.collect import Loaded
from tests.fixtures.train.shared_runs import data_dir_of, shared_run
from tests.shell_harness import HANG_TIMEOUT_S
from tests.test_train_mega_runs import Run, trainer_env
from utils.spec.result import schema_errors

ROOT = Path(__file__).resolve().parent.parent
LR, MIN_LR, STEPS = 1e-3, 1e-4, 8
BASE = dict(FRAMEWORK="fsdp", PRECISION="fp32", SL=64, TRAIN_ITERS=STEPS, WARMUP_STEPS=2, WARMUP_SKIP=1, LR=LR,
            MIN_LR=MIN_LR, MBS=1, TP=1, PP=1, DP=2, GA=1)
# TP=2 (DP=1, MBS 2) against DP=2 (TP=1, MBS 1): the same samples per step from the same weights, in fp32. A TP
# split changes only the order of sums (the row-parallel projections' all-reduce, the DP split the gradient
# reduction; the vocabulary-parallel loss its log-sum-exp), so the losses may differ by float32 rounding, grown
# over 8 Adam steps. Measured on this machine with sequence and loss parallelism and SAC: the largest loss
# difference 1.9e-6 (about 2 float32 ulps at 11.7); the compiled layers' wrong gradients under sequence
# parallelism (now refused) moved step 1's grad norm from 2.19 to 1.93. The tolerance is five times the rounding:
# far below the 0.2 the loss moves in these 8 steps, so a wrong split (a missing all-reduce, a shard mixed up)
# cannot pass.
TP_TOLERANCE = 1e-5
EVAL = dict(EVAL_INTERVAL=3, EVAL_TOKENS=256)  # held-out validation after steps 3, 6 and 8: 2 global batches


def train(directory: Path, data_dir: Path, *, model: str = "llama", args: tuple[str, ...] = (), **knobs) -> Run:
    """Run train/train_fsdp.py as the launcher does (torchrun, one process per rank) and wait for it."""
    settings = {**BASE, **knobs}
    nproc = settings["TP"] * settings["PP"] * settings["DP"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] \
        if nproc > 1 else [sys.executable]
    out = subprocess.run([*launcher, "train/train_fsdp.py", "--model", model, "--run-dir", str(directory), *args],
                         cwd=ROOT, env=trainer_env(data_dir, settings), capture_output=True, text=True,
                         timeout=HANG_TIMEOUT_S)
    return Run(directory, out.returncode, out.stdout + out.stderr)


LAYOUTS = {
    "fsdp_dp2": dict(**EVAL, SAC_FREQ="1/2", PYTHONWARNINGS="default"),  # warnings shown, as the launcher runs
    "rerun": dict(**EVAL, SAC_FREQ="1/2"),
    "tp2": dict(**EVAL, TP=2, DP=1, MBS=2, SAC_FREQ="1/2"),  # autotp's too (test_train_autotp_runs.py)
    "qwen_ddp": dict(model="qwen", DATA_PARALLEL="ddp", COMPILE=1, COMPILE_MODE="default"),
}


def trained(tmp_path_factory, name: str) -> Run:
    """The run of LAYOUTS called name, trained once per session for every file that reads it (shared_runs.py)."""
    return Run(*shared_run(tmp_path_factory, f"fsdp-{name}",
                           lambda directory, data: train(directory, data, **LAYOUTS[name])))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each named run of LAYOUTS, trained once on first use."""
    return functools.partial(trained, tmp_path_factory)


def assert_trained(run: Run) -> None:
    assert run.returncode == 0, run.console[-3000:]
    assert run.result["run"]["status"] == "ok" and len(run.steps) == STEPS


@pytest.mark.parametrize("name", ["fsdp_dp2", "qwen_ddp"])
def test_tiny_models_learn_on_the_sample_data(runs, name):
    run = runs(name)
    assert_trained(run)
    losses = run.series("loss")  # measured: llama 11.77 -> 11.59 (last three), qwen 11.96 -> 11.64
    assert sum(losses[-3:]) / 3 < losses[0] - 0.1, losses


def test_a_cpu_worker_leaves_megatron_cores_missing_library_warnings_to_the_matrix(runs):
    """train.matrix says once that Transformer Engine and Apex are missing (utils/missing_stacks.py)."""
    run = runs("fsdp_dp2")
    assert_trained(run)
    assert "not installed" not in run.console, run.console[:3000]


def test_a_rerun_repeats_every_loss_exactly(runs):
    base, rerun = runs("fsdp_dp2"), runs("rerun")
    assert_trained(rerun)
    assert rerun.series("loss") == base.series("loss")
    assert rerun.series("grad_norm") == base.series("grad_norm")
    assert rerun.result["evaluation"]["points"]["loss"] == base.result["evaluation"]["points"]["loss"]


def test_tensor_parallel_matches_data_parallel(runs):
    """torchtitan's plan: the LM head sharded over the vocabulary (loss parallel), the norms over the sequence; the
    read-back says so and validate holds sequence_parallel to the request's."""
    base, tp2 = runs("fsdp_dp2"), runs("tp2")
    assert_trained(tp2)
    assert tp2.series("loss") == pytest.approx(base.series("loss"), abs=TP_TOLERANCE)
    assert tp2.series("grad_norm") == pytest.approx(base.series("grad_norm"), abs=TP_TOLERANCE)
    evaluation, expected = tp2.result["evaluation"], base.result["evaluation"]
    assert evaluation["points"]["step"] == [3, 6, 8] and evaluation["split"] == expected["split"]
    assert evaluation["points"]["loss"] == pytest.approx(expected["points"]["loss"], abs=TP_TOLERANCE)
    result = tp2.result
    effective, plan = result["effective"], result["effective"]["tp_plan"]
    assert (effective["tp"], effective["dp"], effective["mesh"]["shape"], effective["sharding"]) == \
        (2, 1, [1, 2], "fsdp2")
    assert (effective["sequence_parallel"], effective["loss_parallel"]) == (True, True)
    assert result["parallelism"]["sequence_parallel"] is True
    assert effective["lm_head_vocab_rows"] * 2 == result["model"]["vocab_size"] == effective["vocab_size"]
    assert plan["lm_head"] == "ColwiseParallel Shard(dim=1) -> Shard(dim=-1)"
    assert plan["model.embed_tokens"] == "RowwiseParallel Replicate() -> Shard(dim=1)"
    assert plan["model.norm"] == plan["layers.N.input_layernorm"] == "SequenceParallel Shard(dim=1)"
    assert plan["layers.N.self_attn.q_proj"] == "ColwiseParallel Replicate() -> Shard(dim=-1)"
    assert plan["layers.N.mlp.down_proj"] == "RowwiseParallel Shard(dim=-1) -> Shard(dim=1)"
    assert [f.message for f in validate.check_result(Loaded("fsdp", result, {})) if f.fatal] == []
    base_effective = base.result["effective"]
    assert (base_effective["sequence_parallel"], base_effective["tp_plan"]) == (False, {})


def test_learning_rate_is_megatron_lms_warmup_then_cosine(runs):
    lrs = runs("fsdp_dp2").series("lr")
    assert lrs[0] == 0.0 and lrs[1] == pytest.approx(LR / 2) and lrs[2] == pytest.approx(LR)
    assert lrs[3] == pytest.approx(MIN_LR + (LR - MIN_LR) * 0.5 * (1 + math.cos(math.pi * 1 / 6)))


def test_result_is_valid_with_the_breakdown_and_the_read_back(runs):
    run = runs("fsdp_dp2")
    data_dir = data_dir_of(run.directory)
    result = run.result
    assert schema_errors(result) == []
    breakdown = result["performance"]["breakdown"]
    assert breakdown["count"] == STEPS - 1 and "host clock" in breakdown["method"]
    assert all(breakdown[key] > 0 for key in ("forward_s", "backward_s", "optimizer_s"))
    for step in run.steps:
        parts = step["forward_s"] + step["backward_s"] + step["optimizer_s"]
        assert 0 < parts <= step["step_time_s"]
    effective = result["effective"]
    assert {key: effective[key] for key in ("tp", "dp", "pp", "ga", "mbs", "gbs", "seq_len", "precision", "steps",
                                            "sharding", "checkpointed_layers", "compile", "attn_impl")} == {
        "tp": 1, "dp": 2, "pp": 1, "ga": 1, "mbs": 1, "gbs": 2, "seq_len": 64, "precision": "fp32", "steps": STEPS,
        "sharding": "fsdp2", "checkpointed_layers": [1], "compile": False, "attn_impl": "sdpa"}
    assert effective["parameters"] == result["model"]["parameters"]
    assert effective["data_path"] == str(data_dir / "sample_llama_text_document")
    assert result["features"]["activation_checkpointing"] == "every 2 layers"
    assert [f.message for f in validate.check_result(Loaded("fsdp", result, {})) if f.fatal] == []


def test_compile_and_ddp_are_read_back(runs):
    ddp, tp2 = runs("qwen_ddp").result, runs("tp2").result
    assert (ddp["effective"]["compile"], ddp["effective"]["compile_mode"], ddp["features"]["torch_compile"]) == \
        (True, "default", "default")
    assert (ddp["effective"]["sharding"], ddp["features"]["fsdp2"]) == ("ddp", False)
    assert (tp2["effective"]["compile"], tp2["effective"]["checkpointed_layers"]) == (False, [1])


def test_a_pipeline_parallel_request_is_refused_in_one_line(tmp_path):
    """The configuration refuses PP > 1 for fsdp before anything starts; a request that asks anyway (written by
    hand) meets the trainer's own guard."""
    request = tmp_path / "run" / "config.json"
    code = ("import sys, dataclasses; from pathlib import Path; from train.common import cli as trainer_cli; "
            "path = Path(sys.argv[1]); req = trainer_cli.planned_request('fsdp', 'llama', None, path.parent); "
            "req = dataclasses.replace(req, parallelism=dataclasses.replace(req.parallelism, pp=2, dp=1)); "
            "req.write(path)")
    env = trainer_env(tmp_path, {**BASE, "MOCK_DATA": 1})
    made = subprocess.run([sys.executable, "-c", code, str(request)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=HANG_TIMEOUT_S)
    assert made.returncode == 0, made.stderr[-2000:]
    out = subprocess.run([sys.executable, "train/train_fsdp.py", "--request", str(request), "--run-dir",
                          str(request.parent)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=HANG_TIMEOUT_S)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["train_fsdp: PP=2: framework fsdp has no pipeline parallelism; "
                                                 "give a strategy with PP=1"]
