"""Model specs: the published numbers, parameter counts and the FLOPs formula's worked values; proxies
(MODEL_LAYERS) and shared data keys."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from utils.spec.models import MODEL_KEYS, MODELS, by_variant, data_keys, get_model


def test_llama_and_qwen_numbers_match_their_published_configs():
    llama, qwen = get_model("llama"), get_model("qwen")
    assert (llama.num_layers, llama.hidden_size, llama.ffn_hidden_size, llama.num_attention_heads,
            llama.num_kv_heads, llama.vocab_size, llama.head_dim) == (32, 4096, 14336, 32, 8, 128256, 128)
    assert (qwen.num_layers, qwen.hidden_size, qwen.ffn_hidden_size, qwen.num_attention_heads,
            qwen.num_kv_heads, qwen.vocab_size, qwen.head_dim) == (28, 3584, 18944, 28, 4, 152064, 128)
    assert llama.rope_scaling["factor"] == 8.0 and not qwen.rope_scaling
    assert qwen.qkv_bias and not llama.qkv_bias


def test_llama70b_numbers_match_meta_llama_3_1_70b_config_json():
    big = get_model("llama70b")
    assert (big.num_layers, big.hidden_size, big.ffn_hidden_size, big.num_attention_heads, big.num_kv_heads,
            big.vocab_size, big.head_dim, big.max_position_embeddings) == (80, 8192, 28672, 64, 8, 128256, 128, 131072)
    assert (big.rope_theta, big.norm_eps, big.qkv_bias, big.sliding_window) == (500000.0, 1e-5, False, None)
    assert big.rope_scaling == {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192}
    assert (big.variant, big.hf_id, big.gated) == ("llama3.1-70b", "meta-llama/Llama-3.1-70B", True)


def test_mistral_numbers_match_mistral_7b_v0_1_config_json():
    mistral = get_model("mistral")
    assert (mistral.num_layers, mistral.hidden_size, mistral.ffn_hidden_size, mistral.num_attention_heads,
            mistral.num_kv_heads, mistral.vocab_size, mistral.head_dim,
            mistral.max_position_embeddings) == (32, 4096, 14336, 32, 8, 32000, 128, 32768)
    assert (mistral.rope_theta, mistral.norm_eps, mistral.qkv_bias, mistral.rope_scaling) == (10000.0, 1e-5, False, {})
    assert mistral.sliding_window == 4096 and mistral.megatron_window == (4095, 0)  # HF: itself + 4095 before
    assert (mistral.variant, mistral.hf_id, mistral.data_key) == ("mistral-7b-v0.1", "mistralai/Mistral-7B-v0.1",
                                                                  "mistral")


@pytest.mark.parametrize("key, parameters", [("llama", 8_030_261_248), ("qwen", 7_615_616_512),
                                             ("llama70b", 70_553_706_496), ("mistral", 7_241_732_096),
                                             ("llama32", 3_212_749_824)])
def test_parameter_count(key, parameters):
    """The published sizes: 8.03B, 7.62B, 70.55B and 7.24B (untied embeddings and LM head), and 3.21B (Llama 3.2
    3B, its LM head tied to the embedding)."""
    assert get_model(key).param_count() == parameters


@pytest.mark.parametrize("key, seq_len, gflops", [
    ("llama", 2048, 46.64), ("llama", 4096, 48.25), ("llama", 8192, 51.47),
    ("qwen", 2048, 43.65), ("qwen", 4096, 44.89), ("qwen", 8192, 47.35),
    ("llama70b", 2048, 425.06), ("llama70b", 8192, 449.22),
    ("mistral", 2048, 44.27), ("mistral", 4096, 45.88),
    ("mistral", 8192, 47.49),  # the window caps attention: causal over 8192 would be 49.10
])
def test_flops_per_token_worked_values(key, seq_len, gflops):
    assert round(get_model(key).flops_per_token(seq_len) / 1e9, 2) == gflops


def test_a_window_as_long_as_the_sequence_changes_nothing_and_a_shorter_one_caps_the_keys():
    tiny = get_model("mistral", "tiny")
    assert tiny.sliding_window == 64
    without = dataclasses.replace(tiny, sliding_window=None)
    assert tiny.flops_per_token(64) == without.flops_per_token(64)
    attention_per_unit_span = 6 * tiny.num_layers * tiny.num_attention_heads * tiny.head_dim
    # SL 128, window 64: queries 1..64 see 1..64 keys, 65..128 see 64: mean 48 keys, s -> 96
    assert without.flops_per_token(128) - tiny.flops_per_token(128) == attention_per_unit_span * (128 - 96)


def test_valid_tensor_and_pipeline_sizes():
    assert get_model("llama").valid_tp(8) == [1, 2, 4, 8]
    assert get_model("qwen").valid_tp(8) == [1, 2, 4]
    assert get_model("qwen").valid_pp() == [1, 2, 4, 7, 14, 28]
    assert get_model("llama70b").valid_pp() == [1, 2, 4, 5, 8, 10, 16, 20, 40, 80]


def test_tiny_variants_keep_each_family_and_the_real_vocabulary():
    for (key, size), spec in MODELS.items():
        if size != "tiny":
            continue
        full = get_model(key)
        assert spec.vocab_size == full.vocab_size and spec.qkv_bias == full.qkv_bias
        assert spec.rope_scaling == full.rope_scaling and spec.num_kv_heads < spec.num_attention_heads
        assert by_variant(spec.variant) is spec and spec.size == "tiny"
        assert spec.data_key == full.data_key and spec.gated == full.gated


def test_the_tiny_mistral_window_is_shorter_than_the_cpu_sequence_and_the_tiny_70b_is_its_own_shape():
    assert get_model("mistral", "tiny").megatron_window == (63, 0)
    big, small = get_model("llama70b", "tiny"), get_model("llama", "tiny")
    assert (big.num_attention_heads, big.num_kv_heads, big.num_layers, big.hidden_size) == (8, 2, 2, 128)
    assert small.num_attention_heads == 4 and big.valid_tp(8) == [1, 2]


@pytest.mark.parametrize("key, size, layers, variant", [
    ("llama70b", "full", 8, "llama3.1-70b-L8"), ("llama", "tiny", 1, "llama3.1-8b-tiny-L1"),
    ("mistral", "full", 4, "mistral-7b-v0.1-L4"), ("qwen", "full", 27, "qwen2.5-7b-L27"),
])
def test_a_proxy_keeps_the_width_names_its_layers_and_reads_back_by_variant(key, size, layers, variant):
    full, proxy = get_model(key, size), get_model(key, size, layers)
    assert (proxy.variant, proxy.num_layers, proxy.proxy_of, proxy.size) == (variant, layers, full.variant, size)
    assert f"{layers}-layer proxy" in proxy.display_name
    assert dataclasses.replace(proxy, num_layers=full.num_layers, variant=full.variant, proxy_of=None,
                               display_name=full.display_name) == full  # nothing else changes
    assert by_variant(variant) == proxy
    assert proxy.param_count() < full.param_count()


def test_a_proxy_of_80_layers_of_8_costs_what_8_layers_cost():
    big, proxy = get_model("llama70b"), get_model("llama70b", "full", 8)
    per_layer = (big.param_count() - proxy.param_count()) / 72
    assert proxy.param_count() == 8_946_589_696 and per_layer == 855_654_400


def test_all_layers_is_the_model_itself_and_a_count_out_of_range_is_refused():
    assert get_model("llama", "full", 32) is get_model("llama")
    for layers in (0, 33, -1):
        with pytest.raises(ValueError, match="has 32 layers: a proxy keeps 1 to 32"):
            get_model("llama", "full", layers)


@pytest.mark.parametrize("variant", ["llama3.1-8b-L32", "llama3.1-8b-L33", "llama3.1-8b-L0", "llama3.1-8b-L08",
                                     "gpt-L2", "llama3.1-8b-tiny-L2", "llama3.1-8b-L4-L2"])
def test_by_variant_refuses_what_no_proxy_is(variant):
    with pytest.raises(ValueError, match="unknown model variant"):
        by_variant(variant)


def test_llama70b_shares_llamas_tokenizer_and_data_and_the_others_keep_their_own():
    assert {key: get_model(key).data_key for key in MODEL_KEYS} == {
        "llama": "llama", "qwen": "qwen", "llama70b": "llama", "mistral": "mistral", "llama32": "llama",
        "qwen3moe": "qwen", "gptoss": "gptoss"}
    assert data_keys(["llama70b", "qwen", "llama", "mistral"]) == ["llama", "qwen", "mistral"]


def gated(models: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "utils.spec.models", "gated", models], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)


def test_the_shell_learns_which_models_are_gated_here():
    """Llama's Hub repository needs HF_TOKEN and an accepted licence; Qwen's does not."""
    assert gated("qwen,llama").stdout == "llama\tmeta-llama/Llama-3.1-8B\tLlama 3.1 8B\n"
    assert gated("qwen").stdout == ""


def test_the_gated_tokenizer_of_llama70b_is_llamas_and_mistral_is_gated():
    assert gated("llama70b,mistral").stdout == ("llama\tmeta-llama/Llama-3.1-8B\tLlama 3.1 8B\n"
                                                "mistral\tmistralai/Mistral-7B-v0.1\tMistral 7B v0.1\n")
    assert gated("llama,llama70b").stdout.count("\n") == 1


def test_the_shell_learns_which_data_to_prepare_once():
    run = subprocess.run([sys.executable, "-m", "utils.spec.models", "data-keys", "llama70b,qwen,llama"],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    assert (run.returncode, run.stdout) == (0, "llama\nqwen\n")


def test_an_unknown_model_is_one_line_and_exit_2():
    run = gated("llama,gpt")
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1 and "'llama,gpt'" in run.stderr
