"""The mega trainer's pieces that need no training run: model size, step lines, platform environment."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from evaluate.logs.parse import parse_logs
from tests.shell_harness import HANG_TIMEOUT_S
from train.common.step_log import StepRecord, megatron_line, memory_line
from utils.machine import platform_env
from utils.spec.models import get_model

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def full_models() -> dict:
    """Every full model as train.mega.model builds it with megatron-core (meta device)."""
    out = subprocess.run([sys.executable, "-m", "tests.fixtures.train.full_models"], cwd=ROOT,
                         capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("key, billions", [("llama", 8.030), ("qwen", 7.616), ("llama70b", 70.554),
                                           ("mistral", 7.242), ("llama32", 3.213), ("qwen3moe", 30.532),
                                           ("gptoss", 20.915)])
def test_megatron_builds_the_published_parameter_count(full_models, key, billions):
    assert round(full_models[key]["parameters"] / 1e9, 3) == billions
    assert full_models[key]["parameters"] == get_model(key).param_count()


def test_only_mistral_and_gpt_oss_are_built_with_a_sliding_window(full_models):
    """GPT-OSS's 128-token window, on its odd layers only (test_train_mega_gpt_oss.py reads the features back)."""
    assert {key: built["window_size"] for key, built in full_models.items()} == {
        "llama": None, "qwen": None, "llama70b": None, "mistral": [4095, 0], "llama32": None, "qwen3moe": None,
        "gptoss": [127, 0], "llama+tied": None}


def test_only_the_moe_models_are_built_with_experts_and_heads_wider_than_hidden_over_heads(full_models):
    assert {key: built["num_moe_experts"] for key, built in full_models.items()} == {
        "llama": None, "qwen": None, "llama70b": None, "mistral": None, "llama32": None, "qwen3moe": 128,
        "gptoss": 32, "llama+tied": None}
    assert full_models["qwen3moe"]["head_dim"] == 128 != 2048 // 32
    assert full_models["gptoss"]["head_dim"] == 64 != 2880 // 64


def test_a_tied_lm_head_is_the_embedding_and_counted_once(full_models):
    tied = dataclasses.replace(get_model("llama"), tied_embeddings=True)
    assert full_models["llama+tied"]["parameters"] == tied.param_count() \
        == full_models["llama"]["parameters"] - tied.vocab_size * tied.hidden_size


def test_the_window_really_cuts_attention_short_on_the_cpu():
    """The tiny Mistral's one-layer proxy (window 64) on the local spec: changing token 0 moves the logits of
    positions 0-63 only (full causal attention would move all 128)."""
    out = subprocess.run([sys.executable, "-m", "tests.fixtures.train.window"], cwd=ROOT, capture_output=True,
                         text=True, timeout=HANG_TIMEOUT_S)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["window_size"] == [63, 0] and seen["moved"] == list(range(64))
    assert seen["features"]["sliding_window"] == "window_size=(63, 0)"
    assert seen["features"]["masked_softmax_fusion"] is False


@pytest.mark.parametrize("key, seq_len, gflops", [
    ("llama", 2048, 46.64), ("llama", 4096, 48.25), ("llama", 8192, 51.47),
    ("qwen", 2048, 43.65), ("qwen", 4096, 44.89), ("qwen", 8192, 47.35),
])
def test_flops_per_token_of_the_built_model_matches_the_worked_values(full_models, key, seq_len, gflops):
    built = full_models[key]
    dims = {name: built[name] for name in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                                           "num_kv_heads", "vocab_size")}
    as_built = dataclasses.replace(get_model(key), **dims)
    assert round(as_built.flops_per_token(seq_len) / 1e9, 2) == gflops


def _record(**changes) -> StepRecord:
    values = dict(step=7, step_time_s=1.2345, loss=2.5, lr=3e-4, grad_norm=0.75, skipped=0, nan=0, tokens=8192,
                  mem_allocated_gib=10.5, mem_reserved_gib=12.0)
    return StepRecord(**{**values, **changes})


def test_the_step_line_reads_back_through_the_megatron_log_parser(tmp_path):
    record = _record()
    log = tmp_path / "train.log"
    log.write_text(megatron_line(record, total_steps=20, gbs=4, tflops_per_gpu=1.5) + "\n"
                   + memory_line(0, 7, 9.0, 10.5, 11.0, 12.0) + "\n")
    parsed = parse_logs([log])
    assert parsed.framework == "mega" and parsed.total_steps == 20
    [got] = parsed.records
    assert got["step"] == 7 and got["loss"] == pytest.approx(2.5) and got["lr"] == pytest.approx(3e-4)
    assert got["grad_norm"] == pytest.approx(0.75) and got["step_time_s"] == pytest.approx(1.2345, abs=1e-4)
    assert (got["skipped"], got["nan"]) == (0, 0)
    assert got["mem_allocated_gib"] == pytest.approx(10.5) and got["mem_reserved_gib"] == pytest.approx(12.0)


@pytest.mark.parametrize("tflops, shown", [(0.0472, "0.0472"), (45.61, "45.6"), (611.34, "611.3")])
def test_the_step_line_shows_a_cpus_small_throughput_with_significant_digits(tmp_path, tflops, shown):
    line = megatron_line(_record(), total_steps=20, gbs=4, tflops_per_gpu=tflops)
    assert f"throughput per GPU (TFLOP/s/GPU): {shown} |" in line
    log = tmp_path / "train.log"
    log.write_text(line + "\n")
    [got] = parse_logs([log]).records
    assert got["fw_tflop_per_s_per_gpu"] == pytest.approx(float(shown))


def test_a_nan_step_is_null_in_json_and_flagged_in_the_log_line(tmp_path):
    record = _record(loss=math.nan, grad_norm=math.nan, nan=1)
    assert json.loads(record.as_json())["loss"] is None
    log = tmp_path / "train.log"
    log.write_text(megatron_line(record, total_steps=20, gbs=4, tflops_per_gpu=None) + "\n")
    [got] = parse_logs([log]).records
    assert got["nan"] == 1 and math.isnan(got["loss"])


def test_platform_environment_is_set_once_and_never_overrides_the_user():
    assert platform_env.platform_env("amd")["HSA_NO_SCRATCH_RECLAIM"] == "1"  # the default stack, Primus v26.5's
    assert platform_env.platform_env("amd", stack="primus-v25.11")["HSA_NO_SCRATCH_RECLAIM"] == "0"
    assert platform_env.platform_env("nvd")["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    environ = {"NVTE_FLASH_ATTN": "0"}
    effective = platform_env.apply("nvd", environ)
    assert effective["NVTE_FLASH_ATTN"] == "0" and environ["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    cpu = {}
    assert platform_env.apply("cpu", cpu) == {} == cpu  # read at process start only (glibc, OpenMP): not faked
    assert "GLIBC_TUNABLES" in platform_env.apply("cpu", {"GLIBC_TUNABLES": "x"})


def test_platform_environment_prints_export_lines_for_the_shell():
    out = subprocess.run([sys.executable, "-m", "utils.machine.platform_env", "amd"], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert "export GPU_MAX_HW_QUEUES=2" in out.stdout.splitlines()
    bad = subprocess.run([sys.executable, "-m", "utils.machine.platform_env", "tpu"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


@pytest.mark.parametrize("te, fused_after", [(False, False), (True, True)])
def test_the_local_specs_causal_only_softmax_kernel_is_never_used_with_a_window(te, fused_after):
    """megatron-core 0.16.1's fused masked softmax builds a plain causal mask: with it the local spec would train
    full attention. Transformer Engine takes the window itself, so its fusions stay as they are."""
    from train.mega.model import Stack, _sliding_window
    stack = Stack(gpu=True, transformer_engine=te, rope_kernel=True, softmax_kernel=True)
    window = _sliding_window(get_model("mistral"), stack, {"masked_softmax_fusion": True})
    assert window["window_size"] == (4095, 0)
    assert window.get("masked_softmax_fusion", True) is fused_after
    assert _sliding_window(get_model("llama"), stack, {"masked_softmax_fusion": True}) == {}
