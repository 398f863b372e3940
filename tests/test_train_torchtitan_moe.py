"""torchtitan on a mixture of experts: TPrimat's Qwen3 30B-A3B as torchtitan 0.3.0's own qwen3 MoE model
(train/torchtitan/moe.py), with megatron-core's load-balancing loss added to its routers (torchtitan has none: its
load_balance_coeff is an expert bias, turned off), its experts split over EP of the FSDP ranks, and what it built read
back into effective.moe in megatron-core's names.

The mapping is checked without torchtitan; then torchtitan's own ConfigManager builds the tiny and the full model from
TPrimat's config function (on the meta device: the spec's parameters exactly) and the read-back of what it built passes
the judge's MoE check; the hook on torchtitan's router is held to megatron-core's own aux loss; the tiny model trains
4 steps on the CPU through torchtitan's own loop over gloo, at DP=2 and at EP=2 (the 8 experts 4 and 4 over the two
ranks, tokens exchanged by torchtitan's all-to-all: the same losses); and a dry run on a faked 8-GPU node plans it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluate import model_checks, validate
from evaluate.collect import Loaded
from tests.fixtures.train import torchtitan_overlay
from tests.fixtures.train.shared_runs import shared_run
from tests.fixtures.train.torchtitan_overlay import request
from tests.fixtures.train_matrix.shell import machine, read, run_dirs
from tests.shell_harness import HANG_TIMEOUT_S
from tests.test_train_fsdp_runs import BASE
from tests.test_train_mega_runs import trainer_env
from tests.test_train_torchtitan import RUN_DIR, probe
from train.torchtitan import settings as titan_settings
from utils import run_files
from utils.errors import UsageError
from utils.frameworks.torchtitan import FRAMEWORK, MODEL_NAMES
from utils.machine import pyenvs
from utils.spec.fairness import moe_settings
from utils.spec.models import get_model
from utils.spec.result_types import typed

ROOT = Path(__file__).resolve().parent.parent
STEPS = 4
LAYOUTS = {"dp2": {}, "ep2": {"EP": 2}}  # two ranks each: the 8 experts on both, or 4 and 4
# EP=2 against DP=2: the same weights (step 1's loss is the same to the last digit) and samples; the experts' bf16
# sums in another order. Measured: at most 1.4e-4 apart over 4 steps, while the loss falls 0.085.
LAYOUT_TOLERANCE = 1e-3


def moe_request(size: str = "full", **env: str):
    return request("qwen3moe", MODEL_SIZE=size, TP="1", PP="1", DP="8", **env)


def expected_moe(spec, ep: int, dispatcher: str) -> dict:
    """What torchtitan builds for the spec, in megatron-core's names: the spec's numbers and routing, its own
    dispatcher, grouped GEMM and bf16 experts, no expert bias."""
    return {**moe_settings(spec.moe), "moe_token_dispatcher_type": dispatcher, "moe_grouped_gemm": True,
            "moe_permute_fusion": False, "expert_model_parallel_size": ep, "moe_router_enable_expert_bias": False,
            "experts_dtype": "bf16", "moe_layers": spec.num_layers}


# --- the mapping, without torchtitan --------------------------------------------------------------------------------

def test_torchtitan_builds_qwen3_moe_as_its_qwen3_model_at_tp_1_only():
    assert MODEL_NAMES["qwen3moe"] == "qwen3" and FRAMEWORK.expert_parallel
    assert FRAMEWORK.model_refusal("qwen3moe", 1) == ""
    assert FRAMEWORK.model_refusal("qwen3moe", 2).startswith("torchtitan runs qwen3moe at TP=1 only (TP=2): ")
    assert FRAMEWORK.model_refusal("llama", 2) == "" and "mistral" not in MODEL_NAMES


def test_the_experts_routing_load_balancing_and_ep_are_the_requests():
    req = moe_request(EP="2")
    written = titan_settings.settings(req, RUN_DIR)
    numbers, values, spec = written["model"], written["set"], req.model
    assert numbers["moe"] == dataclasses.asdict(spec.moe)
    assert (numbers["head_dim"], numbers["qk_norm"], numbers["num_layers"]) == (128, True, 48)
    assert (values["parallelism.expert_parallel_degree"], values["parallelism.data_parallel_shard_degree"],
            values["moe_aux_loss_coeff"]) == (2, 8, spec.moe.aux_loss_coeff)
    assert titan_settings.settings(request(), RUN_DIR)["model"]["moe"] is None


def test_expert_parallelism_over_replicated_data_parallelism_is_refused_in_one_line():
    req = moe_request(EP="2")
    req = dataclasses.replace(req, native=dataclasses.replace(req.native, data_parallel="ddp"))
    with pytest.raises(UsageError, match="EP=2 with DATA_PARALLEL=ddp: torchtitan's expert parallelism") as err:
        titan_settings.settings(req, RUN_DIR)
    assert "\n" not in str(err.value)


def test_a_load_balancing_torchtitan_is_not_given_is_refused_and_none_adds_no_loss():
    req = moe_request()

    def balanced(kind: str):
        spec = dataclasses.replace(req.model, moe=dataclasses.replace(req.model.moe, load_balancing=kind))
        return dataclasses.replace(req, model=spec)
    with pytest.raises(UsageError, match="qwen3moe: its seq_aux_loss load balancing is not mapped onto torchtitan"):
        titan_settings.settings(balanced("seq_aux_loss"), RUN_DIR)
    assert titan_settings.settings(balanced("none"), RUN_DIR)["set"]["moe_aux_loss_coeff"] is None


# --- torchtitan 0.3.0 installed -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def torchtitan_path():
    return torchtitan_overlay.installed()


@pytest.mark.parametrize("size, ep", [("tiny", 1), ("full", 2)])
def test_torchtitans_own_classes_build_the_specs_model_and_read_it_back(torchtitan_path, tmp_path, size, ep):
    """TPrimat's config through torchtitan's ConfigManager: its qwen3 model with the spec's parameters, every set field
    kept, the routers given megatron-core's loss scaled 1 / (GA x DP), and the read-back of a GPU run (its router's
    gate under autocast to fp32) passing the judge's MoE check."""
    req = moe_request(size, EP=str(ep))
    found = probe(torchtitan_path, tmp_path, req)
    spec, lay = req.model, req.parallelism
    assert (found["model"], found["parallelize"]) == ("qwen3", "parallelize_qwen3")
    assert [path for path, kept in found["kept"].items() if not kept] == []
    assert found["parameters"] == spec.param_count()
    assert found["norm_eps"] == [spec.norm_eps] and found["scales"] == [1 / (lay.ga * lay.dp)]
    effective = found["effective"]
    assert (effective["head_dim"], effective["qk_norm"], effective["ep"], effective["dp"]) == \
        (spec.head_dim, True, ep, 8)
    # at EP=1 torchtitan's all-to-all dispatcher has no EP mesh to exchange over (the probe builds no meshes)
    assert effective["moe"] == expected_moe(spec, ep, "local")
    result = typed({"model": {"variant": spec.variant}, "effective": effective})
    assert model_checks.moe_routing(result, spec) == []


AUX_PROBE = r"""
import json, sys
import torch
from megatron.core.transformer.moe.moe_utils import switch_load_balancing_loss_func
from train.torchtitan import moe

numbers = json.loads(sys.argv[1])
router = moe.qwen3_moe(numbers, "flex").layers[0].moe.router
torch.manual_seed(0)
plain, hooked = router.build(), router.build()
plain.gate.weight.data.normal_(std=0.02)
hooked.load_state_dict(plain.state_dict())
coeff, scale = numbers["moe"]["aux_loss_coeff"], 100.0  # a large scale: the aux loss's share of the gradient shows
hooked.register_forward_hook(moe.RouterAuxLoss(coeff, scale))
x = torch.randn(2, 32, numbers["dim"])
weights = torch.randn(2, 32, router.top_k)  # a stand-in for the language-model loss's gradient into the scores
scores, chosen, probs = plain(x)
ours = hooked(x)
experts, weight = probs.shape[-1], plain.gate.weight
counts = torch.bincount(chosen.flatten(), minlength=experts)
aux = switch_load_balancing_loss_func(probs.reshape(-1, experts), counts, 64, router.top_k, experts, coeff)
main = (scores * weights).sum()
(main_only,) = torch.autograd.grad(main, weight, retain_graph=True)
(wanted,) = torch.autograd.grad(main + scale * aux, weight)  # megatron-core's loss, its gradient weighed by scale
(ours[0] * weights).sum().backward()
got = hooked.gate.weight.grad
with torch.no_grad():
    evaluated = hooked.eval()(x)[0]
print(json.dumps({"same_outputs": all(torch.equal(a, b) for a, b in zip(ours, (scores, chosen, probs))),
                  "megatron_cores": torch.allclose(got, wanted, rtol=1e-5, atol=1e-9),
                  "without_it": torch.allclose(got, main_only, rtol=1e-3, atol=1e-6),
                  "eval_untouched": torch.equal(evaluated, scores)}))
"""


def test_the_router_hook_trains_megatron_cores_aux_loss_and_leaves_the_outputs(torchtitan_path):
    numbers = titan_settings.settings(moe_request("tiny"), RUN_DIR)["model"]
    env = {**os.environ, "PYTHONPATH": str(torchtitan_path), "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, "-c", AUX_PROBE, json.dumps(numbers)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found == {"same_outputs": True, "megatron_cores": True, "without_it": False, "eval_untouched": True}


# --- the tiny model trained on the CPU through torchtitan's own loop --------------------------------------------------

@dataclasses.dataclass
class Trained:
    """A finished run: its directory, exit status and console."""

    directory: Path
    returncode: int
    console: str

    @property
    def result(self) -> dict:
        return json.loads((self.directory / run_files.RESULT).read_text())


def train(directory: Path, data_dir: Path, **knobs) -> Trained:
    """One torchtitan run of the tiny qwen3moe through TPrimat's launcher (two ranks over gloo), judged by it."""
    settings = {**BASE, "FRAMEWORK": "torchtitan", "MODELS": "qwen3moe", "TRAIN_ITERS": STEPS, **knobs}
    env = {**trainer_env(data_dir, settings), pyenvs.ROOT_ENV: str(pyenvs.root())}
    out = subprocess.run([sys.executable, "-m", "train.launch.run", "--platform", "cpu", "--framework", "torchtitan",
                          "--model", "qwen3moe", "--run-dir", str(directory)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=HANG_TIMEOUT_S)
    return Trained(directory, out.returncode, out.stdout + out.stderr)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    torchtitan_overlay.installed()  # built here (or a clear test failure), then the launcher finds it
    found = {}

    def trained(name: str) -> Trained:
        if name not in found:
            found[name] = Trained(*shared_run(tmp_path_factory, f"torchtitan-moe-{name}",
                                              lambda directory, data: train(directory, data, **LAYOUTS[name])))
        return found[name]
    return trained


@pytest.mark.parametrize("name, dispatcher", [("dp2", "local"), ("ep2", "alltoall")])
def test_the_tiny_qwen3_moe_trains_on_the_cpu_and_passes_the_gate(runs, name, dispatcher):
    run = runs(name)
    assert run.returncode == 0, run.console[-4000:]
    result = run.result
    assert (result["run"]["status"], result["run"]["steps_completed"]) == ("ok", STEPS)
    assert [f.message for f in validate.check_result(Loaded(name, result, {})) if f.fatal] == []
    spec, ep = get_model("qwen3moe", "tiny"), LAYOUTS[name].get("EP", 1)
    assert (result["model"]["parameters"], result["model"]["active_parameters"]) == \
        (spec.param_count(), spec.active_param_count())
    # the CPU's fp32 run: the router's gate in fp32 (the parameters' dtype), the experts in bf16 all the same
    assert result["effective"]["moe"] == expected_moe(spec, ep, dispatcher)
    assert (result["parallelism"]["ep"], result["effective"]["ep"], result["training"]["precision"]) == (ep, ep, "fp32")
    losses = result["series"]["loss"]
    assert losses[-1] < losses[0], losses
    print(f"torchtitan qwen3moe {name}: losses {losses}")


def test_experts_split_over_two_ranks_give_the_losses_of_the_experts_on_both(runs):
    base, split = runs("dp2").result["series"]["loss"], runs("ep2").result["series"]["loss"]
    assert split[0] == base[0]  # the same initial weights, whatever the layout
    assert split == pytest.approx(base, abs=LAYOUT_TOLERANCE)


# --- a dry run on a faked 8-GPU node ----------------------------------------------------------------------------------

def test_a_dry_run_on_an_8_gpu_node_plans_qwen3_moe_with_its_experts_and_a_memory_line(tmp_path):
    result = machine(tmp_path, engine=True, nvidia=8).run("shell/run_train.sh", DRY_RUN="1", FRAMEWORK="torchtitan",
                                                          MODELS="qwen3moe", TARGET_DEVICE="h100", EP="2")
    assert result.returncode == 0, result.output
    (run_dir,) = run_dirs(tmp_path / "output")
    assert run_dir.name == "torchtitan-qwen3moe"
    written = read(run_dir / "torchtitan_settings.json")
    assert written["model"]["moe"] == dataclasses.asdict(get_model("qwen3moe").moe)
    assert written["set"]["parallelism.expert_parallel_degree"] == 2
    (line,) = [line for line in result.stdout.splitlines() if "torchtitan-qwen3moe" in line and " EP2 " in line]
    assert "TP1 PP1 DP8 EP2" in line
    assert "predicted peak" in result.stdout.split(line, 1)[1].splitlines()[1]


def test_a_dry_run_at_tp_2_skips_torchtitan_for_qwen3_moe_saying_why(tmp_path):
    result = machine(tmp_path, engine=True, nvidia=8).run("shell/run_train.sh", DRY_RUN="1", FRAMEWORK="torchtitan",
                                                          MODELS="qwen3moe", TP="2", DP="4")
    assert result.returncode == 2 and run_dirs(tmp_path / "output") == []
    assert "skipped: torchtitan runs qwen3moe at TP=1 only (TP=2): at TP > 1 torchtitan routes the TP group's " \
        "tokens as DTensors, onto which the load-balancing loss TPrimat adds" in result.stdout
