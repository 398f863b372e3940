"""The torch-native frameworks' model (train/native/model.py): every architecture number from TPrimat's spec,
built without distributed and without downloading anything."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from train.native import model as native_model
from train.common.outcome import SettingsError
from utils.spec.fairness import WORKLOAD
from utils.spec.models import get_model


@pytest.mark.parametrize("key, cls", [("llama", "LlamaForCausalLM"), ("qwen", "Qwen2ForCausalLM")])
def test_the_tiny_models_have_the_specs_numbers_and_parameter_count(key, cls):
    spec = get_model(key, "tiny")
    model = native_model.build(spec, "eager", seed=3, device=torch.device("cpu"))
    config = model.config
    assert type(model).__name__ == cls
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size, config.num_attention_heads,
            config.num_key_value_heads, config.vocab_size, config.rms_norm_eps) == (
        spec.num_layers, spec.hidden_size, spec.ffn_hidden_size, spec.num_attention_heads, spec.num_kv_heads,
        spec.vocab_size, spec.norm_eps)
    assert config.rope_parameters["rope_theta"] == spec.rope_theta
    assert config.tie_word_embeddings is False and config._attn_implementation == "eager"
    assert config.initializer_range == WORKLOAD["init_method_std"]
    assert native_model.count_parameters(model) == spec.param_count()
    attention = model.model.layers[0].self_attn
    assert (attention.q_proj.bias is not None) is spec.qkv_bias and attention.o_proj.bias is None


def test_a_tied_model_computes_its_logits_with_the_embedding_and_counts_it_once():
    spec = dataclasses.replace(get_model("llama", "tiny"), tied_embeddings=True)
    model = native_model.build(spec, "eager", seed=3, device=torch.device("cpu"))
    assert model.config.tie_word_embeddings is True
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert native_model.count_parameters(model) == spec.param_count() \
        == get_model("llama", "tiny").param_count() - spec.vocab_size * spec.hidden_size


def test_llama_keeps_its_llama3_frequency_scaling_and_qwen_has_none():
    llama, qwen = (native_model.hf_config(get_model(key, "full"), "sdpa") for key in ("llama", "qwen"))
    assert llama.rope_parameters == {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 8192}
    assert qwen.rope_parameters == {"rope_type": "default", "rope_theta": 1000000.0}


def test_one_seed_builds_the_same_weights_and_another_seed_others():
    spec = get_model("qwen", "tiny")
    first, again, other = (native_model.build(spec, "sdpa", seed, torch.device("cpu")) for seed in (5, 5, 6))
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), again.parameters()))
    assert not torch.equal(first.model.layers[0].mlp.up_proj.weight, other.model.layers[0].mlp.up_proj.weight)


def test_flash_attention_without_its_package_and_unknown_implementations_are_refused(monkeypatch):
    monkeypatch.setattr(native_model.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SettingsError, match="flash_attn package"):
        native_model.check_attention("flash_attention_2")
    with pytest.raises(SettingsError, match="not one of"):
        native_model.check_attention("xformers")
