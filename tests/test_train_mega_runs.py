"""The mega trainer, trained for real on the CPU (torchrun, gloo, tiny models, a small prepared dataset).

Each run is a few steps of SL 64, so the layouts can be compared step by step: every layout of one
seed starts from the same weights and sees the same samples, so TP, PP and GA change the losses
only by rounding, and a rerun repeats them bit for bit. The runs train in the CPU's own precision
(fp32, or bf16 where the CPU has bf16 instructions); one run asks for bf16 where it is emulated.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from evaluate import validate
from evaluate.collect import Loaded
from evaluate.logs.parse import parse_logs
from tests.fixtures.train.data_dir import make_data_dir
from tests.fixtures.train.judged import judged_result
from tests.fixtures.train.shared_runs import data_dir_of, shared_run
from tests.shell_harness import HANG_TIMEOUT_S
from utils.config import KNOBS
from utils.spec.fairness import IDENTITY_KEYS
from utils.machine.hardware import cpu_native_bf16
from utils.machine.platform_env import platform_env
from utils.spec.result import schema_errors

ROOT = Path(__file__).resolve().parent.parent
LR, MIN_LR = 1e-3, 1e-4
# Every layout of a 4-step run: SL 64, warm-up 2 steps, GBS 2.
BASE = dict(SL=64, TRAIN_ITERS=4, WARMUP_STEPS=2, WARMUP_SKIP=1, LR=LR, MIN_LR=MIN_LR, MBS=2, TP=1, PP=1, DP=1, GA=1)
LEARN_STEPS = 8
EVAL = dict(EVAL_INTERVAL=2, EVAL_TOKENS=256)  # held-out validation after steps 2 and 4: 2 global batches
# stop_at_target's validation losses without the target, measured: 11.85, 11.62, 11.49, 11.44 after steps 2, 4, 6, 8 (bf16; fp32 within 0.05)
TARGET_LOSS = 11.55
AVX2_ONLY = Path(__file__).parent / "fixtures" / "train" / "cpuinfo_avx2_only"  # a CPU without bf16 instructions
BF16_TOLERANCE = 0.05  # absolute, on losses near 11.7: a bf16 model against the same model in fp32
LAYOUT_TOLERANCE = 2e-3  # absolute, on losses near 11.7: rounding of a different split of the same sums (bf16 at worst)


@dataclass
class Run:
    """A finished trainer run: its exit status, console output and run directory (its result.json, as the judge
    writes it from the trainer's records)."""

    directory: Path
    returncode: int
    console: str

    @property
    def steps(self) -> list[dict]:
        path = self.directory / "steps.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    result = property(lambda self: judged_result(self.directory))

    def series(self, key: str) -> list:
        return [step[key] for step in self.steps]


def trainer_env(data_dir: Path, knobs: dict) -> dict:
    """The caller's environment without configuration knobs, plus the CPU platform's environment (as the
    launcher exports it) and the run's knobs."""
    env = {k: v for k, v in os.environ.items() if k not in KNOBS and not k.startswith(("CPU_", "TPRIMAT_"))}
    env.update(platform_env("cpu"))
    env.update(PLATFORM="cpu", TPRIMAT_DETECTED_PLATFORM="cpu", TPRIMAT_DETECTED_GPUS="0", HF_HUB_OFFLINE="1",
               DATA_DIR=str(data_dir), NNODES="1", PYTHONWARNINGS="ignore")
    env.update({key: str(value) for key, value in knobs.items()})
    env["GPUS_PER_NODE"] = str(int(env["TP"]) * int(env["PP"]) * int(env["DP"]))
    return env


def train(directory: Path, data_dir: Path, *, model: str = "llama", args: tuple[str, ...] = (), **knobs) -> Run:
    """Run train/train_mega.py as the launcher does (torchrun, one process per rank; a single process
    is started directly, which the trainer supports too) and wait for it."""
    settings = {**BASE, **knobs}
    nproc = settings["TP"] * settings["PP"] * settings["DP"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] \
        if nproc > 1 else [sys.executable]
    out = subprocess.run([*launcher, "train/train_mega.py", "--model", model, "--run-dir", str(directory), *args],
                         cwd=ROOT, env=trainer_env(data_dir, settings), capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    return Run(directory, out.returncode, out.stdout + out.stderr)


def write_request(path: Path, data_dir: Path, *, model: str = "llama", **knobs) -> Path:
    """The request train.plan builds from the configuration (knobs as train() gives them), written as the launcher
    writes config.json, for a run named after path's directory."""
    code = ("import sys; from pathlib import Path; from train.train_mega import planned_request; "
            "path = Path(sys.argv[2]); planned_request(sys.argv[1], None, path.parent).write(path)")
    out = subprocess.run([sys.executable, "-c", code, model, str(path)], cwd=ROOT,
                         env=trainer_env(data_dir, {**BASE, **knobs}), capture_output=True, text=True,
                         timeout=HANG_TIMEOUT_S)
    assert out.returncode == 0, out.stderr[-3000:]
    return path


def launched_with_its_request(directory: Path, data_dir: Path, **knobs) -> Run:
    """The launcher's way (--request RUN_DIR/config.json, written first) under environment knobs the request must
    override: read, the configuration would refuse LR, and TRAIN_ITERS and SEED would change the run."""
    request = write_request(directory / "config.json", data_dir, **knobs)
    return train(directory, data_dir, args=("--request", str(request)), TRAIN_ITERS=3, SEED=7, LR="not-a-number")


LAYOUTS = {
    "base": EVAL,
    "rerun_profiled": dict(**EVAL, PROFILING="true", PROFILE_START_STEP=2, PROFILE_END_STEP=3),
    "tp2": dict(**EVAL, TP=2),
    "pp2_ga2": dict(**EVAL, PP=2, MBS=1, GA=2),  # 1F1B interleaves two microbatches (test_train_mega_breakdown.py)
    "ga2_from_request": dict(**EVAL, MBS=1, GA=2, launch=launched_with_its_request),
    "tuned_dp2": dict(**EVAL, MBS=1, DP=2, FAIRNESS="tuned"),
    "learn_llama": dict(DP=2, TRAIN_ITERS=LEARN_STEPS, PYTHONWARNINGS="default"),  # warnings shown, as launched
    "stop_at_target": dict(**EVAL, TRAIN_ITERS=LEARN_STEPS, TARGET_LOSS=TARGET_LOSS, model="qwen"),
    "nan": dict(DP=2, MBS=1, TRAIN_ITERS=3, model="qwen", args=("--inject-nan-at-step", "2")),
    "bf16_emulated": dict(**EVAL, PRECISION="bf16", TRAIN_ITERS=2, WARMUP_STEPS=1, TPRIMAT_CPUINFO=str(AVX2_ONLY)),
}


def trained(tmp_path_factory, name: str) -> Run:
    """The run of LAYOUTS called name, trained once per session for every file that reads it (shared_runs.py)."""
    knobs = dict(LAYOUTS[name])
    launch = knobs.pop("launch", train)
    return Run(*shared_run(tmp_path_factory, f"mega-{name}", lambda directory, data: launch(directory, data, **knobs)))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return make_data_dir(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each named run of LAYOUTS, trained once on first use."""
    return functools.partial(trained, tmp_path_factory)


def assert_trained(run: Run, steps: int) -> None:
    assert run.returncode == 0, run.console[-3000:]
    assert run.result["run"]["status"] == "ok" and len(run.steps) == steps


def test_tiny_models_learn_on_the_sample_data(runs):
    run = runs("learn_llama")
    assert_trained(run, LEARN_STEPS)
    losses = run.series("loss")
    assert sum(losses[-3:]) / 3 < losses[0] - 0.3, losses


def test_a_run_with_a_target_loss_stops_at_the_first_evaluation_that_reaches_it(runs):
    run = runs("stop_at_target")
    assert_trained(run, 6)  # of 8: the evaluation after step 6 is the first at or below the target
    result = run.result
    points = result["evaluation"]["points"]
    assert points["step"] == [2, 4, 6] and points["loss"][-1] <= TARGET_LOSS < points["loss"][-2]
    assert points["loss"] == sorted(points["loss"], reverse=True)  # the held-out loss falls: the model learns
    to_train = result["time_to_train"]
    assert (to_train["reached"], to_train["stopped_at_target"], to_train["step"], to_train["tokens"]) == \
        (True, True, 6, 6 * 2 * 64)
    assert to_train["wall_s"] == points["wall_s"][-1] > to_train["train_time_s"] == points["train_time_s"][-1]
    assert result["run"]["steps_completed"] == 6 and result["training"]["steps"] == LEARN_STEPS
    assert [f.message for f in validate.check_result(Loaded("target", result, {})) if f.fatal] == []


def test_data_parallel_replicas_stay_identical(runs):
    effective = runs("learn_llama").result["effective"]
    assert effective["dp"] == 2 and effective["dp_replicas_identical"] is True


def test_a_rerun_with_the_same_seed_repeats_every_loss_exactly(runs):
    base, rerun = runs("base"), runs("rerun_profiled")
    assert_trained(base, 4)
    assert_trained(rerun, 4)
    assert rerun.series("loss") == base.series("loss")
    assert rerun.series("grad_norm") == base.series("grad_norm")


@pytest.mark.parametrize("name, readback", [
    ("tp2", {"tp": 2, "sequence_parallel": True}),
    ("pp2_ga2", {"pp": 2, "ga": 2, "mbs": 1, "gbs": 2}),
    ("ga2_from_request", {"ga": 2, "mbs": 1, "gbs": 2}),
])
def test_other_layouts_give_the_same_losses(runs, name, readback):
    base, other = runs("base"), runs(name)
    assert_trained(other, 4)
    assert other.series("loss") == pytest.approx(base.series("loss"), abs=LAYOUT_TOLERANCE)
    assert_same_evaluation(other, base)
    effective = other.result["effective"]
    assert {key: effective[key] for key in readback} == readback


def assert_same_evaluation(run: Run, base: Run) -> None:
    """The same validation documents and samples after the same steps, the losses equal up to the layout's
    rounding, as the training losses are (a TP or PP split reduces the loss's sum over other ranks)."""
    evaluation, expected = run.result["evaluation"], base.result["evaluation"]
    assert evaluation["split"] == expected["split"] and evaluation["split"]["documents"] == 10
    assert evaluation["points"]["step"] == [2, 4] and evaluation["iters"] == 2 and evaluation["tokens"] == 256
    assert evaluation["points"]["loss"] == pytest.approx(expected["points"]["loss"], abs=LAYOUT_TOLERANCE)
    assert all(math.isfinite(loss) for loss in evaluation["points"]["loss"])


def test_learning_rate_follows_megatron_lm_warmup_then_cosine(runs):
    """Megatron-LM's order (Primus's too): step k runs at the schedule's value after k-1 steps."""
    lrs = runs("base").series("lr")  # 4 steps, warm-up 2
    assert lrs[0] == 0.0 and lrs[1] == pytest.approx(LR / 2)  # step 1 at LR 0
    assert lrs[2] == pytest.approx(LR)  # the end of the warm-up
    assert lrs[3] == pytest.approx(MIN_LR + (LR - MIN_LR) * 0.5 * (1 + math.cos(math.pi * 1 / 2)))


def test_result_is_valid_and_carries_the_data_fingerprints_and_the_read_back_settings(runs):
    run = runs("base")
    data_dir = data_dir_of(run.directory)
    result = run.result
    assert schema_errors(result) == []
    manifest = json.loads((data_dir / "sample_llama_text_document.manifest.json").read_text())
    training = result["training"]
    assert training["dataset_fingerprint"] == manifest["fingerprint"]
    assert training["tokenizer_fingerprint"] == manifest["tokenizer"]["sha256"]
    assert training["mock_data"] is False and result["effective"]["mock_data"] is False
    assert result["effective"]["data_path"] == str(data_dir / "sample_llama_text_document")
    effective = result["effective"]
    assert (effective["tp"], effective["pp"], effective["dp"], effective["ga"], effective["mbs"],
            effective["seq_len"]) == (1, 1, 1, 1, 2, 64)
    assert effective["parameters"] == result["model"]["parameters"]
    assert result["features"]["layer_spec"] == "local"
    assert result["series"]["loss"] == run.series("loss")
    assert result["performance"]["tokens_per_step"] == 2 * 64 == run.steps[0]["tokens"]
    # the workload identity as recorded and as megatron-core holds it (the spec profile by default)
    assert {key: training[key] for key in IDENTITY_KEYS} == {
        "fairness_profile": "spec", "init_method_std": 0.02, "padded_vocab_size": 128256, "eod_mask_loss": False,
        "dataloader_type": "single", "lr_warmup_convention": "megatron", "check_for_nan_in_grad": False,
        "fp8_recipe": None, "validation_split": "95,5,0"}
    assert {key: effective[key] for key in ("init_method_std", "padded_vocab_size", "eod_mask_loss",
                                            "check_for_nan_in_grad", "overlap_grad_reduce", "overlap_param_gather",
                                            "grad_reduce_in_fp32")} == {
        "init_method_std": 0.02, "padded_vocab_size": 128256, "eod_mask_loss": False, "check_for_nan_in_grad": False,
        "overlap_grad_reduce": False, "overlap_param_gather": False, "grad_reduce_in_fp32": False}
    assert [f.message for f in validate.check_result(Loaded("base", result, {})) if f.fatal] == []


def test_evaluations_are_kept_in_evals_jsonl_and_out_of_every_step_time(runs):
    run = runs("base")
    evaluation = run.result["evaluation"]
    kept = [json.loads(line) for line in (run.directory / "evals.jsonl").read_text().splitlines()]
    assert {key: [point[key] for point in kept] for key in evaluation["points"]} == evaluation["points"]
    assert evaluation["split"]["fingerprint"].startswith("sha256:") and evaluation["split"]["percent"] == 5
    assert evaluation["points"]["tokens"] == [2 * 2 * 64, 4 * 2 * 64]
    times = run.series("step_time_s")
    assert evaluation["points"]["train_time_s"] == pytest.approx([sum(times[:2]), sum(times)], rel=1e-9)
    assert evaluation["time_s"] == pytest.approx(sum(evaluation["points"]["eval_time_s"]))
    # wall_s counts both evaluations, the step times none: were the first inside step 3's time, wall_s would fall
    # short of the step times plus both evaluations by its length
    assert evaluation["points"]["wall_s"][1] >= evaluation["points"]["train_time_s"][1] + evaluation["time_s"]
    assert run.console.count("validation loss at iteration") == 2


def test_a_cpu_worker_leaves_the_missing_libraries_to_the_matrix_and_the_result(runs):
    """No Transformer Engine and Apex warnings from the workers (train.matrix says it once: utils/missing_stacks.py);
    the result still says that TE was not used."""
    run = runs("learn_llama")  # two workers
    assert_trained(run, LEARN_STEPS)
    assert "not installed" not in run.console, run.console[:3000]
    features = run.result["features"]
    assert features["layer_spec"] == "local" and not features["attention"].startswith("transformer_engine")


def test_the_tuned_profile_overlaps_data_parallel_communication_with_the_same_losses(runs):
    base, tuned = runs("base"), runs("tuned_dp2")
    assert_trained(tuned, 4)
    assert tuned.series("loss") == pytest.approx(base.series("loss"), abs=LAYOUT_TOLERANCE)
    assert_same_evaluation(tuned, base)  # the overlapped parameter gather finished before each evaluation
    effective = tuned.result["effective"]
    assert (effective["overlap_grad_reduce"], effective["overlap_param_gather"], effective["grad_reduce_in_fp32"],
            effective["dp_replicas_identical"]) == (True, True, True, True)
    assert tuned.result["training"]["fairness_profile"] == "tuned"


def test_the_cpu_trains_in_its_own_precision_and_records_it(runs):
    result = runs("base").result
    native = cpu_native_bf16()
    assert result["training"]["precision"] == result["effective"]["precision"] == ("bf16" if native else "fp32")
    assert result["features"]["cpu_native_bf16"] is native


def test_bf16_on_a_cpu_without_bf16_instructions_trains_and_warns_with_the_measured_factor(runs):
    run, base = runs("bf16_emulated"), runs("base")
    assert_trained(run, 2)
    assert run.result["effective"]["precision"] == "bf16" and run.result["features"]["cpu_native_bf16"] is False
    warning = re.search(r"PRECISION=bf16 on a CPU without bf16 instructions: a bf16 matrix product measured "
                        r"(\d+)x slower than fp32 here", run.console)
    assert warning and run.console.count(warning.group(0)) == 1, run.console[-2000:]
    assert any(warning.group(0) in note for note in run.result["warnings"])
    assert run.series("loss")[0] == pytest.approx(base.series("loss")[0], abs=BF16_TOLERANCE)  # the same first batch
    assert run.result["evaluation"]["points"]["step"] == [2]  # after the last step


def test_each_worker_records_its_peak_host_memory(runs):
    result = runs("learn_llama").result  # two workers
    per_worker = result["memory"]["host_rss_gib_per_worker"]
    assert len(per_worker) == 2 and all(0.1 < gib < 16 for gib in per_worker)
    assert result["memory"]["peak_host_rss_gib"] == max(per_worker)
    series = result["series"]["mem_host_rss_gib"]
    assert series == sorted(series) and series[-1] <= max(per_worker)  # a peak so far never falls


def test_console_shows_megatron_lines_that_parse_to_the_recorded_steps(runs, tmp_path):
    run = runs("base")
    log = tmp_path / "console.log"
    log.write_text(run.console)
    parsed = parse_logs([log])
    assert parsed.framework == "mega"
    assert [r["step"] for r in parsed.records] == [1, 2, 3, 4]
    assert [r["loss"] for r in parsed.records] == pytest.approx(run.series("loss"), rel=1e-6)


def test_profiling_writes_a_chrome_trace_and_a_top_kernels_table(runs):
    profile = runs("rerun_profiled").directory / "profile"
    assert "traceEvents" in json.loads((profile / "trace_rank0.json").read_text())
    assert "steps 2-3" in (profile / "top_kernels.txt").read_text()


def test_a_nan_loss_fails_the_run_and_keeps_the_steps_before_it(runs):
    run = runs("nan")
    assert run.returncode != 0
    assert [s["nan"] for s in run.steps] == [0, 1] and run.steps[1]["loss"] is None  # both ranks stopped
    assert math.isfinite(run.steps[0]["loss"])
    result = run.result
    assert result["run"]["status"] == "failed" and result["run"]["exit_code"] == 1
    assert result["run"]["steps_completed"] == 2 and "not finite" in result["run"]["error_excerpt"]


@pytest.mark.parametrize("verified", [None, False])
def test_missing_or_unverified_data_stops_before_the_model_is_built(tmp_path, verified):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    if verified is not None:
        make_data_dir(data_dir, model_keys=("llama",), documents=5, verified=verified)
    run = train(tmp_path / "run", data_dir)
    assert run.returncode == 2
    assert "./shell/run_data.sh" in run.console and "Traceback" not in run.console
    assert run.result["run"]["status"] == "failed" and run.steps == []


def test_mock_data_is_only_used_when_asked_for_and_says_so(tmp_path):
    run = train(tmp_path / "run", tmp_path / "no-data", MOCK_DATA=1, TRAIN_ITERS=2, WARMUP_STEPS=1)
    assert_trained(run, 2)
    result = run.result
    assert result["training"]["mock_data"] is True and result["training"]["dataset"] is None
    assert result["effective"]["dataset_class"] == "MockGPTDataset"
    assert any("MOCK DATA" in warning for warning in result["warnings"])


def test_a_trainer_given_its_request_takes_every_setting_from_it_not_from_the_environment(runs):
    """The launcher's way (--request RUN_DIR/config.json): the configuration is not even read (a knob it would
    refuse changes nothing), and the knobs of the environment no longer count (launched_with_its_request)."""
    run = runs("ga2_from_request")
    assert_trained(run, 4)
    result = run.result
    assert (result["training"]["steps"], result["training"]["seed"], result["training"]["lr"],
            result["run"]["id"]) == (4, 42, LR, "run")
    assert {key: result["effective"][key] for key in ("mbs", "ga", "gbs", "seed")} == {"mbs": 1, "ga": 2, "gbs": 2,
                                                                                        "seed": 42}
    assert result["parallelism"]["distributed_optimizer"] is True and result["parallelism"]["nnodes"] == 1


@pytest.mark.parametrize("args, message", [
    (("--model", "qwen"), "the request is for model llama, not qwen"),
    (("--strategy", "balanced"), "the request is for strategy custom, not balanced"),
])
def test_a_command_line_naming_another_run_than_its_request_is_refused_in_one_line(tmp_path, data_dir, args,
                                                                                   message):
    request = write_request(tmp_path / "config.json", data_dir)
    out = subprocess.run([sys.executable, "train/train_mega.py", "--request", str(request), "--run-dir",
                          str(tmp_path / "run"), *args], cwd=ROOT, env=trainer_env(data_dir, BASE),
                         capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [f"train_mega: {request}: {message}; give "
                                                                       "the matching request or leave the option out"]
    assert not (tmp_path / "run").exists()


def test_a_request_that_is_no_request_is_one_line(tmp_path, data_dir):
    (tmp_path / "config.json").write_text("{}")
    out = subprocess.run([sys.executable, "train/train_mega.py", "--request", str(tmp_path / "config.json"),
                          "--run-dir", str(tmp_path / "run")], cwd=ROOT, env=trainer_env(data_dir, BASE),
                         capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith(f"train_mega: {tmp_path / 'config.json'}: no 'identity' section")


def test_a_run_directory_is_never_reused(tmp_path, data_dir):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "steps.jsonl").write_text("")
    run = train(tmp_path / "run", data_dir)
    assert run.returncode == 2 and "already holds a run" in run.console
