"""train.prim.config: the Primus experiment YAML derived from the shipped one, every setting under overrides,
checked against the release's presets, and started the way the run's Primus release starts a pretrain."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evaluate.logs import settings as log_settings
from tests.fixtures.train_matrix import primus_v25_11, primus_v26_5
from tests.fixtures.train_matrix.requests import FIXTURES, run_request
from utils.spec.fairness import FIXED, profile
from utils.cli import UsageError
from utils.frameworks import TABLE
from train.prim import launch
from train.prim.config import (RENAMED_KEYS, ShippedConfigMissing, UnknownKeys, command, experiment, overrides,
                               render, shipped_config, write_experiment)

PRIMUS = FIXTURES / "primus"  # a release/v26.5 checkout's stand-in (the AMD default stack's)
SHIPPED = {"v26.5": PRIMUS, "v25.11": FIXTURES / "primus_v25.11"}  # each release's shipped MI300X files
FACTS = {"v26.5": primus_v26_5, "v25.11": primus_v25_11}
STACKS = {"v26.5": "primus-v26.5", "v25.11": "primus-v25.11"}
RUN_DIR = "/out/set/prim-llama"


def shipped(model: str, release: str = "v26.5", precision: str = "bf16") -> dict:
    return yaml.safe_load(shipped_config(SHIPPED[release], model, precision).read_text())


def on(req, release: str):
    """The request on the AMD stack of a Primus release (STACK)."""
    return dataclasses.replace(req, environment=dataclasses.replace(req.environment, stack=STACKS[release]))


def overrides_of(exp: dict) -> dict:
    return exp["modules"]["pre_trainer"]["overrides"]


@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_every_requested_setting_sits_under_the_overrides(model):
    req = run_request("amd", "prim", model, STRATEGY="balanced")
    o = overrides_of(experiment(req, shipped(model), RUN_DIR))
    expected = {
        "tensor_model_parallel_size": req.parallelism.tp, "pipeline_model_parallel_size": req.parallelism.pp,
        "expert_model_parallel_size": 1, "sequence_parallel": True, "micro_batch_size": 1, "global_batch_size": 64, "seq_length": 2048,
        "train_iters": 500, "lr": 3e-4, "min_lr": 0.0, "lr_warmup_iters": 50, "lr_decay_iters": 500,
        "lr_decay_style": "cosine", "weight_decay": 0.1, "adam_beta1": 0.9, "adam_beta2": 0.95,
        "clip_grad": 1.0, "seed": 42, "bf16": True, "fp8": None, "log_interval": 1,
        "mock_data": False, "train_data_path": f"/data/bc_{model}_text_document",
        "tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": f"/data/tokenizers/{model}",
        "eval_iters": 0, "save": None,
    }
    assert {key: o[key] for key in expected} == expected
    assert req.parallelism.tp == 2


@pytest.mark.parametrize("model", ["llama", "qwen"])
@pytest.mark.parametrize("fairness", ["spec", "tuned"])
def test_every_fairness_setting_is_written_in_megatron_lm_s_names(model, fairness):
    o = overrides_of(experiment(run_request("amd", "prim", model, FAIRNESS=fairness), shipped(model), RUN_DIR))
    table = profile(fairness)
    settable = [key for key in table if key != "fp8_format" and key not in FIXED["primus"]]  # no option for those
    assert {key: o[RENAMED_KEYS.get(key, key)] for key in settable} == {key: table[key] for key in settable}
    assert not set(FIXED["primus"]) & set(o)
    assert o["fp8"] is None  # a BF16 run: the recipe is written but not used
    assert (o["overlap_grad_reduce"], o["accumulate_allreduce_grads_in_fp32"]) == \
        ((False, False) if fairness == "spec" else (True, True))
    assert o["check_for_nan_in_loss_and_grad"] is False  # Primus's trainer_base.yaml ships it on


def test_an_fp8_run_uses_the_shared_delayed_scaling_recipe():
    o = overrides_of(experiment(run_request("amd", "prim", "llama", PRECISION="fp8"), shipped("llama"), RUN_DIR))
    assert (o["fp8"], o["fp8_recipe"], o["fp8_margin"], o["fp8_amax_history_len"], o["fp8_amax_compute_algo"]) == \
        ("hybrid", "delayed", 0, 1024, "max")


@pytest.mark.parametrize("model, tp, tokenizer_size, published", [
    ("qwen", 1, 151665, 152064), ("qwen", 2, 151665, 152064), ("llama", 4, 128256, 128256)])
def test_primus_runs_megatron_lm_s_workload_and_the_published_vocabulary(model, tp, tokenizer_size, published):
    """Primus's shipped configs mask EOD tokens, draw init std 0.008, cycle the data and pad the
    tokenizer's size to 128 x TP (Qwen 151680 at TP1, 151808 at TP2, Llama 128512 at TP4)."""
    req = run_request("amd", "prim", model, TP=str(tp), DP=str(8 // tp))
    o = overrides_of(experiment(req, shipped(model), RUN_DIR))
    assert (o["eod_mask_loss"], o["init_method_std"], o["dataloader_type"]) == (False, 0.02, "single")
    multiple = o["make_vocab_size_divisible_by"] * tp  # Megatron-LM's _vocab_size_with_padding
    assert math.ceil(tokenizer_size / multiple) * multiple == published == req.fairness.workload["padded_vocab_size"]


def test_nothing_is_added_at_the_top_level_where_primus_would_ignore_it():
    base = shipped("llama")
    exp = experiment(run_request("amd", "prim", "llama"), base, RUN_DIR)
    assert set(exp) == set(base)
    assert exp["exp_name"] == "prim-llama" and exp["workspace"] == f"{RUN_DIR}/primus"
    assert {k: v for k, v in exp["modules"]["pre_trainer"].items() if k != "overrides"} == \
        {k: v for k, v in base["modules"]["pre_trainer"].items() if k != "overrides"}


def test_shipped_placeholders_for_requested_settings_are_replaced_by_values():
    o = overrides_of(experiment(run_request("amd", "prim", "qwen"), shipped("qwen"), RUN_DIR))
    assert o["seq_length"] == 2048 and o["max_position_embeddings"] == 131072
    assert o["auto_continue_train"] == "${CONTI_PARAMS:0}"  # not a TPrimat setting: left to Primus


@pytest.mark.parametrize("release, grouped_gemm", [("v26.5", "use_turbo_grouped_gemm"),
                                                   ("v25.11", "use_turbo_grouped_mlp")])
@pytest.mark.parametrize("fairness", ["spec", "tuned"])
def test_primus_turbo_kernels_the_shipped_file_turns_on_are_off_under_every_profile(release, grouped_gemm, fairness):
    """Primus ships Turbo attention and grouped GEMM on for Qwen 2.5 7B (v26.5 renamed use_turbo_grouped_mlp to
    use_turbo_grouped_gemm); every other run uses Transformer Engine's attention, so prim turns them off."""
    req = on(run_request("amd", "prim", "qwen", FAIRNESS=fairness), release)
    turbo = ("enable_primus_turbo", "use_turbo_attention", "use_turbo_grouped_mlp", "use_turbo_grouped_gemm")
    assert {key: overrides_of(shipped("qwen", release))[key] for key in turbo if key in overrides_of(
        shipped("qwen", release))} == {"enable_primus_turbo": True, "use_turbo_attention": True, grouped_gemm: True}
    exp = experiment(req, shipped("qwen", release), RUN_DIR)
    assert {key: overrides_of(exp)[key] for key in turbo if key in overrides_of(exp)} == \
        {"enable_primus_turbo": False, "use_turbo_attention": False, grouped_gemm: False}
    assert overrides_of(exp)["attention_backend"] == "auto" == profile(fairness)["attention_backend"]


def test_the_architecture_is_the_requested_variant():
    o = overrides_of(experiment(run_request("amd", "prim", "llama", MODEL_SIZE="tiny", TRAIN_ITERS="20",
                                            WARMUP_STEPS="2", WARMUP_SKIP="2"), shipped("llama"), RUN_DIR))
    assert (o["num_layers"], o["hidden_size"], o["num_attention_heads"], o["num_query_groups"]) == (2, 128, 4, 2)
    assert o["use_rope_scaling"] is True and o["add_qkv_bias"] is False
    assert "rope_scaling_factor" not in o  # Megatron-LM never applies it: test_train_prim_layout.py
    q = overrides_of(experiment(run_request("amd", "prim", "qwen"), shipped("qwen"), RUN_DIR))
    assert (q["num_layers"], q["add_qkv_bias"], q["use_rope_scaling"], q["rotary_base"]) == (28, True, False, 1e6)


def test_fp8_is_hybrid():
    o = overrides_of(experiment(run_request("amd", "prim", "llama", PRECISION="fp8"), shipped("llama"), RUN_DIR))
    assert o["fp8"] == "hybrid" and o["bf16"] is True


def test_mock_data_only_when_asked_for():
    o = overrides_of(experiment(run_request("amd", "prim", "llama", MOCK_DATA="1"), shipped("llama"), RUN_DIR))
    assert o["mock_data"] is True and o["train_data_path"] is None


def test_validation_is_megatron_lm_s_own_evaluation_on_the_request_s_split_of_data_path():
    req = run_request("amd", "prim", "llama", EVAL_INTERVAL="50", EVAL_TOKENS="300000", VALIDATION_PERCENT="5")
    o = overrides_of(experiment(req, shipped("llama"), RUN_DIR))
    assert {key: o[key] for key in ("eval_interval", "eval_iters", "split", "data_path", "train_data_path")} == {
        "eval_interval": 50, "eval_iters": 3, "split": "95,5,0", "data_path": "/data/bc_llama_text_document",
        "train_data_path": None}  # 300,000 tokens = 3 global batches of 64 x 2048 rounded up
    assert FACTS["v26.5"].unknown_keys(overrides(req)) == []
    assert FACTS["v25.11"].unknown_keys(overrides(on(req, "v25.11"))) == []


@pytest.mark.parametrize("release, switch", [("v26.5", {"PRIMUS_MLPERF": "1"}), ("v25.11", {})])
def test_v26_5_evaluates_the_same_first_validation_samples_every_time_and_v25_11_cannot(release, switch):
    req = on(run_request("amd", "prim", "llama", EVAL_INTERVAL="50"), release)
    env = command(req, Path("/primus"), Path("/out/exp.yaml"), "/out/run").env
    assert {key: env[key] for key in ("PRIMUS_MLPERF",) if key in env} == switch
    plain = command(on(run_request("amd", "prim", "llama"), release), Path("/primus"), Path("/out/exp.yaml"), "/o")
    assert "PRIMUS_MLPERF" not in plain.env  # only a run that evaluates


def test_without_validation_megatron_lm_never_evaluates_and_trains_on_every_document():
    o = overrides_of(experiment(run_request("amd", "prim", "llama"), shipped("llama"), RUN_DIR))
    assert (o["eval_iters"], o["eval_interval"], o["data_path"], o["split"]) == (0, 500, None, None)


def test_profiling_switches_primus_profiler_over_the_configured_steps():
    o = overrides_of(experiment(run_request("amd", "prim", "llama", PROFILING="true"), shipped("llama"), RUN_DIR))
    assert (o["profile"], o["use_pytorch_profiler"], o["profile_step_start"], o["profile_step_end"]) == \
        (True, True, 10, 12)


def test_shipped_config_per_precision_then_the_older_single_file(tmp_path):
    assert shipped_config(PRIMUS, "llama", "bf16").name == "llama3.1_8B-BF16-pretrain.yaml"
    assert shipped_config(FIXTURES / "primus_v0.5", "llama", "fp8").name == "llama3.1_8B-pretrain.yaml"
    with pytest.raises(ShippedConfigMissing, match="PRIMUS_PATH"):
        shipped_config(tmp_path, "qwen", "bf16")


def test_written_yaml_names_its_base_and_reads_back(tmp_path):
    req = run_request("amd", "prim", "llama")
    out = tmp_path / "primus_experiment.yaml"
    base = write_experiment(req, PRIMUS, out, str(tmp_path))
    text = out.read_text()
    assert text.startswith(f"# Generated by TPrimat (train/prim/config.py) from {base}.")
    assert yaml.safe_load(text) == experiment(req, shipped("llama"), str(tmp_path))
    assert render(yaml.safe_load(text), base) == text


def test_a_key_the_releases_presets_lack_is_refused_in_one_line_before_anything_is_written(tmp_path, monkeypatch):
    """v26.5 would take a misspelt key in and drop it silently; TPrimat names it, the release and the fix."""
    monkeypatch.setitem(RENAMED_KEYS, "check_for_nan_in_grad", "check_for_nan_in_grad")  # megatron-core's DDP name
    out = tmp_path / "primus_experiment.yaml"
    with pytest.raises(UnknownKeys) as refused:
        write_experiment(run_request("amd", "prim", "llama"), PRIMUS, out, str(tmp_path))
    assert str(refused.value) == (
        "Primus v26.5 has no key check_for_nan_in_grad in its presets (primus/configs/modules/megatron/"
        f"pre_trainer.yaml + primus/configs/models/megatron/llama3.1_8B.yaml in {PRIMUS}); "
        "name it as that release does in train/prim/config.py")
    assert not out.exists()


def test_a_dry_run_refuses_it_too_with_exit_status_2(tmp_path, monkeypatch):
    monkeypatch.setitem(RENAMED_KEYS, "check_for_nan_in_grad", "check_for_nan_in_grad")
    monkeypatch.setenv("PRIMUS_PATH", str(PRIMUS))
    req = run_request("amd", "prim", "llama", DRY_RUN="1")
    assert req.environment.dry_run
    with pytest.raises(UsageError, match="^Primus v26.5 has no key check_for_nan_in_grad in its presets"):
        launch.command(req, tmp_path, tmp_path)


def test_a_missing_release_checkout_says_how_to_get_it(tmp_path):
    with pytest.raises(ShippedConfigMissing, match=r"^no Primus v26.5 checkout at .*/nowhere \(it holds no "
                       r"primus-cli\): git clone --branch "
                       r"release/v26.5 --recurse-submodules https://github.com/AMD-AGI/Primus.git .* "
                       r"\(or set PRIMUS_PATH to one\)$"):
        write_experiment(run_request("amd", "prim", "llama"), tmp_path / "nowhere", tmp_path / "e.yaml", str(tmp_path))


def test_a_directory_without_the_release_s_launcher_is_no_checkout_of_it(tmp_path):
    (tmp_path / "v25.11" / "examples").mkdir(parents=True)
    (tmp_path / "v25.11" / "examples" / "run_pretrain.sh").write_text("")  # v25.11's layout has no primus-cli
    with pytest.raises(ShippedConfigMissing, match=r"^no Primus v26.5 checkout at .*/v25.11 \(it holds no "
                       r"primus-cli\): git clone --branch release/v26.5 "):
        write_experiment(run_request("amd", "prim", "llama"), tmp_path / "v25.11", tmp_path / "e.yaml", str(tmp_path))


RENDEZVOUS = dict(NNODES="2", GPUS_PER_NODE="8", NODE_RANK="1", MASTER_ADDR="10.0.0.1", MASTER_PORT="29600",
                  DP="16", LAUNCHER="slurm")


def test_v26_5_runs_primus_cli_direct_with_no_pip_install_and_this_nodes_rendezvous():
    cmd = command(run_request("amd", "prim", "llama", **RENDEZVOUS), Path("/primus"), Path("/out/exp.yaml"), "/out/run")
    assert cmd.argv == ["bash", "./primus-cli", "direct", "--log_file", "/out/run/primus_launcher.log", "--",
                        "train", "pretrain", "--config", "/out/exp.yaml"] and cmd.cwd == "/primus"
    assert {k: cmd.env[k] for k in ("PRIMUS_SKIP_PIP", "PIP_NO_INDEX", "NNODES", "NODE_RANK", "GPUS_PER_NODE",
                                    "MASTER_ADDR", "MASTER_PORT")} == \
        {"PRIMUS_SKIP_PIP": "1", "PIP_NO_INDEX": "1", "NNODES": "2", "NODE_RANK": "1", "GPUS_PER_NODE": "8",
         "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29600"}
    assert "EXP" not in cmd.env


def test_v25_11s_launch_time_pip_installs_install_nothing_and_download_nothing():
    """v25.11's launcher pip-installs requirements.txt and builds Emerging-Optimizers at every launch, with no
    switch (utils/upstream/table.py): pip's own settings make both resolve against what the image holds only."""
    req = on(run_request("amd", "prim", "llama", STACK="primus-v25.11"), "v25.11")
    cmd = command(req, SHIPPED["v25.11"], Path("/out/exp.yaml"), "/out/run")
    assert cmd.argv == ["bash", "./examples/run_pretrain.sh"]
    assert {k: cmd.env[k] for k in ("PIP_NO_INDEX", "PIP_DRY_RUN", "PIP_NO_BUILD_ISOLATION")} == \
        {"PIP_NO_INDEX": "1", "PIP_DRY_RUN": "1", "PIP_NO_BUILD_ISOLATION": "0"}


def test_v26_5_on_one_node_shows_local_rank_0_and_the_last_one_whose_validation_lines_only_it_prints():
    cmd = command(run_request("amd", "prim", "llama"), Path("/primus"), Path("/out/exp.yaml"), "/out/run")
    # primus-cli-direct.sh puts LOCAL_RANKS after its own --local-ranks-filter 0, and torchrun's later one wins
    assert cmd.env["LOCAL_RANKS"] == "--local-ranks-filter 0,7"


def test_v26_5_on_several_nodes_keeps_primus_own_filter_which_shows_the_last_rank_on_the_last_node():
    cmd = command(run_request("amd", "prim", "llama", **RENDEZVOUS), Path("/primus"), Path("/out/exp.yaml"), "/out/run")
    assert "LOCAL_RANKS" not in cmd.env


def test_v25_11_runs_run_pretrain_sh_as_before():
    req = on(run_request("amd", "prim", "llama", **RENDEZVOUS), "v25.11")
    cmd = command(req, Path("/workspace/Primus"), Path("/out/exp.yaml"), "/out/run")
    assert cmd.argv == ["bash", "./examples/run_pretrain.sh"] and cmd.cwd == "/workspace/Primus"
    assert {k: cmd.env[k] for k in ("EXP", "TRAIN_LOG", "NNODES", "NODE_RANK", "GPUS_PER_NODE", "MASTER_ADDR",
                                    "MASTER_PORT")} == \
        {"EXP": "/out/exp.yaml", "TRAIN_LOG": "/out/run/primus_launcher.log", "NNODES": "2", "NODE_RANK": "1",
         "GPUS_PER_NODE": "8", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29600"}
    assert "PRIMUS_SKIP_PIP" not in cmd.env and "LOCAL_RANKS" not in cmd.env


# The facts each release's presets are checked against: primus_v25_11.py, primus_v26_5.py.

@pytest.mark.parametrize("release", ["v26.5", "v25.11"])
@pytest.mark.parametrize("model", ["llama", "qwen", "llama70b"])
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("fairness", ["spec", "tuned"])
@pytest.mark.parametrize("extra", [{}, {"MOCK_DATA": "1", "STRATEGY": "balanced"},
                                   {"PROFILING": "1", "MODEL_SIZE": "tiny", "TRAIN_ITERS": "20", "WARMUP_STEPS": "2",
                                    "WARMUP_SKIP": "2"}])
def test_every_key_tprimat_writes_is_one_the_release_accepts(release, model, precision, fairness, extra):
    if model == "llama70b":  # an 8-layer proxy: the plan's layouts for 70B need more than one node
        extra = {"MODELS": model, "MODEL_LAYERS": "1" if "MODEL_SIZE" in extra else "8",
                 **{k: v for k, v in extra.items() if k != "STRATEGY"}}
    req = on(run_request("amd", "prim", model, PRECISION=precision, FAIRNESS=fairness, **extra), release)
    assert FACTS[release].unknown_keys(overrides(req)) == []


@pytest.mark.parametrize("release", ["v26.5", "v25.11"])
@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_every_key_of_the_shipped_files_tprimat_keeps_is_one_the_release_accepts(release, model):
    assert FACTS[release].unknown_keys(overrides_of(shipped(model, release))) == []


def run_stand_in(tmp_path, exp: dict, release: str) -> subprocess.CompletedProcess:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    env = {**os.environ, "EXP": str(path), "GPUS_PER_NODE": "8", "NNODES": "1", "FAKE_PRIMUS_RELEASE": release}
    return subprocess.run([sys.executable, str(PRIMUS / "examples" / "fake_primus.py")], env=env,
                          capture_output=True, text=True, timeout=60)


def argument_dump(out: subprocess.CompletedProcess) -> dict:
    return dict(match.groups() for match in map(log_settings.ARGUMENT.search, out.stdout.splitlines()) if match)


def test_the_v25_11_stand_in_dies_on_an_override_key_primus_does_not_have(tmp_path):
    exp = shipped("llama", "v25.11")
    overrides_of(exp)["check_for_nan_in_grad"] = False  # Megatron-core's DDP name; Primus's is ..._in_loss_and_grad
    out = run_stand_in(tmp_path, exp, "v25.11")
    assert out.returncode != 0
    assert "Override namespace failed: can't find key(check_for_nan_in_grad)" in out.stderr
    assert "iteration" not in out.stdout


def test_the_v26_5_stand_in_ignores_that_key_silently_which_is_why_tprimat_refuses_it(tmp_path):
    exp = shipped("llama")
    overrides_of(exp).update(check_for_nan_in_grad=False, train_iters=2, seq_length=64)
    out = run_stand_in(tmp_path, exp, "v26.5")
    assert out.returncode == 0, out.stderr
    assert argument_dump(out)["check_for_nan_in_loss_and_grad"] == "True"  # the preset's, not what was meant


@pytest.mark.parametrize("release", ["v26.5", "v25.11"])
def test_a_key_the_experiment_leaves_out_takes_the_release_s_default(tmp_path, release):
    exp = shipped("qwen", release)
    for key in ("init_method_std", "eod_mask_loss", "seed"):
        overrides_of(exp).pop(key, None)
    overrides_of(exp).update(train_iters=2, seq_length=64)
    out = run_stand_in(tmp_path, exp, release)
    assert out.returncode == 0, out.stderr
    dump = argument_dump(out)
    assert (dump["init_method_std"], dump["eod_mask_loss"], dump["seed"], dump["dataloader_type"]) == \
        ("0.008", "False", "1234", "cyclic")  # Qwen 2.5's model default, then the module's
    assert FACTS[release].defaults("qwen2.5_7B.yaml")["init_method_std"] == 0.008


def test_llama70b_has_primus_shipped_names_and_a_proxy_overrides_its_layers():
    assert TABLE["prim"].model_name("llama70b") == ("llama3.1_70B-{precision}-pretrain.yaml", "llama3.1_70B-pretrain.yaml")
    o = overrides(run_request("amd", "prim", "llama70b", MODELS="llama70b", MODEL_LAYERS="8"))
    assert (o["num_layers"], o["hidden_size"], o["ffn_hidden_size"], o["num_attention_heads"],
            o["num_query_groups"]) == (8, 8192, 28672, 64, 8)


def test_primus_ships_no_mistral_so_the_table_lacks_it_and_asking_is_one_line():
    """Primus's MI300X configs have Mixtral's MoE models but no Mistral 7B: the planner skips prim for it."""
    assert TABLE["prim"].model_name("mistral") is None
    with pytest.raises(ShippedConfigMissing, match="^Primus ships no experiment config for mistral"):
        shipped_config(PRIMUS, "mistral", "bf16")


def test_ep_is_megatron_lms_expert_model_parallel_size_and_its_argument_dump_reads_back_as_ep():
    req = run_request("amd", "prim", "llama")
    req = dataclasses.replace(req, parallelism=dataclasses.replace(req.parallelism, ep=2))  # the mapping alone
    assert overrides_of(experiment(req, shipped("llama"), RUN_DIR))["expert_model_parallel_size"] == 2
    assert log_settings.setting_name("expert_model_parallel_size") == "ep"  # compared with the request's ep
