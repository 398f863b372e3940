"""The run matrix from the shell: wrappers, the launcher and shell/train.sh on faked GPU nodes.

GPU training itself cannot run here, so Primus is replaced by a stand-in checkout
(tests/fixtures/train_matrix/primus: a release/v26.5 checkout's shipped configs and presets, and a primus-cli
that prints Primus-style logs); everything of TPrimat's around it runs for real.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.fixtures.train_matrix.shell import alive, machine, prepared_data, read, request, run_dirs
from tests.shell_harness import HANG_TIMEOUT_S, REPO
from utils import frameworks
from utils.machine.platform_env import platform_env
from utils.config import PLATFORMS
from utils.spec import stacks

WRAPPERS = sorted(p.name for p in (REPO / "train").glob("train_*_*_*.sh"))
FRAMEWORK_COMMAND = {"mega": "train/train_mega.py", "nemo": "train.train_nemo", "prim": "./primus-cli",
                     "fsdp": "train/train_fsdp.py", "autotp": "train/train_autotp.py"}
SHORT_RUN = {"TRAIN_ITERS": "6", "WARMUP_STEPS": "1", "WARMUP_SKIP": "2"}
WRAPPED_MODELS = ("llama", "qwen")  # the benchmarked pair; a further model runs through train/launch.sh alone


def test_every_wrapper_is_a_shortcut_to_a_framework_its_platform_runs_and_a_benchmarked_model():
    """Wrappers are shortcuts, not registration: a framework is its registry entry, and runs through
    train/launch.sh without one (tests/test_framework_toy.py)."""
    assert set(WRAPPERS) <= {f"train_{platform}_{framework}_{model}.sh" for platform in PLATFORMS
                             for framework in frameworks.on(platform) for model in WRAPPED_MODELS}
    assert {name.split("_")[2] for name in WRAPPERS} == {"mega", "prim", "nemo", "fsdp", "autotp"}


@pytest.mark.parametrize("script", WRAPPERS)
def test_each_wrapper_hands_its_platform_framework_and_model_to_the_launcher(script):
    platform, framework, model = script.removesuffix(".sh").split("_")[1:]
    lines = (REPO / "train" / script).read_text().splitlines()
    assert lines[1] == f"# usage: bash train/{script} [--run-dir DIR] [--repeat N]"
    assert lines[-1] == f'exec bash "$(dirname "${{BASH_SOURCE[0]}}")/launch.sh" {platform} {framework} {model} "$@"'


NEMO_STACK = {"nemo": {"STACK": "nemo-25.04"}}  # NeMo 2's recipes run on the 25.x image only (utils/spec/stacks.py)


# One wrapper per framework runs for real (its dry run): the rest differ from these only in the words checked above.
@pytest.mark.parametrize("script", ["train_cpu_mega_llama.sh", "train_nvd_nemo_qwen.sh", "train_amd_prim_llama.sh",
                                    "train_nvd_fsdp_qwen.sh", "train_amd_autotp_llama.sh"])
def test_each_wrapper_launches_its_platform_framework_and_model(tmp_path, script):
    platform, framework, model = script.removesuffix(".sh").split("_")[1:]
    fake = machine(tmp_path)
    result = fake.run(f"train/{script}", DRY_RUN="1", **NEMO_STACK.get(framework, {}))
    assert result.returncode == 0, result.output
    (run_dir,) = run_dirs(tmp_path / "output")
    identity = request(run_dir).identity
    assert (identity.platform, identity.framework, identity.model) == (platform, framework, model)
    assert FRAMEWORK_COMMAND[framework] in read(run_dir / "launch.json")["command"]
    assert not (run_dir / "train.log").exists()


def test_wrappers_are_thin_and_share_one_launcher():
    for script in WRAPPERS:
        code = [line for line in (REPO / "train" / script).read_text().splitlines() if not line.startswith("#")]
        assert len(code) == 1 and "launch.sh" in code[0], script


def test_a_wrapper_refuses_a_machine_of_another_platform(tmp_path):
    fake = machine(tmp_path)
    result = fake.run("train/train_nvd_nemo_llama.sh")
    assert result.returncode == 2
    assert "PLATFORM=nvd" in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "output").exists() or run_dirs(tmp_path / "output") == []


def unverified_data(data_dir, dataset, models):
    """Data whose manifest says data.verify did not pass."""
    prepared_data(data_dir, dataset, models)
    for model in models:
        (data_dir / f"{dataset}_{model}_text_document.manifest.json").write_text('{"verified": false}')


@pytest.mark.parametrize("script, gpus, data", [
    ("train_amd_prim_llama.sh", {"amd": 8}, None),
    ("train_nvd_nemo_qwen.sh", {"nvidia": 8}, unverified_data),
    ("train_nvd_mega_llama.sh", {"nvidia": 8}, None),
])
def test_a_single_run_refuses_data_without_a_verified_manifest_and_leaves_nothing(tmp_path, script, gpus, data):
    platform, framework, model = script.removesuffix(".sh").split("_")[1:]
    fake = machine(tmp_path, **gpus)
    if data:
        data(tmp_path / "data", "bc", [model])
    run_dir = tmp_path / "output" / "set" / f"{framework}-{model}"
    result = fake.run(f"train/{script}", "--run-dir", str(run_dir), **NEMO_STACK.get(framework, {}))
    assert result.returncode == 2, result.output
    (error,) = result.stderr.splitlines()
    assert error.startswith("[tprimat] error: data not prepared: ") and "./shell/run_data.sh" in error
    assert not run_dir.exists() and not (tmp_path / "output").exists()


def test_a_dry_run_without_data_still_prints_the_command_with_a_warning(tmp_path):
    fake = machine(tmp_path, amd=8)
    result = fake.run("train/train_amd_prim_llama.sh", DRY_RUN="1")
    assert result.returncode == 0, result.output
    assert "command: " in result.stdout
    (warning,) = [line for line in result.stderr.splitlines() if "warning" in line]
    assert "dry run: data not prepared: llama" in warning and "./shell/run_data.sh" in warning


def test_mock_data_needs_no_prepared_data(tmp_path):
    fake = machine(tmp_path, amd=8)
    result = fake.run("train/train_amd_prim_llama.sh", DRY_RUN="1", MOCK_DATA="1")
    assert result.returncode == 0, result.output
    assert "data not prepared" not in result.output
    assert request(run_dirs(tmp_path / "output")[0]).data.mock_data


@pytest.mark.parametrize("platform, vendor_file", [("nvd", "nemo_settings.json"), ("amd", "primus_experiment.yaml")])
def test_dry_run_sweep_lists_every_run_and_writes_its_configuration(tmp_path, platform, vendor_file):
    fake = machine(tmp_path, **{"nvidia" if platform == "nvd" else "amd": 8})
    counterpart = "nemo" if platform == "nvd" else "prim"
    result = fake.run("shell/train.sh", DRY_RUN="1", STRATEGY="all", FRAMEWORK=f"mega,{counterpart}",
                      STACK="nemo-25.04")
    assert result.returncode == 0, result.output
    dirs = run_dirs(tmp_path / "output")
    assert len(dirs) == 20 and len({d.parent for d in dirs}) == 1
    assert (dirs[0].parent / "system.json").exists()
    for run_dir in dirs:
        lay = request(run_dir).parallelism
        layout = f"TP{lay.tp} PP{lay.pp} DP{lay.dp} GA{lay.ga}"
        assert f"{run_dir.name}  " in result.stdout and layout in result.stdout
        assert "command: " in result.stdout
        assert not (run_dir / "train.log").exists()
    assert sum((d / vendor_file).exists() for d in dirs) == 10
    assert "nothing was trained" in result.stderr


@pytest.mark.parametrize("platform, fairness, precision, stack", [("amd", "spec", "bf16", "primus-v26.5"),
                                                                 ("nvd", "tuned", "fp8", "nemo-25.04")])
def test_a_dry_run_writes_the_fairness_profile_and_the_workload_into_every_framework_s_configuration(
        tmp_path, platform, fairness, precision, stack):
    import yaml

    fake = machine(tmp_path, **{"nvidia" if platform == "nvd" else "amd": 8})
    result = fake.run("shell/train.sh", DRY_RUN="1", MODELS="llama", FAIRNESS=fairness, PRECISION=precision,
                      FP8_RECIPE="tensorwise", STACK=stack)  # the recipe torchao's float8 (fsdp) has too
    assert result.returncode == 0, result.output
    runs = {request(d).identity.framework: d for d in run_dirs(tmp_path / "output")}
    # DeepSpeed AutoTP has no FP8 (torchtitan's bf16 only is mapped); neither stack's row lists torchtitan (nemo-25.04
    # predates it, primus-v26.5's torch is too old for it)
    native = {"fsdp"} if precision == "fp8" else {"fsdp", "autotp"}
    assert set(runs) == ({"mega", "prim"} if platform == "amd" else {"mega", "nemo"}) | native
    tuned = fairness == "tuned"
    for framework, run_dir in runs.items():
        config = request(run_dir).fairness
        assert config.profile == fairness
        assert (config.table["overlap_grad_reduce"], config.table["grad_reduce_in_fp32"],
                config.table["check_for_nan_in_grad"]) == (tuned, tuned, False)
        assert config.workload == {"init_method_std": 0.02, "eod_mask_loss": False, "dataloader_type": "single",
                                      "padded_vocab_size": 128256,
                                      "lr_warmup_convention": {"nemo": "nemo-cosine-annealing",
                                                               "torchtitan": "torchtitan"}.get(framework, "megatron")}
    if platform == "amd":
        o = yaml.safe_load((runs["prim"] / "primus_experiment.yaml").read_text())["modules"]["pre_trainer"]["overrides"]
        assert (o["eod_mask_loss"], o["init_method_std"], o["dataloader_type"], o["make_vocab_size_divisible_by"]) == \
            (False, 0.02, "single", 128256)  # Primus ships true, 0.008, cyclic and 128
        assert (o["overlap_grad_reduce"], o["overlap_param_gather"], o["accumulate_allreduce_grads_in_fp32"],
                o["check_for_nan_in_loss_and_grad"]) == (False, False, False, False)
    else:
        settings = read(runs["nemo"] / "nemo_settings.json")
        ddp, plugin = settings["ddp"], settings["precision"]["set"]
        assert (ddp["overlap_grad_reduce"], ddp["overlap_param_gather"], ddp["grad_reduce_in_fp32"],
                ddp["check_for_nan_in_grad"]) == (True, True, True, False)  # the recipes check for NaN
        assert (plugin["grad_reduce_in_fp32"], plugin["fp8"], plugin["fp8_recipe"], plugin["first_last_layers_bf16"]) \
            == (True, "hybrid", "tensorwise", False)
        assert settings["set"]["model.config.init_method_std"] == 0.02
        assert settings["data"]["eod_mask_loss"] is False


def test_dry_run_in_the_container_prints_the_docker_invocation(tmp_path):
    fake = machine(tmp_path, nvidia=8)
    result = fake.run("shell/train.sh", DRY_RUN="1", FRAMEWORK="nemo", MODELS="qwen", TPRIMAT_RUNTIME="docker",
                      STACK="nemo-25.04")
    assert result.returncode == 0, result.output
    line = next(l for l in result.stderr.splitlines() if "from the host:" in l)
    assert "docker run" in line and "--gpus all" in line and "tprimat:nvd-nemo-25.04" in line
    assert "bash train/launch.sh nvd nemo qwen --run-dir " in line


def test_a_primus_run_ends_with_its_log_result_and_read_back_settings(tmp_path):
    fake = machine(tmp_path, amd=8)
    prepared_data(tmp_path / "data", "bc", ["llama"])
    result = fake.run("train/train_amd_prim_llama.sh", STRATEGY="balanced", **SHORT_RUN)
    assert result.returncode == 0, result.output
    (run_dir,) = run_dirs(tmp_path / "output")
    log = (run_dir / "train.log").read_text()
    # rank 0's forwarded line and, with the last local rank shown (LOCAL_RANKS), the last rank's own: one step
    assert log.count("iteration        6/       6") == 2
    outcome = read(run_dir / "result.json")
    assert outcome["run"]["status"] == "ok" and outcome["run"]["steps_completed"] == 6
    assert (outcome["effective"]["tp"], outcome["effective"]["mock_data"]) == (2, False)
    assert read(run_dir / "launch.json")["status"] == "ok"
    # the default stack's Primus run environment, which mega, fsdp and autotp on AMD run with too, its own values in it
    row = stacks.default("amd")
    assert outcome["effective"]["environment"] == platform_env("amd", "prim", row.name)
    assert row.env.items() <= outcome["effective"]["environment"].items()


def test_a_two_node_run_keeps_each_nodes_log_and_extracts_from_all(tmp_path):
    fake = machine(tmp_path, amd=8)
    prepared_data(tmp_path / "data", "bc", ["llama"])
    run_dir = tmp_path / "output" / "set" / "prim-llama"
    env = {**fake.env, "NNODES": "2", "DP": "16", "GA": "4", "RUN_SET_DIR": str(run_dir.parent), **SHORT_RUN}
    script = ["bash", str(fake.root / "train/train_amd_prim_llama.sh"), "--run-dir", str(run_dir)]
    other = subprocess.Popen(script, env={**env, "NODE_RANK": "1"}, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    first = subprocess.run(script, env={**env, "NODE_RANK": "0"}, capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    assert other.wait(timeout=HANG_TIMEOUT_S) == 0 and first.returncode == 0, first.stdout + first.stderr
    assert read(run_dir / "node1" / "launch.json")["status"] == "ok"
    assert not (run_dir / "node1" / "config.json").exists() and not (run_dir / "node1" / "result.json").exists()
    outcome = read(run_dir / "result.json")
    assert outcome["run"]["log_files"] == [str(run_dir / "train.log"), str(run_dir / "node1" / "train.log")]
    assert outcome["parallelism"]["num_gpus"] == 16 and outcome["run"]["status"] == "ok"


def test_mock_data_in_the_primus_log_fails_the_run(tmp_path):
    fake = machine(tmp_path, amd=8)
    prepared_data(tmp_path / "data", "bc", ["llama"])
    result = fake.run("train/train_amd_prim_llama.sh", FAKE_PRIMUS_MOCK="1", **SHORT_RUN)
    assert result.returncode == 1
    (run_dir,) = run_dirs(tmp_path / "output")
    outcome = read(run_dir / "result.json")
    assert outcome["run"]["status"] == "failed" and "MOCK DATA" in outcome["run"]["error_excerpt"]
    assert "MOCK DATA" in result.stderr


def test_a_setting_that_did_not_apply_fails_the_run_naming_it(tmp_path):
    fake = machine(tmp_path, amd=8)
    prepared_data(tmp_path / "data", "bc", ["qwen"])
    result = fake.run("train/train_amd_prim_qwen.sh", STRATEGY="balanced", FAKE_PRIMUS_TP="1", **SHORT_RUN)
    assert result.returncode == 1
    (run_dir,) = run_dirs(tmp_path / "output")
    excerpt = read(run_dir / "result.json")["run"]["error_excerpt"]
    assert "tp is 1 in the framework, 2 requested" in excerpt


def test_a_failed_run_is_recorded_and_the_matrix_goes_on(tmp_path):
    fake = machine(tmp_path, amd=8)
    prepared_data(tmp_path / "data", "bc")
    result = fake.run("shell/train.sh", FRAMEWORK="prim", FAKE_PRIMUS_FAIL="llama", **SHORT_RUN)
    assert result.returncode == 1
    llama, qwen = run_dirs(tmp_path / "output")
    failed = read(llama / "result.json")
    assert failed["run"]["status"] == "failed" and failed["run"]["exit_code"] == 1
    assert "out of memory" in failed["run"]["error_excerpt"]
    assert (failed["training"]["fairness_profile"], failed["training"]["init_method_std"]) == ("spec", 0.02)
    assert read(qwen / "result.json")["run"]["status"] == "ok"
    summary = [line.split() for line in result.stdout.splitlines() if line.startswith(("prim-llama", "prim-qwen"))]
    assert [row[:2] for row in summary] == [["prim-llama", "failed"], ["prim-qwen", "ok"]]


def test_ctrl_c_stops_the_run_and_its_children_and_keeps_what_finished(tmp_path):
    fake = machine(tmp_path, amd=8)
    prepared_data(tmp_path / "data", "bc")
    env = {**fake.env, "FRAMEWORK": "prim", "MODELS": "qwen,llama", "FAKE_PRIMUS_HANG": "llama", **SHORT_RUN}
    proc = subprocess.Popen(["bash", str(fake.root / "shell/train.sh")], cwd=fake.root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    log = None
    deadline = time.monotonic() + 120
    while log is None and time.monotonic() < deadline:
        time.sleep(0.2)
        log = next((p for p in (tmp_path / "output").glob("*/prim-llama/train.log") if "fake worker" in p.read_text()),
                   None)
    assert log is not None, "the second run never reached its second step"
    worker = int(log.read_text().split("fake worker ")[1].split()[0])
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
    output = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 130, output
    qwen, llama = log.parent.parent / "prim-qwen", log.parent
    assert read(qwen / "result.json")["run"]["status"] == "ok"
    assert read(llama / "launch.json")["status"] == "interrupted"
    outcome = read(llama / "result.json")
    assert outcome["run"]["status"] == "incomplete" and outcome["run"]["steps_completed"] == 2
    assert not alive(worker)
    assert "prim-llama" in output and "interrupted" in output


def test_a_megatron_bridge_dry_run_on_nvidia_plans_each_recipe_and_writes_its_settings_and_model_config(tmp_path):
    fake = machine(tmp_path, nvidia=8)
    result = fake.run("shell/train.sh", DRY_RUN="1", FRAMEWORK="mbridge", MODELS="llama,qwen,mistral")
    assert result.returncode == 0, result.output
    runs = {request(d).identity.model: d for d in run_dirs(tmp_path / "output")}
    assert set(runs) == {"llama", "qwen"}  # Megatron-Bridge has no Mistral recipe: skipped, with its reason
    assert "mbridge has no name for mistral" in result.output
    for model, run_dir in runs.items():
        argv = read(run_dir / "launch.json")["command"]
        assert argv[1:3] == ["-m", "torch.distributed.run"]
        assert argv[-4:-1] == ["--module", "train.train_mbridge", "--settings"]
        settings = read(run_dir / "mbridge_settings.json")
        assert settings["set"]["model.tensor_model_parallel_size"] == request(run_dir).parallelism.tp
        assert (run_dir / "mbridge" / "hf" / settings["hub_id"] / "config.json").is_file()
        assert not (run_dir / "train.log").exists()
