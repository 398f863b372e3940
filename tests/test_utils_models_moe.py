"""The mixture-of-experts model (Qwen3-30B-A3B): its published numbers, its total and active parameters, the FLOPs
convention (a MoE model's FLOPs count its active parameters, for every framework alike) and the gate that holds a
result to it (evaluate.validate recomputes the FLOPs and the model numbers from the same spec)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from evaluate import validate
from evaluate.collect import Loaded
from tests.fixtures.train_matrix.requests import node
from tests.test_utils_result import build
from train.plan import build_plan, request
from utils.spec.models import MoESpec, get_model


def test_qwen3_30b_a3b_numbers_match_megatron_bridges_provider_and_hugging_faces_names():
    """Megatron-Bridge 5ca1c1a1 qwen_provider.py lines 363-411; v0.6.0's test_qwen3_moe_bridge.py lines 34-61."""
    spec = get_model("qwen3moe")
    assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim,
            spec.vocab_size, spec.max_position_embeddings) == (48, 2048, 32, 4, 128, 151936, 40960)
    assert spec.head_dim != spec.hidden_size // spec.num_attention_heads  # 128, not 64: an explicit head width
    assert (spec.rope_theta, spec.norm_eps, spec.qkv_bias, spec.qk_norm, spec.tied_embeddings) == \
        (1e6, 1e-6, False, True, False)
    assert spec.moe == MoESpec(num_experts=128, top_k=8, expert_ffn_size=768, shared_experts=0,
                               shared_expert_ffn_size=0, score_function="softmax", norm_topk_prob=True,
                               load_balancing="aux_loss", aux_loss_coeff=1e-3)
    assert (spec.hf_family, spec.hf_id, spec.data_key, spec.gated) == ("qwen3_moe", "Qwen/Qwen3-30B-A3B", "qwen", False)


def test_qwen3_30b_a3b_has_30_5b_parameters_of_which_3_3b_are_active():
    """The published 30.5B total and 3.3B activated, counted part by part."""
    spec = get_model("qwen3moe")
    attention = 2048 * (4096 + 2 * 512) + 4096 * 2048
    norms = 2 * 2048 + 2 * 128  # the layer's two RMSNorms and QK-norm's two head_dim weights
    router, expert = 128 * 2048, 3 * 2048 * 768
    embeddings = 2 * 151936 * 2048 + 2048  # untied, and the final norm
    assert spec.param_count() == 48 * (attention + norms + router + 128 * expert) + embeddings == 30_532_122_624
    assert spec.active_param_count() == 48 * (attention + norms + router + 8 * expert) + embeddings == 3_353_032_704


def test_a_dense_models_active_parameters_are_all_of_them():
    for key in ("llama", "qwen", "llama70b", "mistral", "llama32"):
        spec = get_model(key)
        assert spec.moe is None and not spec.qk_norm and spec.active_param_count() == spec.param_count()


def test_moe_flops_count_the_active_experts_and_the_router_not_every_expert():
    """6 x (active weights + LM head) + the attention term: the top-k experts, the router and any shared expert."""
    spec = get_model("qwen3moe")
    attention_term = 6 * 48 * 4096 * 4096
    active = 48 * (2048 * (4096 + 1024) + 4096 * 2048 + 128 * 2048 + 8 * 3 * 2048 * 768) + 2048 * 151936
    assert spec.flops_per_token(4096) == 6 * active + attention_term
    # the convention broken: every expert counted would add 6 x L x (E - k) x 3 h f_e per token, ~14x the experts'
    every_expert = dataclasses.replace(spec, moe=dataclasses.replace(spec.moe, top_k=128))
    assert every_expert.flops_per_token(4096) - spec.flops_per_token(4096) == 6 * 48 * 120 * 3 * 2048 * 768
    shared = dataclasses.replace(spec, moe=dataclasses.replace(spec.moe, shared_experts=1, shared_expert_ffn_size=512))
    assert shared.flops_per_token(4096) - spec.flops_per_token(4096) == 6 * 48 * 3 * 2048 * 512


def test_the_tiny_qwen3_moe_keeps_its_features_at_cpu_size():
    tiny = get_model("qwen3moe", "tiny")
    assert (tiny.num_layers, tiny.hidden_size, tiny.num_attention_heads, tiny.num_kv_heads, tiny.head_dim) == \
        (2, 128, 4, 2, 64)
    assert (tiny.moe.num_experts, tiny.moe.top_k, tiny.moe.expert_ffn_size) == (8, 2, 48)
    assert tiny.qk_norm and tiny.moe.norm_topk_prob and tiny.moe.aux_loss_coeff == 1e-3
    assert tiny.param_count() == 39_390_080  # megatron-core's local MoE layers count the same (mega's check)


def judged(data) -> dict[str, str]:
    """Each check that found something, with its messages on one line each."""
    found: dict[str, str] = {}
    for finding in validate.check_result(Loaded("test", data, {})):
        found[finding.check] = "\n".join(filter(None, (found.get(finding.check), finding.message)))
    return found


def test_a_moe_result_records_its_active_parameters_and_the_gate_holds_it_to_the_spec():
    data = build(variant="qwen3-30b-a3b")
    spec = get_model("qwen3moe")
    assert data["model"]["active_parameters"] == spec.active_param_count()
    assert data["model"]["moe"]["top_k"] == 8 and data["model"]["qk_norm"] is True
    assert data["performance"]["flops_per_token"] == spec.flops_per_token(2048)
    assert "figures" not in judged(data) and "model" not in judged(data)
    dense = build()
    assert dense["model"]["active_parameters"] == dense["model"]["parameters"] and "moe" not in dense["model"]


def test_a_moe_result_whose_flops_count_every_expert_fails_the_gate():
    data = build(variant="qwen3-30b-a3b")
    every_expert = dataclasses.replace(get_model("qwen3moe"), moe=dataclasses.replace(get_model("qwen3moe").moe,
                                                                                        top_k=128))
    scale = every_expert.flops_per_token(2048) / data["performance"]["flops_per_token"]
    data["performance"]["flops_per_token"] *= scale
    data["performance"]["tflop_per_s_per_gpu"] *= scale
    data["performance"]["mfu"] *= scale
    assert "\nflops_per_token is" in "\n" + judged(data)["figures"]


@pytest.mark.parametrize("key, value", [("active_parameters", 30_532_122_624), ("parameters", 3_353_032_704)])
def test_a_moe_results_parameter_counts_edited_fail_the_gate(key, value):
    data = build(variant="qwen3-30b-a3b")
    data["model"][key] = value
    assert judged(data)["model"].startswith(f"model.{key} is {value} in the result")


def test_a_moe_results_experts_edited_fail_the_gate():
    data = build(variant="qwen3-30b-a3b")
    data["model"]["moe"]["top_k"] = 2
    assert judged(data)["model"].startswith("model.moe is")


@pytest.mark.parametrize("platform, stack", [("nvd", None), ("amd", None), ("nvd", "nemo-25.04")])
def test_a_framework_that_cannot_run_the_moe_model_skips_it_with_the_reason(platform, stack):
    """Those with recipe names have none for it but prim, torchtitan and mbridge (Megatron-Bridge's own Qwen3
    30B-A3B recipe, on the stack rows that carry Megatron-Bridge); those building from the spec build it only with
    builds_moe."""
    env = {"STACK": stack} if stack else {}
    runs = {run.name.split("-")[0]: run.skipped for run in build_plan(node(platform, FRAMEWORK="all",
                                                                          MODELS="qwen3moe", **env))}
    assert ("mbridge" in runs) == (platform == "nvd" and stack is None)  # the rows with Megatron-Bridge
    # prim: Primus's own config; torchtitan: its qwen3 MoE model, where a stack lists it; mbridge: its own recipe
    assert (runs.pop("mega"), runs.pop("fsdp"), runs.pop("prim", ""), runs.pop("torchtitan", ""),
            runs.pop("mbridge", "")) == ("", "", "", "", "")
    for framework, reason in runs.items():
        named = f"{framework} has no name for qwen3moe (utils/frameworks/{framework}/: its model_names has none)"
        built = (f"{framework} builds no mixture-of-experts model such as qwen3moe (utils/frameworks/{framework}/: "
                 "builds_moe is off); the frameworks that build one: mega, fsdp, torchtitan")
        assert reason == (built if framework == "autotp" else named), framework


def test_fsdp_builds_the_moe_model_at_tp_1_only_and_says_why():
    runs = {run.name: run.skipped for run in build_plan(node("nvd", FRAMEWORK="mega,fsdp", MODELS="qwen3moe,qwen",
                                                             TP="2", DP="4"))}
    assert runs == {"mega-qwen3moe": "", "mega-qwen": "", "fsdp-qwen": "",
                    "fsdp-qwen3moe": "fsdp runs qwen3moe at TP=1 only (TP=2): Hugging Face's experts are one 3-D "
                                     "tensor per layer, which the tensor-parallel plan "
                                     "(train/native/tensor_parallel.py) does not split"}


def test_the_default_run_leaves_the_moe_model_out():
    assert [run.name for run in build_plan(node("cpu")) if "qwen3moe" in run.name] == []


def test_a_run_request_keeps_the_experts_through_its_config_json():
    """The launcher writes the request as config.json and every trainer reads it back: the MoE spec must come back
    a MoESpec, not the JSON object it was written as."""
    from utils.spec.request import Request

    cfg = node("cpu", FRAMEWORK="mega", MODELS="qwen3moe")
    written = request(cfg, build_plan(cfg)[0])
    read = Request.from_json(json.loads(json.dumps(written.to_json())))
    assert read.model == written.model == get_model("qwen3moe", "tiny")
    assert isinstance(read.model.moe, MoESpec) and read.model.moe.top_k == 2


@pytest.mark.parametrize("changes", [dict(top_k=9), dict(top_k=0), dict(score_function="relu"),
                                     dict(load_balancing="z"), dict(shared_experts=1)])
def test_a_moe_spec_that_cannot_be_is_refused(changes):
    with pytest.raises(ValueError, match="top_k must be 1..num_experts"):
        dataclasses.replace(get_model("qwen3moe", "tiny").moe, **changes)


@pytest.mark.parametrize("size", ["full", "tiny"])
def test_the_memory_prediction_holds_every_expert_and_the_router(size):
    """The prediction's parameter tensors (utils/predict/parameters.py) add up to the spec's total for every model,
    the experts, router and QK-norm of the MoE one included: its weights, gradients and optimizer state are those of
    30.5B parameters, not of a dense model of its config's FFN width (activations and dispatch: not yet modelled)."""
    from utils.predict.parameters import hf_shapes, megatron_numels
    from utils.spec.models import MODEL_KEYS

    for key in MODEL_KEYS:
        spec = get_model(key, size)
        assert sum(rows * cols for rows, cols in hf_shapes(spec, 1, False)) == spec.param_count(), key
        assert sum(megatron_numels(spec, 1, spec.num_layers, True, True)) == spec.param_count(), key
    tiny = get_model("qwen3moe", "tiny")
    halves = megatron_numels(tiny, 2, tiny.num_layers, True, True)
    assert 8 * 128 in halves and 2 * 24 * 128 in halves  # the router whole on each TP rank, each expert split
