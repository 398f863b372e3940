"""The mega trainer on a mixture-of-experts model, trained for real on the CPU: the tiny Qwen3 30B-A3B (8 experts,
top-2, QK-norm, heads wider than hidden/heads) in megatron-core's own MoE layer over gloo with two workers.

What it ran with is read back from megatron-core's TransformerConfig into the result (effective.moe), the result's
FLOPs count the active parameters and pass the gate, and a TP=2 layout (the experts split over TP, the router
whole on each rank) and an EP=2 one (4 of the 8 experts on each DP rank, tokens dispatched over gloo's all-to-all)
give the DP=2 run's losses: the same weights and samples whatever the layout.
"""

from __future__ import annotations

import copy
import functools
import math
import shutil

import pytest

from evaluate import compare, validate
from evaluate.collect import Loaded
from tests.fixtures.train.shared_runs import shared_run
from tests.test_train_mega_runs import BASE, LAYOUT_TOLERANCE, Run, assert_trained, train
from utils.spec.models import get_model
from utils.spec.result import schema_errors

STEPS = BASE["TRAIN_ITERS"]
LAYOUTS = {
    "dp2": dict(DP=2),  # 2 workers, a global batch of 4
    "tp2_ga2": dict(TP=2, GA=2),  # the same 4 samples in two microbatches on one TP=2 model
    "ep2": dict(DP=2, EP=2, MODELS="qwen3moe"),  # the dp2 run, its 8 experts split 4 and 4 over the two DP ranks
}


def trained(tmp_path_factory, name: str) -> Run:
    """The run of LAYOUTS called name, trained once per session for every file that reads it (shared_runs.py:
    tests/test_train_mbridge_cpu.py holds Megatron-Bridge's MoE run against dp2)."""
    return Run(*shared_run(tmp_path_factory, f"mega-moe-{name}",
                           lambda directory, data: train(directory, data, model="qwen3moe", **LAYOUTS[name])))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return functools.cache(functools.partial(trained, tmp_path_factory))


def test_the_tiny_qwen3_moe_trains_over_gloo_and_passes_the_gate(runs):
    run = runs("dp2")
    assert_trained(run, STEPS)
    result = run.result
    assert schema_errors(result) == []
    losses = run.series("loss")
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0], losses
    assert [f.message for f in validate.check_result(Loaded("moe", result, {})) if f.fatal] == []
    spec = get_model("qwen3moe", "tiny")
    model = result["model"]
    assert (model["variant"], model["parameters"], model["active_parameters"]) == \
        ("qwen3-30b-a3b-tiny", spec.param_count(), spec.active_param_count())
    assert result["effective"]["parameters"] == spec.param_count()  # megatron-core's count is the spec's
    assert result["performance"]["flops_per_token"] == spec.flops_per_token(64)


def test_the_moe_settings_are_read_back_from_megatron_cores_config(runs):
    effective = runs("dp2").result["effective"]
    assert effective["qk_norm"] is True and effective["head_dim"] == 64
    assert effective["moe"] == {
        "num_moe_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 48,
        "moe_shared_expert_intermediate_size": None, "moe_router_score_function": "softmax",
        "moe_router_pre_softmax": False, "moe_router_load_balancing_type": "aux_loss", "moe_aux_loss_coeff": 1e-3,
        "moe_token_dispatcher_type": "alltoall", "moe_router_dtype": "fp32", "moe_expert_capacity_factor": None,
        "moe_z_loss_coeff": None, "moe_grouped_gemm": False, "moe_permute_fusion": False,
        "moe_shared_expert_overlap": False, "expert_model_parallel_size": 1}


def test_the_cpu_says_which_moe_kernels_it_runs_without(runs):
    warnings = runs("dp2").result["warnings"]
    assert "MoE kernels unavailable on this stack (Transformer Engine's), running without: moe_grouped_gemm, " \
           "moe_permute_fusion" in warnings


def test_experts_split_over_tensor_parallel_ranks_give_the_same_losses(runs):
    base, other = runs("dp2"), runs("tp2_ga2")
    assert_trained(other, STEPS)
    assert other.series("loss") == pytest.approx(base.series("loss"), abs=LAYOUT_TOLERANCE)
    effective = other.result["effective"]
    assert (effective["tp"], effective["ga"], effective["gbs"], effective["sequence_parallel"]) == (2, 2, 4, True)


def test_experts_split_over_expert_parallel_ranks_give_the_same_losses_and_are_read_back(runs):
    base, run = runs("dp2"), runs("ep2")
    assert_trained(run, STEPS)
    result = run.result
    assert schema_errors(result) == []
    assert [f.message for f in validate.check_result(Loaded("ep2", result, {})) if f.fatal] == []
    assert (result["parallelism"]["ep"], result["parallelism"]["dp"], result["parallelism"]["num_gpus"]) == (2, 2, 2)
    effective = result["effective"]
    assert (effective["ep"], effective["dp"], effective["moe"]["expert_model_parallel_size"]) == (2, 2, 2)
    assert effective["parameters"] == get_model("qwen3moe", "tiny").param_count()  # each expert counted once
    assert effective["dp_replicas_identical"] is True  # the dense weights over DP, each expert over its own group
    # each expert drawn as the whole model draws it (train/mega/model.py's global expert index): the same model
    assert run.series("loss") == pytest.approx(base.series("loss"), abs=LAYOUT_TOLERANCE)


def assert_experts_load_counted(result: dict) -> None:
    """Every step counted each layer's top-k choices of every token once (a dropless router: tokens x top-k
    assignments a layer, whatever the layout), and the gate recomputes the summary from those counts."""
    moe, series, load = result["model"]["moe"], result["series"], result["performance"]["expert_load"]
    per_layer = result["training"]["gbs"] * result["training"]["seq_len"] * moe["top_k"]
    layers = result["model"]["num_layers"]
    assert series["expert_load_assigned"] == [[per_layer] * layers] * len(series["step"])
    assert all(per_layer / moe["num_experts"] <= most <= per_layer for step in series["expert_load_max"]
               for most in step)
    assert (load["experts"], load["layers"], load["dropped_assignments"]) == (moe["num_experts"], layers, 0)
    assert 1.0 <= max(load["max_over_mean_by_layer"]) <= load["max_over_mean"] <= moe["num_experts"]
    flattered = copy.deepcopy(result)
    flattered["performance"]["expert_load"]["max_over_mean"] = 0.5
    assert [f.message for f in validate.check_result(Loaded("flattered", flattered, {})) if f.fatal] == [
        f"performance.expert_load.max_over_mean is 0.5 in the result, {load['max_over_mean']!r} from its router "
        "counts"]


def test_the_experts_load_is_counted_per_layer_and_step_on_every_layout(runs):
    for name in LAYOUTS:
        assert_experts_load_counted(runs(name).result)


def test_the_report_shows_each_moe_runs_load_beside_its_throughput(runs, tmp_path):
    for name in ("dp2", "ep2"):
        shutil.copytree(runs(name).directory, tmp_path / "runs" / f"mega-qwen3moe-{name}")
    assert compare.main([str(tmp_path / "runs"), "-o", str(tmp_path / "out")]) == 0
    section = (tmp_path / "out" / "report.md").read_text().split("## Mixture of experts: the experts' load")[1]
    for name, layout in (("dp2", "1/1/2/1"), ("ep2", "1/1/2/2")):
        load = runs(name).result["performance"]["expert_load"]
        (row,) = [line for line in section.split("\n## ")[0].splitlines() if f"| {layout} |" in line]
        assert f"| 8, 2 | {load['max_over_mean']:.2f} |" in row and row.endswith("| 0 |"), row
