"""The mega trainer on GPT-OSS-20B's tiny variant, trained for real on the CPU in megatron-core's own layers over gloo:
attention sinks, a sliding window on layer 1 and full attention on layer 2, biases on every linear layer (the
router's and the experts' included), the clamped SwiGLU and YaRN, as TransformerConfig's own fields build them.

The built model is the spec's (its parameter count and features read back and held to the spec by the gate), an
EP=2 layout gives the DP=2 run's losses, and megatron-core's refusal that made mega skip the one-rank reduction for
the local experts' biases is shown on megatron-core itself, so that the day it is fixed upstream this test says so.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from evaluate import validate
from evaluate.collect import Loaded
from tests.fixtures.train.data_dir import make_data_dir
from tests.test_train_mega_moe import assert_experts_load_counted
from tests.test_train_mega_runs import BASE, LAYOUT_TOLERANCE, assert_trained, train
from utils.spec.models import get_model
from utils.spec.result import schema_errors

STEPS = BASE["TRAIN_ITERS"]
LAYOUTS = {"dp2": dict(DP=2, MODELS="gptoss"), "ep2": dict(DP=2, EP=2, MODELS="gptoss")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    data = make_data_dir(tmp_path_factory.mktemp("gptoss-data"), ("gptoss",))

    @functools.cache
    def trained(name: str):
        return train(tmp_path_factory.mktemp(f"gptoss-{name}") / "run", data, model="gptoss", **LAYOUTS[name])
    return trained


def fatal(result: dict) -> list[str]:
    return [f.message for f in validate.check_result(Loaded("gptoss", result, {})) if f.fatal]


def test_the_tiny_gpt_oss_trains_over_gloo_as_the_spec_builds_it_and_passes_the_gate(runs):
    run = runs("dp2")
    assert_trained(run, STEPS)
    result, spec = run.result, get_model("gptoss", "tiny")
    assert schema_errors(result) == [] and fatal(result) == []
    effective = result["effective"]
    assert effective["parameters"] == spec.param_count() == 52_471_704  # biases and sinks as the spec counts them
    assert effective["model_features"] == list(spec.features) == [
        "sliding_window", "alternating_window", "attention_sinks", "linear_bias", "clamped_swiglu", "yarn"]
    assert (effective["activation"], effective["position_embedding"], effective["head_dim"]) == \
        ("quick_gelu", "yarn", 64)
    assert (effective["moe"]["moe_router_load_balancing_type"], effective["moe"]["moe_aux_loss_coeff"]) == ("none", 0)
    assert result["performance"]["flops_per_token"] == spec.flops_per_token(64)
    assert_experts_load_counted(result)


def test_a_model_built_without_one_of_its_features_fails_the_gate(runs):
    result = copy.deepcopy(runs("dp2").result)
    result["effective"]["model_features"].remove("attention_sinks")
    assert "effective.model_features is ['alternating_window', 'clamped_swiglu', 'linear_bias', 'sliding_window', " \
           "'yarn'] in the framework, ['alternating_window', 'attention_sinks', 'clamped_swiglu', 'linear_bias', " \
           "'sliding_window', 'yarn'] for gpt-oss-20b-tiny in utils/spec/models.py" in fatal(result)


def test_experts_with_biases_split_over_expert_parallel_ranks_give_the_same_losses(runs):
    base, run = runs("dp2"), runs("ep2")
    assert_trained(run, STEPS)
    assert fatal(run.result) == [] and run.result["effective"]["ep"] == 2
    assert run.series("loss") == pytest.approx(base.series("loss"), abs=LAYOUT_TOLERANCE)


class OneRank:
    """A process group of one rank, as megatron-core's _reduce asks it."""

    def size(self) -> int:
        return 1


def test_megatron_cores_one_rank_reduction_refuses_the_in_place_expert_bias_that_mega_skips_it_for():
    """megatron-core 0.19.2: tensor_parallel/mappings.py _reduce hands a one-rank group's input back as it is, and
    transformer/mlp.py adds an expert's fc2 bias in place on that output (utils/upstream/table.py)."""
    from megatron.core.tensor_parallel.mappings import _ReduceFromModelParallelRegion

    from train.mega.model import _reduce_without_a_view

    output = torch.ones(4, 2, requires_grad=True) * 2.0
    reduced = _ReduceFromModelParallelRegion.apply(output, OneRank())
    with pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
        reduced += torch.ones(2)
    from megatron.core.tensor_parallel import layers

    original = layers.reduce_from_tensor_model_parallel_region
    try:
        _reduce_without_a_view()
        skipped = layers.reduce_from_tensor_model_parallel_region(output, group=OneRank())
        skipped += torch.ones(2)  # allowed: no custom Function's output
        skipped.sum().backward()
    finally:
        layers.reduce_from_tensor_model_parallel_region = original
