"""Model specs: the published numbers, parameter counts and the FLOPs formula's worked values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from utils.models import MODELS, by_variant, get_model


def test_llama_and_qwen_numbers_match_their_published_configs():
    llama, qwen = get_model("llama"), get_model("qwen")
    assert (llama.num_layers, llama.hidden_size, llama.ffn_hidden_size, llama.num_attention_heads,
            llama.num_kv_heads, llama.vocab_size, llama.head_dim) == (32, 4096, 14336, 32, 8, 128256, 128)
    assert (qwen.num_layers, qwen.hidden_size, qwen.ffn_hidden_size, qwen.num_attention_heads,
            qwen.num_kv_heads, qwen.vocab_size, qwen.head_dim) == (28, 3584, 18944, 28, 4, 152064, 128)
    assert llama.rope_scaling["factor"] == 8.0 and not qwen.rope_scaling
    assert qwen.qkv_bias and not llama.qkv_bias


@pytest.mark.parametrize("key, billions", [("llama", 8.030), ("qwen", 7.616)])
def test_parameter_count(key, billions):
    assert round(get_model(key).param_count() / 1e9, 3) == billions


@pytest.mark.parametrize("key, seq_len, gflops", [
    ("llama", 2048, 46.64), ("llama", 4096, 48.25), ("llama", 8192, 51.47),
    ("qwen", 2048, 43.65), ("qwen", 4096, 44.89), ("qwen", 8192, 47.35),
])
def test_flops_per_token_worked_values(key, seq_len, gflops):
    assert round(get_model(key).flops_per_token(seq_len) / 1e9, 2) == gflops


def test_valid_tensor_and_pipeline_sizes():
    assert get_model("llama").valid_tp(8) == [1, 2, 4, 8]
    assert get_model("qwen").valid_tp(8) == [1, 2, 4]
    assert get_model("qwen").valid_pp() == [1, 2, 4, 7, 14, 28]


def test_tiny_variants_keep_each_family_and_the_real_vocabulary():
    for (key, size), spec in MODELS.items():
        if size != "tiny":
            continue
        full = get_model(key)
        assert spec.vocab_size == full.vocab_size and spec.qkv_bias == full.qkv_bias
        assert spec.rope_scaling == full.rope_scaling and spec.num_kv_heads < spec.num_attention_heads
        assert by_variant(spec.variant) is spec and spec.size == "tiny"


def gated(models: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "utils.models", "gated", models], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)


def test_the_shell_learns_which_models_are_gated_here():
    """Llama's Hub repository needs HF_TOKEN and an accepted licence; Qwen's does not."""
    assert gated("qwen,llama").stdout == "llama\tmeta-llama/Llama-3.1-8B\tLlama 3.1 8B\n"
    assert gated("qwen").stdout == ""


def test_an_unknown_model_is_one_line_and_exit_2():
    run = gated("llama,gpt")
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1 and "'llama,gpt'" in run.stderr
