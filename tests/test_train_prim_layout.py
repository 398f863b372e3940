"""prim runs the request's layout, memory and kernels whatever Primus's shipped file chose, and claims no setting
Megatron-LM does not apply: the 70B file's FSDP2 and full recompute, Turbo attention, the RoPE scaling factor."""

from __future__ import annotations

import dataclasses
import inspect
import os
import subprocess
import sys

import pytest
import yaml

from evaluate.extract import features
from evaluate.logs.parse import parse_logs
from tests.fixtures.train_matrix import megatron_args, primus_v25_11, primus_v26_5
from tests.fixtures.train_matrix.requests import FIXTURES, run_request
from tests.fixtures.train_matrix.shell import machine
from train.prim import releases
from train.prim.config import APPLIED_ROPE_SCALING_FACTOR, NotApplied, experiment, overrides, shipped_config
from utils.machine.platform_env import platform_env

SHIPPED = {"v26.5": FIXTURES / "primus", "v25.11": FIXTURES / "primus_v25.11"}
STACKS = {"v26.5": "primus-v26.5", "v25.11": "primus-v25.11"}


def defaults(release: str) -> dict:
    """The release's preset values for the 70B experiment (v25.11's stand-in has the 8B model's: the module's keys,
    which Megatron's layout checks read, are the same)."""
    return primus_v26_5.defaults("llama3.1_70B.yaml") if release == "v26.5" else primus_v25_11.defaults(
        "llama3.1_8B.yaml")


def shipped_70b(release: str) -> dict:
    return yaml.safe_load(shipped_config(SHIPPED[release], "llama70b", "bf16").read_text())


def proxy_request(release: str, **knobs):
    req = run_request("amd", "prim", "llama70b", MODELS="llama70b", MODEL_LAYERS="8", **knobs)
    return dataclasses.replace(req, environment=dataclasses.replace(req.environment, stack=STACKS[release]))


@pytest.mark.parametrize("release", ["v26.5", "v25.11"])
def test_the_shipped_70b_file_with_the_distributed_optimizer_is_what_megatron_refuses(release):
    """What prim wrote before: the shipped FSDP2 kept, the distributed optimizer forced on."""
    shipped = shipped_70b(release)["modules"]["pre_trainer"]["overrides"]
    assert (shipped["use_torch_fsdp2"], shipped["recompute_granularity"], shipped["recompute_num_layers"]) == \
        (True, "full", 80)
    args = {**defaults(release), **shipped, "use_distributed_optimizer": True}
    assert "--use-torch-fsdp2 is not supported with MCore's distributed optimizer" in \
        megatron_args.refusals(args, platform_env("amd"))


@pytest.mark.parametrize("release", ["v26.5", "v25.11"])
@pytest.mark.parametrize("fairness", ["spec", "tuned"])
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_a_70b_proxy_experiment_is_one_megatron_accepts_with_the_requests_layout_and_no_recompute(
        release, fairness, precision):
    req = proxy_request(release, FAIRNESS=fairness, PRECISION=precision)
    exp = experiment(req, shipped_70b(release), "/out/run")
    o = exp["modules"]["pre_trainer"]["overrides"]
    assert megatron_args.refusals({**defaults(release), **o}, platform_env("amd")) == []
    assert (o["use_torch_fsdp2"], o["use_distributed_optimizer"], o["num_layers"]) == (False, True, 8)
    assert (o["recompute_granularity"], o["recompute_method"], o["recompute_num_layers"]) == (None, None, None)
    assert (o["tensor_model_parallel_size"], o["pipeline_model_parallel_size"]) == \
        (req.parallelism.tp, req.parallelism.pp)


def test_the_dry_run_of_a_70b_proxy_writes_an_experiment_megatron_accepts(tmp_path):
    """PLATFORM=amd DRY_RUN=1 FRAMEWORK=prim MODELS=llama70b MODEL_LAYERS=8 ./shell/run_train.sh on 8 fake GPUs."""
    fake = machine(tmp_path, amd=8)
    result = fake.run("shell/run_train.sh", PLATFORM="amd", DRY_RUN="1", FRAMEWORK="prim", MODELS="llama70b",
                      MODEL_LAYERS="8")
    assert result.returncode == 0, result.output
    (written,) = (tmp_path / "output").glob("*/*/primus_experiment.yaml")
    o = yaml.safe_load(written.read_text())["modules"]["pre_trainer"]["overrides"]
    assert megatron_args.refusals({**defaults("v26.5"), **o}, platform_env("amd")) == []
    assert o["use_torch_fsdp2"] is False and o["recompute_granularity"] is None


def stand_in_features(tmp_path, exp: dict) -> dict:
    """The result's features of a Primus stand-in run of the experiment (its argument dump, read as extract does)."""
    path = tmp_path / "exp.yaml"
    exp["modules"]["pre_trainer"]["overrides"].update(train_iters=2, seq_length=64)
    path.write_text(yaml.safe_dump(exp))
    env = {**os.environ, "EXP": str(path), "GPUS_PER_NODE": "8", "NNODES": "1"}
    out = subprocess.run([sys.executable, str(SHIPPED["v26.5"] / "examples" / "fake_primus.py")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    log = tmp_path / "train.log"
    log.write_text(out.stdout)
    return features(parse_logs([log], "prim").effective)


def test_prim_qwen_trains_with_transformer_engines_attention_and_its_result_says_so(tmp_path):
    shipped = yaml.safe_load(shipped_config(SHIPPED["v26.5"], "qwen", "bf16").read_text())
    assert stand_in_features(tmp_path, shipped)["use_turbo_attention"] is True  # as Primus ships it
    found = stand_in_features(tmp_path, experiment(run_request("amd", "prim", "qwen"), shipped, str(tmp_path)))
    assert (found["enable_primus_turbo"], found["use_turbo_attention"], found["attention_backend"]) == \
        (False, False, "auto")


def test_megatron_applies_only_its_own_rope_scaling_factor_so_tprimat_writes_none():
    """Megatron-LM's gpt_builders.py passes rope_scaling but no factor: GPTModel's default is what trains."""
    from megatron.core.models.gpt.gpt_model import GPTModel

    assert inspect.signature(GPTModel.__init__).parameters["rope_scaling_factor"].default == \
        APPLIED_ROPE_SCALING_FACTOR
    req = run_request("amd", "prim", "llama")
    assert req.model.rope_scaling["factor"] == APPLIED_ROPE_SCALING_FACTOR
    assert "rope_scaling_factor" not in overrides(req) and overrides(req)["use_rope_scaling"] is True
    other = dataclasses.replace(req, model=dataclasses.replace(
        req.model, rope_scaling={**req.model.rope_scaling, "factor": 32.0}))
    with pytest.raises(NotApplied, match=r"scales RoPE by 32.0, but Primus's Megatron-LM applies only 8.0"):
        overrides(other)


@pytest.mark.parametrize("release", ["v26.5", "v25.11"])
def test_a_primus_launchers_pip_installs_nothing_and_never_reaches_an_index(tmp_path, release):
    """v25.11's prepare.py runs `pip install -e third_party/Emerging-Optimizers` with check=True and run_pretrain.sh
    `pip install -r requirements.txt` at every launch: under the release's environment this machine's real pip
    must exit 0 for the checkout and for an installed requirement, install nothing, and refuse a missing one."""
    env = {**os.environ, **{k: v for k, v in releases.of(release).env.items() if k.startswith("PIP_")},
           "PIP_FIND_LINKS": "", "PIP_CONFIG_FILE": os.devnull}
    checkout = tmp_path / "Emerging-Optimizers"
    (checkout / "tprimat_eo_probe").mkdir(parents=True)
    (checkout / "tprimat_eo_probe" / "__init__.py").write_text("")
    (checkout / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
                                             '"setuptools.build_meta"\n[project]\nname = "tprimat-eo-probe"\n'
                                             'version = "0.1"\n')
    pip = [sys.executable, "-m", "pip", "install"]
    editable = subprocess.run([*pip, "-e", str(checkout)], env=env, capture_output=True, text=True, timeout=120)
    assert editable.returncode == 0, editable.stderr
    assert "Would install tprimat-eo-probe-0.1" in editable.stdout
    listed = subprocess.run([sys.executable, "-m", "pip", "list"], capture_output=True, text=True, timeout=60).stdout
    assert "tprimat-eo-probe" not in listed and not list(checkout.glob("*.egg-info"))
    assert subprocess.run([*pip, "pyyaml"], env=env, capture_output=True, timeout=120).returncode == 0
    missing = subprocess.run([*pip, "mlflow==3.4.0"], env=env, capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and "No matching distribution found for mlflow==3.4.0" in missing.stderr


@pytest.mark.parametrize("release", ["v26.5", "v25.11"])
@pytest.mark.parametrize("fairness", ["spec", "tuned"])
def test_megatrons_bf16_rule_leaves_the_gradient_reduction_the_profile_asks_for(release, fairness):
    """Primus runs Megatron-LM's validate_args, which reduces bf16 gradients in fp32 unless grad_reduce_in_bf16 says
    otherwise (utils/upstream/table.py: megatron-lm-bf16-reduces-in-fp32): the experiment says it, both ways."""
    req = proxy_request(release, FAIRNESS=fairness)
    o = experiment(req, shipped_70b(release), "/out/run")["modules"]["pre_trainer"]["overrides"]
    asked = req.fairness.table["grad_reduce_in_fp32"]
    assert megatron_args.settled({**defaults(release), **o})["accumulate_allreduce_grads_in_fp32"] is asked
    assert megatron_args.settled({**defaults(release), **o, "grad_reduce_in_bf16": False})[
        "accumulate_allreduce_grads_in_fp32"] is True  # what a real Primus ran before, whatever the profile said
