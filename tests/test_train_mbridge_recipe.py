"""train.mbridge: TPrimat request -> Megatron-Bridge recipe settings and its command, checked without Megatron-Bridge
installed (tests/test_train_mbridge_build.py builds them with it)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.train_matrix.requests import run_request
from train.mbridge.launch import command
from train.mbridge.recipe import FAIRNESS_PATHS, HUB_IDS, recipe_settings
from utils.cli import UsageError
from utils.frameworks import TABLE
from utils.spec.fairness import SPEC, profile

ROOT = Path(__file__).resolve().parent.parent

RUN_DIR = "/out/set/mbridge-llama"


def request(model: str = "llama", platform: str = "nvd", **env: str):
    return run_request(platform, "mbridge", model, FRAMEWORK="mbridge", MODELS=model, **env)


def settings_for(model: str = "llama", **env: str) -> dict:
    return recipe_settings(request(model, **env), RUN_DIR)


@pytest.mark.parametrize("model, recipe", [("llama", "llama.llama31_8b_pretrain_config"),
                                           ("qwen", "qwen.qwen25_7b_pretrain_config"),
                                           ("llama70b", "llama.llama31_70b_pretrain_config"),
                                           ("llama32", "llama.llama32_3b_pretrain_config"),
                                           ("qwen3moe", "qwen.qwen3_30b_a3b_pretrain_config")])
def test_each_model_uses_megatron_bridges_own_recipe_and_the_hub_id_it_asks_for(model, recipe):
    s = settings_for(model)
    assert (s["recipe"], s["hub_id"]) == (recipe, HUB_IDS[recipe])
    assert s["model_dir"] == f"{RUN_DIR}/mbridge/hf"


def test_mistral_has_no_recipe_so_the_plan_skips_it():
    assert TABLE["mbridge"].model_name("mistral") is None


@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_layout_and_workload_override_the_recipe_defaults(model):
    s = settings_for(model, STRATEGY="truly_identical")["set"]
    expected = {
        "model.tensor_model_parallel_size": 4, "model.pipeline_model_parallel_size": 1 if model == "llama" else 2,
        "model.expert_model_parallel_size": 1,
        "model.context_parallel_size": 1,  # the 8B recipe ships CP=2
        "model.sequence_parallel": True, "model.virtual_pipeline_model_parallel_size": None,
        "train.train_iters": 500, "train.global_batch_size": 64, "train.micro_batch_size": 1,
        "model.seq_length": 2048, "dataset.seq_length": 2048, "logger.log_interval": 1,
        "optimizer.lr": 3e-4, "optimizer.min_lr": 0.0, "optimizer.weight_decay": 0.1, "optimizer.adam_beta1": 0.9,
        "optimizer.adam_beta2": 0.95, "optimizer.clip_grad": 1.0, "optimizer.bf16": True,
        "scheduler.lr_warmup_iters": 50, "scheduler.lr_decay_iters": 500, "scheduler.lr_decay_style": "cosine",
        "checkpoint.save": None, "validation.eval_iters": 0,
    }
    assert {key: s[key] for key in expected} == expected


def test_ep_is_the_providers_expert_model_parallel_size():
    req = request()
    req = dataclasses.replace(req, parallelism=dataclasses.replace(req.parallelism, ep=2))  # the mapping alone
    assert recipe_settings(req, RUN_DIR)["set"]["model.expert_model_parallel_size"] == 2


def test_validation_is_megatron_bridges_own_on_the_requests_split():
    s = settings_for(EVAL_INTERVAL="50", EVAL_TOKENS="300000", VALIDATION_PERCENT="10")["set"]
    assert (s["validation.eval_interval"], s["validation.eval_iters"], s["dataset.split"]) == (50, 3, "90,10,0")
    # without EVAL_INTERVAL: no evaluation, and every document trains
    s = settings_for()["set"]
    assert (s["validation.eval_interval"], s["validation.eval_iters"], s["dataset.split"]) == (500, 0, "100,0,0")


def test_the_architecture_is_the_requested_variant_with_the_workloads_vocabulary():
    s = settings_for("llama70b", MODEL_LAYERS="8")["set"]
    assert (s["model.num_layers"], s["model.hidden_size"], s["model.num_query_groups"], s["model.vocab_size"]) == \
        (8, 8192, 8, 128256)
    assert s["tokenizer.use_tokenizer_vocab_size"] is False  # the preset vocab_size is kept as it is


def test_real_data_is_the_prepared_prefix_and_mock_data_has_none():
    req = request()
    assert settings_for()["set"]["dataset.data_path"] == [req.data.prefix]
    assert settings_for(MOCK_DATA="1")["set"]["dataset.data_path"] is None
    assert settings_for()["set"]["tokenizer.tokenizer_model"] == req.data.tokenizer_dir


@pytest.mark.parametrize("fairness", ["spec", "tuned"])
def test_the_fairness_profile_reaches_the_ddp_model_and_optimizer(fairness):
    s, table = settings_for(FAIRNESS=fairness)["set"], profile(fairness)
    assert {path: s[path] for path in FAIRNESS_PATHS.values()} == \
        {path: table[name] for name, path in FAIRNESS_PATHS.items()}
    assert (s["ddp.overlap_grad_reduce"], s["ddp.grad_reduce_in_fp32"]) == \
        (table["overlap_grad_reduce"], table["grad_reduce_in_fp32"])


def test_fp8_takes_the_delayed_scaling_preset_with_the_profiles_recipe():
    bf16, fp8 = settings_for()["mixed_precision"], settings_for(PRECISION="fp8")["mixed_precision"]
    assert bf16 == {"preset": "bf16_mixed", "set": {"grad_reduce_in_fp32": False, "fp8_param_gather": False,
                                                    "reuse_grad_buf_for_mxfp8_param_ag": False}}
    assert fp8["preset"] == "bf16_with_fp8_delayed_scaling_mixed"
    assert {key: fp8["set"][key] for key in ("fp8", "fp8_recipe", "fp8_amax_history_len")} == \
        {"fp8": "hybrid", "fp8_recipe": "delayed", "fp8_amax_history_len": 1024}


def test_mxfp8_reuses_the_grad_buffer_for_the_parameter_gather_only_when_the_profile_gathers_in_fp8(monkeypatch):
    mxfp8 = settings_for(PRECISION="mxfp8")["mixed_precision"]
    assert mxfp8["preset"] == "bf16_with_mxfp8_mixed"  # which ships the reuse on
    assert (mxfp8["set"]["fp8_param_gather"], mxfp8["set"]["reuse_grad_buf_for_mxfp8_param_ag"]) == (False, False)
    monkeypatch.setitem(SPEC, "fp8_param_gather", True)
    gathered = settings_for(PRECISION="mxfp8")["mixed_precision"]["set"]
    assert (gathered["fp8_param_gather"], gathered["reuse_grad_buf_for_mxfp8_param_ag"]) == (True, True)
    assert settings_for(PRECISION="fp8")["mixed_precision"]["set"]["reuse_grad_buf_for_mxfp8_param_ag"] is False


@pytest.mark.parametrize("model", ["llama", "llama70b"])
def test_no_recipe_overlaps_communication_collects_garbage_or_sets_its_own_environment(model):
    """The 70B recipe's communication-overlap setup, every recipe's manual GC and cfg.env_vars: as the other
    frameworks run (the environment is the stack's, for all of them)."""
    s = settings_for(model)["set"]
    assert (s["comm_overlap"], s["train.manual_gc"], s["env_vars"]) == (None, False, {})


def test_profiling_sets_megatrons_nsys_range_on_rank_0():
    s = settings_for(PROFILING="1")["set"]
    assert (s["profiling.use_nsys_profiler"], s["profiling.profile_ranks"]) == (True, [0])
    assert "profiling.use_nsys_profiler" not in settings_for()["set"]


def test_the_command_is_torchrun_on_the_trainer_module_with_its_settings_file(tmp_path):
    req = request(DRY_RUN="1")
    launch = command(req, tmp_path, tmp_path)
    settings_file = str(tmp_path / "mbridge_settings.json")
    assert launch.argv[-4:] == ["--module", "train.train_mbridge", "--settings", settings_file]
    written = json.loads((tmp_path / "mbridge_settings.json").read_text())
    assert written == json.loads(json.dumps(recipe_settings(req, str(tmp_path))))
    config = json.loads((tmp_path / "mbridge" / "hf" / written["hub_id"] / "config.json").read_text())
    assert (config["architectures"], config["num_hidden_layers"], config["hidden_size"]) == \
        (["LlamaForCausalLM"], req.model.num_layers, req.model.hidden_size)
    assert launch.env["HF_HUB_OFFLINE"] == "1"


def test_a_request_on_a_stack_without_megatron_bridge_is_refused_by_name(tmp_path):
    """The plan skips mbridge there; a request written for such a row anyway (by hand, or by an older plan) stops."""
    req = request(STACK="nemo-25.04")
    assert req.stack.megatron_bridge is None
    with pytest.raises(UsageError, match=f"stack {req.stack.name} .* carries no Megatron-Bridge"):
        command(req, tmp_path, tmp_path)


def test_megatron_bridges_iteration_and_gb_memory_lines_are_read_as_megatrons(tmp_path):
    """Its training_log prints Megatron-LM's iteration line and its report_memory a '(GB)' line of torch's
    memory_stats names in 10^9 bytes (v0.6.0, src/megatron/bridge/training/utils/train_utils.py)."""
    from evaluate.logs.parse import parse_logs
    from evaluate.logs.settings import EFFECTIVE_MARKER
    from train.mbridge.readback import MARKER

    log = tmp_path / "train.log"
    log.write_text(
        " [2026-11-26 12:00:00] iteration        1/       2 | consumed samples:           64 | elapsed time per "
        "iteration (ms): 9341.2 | throughput per GPU (TFLOP/s/GPU): 612.3 | learning rate: 1.500000E-05 | global "
        "batch size:    64 | lm loss: 9.123456E+00 | loss scale: 1.0 | grad norm: 3.142 | number of skipped "
        "iterations:   0 | number of nan iterations:   0 |\n"
        # training_log's report_memory line (mbridge-memory-report-names), as Megatron-Bridge 0.6.2 printed it on an H200
        "[Rank 0] (after 1 iterations) memory (GB) | mem-allocated-gigabytes: 38.799 | mem-active-gigabytes: 38.799 "
        "| mem-inactive-gigabytes: 0.0 | mem-reserved-gigabytes: 46.695 | mem-max-allocated-gigabytes: 46.491 | "
        "mem-max-active-gigabytes: 46.491 | mem-max-inactive-gigabytes: 0.0 | mem-max-reserved-gigabytes: 46.695 | "
        "mem-alloc-retires: 0 | mem-allocated-count: 119\n")
    (record,) = parse_logs([log], "mbridge").records
    assert record["step_time_s"] == pytest.approx(9.3412)
    assert (record["mem_allocated_gib"], record["mem_reserved_gib"]) == \
        (pytest.approx(46.491e9 / 2 ** 30), pytest.approx(46.695e9 / 2 ** 30))
    assert MARKER == EFFECTIVE_MARKER


def test_its_launch_writes_the_model_folder_on_a_python_without_torch(tmp_path):
    """A dry run on a GPU node's host Python needs no torch: the recipe settings and the Hugging Face model folder
    come from torch-free modules (train/common/hf_config.py, train/common/megatron_settings.py)."""
    script = ("import sys; sys.modules['torch'] = None\n"  # any import of torch fails
              "from tests.fixtures.train_matrix.requests import run_request\n"
              "from train.mbridge.launch import write_model_dir\n"
              "from train.mbridge.recipe import recipe_settings\n"
              "req = run_request('nvd', 'mbridge', 'llama')\n"
              f"print(write_model_dir(req, recipe_settings(req, {str(tmp_path)!r})))\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (Path(out.stdout.strip().splitlines()[-1]) / "config.json").is_file()
