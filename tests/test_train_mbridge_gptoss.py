"""mbridge on GPT-OSS-20B, checked without Megatron-Bridge installed: Megatron-Bridge's own gpt_oss_20b_pretrain_config
with the experts and routing every framework runs, the model's Hugging Face gpt_oss config as its GPT-OSS bridge
and transformers read it, and megatron-core's refusal of biased experts split over TP, which keeps every megatron-core
framework at TP=1 for it. tests/test_train_mbridge_build.py builds and finalizes these settings with Megatron-Bridge
itself (the features, MoE settings and per-token loss of the finalized model)."""

from __future__ import annotations

import pytest

from tests.fixtures.train_matrix.requests import run_request
from train.mbridge.launch import write_model_dir
from train.mbridge.recipe import HUB_IDS, MOE_AS_THE_OTHERS, recipe_settings
from utils.frameworks import TABLE
from utils.spec.fairness import moe_settings


def request(size: str = "full", **env: str):
    return run_request("nvd", "mbridge", "gptoss", FRAMEWORK="mbridge", MODELS="gptoss", MODEL_SIZE=size, **env)


def test_the_recipe_is_megatron_bridges_gpt_oss_20b_over_its_hub_config():
    s = recipe_settings(request(), "/out/set/mbridge-gptoss")
    assert (s["recipe"], s["hub_id"]) == ("gpt_oss.gpt_oss_20b_pretrain_config", "openai/gpt-oss-20b")
    assert HUB_IDS[TABLE["mbridge"].model_name("gptoss")] == "openai/gpt-oss-20b"


@pytest.mark.parametrize("size", ["full", "tiny"])
def test_the_experts_run_as_every_framework_runs_them_and_the_loss_is_averaged_per_microbatch(size):
    req = request(size, EP="8" if size == "full" else "1")
    s = recipe_settings(req, "/out/set/mbridge-gptoss")["set"]
    wanted = {f"model.{name}": value for name, value in moe_settings(req.model.moe).items()}
    assert {path: s[path] for path in wanted} == wanted
    assert (s["model.moe_router_load_balancing_type"], s["model.moe_aux_loss_coeff"]) == ("none", 0.0)
    assert {path: s[path] for path in MOE_AS_THE_OTHERS} == MOE_AS_THE_OTHERS
    assert s["model.calculate_per_token_loss"] is False
    assert s["model.window_size"] == list(req.model.megatron_window)


@pytest.mark.parametrize("size", ["full", "tiny"])
def test_the_model_folder_is_a_gpt_oss_config_as_the_spec(tmp_path, size):
    """What the GPT-OSS bridge reads (models/gpt_oss/gpt_oss_bridge.py: sliding_window, intermediate_size as the
    experts' width; model_bridge.py CONFIG_MAPPING: num_local_experts, num_experts_per_tok, head_dim,
    router_aux_loss_coef) and what transformers' GptOssConfig reads besides (layer_types, the YaRN rope, the clamp)."""
    from transformers import AutoConfig

    req = request(size)
    config, spec = AutoConfig.from_pretrained(write_model_dir(req, recipe_settings(req, str(tmp_path)))), req.model
    assert (config.model_type, config.architectures) == ("gpt_oss", ["GptOssForCausalLM"])
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
            config.head_dim, config.vocab_size, config.attention_bias, config.tie_word_embeddings) == \
        (spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim,
         spec.vocab_size, True, False)
    assert (config.num_local_experts, config.num_experts_per_tok, config.intermediate_size,
            config.router_aux_loss_coef, config.swiglu_limit, config.sliding_window) == \
        (spec.moe.num_experts, spec.moe.top_k, spec.moe.expert_ffn_size, spec.moe.aux_loss_coeff, spec.swiglu_limit,
         spec.sliding_window)
    assert config.layer_types == ["sliding_attention", "full_attention"] * (spec.num_layers // 2)
    rope = config.rope_parameters
    assert {key: rope[key] for key in spec.rope_scaling} == spec.rope_scaling
    assert rope["rope_theta"] == spec.rope_theta


def test_megatron_core_refuses_biased_experts_over_tp_so_its_frameworks_plan_gpt_oss_at_tp_1():
    """megatron-core 0.19.2 transformer_config.py:2279-2282, run: experts with biases split over 2 TP ranks are
    refused, so mega and mbridge (megatron-core's experts) skip GPT-OSS at TP > 1 instead of failing there."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    shape = dict(num_layers=2, hidden_size=64, num_attention_heads=4, num_moe_experts=4, moe_router_topk=2,
                 add_bias_linear=True)
    TransformerConfig(**shape, expert_tensor_parallel_size=1)
    with pytest.raises(AssertionError, match="ETP==1"):
        TransformerConfig(**shape, tensor_model_parallel_size=2, expert_tensor_parallel_size=2)
    for name in ("mega", "mbridge"):
        assert TABLE[name].model_refusal("gptoss", 1) == ""
        assert TABLE[name].model_refusal("gptoss", 2).startswith(f"{name} runs gptoss at TP=1 only (TP=2): ")
        assert TABLE[name].model_refusal("qwen3moe", 2) == ""  # experts without biases split over TP
