"""train.nemo.recipe: TPrimat request -> NeMo 2.0 recipe settings, checked without NeMo installed."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from tests.fixtures.train_matrix.requests import run_request
from utils.spec.fairness import profile
from train.common.megatron_settings import DDP_KEYS, DELAYED_KEYS
from train.nemo.recipe import FAIRNESS_PATHS, recipe_settings
from train.common.settings_file import assign
from utils.machine.platform_env import platform_env

RUN_DIR = "/out/set/nemo-llama"


def settings_for(model: str, **env: str) -> dict:
    return recipe_settings(run_request("nvd", "nemo", model, **env), RUN_DIR)


@pytest.mark.parametrize("model, recipe", [("llama", "llama31_8b"), ("qwen", "qwen25_7b"),
                                           ("llama70b", "llama31_70b"), ("mistral", "mistral_7b"),
                                           ("llama32", "llama32_3b")])
def test_each_model_uses_nemos_own_recipe(model, recipe):
    s = settings_for(model, MODELS=model)
    assert (s["recipe"], s["num_nodes"], s["num_gpus_per_node"]) == (recipe, 1, 8)


def test_a_proxy_sets_its_layer_count_on_the_recipe_of_its_model():
    s = settings_for("llama70b", MODELS="llama70b", MODEL_LAYERS="8")
    assert s["recipe"] == "llama31_70b"
    assert (s["set"]["model.config.num_layers"], s["set"]["model.config.hidden_size"],
            s["set"]["model.config.num_query_groups"]) == (8, 8192, 8)


def test_mistrals_window_is_set_as_huggingface_means_it_and_llama_has_none():
    """NeMo's MistralConfig7B says window_size [4096, 0] (4097 tokens); TPrimat's spec means 4096, as HF's does."""
    assert settings_for("mistral", MODELS="mistral")["set"]["model.config.window_size"] == [4095, 0]
    assert settings_for("mistral", MODELS="mistral", MODEL_SIZE="tiny")["set"]["model.config.window_size"] == [63, 0]
    assert "model.config.window_size" not in settings_for("llama")["set"]


@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_parallelism_and_workload_override_the_recipe_defaults(model):
    s = settings_for(model, STRATEGY="truly_identical")["set"]
    expected = {
        "trainer.strategy.tensor_model_parallel_size": 4,
        "trainer.strategy.pipeline_model_parallel_size": 1 if model == "llama" else 2,
        "trainer.strategy.context_parallel_size": 1,  # the 8B recipe's default is 2
        "trainer.strategy.sequence_parallel": True,
        "trainer.max_steps": 500, "trainer.log_every_n_steps": 1,
        "optim.config.lr": 3e-4, "optim.config.weight_decay": 0.1, "optim.config.adam_beta1": 0.9,
        "optim.config.adam_beta2": 0.95, "optim.config.clip_grad": 1.0, "optim.config.bf16": True,
        "optim.lr_scheduler.warmup_steps": 50, "optim.lr_scheduler.min_lr": 0.0,
        "optim.lr_scheduler.max_steps": 500, "model.config.seq_length": 2048,
    }
    assert {key: s[key] for key in expected} == expected


def test_validation_is_lightning_s_own_on_the_request_s_split_and_the_timer_knows_the_target():
    settings = settings_for("llama", EVAL_INTERVAL="50", EVAL_TOKENS="300000", VALIDATION_PERCENT="5",
                            TARGET_LOSS="3.3")
    s = settings["set"]
    # 300,000 tokens = 3 global batches of 64 x 2048 rounded up; the sanity check stays off
    assert (s["trainer.val_check_interval"], s["trainer.limit_val_batches"], s["trainer.num_sanity_val_steps"]) == \
        (50, 3, 0)
    assert settings["data"]["split"] == "95,5,0"
    assert settings["step_timer"] == {"target_loss": 3.3, "tokens_per_step": 64 * 2048}


def test_validation_checkpoints_and_resume_are_off():
    s = settings_for("llama")["set"]
    assert s["trainer.limit_val_batches"] == 0 and s["trainer.num_sanity_val_steps"] == 0
    assert s["trainer.enable_checkpointing"] is False and s["log.ckpt"] is None and s["resume"] is None
    assert s["log.log_dir"] == f"{RUN_DIR}/nemo"


@pytest.mark.parametrize("model", ["llama", "qwen"])
@pytest.mark.parametrize("fairness", ["spec", "tuned"])
def test_every_fairness_setting_of_the_profile_is_applied(model, fairness):
    s = settings_for(model, FAIRNESS=fairness, PRECISION="fp8")
    applied = {name: s["set"][path] for name, path in FAIRNESS_PATHS.items()}
    applied |= {name: s["ddp"][name] for name in DDP_KEYS}
    assert s["ddp"]["use_distributed_optimizer"] == s["set"]["optim.config.use_distributed_optimizer"]
    applied["attention_backend"] = s["attention_backend"]
    applied["use_flash_attn"] = platform_env("nvd")["NVTE_FLASH_ATTN"] == "1"
    applied["fp8_param_gather"] = s["precision"]["set"]["fp8_param_gather"]
    plugin = s["precision"]["set"]
    applied |= {"fp8_format": plugin["fp8"], "fp8_recipe": plugin["fp8_recipe"],
                **{key: plugin[key] for key in DELAYED_KEYS}}
    # what NeMo has no switch for: Transformer Engine's amax reduction (read back, train/common/fp8.py) and Primus's
    # own kernels
    assert applied == {k: v for k, v in profile(fairness).items() if k not in ("fp8_reduce_amax", "primus_turbo")}
    # the plugin's grad_reduce_in_fp32 overrides the DDP config's: both say the profile's
    assert s["precision"]["set"]["grad_reduce_in_fp32"] == s["ddp"]["grad_reduce_in_fp32"] == (fairness == "tuned")


def test_nemos_nan_check_and_fp8_recipe_are_replaced_by_the_shared_ones():
    """bf16_with_fp8_mixed ships amax history 1024 / max (kept: the shared recipe); the recipes' DDP
    config checks every gradient bucket for NaN and averages inside the collective (both turned off,
    as in mega and Primus)."""
    s = settings_for("llama", PRECISION="fp8")
    assert (s["ddp"]["check_for_nan_in_grad"], s["ddp"]["average_in_collective"]) == (False, False)
    assert (s["precision"]["set"]["fp8"], s["precision"]["set"]["fp8_amax_history_len"],
            s["precision"]["set"]["fp8_amax_compute_algo"]) == ("hybrid", 1024, "max")
    assert "fp8_amax_history_len" not in settings_for("llama")["precision"]["set"]  # BF16: no FP8 recipe


@pytest.mark.parametrize("model, vocab", [("llama", 128256), ("qwen", 152064)])
def test_the_workload_conventions_are_set_on_the_recipe_and_the_data(model, vocab):
    s = settings_for(model, STRATEGY="truly_identical")
    assert s["set"]["model.config.init_method_std"] == 0.02
    assert s["set"]["model.config.vocab_size"] == vocab  # at TP4 too: NeMo keeps a preset vocab_size
    assert s["data"]["eod_mask_loss"] is False
    assert s["workload"]["lr_warmup_convention"] == "nemo-cosine-annealing"  # NeMo's own, recorded


@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_real_data_through_pretraining_data_module(model):
    data = settings_for(model)["data"]
    assert data == {"module": "PreTrainingDataModule", "paths": [f"/data/bc_{model}_text_document"],
                    "tokenizer_dir": f"/data/tokenizers/{model}", "split": "100,0,0", "seed": 42,
                    "index_mapping_dir": f"{RUN_DIR}/nemo/index_mapping", "eod_mask_loss": False, "seq_length": 2048,
                    "global_batch_size": 64, "micro_batch_size": 1}


def test_mock_data_only_when_asked_for_and_with_the_models_own_tokenizer():
    data = settings_for("llama", MOCK_DATA="1")["data"]
    assert (data["module"], data["tokenizer_dir"]) == ("MockDataModule", "/data/tokenizers/llama")


def test_memory_and_step_timing_are_logged_every_step():
    s = settings_for("qwen")
    assert s["env"]["NEMO_LOG_MEMORY_USAGE"] == "1"
    assert {"class": "TimingCallback"} in s["callbacks"]


@pytest.mark.parametrize("precision, recipe, plugin", [
    ("bf16", "delayed", "bf16_mixed"), ("fp8", "delayed", "bf16_with_fp8_mixed"),
    ("fp8", "tensorwise", "bf16_with_fp8_current_scaling_mixed"), ("mxfp8", "delayed", "bf16_with_mxfp8_mixed")])
def test_each_precision_takes_nemos_own_plugin_with_its_recipe_on_every_layer(precision, recipe, plugin):
    s = settings_for("llama", PRECISION=precision, FP8_RECIPE=recipe)["precision"]
    assert s["plugin"] == plugin
    if precision != "bf16":  # the recipe asked for, not the plugin's; the current-scaling plugin's bf16 ends undone
        assert (s["set"]["fp8"], s["set"]["fp8_recipe"], s["set"]["first_last_layers_bf16"]) == \
            ("hybrid", recipe if precision == "fp8" else "mxfp8", False)


def test_pipeline_parallel_needs_a_pipeline_dtype():
    assert settings_for("qwen", STRATEGY="balanced")["pipeline_dtype"] == "bfloat16"
    assert settings_for("llama", STRATEGY="balanced")["pipeline_dtype"] is None


def test_profiling_adds_nemos_nsys_callback_with_zero_based_steps():
    callbacks = settings_for("llama", PROFILING="1")["callbacks"]
    assert {"class": "NsysCallback", "start_step": 9, "end_step": 11, "ranks": [0]} in callbacks


def test_tiny_variant_gets_its_architecture():
    s = settings_for("qwen", MODEL_SIZE="tiny", TRAIN_ITERS="20", WARMUP_STEPS="2", WARMUP_SKIP="2")["set"]
    assert (s["model.config.num_layers"], s["model.config.hidden_size"], s["model.config.num_query_groups"]) == (2, 128, 2)


def test_settings_are_plain_json():
    s = settings_for("qwen", STRATEGY="balanced")
    assert json.loads(json.dumps(s)) == s


def test_assign_sets_a_dotted_path_and_names_a_wrong_one():
    class Node:
        pass

    root = Node()
    root.trainer = Node()
    root.trainer.strategy = Node()
    assign(root, "trainer.strategy.sequence_parallel", True)
    assert root.trainer.strategy.sequence_parallel is True
    with pytest.raises(AttributeError, match="optim"):
        assign(root, "optim.config.lr", 1.0)


def test_nemo_is_not_needed_to_map_or_to_import_the_launcher():
    for name in ("train.nemo.recipe", "train.train_nemo"):
        importlib.reload(importlib.import_module(name))
    assert not any(name == "nemo" or name.startswith(("nemo.", "nemo_run", "lightning")) for name in sys.modules)
