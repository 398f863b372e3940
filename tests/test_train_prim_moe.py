"""prim trains Qwen3 30B-A3B (qwen3moe) from Primus's shipped qwen3_30B_A3B-{BF16,FP8}-pretrain.yaml with the experts
and routing every framework runs (utils.spec.fairness.moe_settings) in Megatron-LM's argument names, and with what
the shipped file turns on that no other framework runs turned off; the routing is read back from Megatron-LM's
argument dump, where the judge checks it.

The shipped files are the stand-ins' (tests/fixtures/train_matrix/primus for release/v26.5, primus_v25.11 for
v25.11: each written from the release's file), the presets the v26.5 stand-in checkout's and primus_v25_11.py's key
lists, each read from the release's own checkout (utils/upstream/primus_facts.py names the lines relied on).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
import yaml

from evaluate import validate
from evaluate.collect import Loaded
from evaluate.logs.parse import parse_logs
from tests.fixtures.logs.extracting import FIXTURES as LOGS
from tests.fixtures.train_matrix import megatron_args, primus_v25_11, primus_v26_5
from tests.fixtures.train_matrix.requests import FIXTURES, run_request
from tests.fixtures.train_matrix.shell import machine, prepared_data, read, run_dirs
from train.prim import presets
from train.prim.config import CONFIG_DIRS, experiment, model_preset, shipped_config
from train.prim.moe import ARGUMENT
from utils.frameworks import TABLE
from utils.frameworks.megatron_log import MOE_ARGUMENTS
from utils.machine.platform_env import platform_env
from utils.spec.fairness import moe_settings
from utils.spec.models import get_model

SHIPPED = {"v26.5": FIXTURES / "primus", "v25.11": FIXTURES / "primus_v25.11"}
STACKS = {"v26.5": "primus-v26.5", "v25.11": "primus-v25.11"}
SHORT_RUN = {"TRAIN_ITERS": "6", "WARMUP_STEPS": "1", "WARMUP_SKIP": "2"}


def shipped(release: str, precision: str = "bf16", folder: str | None = None) -> dict:
    path = shipped_config(SHIPPED[release], "qwen3moe", precision) if folder is None else \
        SHIPPED[release] / CONFIG_DIRS[1] / "qwen3_30B_A3B-BF16-pretrain.yaml"
    return yaml.safe_load(path.read_text())


def moe_request(release: str = "v26.5", size: str = "full", ep: int = 8, **knobs):
    req = run_request("amd", "prim", "qwen3moe", MODELS="qwen3moe", MODEL_SIZE=size, EP=str(ep), **knobs)
    return dataclasses.replace(req, environment=dataclasses.replace(req.environment, stack=STACKS[release]))


def trainer(exp: dict) -> dict:
    return exp["modules"]["pre_trainer"]


def defaults(release: str) -> dict:
    """The release's preset values for the Qwen3 30B-A3B experiment."""
    return (primus_v26_5 if release == "v26.5" else primus_v25_11).defaults("qwen3_30B_A3B.yaml")


def unknown(release: str, exp: dict) -> list[str]:
    """The override keys the release's presets lack: the v26.5 stand-in read as a checkout, v25.11's key lists."""
    if release == "v26.5":
        return presets.unknown_keys(SHIPPED["v26.5"], trainer(exp))
    return primus_v25_11.unknown_keys(trainer(exp)["overrides"])


def test_primus_ships_qwen3_30b_a3b_under_mi300x_in_v26_5_and_under_mi355x_only_in_v25_11():
    assert TABLE["prim"].model_name("qwen3moe") == ("qwen3_30B_A3B-{precision}-pretrain.yaml",)
    assert shipped_config(SHIPPED["v26.5"], "qwen3moe", "bf16").relative_to(SHIPPED["v26.5"]).as_posix() == \
        "examples/megatron/configs/MI300X/qwen3_30B_A3B-BF16-pretrain.yaml"
    assert shipped_config(SHIPPED["v26.5"], "qwen3moe", "fp8").name == "qwen3_30B_A3B-FP8-pretrain.yaml"
    assert not (SHIPPED["v25.11"] / CONFIG_DIRS[0] / "qwen3_30B_A3B-BF16-pretrain.yaml").exists()
    for precision, name in (("bf16", "BF16"), ("fp8", "FP8"), ("mxfp8", "BF16")):
        assert shipped_config(SHIPPED["v25.11"], "qwen3moe", precision).relative_to(SHIPPED["v25.11"]).as_posix() \
            == f"examples/megatron/configs/MI355X/qwen3_30B_A3B-{name}-pretrain.yaml"


@pytest.mark.parametrize("release", ["v26.5", "v25.11"])
@pytest.mark.parametrize("size", ["full", "tiny"])
@pytest.mark.parametrize("ep", [1, 8])
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_the_experiment_trains_the_requested_variant_with_the_profiles_routing_in_keys_the_release_accepts(
        release, size, ep, precision):
    req = moe_request(release, size, ep, PRECISION=precision)
    exp = experiment(req, shipped(release, precision), "/out/run")
    o, spec = trainer(exp)["overrides"], get_model("qwen3moe", size)
    assert trainer(exp)["model"] == "qwen3_30B_A3B.yaml"
    assert unknown(release, exp) == []
    assert megatron_args.refusals({**defaults(release), **o}, platform_env("amd")) == []
    assert (o["num_layers"], o["hidden_size"], o["num_attention_heads"], o["num_query_groups"], o["kv_channels"],
            o["qk_layernorm"], o["add_qkv_bias"]) == ((48, 2048, 32, 4, 128, True, False) if size == "full" else
                                                      (2, 128, 4, 2, 64, True, False))
    assert {name: o[ARGUMENT[name]] for name in moe_settings(spec.moe)} == moe_settings(spec.moe)
    assert (o["num_experts"], o["moe_router_topk"], o["moe_ffn_hidden_size"]) == \
        ((128, 8, 768) if size == "full" else (8, 2, 48))
    assert (o["expert_model_parallel_size"], o["tensor_model_parallel_size"]) == (ep, 1)
    assert o["fp8"] == ("hybrid" if precision == "fp8" else None)


@pytest.mark.parametrize("release", ["v26.5", "v25.11"])
def test_every_routing_key_is_written_because_the_releases_presets_route_otherwise(release):
    """v25.11's Qwen presets set no routing (language_model.yaml's allgather, no grouped GEMM or fused permutation);
    both leave the load-balancing loss at 0.0 where Qwen3's weight is 0.001."""
    o = trainer(experiment(moe_request(release), shipped(release), "/out/run"))["overrides"]
    preset = defaults(release)
    differ = {key for key in map(ARGUMENT.get, moe_settings(get_model("qwen3moe").moe)) if preset[key] != o[key]}
    assert differ == {"moe_aux_loss_coeff", "moe_router_dtype"} | ({"moe_token_dispatcher_type", "moe_grouped_gemm",
                                                                     "moe_permute_fusion"} if release == "v25.11"
                                                                    else set())


@pytest.mark.parametrize("release", ["v26.5", "v25.11"])
@pytest.mark.parametrize("fairness", ["spec", "tuned"])
def test_the_debugging_router_and_primus_turbo_the_shipped_files_turn_on_are_off(release, fairness):
    """Primus ships the router's random-logit switch on in both releases, and v26.5 Primus-Turbo's attention, grouped
    GEMM and DeepEP dispatcher with sync-free MoE stage 2: none of it runs in any other framework."""
    base = trainer(shipped(release))["overrides"]
    turbo = {key: value for key, value in base.items() if "turbo" in key and not key.startswith("turbo_deepep")}
    assert base["moe_router_force_load_balancing"] is True
    assert turbo == ({"enable_primus_turbo": True, "use_turbo_attention": True, "use_turbo_grouped_gemm": True,
                      "use_turbo_deepep": True, "turbo_sync_free_moe_stage": 2} if release == "v26.5" else
                     {"enable_primus_turbo": False, "use_turbo_attention": False, "use_turbo_grouped_mlp": False})
    o = trainer(experiment(moe_request(release, FAIRNESS=fairness), shipped(release), "/out/run"))["overrides"]
    assert {key: o[key] for key in turbo} == {key: 0 if key == "turbo_sync_free_moe_stage" else False
                                              for key in turbo}
    assert (o["moe_router_force_load_balancing"], o["moe_use_legacy_grouped_gemm"]) == (False, False)
    assert (o["gradient_accumulation_fusion"], o["overlap_grad_reduce"]) == (False, fairness == "tuned")


def test_the_shipped_sync_free_stage_without_primus_turbo_is_what_primus_refuses():
    """Turning Primus-Turbo off alone would stop the run at Primus's ROCm argument check: the stage goes to 0 too."""
    base = trainer(shipped("v26.5"))["overrides"]
    args = {**defaults("v26.5"), **base, "enable_primus_turbo": False, "expert_model_parallel_size": 8}
    assert megatron_args.refusals(args) == ["Please set `enable_primus_turbo=True` to enable sync-free MoE."]


def test_the_mi355x_file_trains_what_the_mi300x_file_does_its_optimizer_recompute_and_kernels_overridden():
    """v26.5 ships Qwen3 30B-A3B in both folders; the MI355X file's precision-aware optimizer with bf16 moments,
    experimental flag, recompute, Transformer Engine cross entropy and legacy grouped GEMM are all written over, so
    the experiments differ only in Primus-Turbo's unused DeepEP CU count and its RMSNorm switch (off)."""
    mi355x = trainer(shipped("v26.5", folder="MI355X"))["overrides"]
    assert (mi355x["use_precision_aware_optimizer"], mi355x["exp_avg_dtype"], mi355x["enable_experimental"],
            mi355x["recompute_granularity"], mi355x["moe_use_legacy_grouped_gemm"]) == \
        (True, "bf16", True, "full", True)
    req = moe_request()
    one, other = (trainer(experiment(req, shipped("v26.5", folder=folder), "/out/run"))["overrides"]
                  for folder in (None, "MI355X"))
    assert set(one.items()) ^ set(other.items()) == {("turbo_deepep_num_cu", 64), ("turbo_deepep_num_cu", 80),
                                                     ("use_turbo_rms_norm", False)}
    assert (other["use_precision_aware_optimizer"], other["main_grads_dtype"], other["exp_avg_dtype"],
            other["exp_avg_sq_dtype"], other["enable_experimental"], other["recompute_granularity"]) == \
        (False, "fp32", "fp32", "fp32", False, None)


def test_the_model_preset_is_the_shipped_default_whatever_the_node_sets(monkeypatch):
    """The files name theirs ${PRIMUS_MODEL:qwen3_30B_A3B}.yaml, which Primus fills from the environment first."""
    monkeypatch.setenv("PRIMUS_MODEL", "qwen3_235B_A22B")
    assert trainer(shipped("v26.5"))["model"] == "${PRIMUS_MODEL:qwen3_30B_A3B}.yaml"
    assert trainer(experiment(moe_request(), shipped("v26.5"), "/out/run"))["model"] == "qwen3_30B_A3B.yaml"
    with pytest.raises(ValueError, match=r"model preset \$\{PRIMUS_MODEL\}.yaml, a placeholder without a default"):
        model_preset("${PRIMUS_MODEL}.yaml")


def stand_in(tmp_path, exp: dict, release: str) -> subprocess.CompletedProcess:
    """The Primus stand-in on the experiment, 2 short steps: its argument dump and iteration lines."""
    trainer(exp)["overrides"].update(train_iters=2, seq_length=64)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    env = {**os.environ, "EXP": str(path), "GPUS_PER_NODE": "8", "NNODES": "1", "FAKE_PRIMUS_RELEASE": release}
    return subprocess.run([sys.executable, str(SHIPPED["v26.5"] / "examples" / "fake_primus.py")], env=env,
                          capture_output=True, text=True, timeout=60)


def read_back(tmp_path, out: subprocess.CompletedProcess) -> dict:
    log = tmp_path / "train.log"
    log.write_text(out.stdout)
    return parse_logs([log], "prim").effective


@pytest.mark.parametrize("release", ["v26.5", "v25.11"])
def test_the_stand_in_takes_the_experiment_and_its_argument_dump_reads_back_as_the_routing_and_ep(tmp_path, release):
    req = moe_request(release, "tiny", 8)
    out = stand_in(tmp_path, experiment(req, shipped(release), str(tmp_path)), release)
    assert out.returncode == 0, out.stderr
    effective = read_back(tmp_path, out)
    assert effective["ep"] == 8
    assert effective["moe"] == {**moe_settings(req.model.moe), "expert_model_parallel_size": 8,
                                "moe_router_force_load_balancing": False, "moe_use_legacy_grouped_gemm": False}


def test_the_shipped_v25_11_experiment_alone_reads_back_a_routing_the_judge_would_fail(tmp_path):
    """What Primus v25.11 runs from its own file: allgather, no load-balancing loss, the router in bf16, random
    logits."""
    out = stand_in(tmp_path, shipped("v25.11"), "v25.11")
    assert out.returncode == 0, out.stderr
    moe = read_back(tmp_path, out)["moe"]
    assert (moe["moe_token_dispatcher_type"], moe["moe_aux_loss_coeff"], moe["moe_router_dtype"],
            moe["moe_router_force_load_balancing"]) == ("allgather", 0.0, None, True)


def test_the_argument_dump_names_every_routing_setting_and_a_primus_log_gives_it_as_effective_moe():
    """tests/fixtures/logs/primus_v26_5_moe_arguments.log: Megatron-LM d3528a21's _print_args on rank 0's console
    (every argument as "  name ..... value", sorted), then Primus's forwarded iteration lines."""
    assert set(moe_settings(get_model("qwen3moe").moe)) <= set(MOE_ARGUMENTS.values())
    parsed = parse_logs([LOGS / "primus_v26_5_moe_arguments.log"])
    assert (parsed.framework, parsed.effective["ep"], parsed.effective["tp"]) == ("prim", 8, 1)
    assert parsed.effective["moe"] == {**moe_settings(get_model("qwen3moe").moe), "expert_model_parallel_size": 8,
                                       "moe_router_force_load_balancing": False, "moe_use_legacy_grouped_gemm": False}
    dense = parse_logs([LOGS / "primus_v26_5_rank0_console.log"]).effective
    assert "moe" not in dense


def test_a_prim_qwen3moe_run_on_a_faked_node_is_judged_on_its_read_back_routing(tmp_path):
    """The launcher writes the experiment, the stand-in runs it, the judge reads effective.moe and ep from its log
    and passes the run; the routing v25.11's own file would run fails it."""
    fake = machine(tmp_path, amd=8)
    prepared_data(tmp_path / "data", "bc", ["qwen"])
    result = fake.run("shell/train.sh", FRAMEWORK="prim", MODELS="qwen3moe", MODEL_SIZE="tiny", EP="8", **SHORT_RUN)
    assert result.returncode == 0, result.output
    (run_dir,) = run_dirs(tmp_path / "output")
    outcome = read(run_dir / "result.json")
    assert outcome["run"]["status"] == "ok" and outcome["effective"]["ep"] == outcome["parallelism"]["ep"] == 8
    assert outcome["effective"]["moe"]["moe_token_dispatcher_type"] == "alltoall"
    fatal = [f.message for f in validate.check_result(Loaded("prim", outcome, {})) if f.fatal]
    assert fatal == []
    shipped_routing = read_back(tmp_path, stand_in(tmp_path, shipped("v25.11"), "v25.11"))["moe"]
    outcome["effective"]["moe"] = {**shipped_routing, "num_moe_experts": 8, "moe_router_topk": 2,
                                   "moe_ffn_hidden_size": 48}
    assert [f.message for f in validate.check_result(Loaded("prim", outcome, {})) if f.fatal] == [
        "effective.moe.moe_aux_loss_coeff is 0.0 in the framework, 0.001 for qwen3-30b-a3b-tiny and "
        "utils.spec.fairness.MOE_ROUTING",
        "effective.moe.moe_router_dtype is None in the framework, 'fp32' for qwen3-30b-a3b-tiny and "
        "utils.spec.fairness.MOE_ROUTING"]


@pytest.mark.parametrize("device, memory", [("mi300x", "192 GiB"), ("mi355x", "288 GiB")])
def test_a_dry_run_on_an_8_gpu_amd_node_plans_prim_qwen3moe_at_ep_8_with_its_predicted_memory(tmp_path, device,
                                                                                                memory):
    fake = machine(tmp_path, engine=True, amd=8)
    result = fake.run("shell/run_train.sh", DRY_RUN="1", FRAMEWORK="prim", MODELS="qwen3moe", EP="8",
                      TARGET_DEVICE=device)
    assert result.returncode == 0, result.output
    lines = result.stdout.splitlines()
    row = next(index for index, line in enumerate(lines) if line.split()[1:2] == ["prim-qwen3moe"])
    assert " TP1 PP1 DP8 EP8 GA8 " in lines[row] and "skipped" not in lines[row]
    assert lines[row + 1].strip().startswith("predicted peak ") and f" of {memory}: fits " in lines[row + 1]
    (written,) = (tmp_path / "output").glob("*/prim-qwen3moe/primus_experiment.yaml")
    o = trainer(yaml.safe_load(written.read_text()))["overrides"]
    assert (o["num_experts"], o["expert_model_parallel_size"], o["moe_router_force_load_balancing"]) == (128, 8, False)
