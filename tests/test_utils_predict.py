"""utils/predict*.py: memory per GPU held against what the frameworks really allocate and against PyTorch's own
memory tracker, and the step-time bound's parts from their formulas.

Tolerances (also in README, "Will it fit, and how fast could it be"):
- weights, gradients, optimizer state: equal to the byte to the tensors mega, fsdp and autotp hold for the tiny
  models on the CPU (autotp's gradients: its fp32 shard, plus at most the undecayed vectors' gradients DeepSpeed
  has not yet flattened when its first group steps);
- fsdp's whole step, full-size Llama 3.1 8B, Qwen 2.5 7B and Llama 3.1 70B at SL 8192 on 8 ranks under
  FakeTensorMode: weights and optimizer state to the byte, each layer's activations to the byte, the peak within
  0.01%;
- every memory model's peak against every live tensor of a real CPU step, at two sizes: within 10% (the issue's
  bound) and each phase within 1% (tests/test_utils_predict_measured.py).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.fixtures.train_matrix.requests import node, run_request
from train.plan import build_plan, table
from utils import frameworks
from utils.machine.hardware import TARGET_DEVICES
from utils.spec.models import get_model
from utils.predict import NO_DEVICE, gpu_target, host_target, layout, predict, result_section
from utils.predict.memory import (GPU_WORKSPACE_BYTES, MEMORY_MODELS, Layout, hf_shapes, megatron_buffer,
                                  megatron_numels, megatron_stage, memory)
from utils.predict.step_time import bound, links, stage_parameters

ROOT = Path(__file__).resolve().parent.parent
H100 = gpu_target(TARGET_DEVICES["h100"], None, "TARGET_DEVICE=h100")


def tracked(model: str, *layers: int) -> list[dict]:
    """tests/fixtures/train/fake_tracked.py's peak by category of each depth, tracked in one process."""
    out = subprocess.run([sys.executable, "-m", "tests.fixtures.train.fake_tracked", model, ",".join(map(str, layers)),
                          "8", "8192", "1"], cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    return [found[str(depth)] for depth in layers]


def fsdp_layout() -> Layout:
    return Layout(memory_model="fsdp2", tp=1, pp=1, dp=8, ga=1, mbs=1, seq_len=8192, precision="bf16",
                  grad_fp32=False, distributed_optimizer=True, overlap_grad_reduce=False, on_gpu=False)


@pytest.mark.parametrize("model", ["llama", "qwen", "llama70b"])
def test_full_size_fsdp_step_matches_pytorchs_fake_tensor_tracker(model):
    """One and two full-width layers are tracked; every layer is the same, and the peak (the start of backward at
    the loss) holds every layer's activations, so the whole model's peak is the two-layer one plus one layer's
    increment per further layer: exact, not an approximation."""
    one, two = tracked(model, 1, 2)
    lay = fsdp_layout()
    for layers, seen in ((1, one), (2, two)):
        predicted = memory(get_model(model, "full", layers), lay)
        assert seen["Sharded Param"] == predicted.weights and seen["OptState"] == predicted.optimizer
    per_layer = two["Activation"] - one["Activation"]
    predicted_per_layer = (memory(get_model(model, "full", 2), lay).activations
                           - memory(get_model(model, "full", 1), lay).activations)
    assert per_layer == predicted_per_layer
    full = get_model(model, "full")
    extrapolated = two["Total"] + (full.num_layers - 2) * (two["Total"] - one["Total"])
    assert abs(memory(full, lay).peak - extrapolated) <= 1e-4 * extrapolated


def test_the_plan_prints_memory_and_time_for_each_run_on_the_target_device():
    cfg = node("nvd", TARGET_DEVICE="h100", FRAMEWORK="mega,fsdp", MODELS="llama")
    lines = table(cfg, build_plan(cfg))
    assert "predicted for: NVIDIA H100 80GB HBM3 (TARGET_DEVICE=h100)" in lines
    rows = [line for line in lines if "predicted peak" in line]
    assert len(rows) == 2 and all(" GiB of 79.6 GiB: fits (" in row and "step >= " in row for row in rows)


def test_a_run_that_will_not_fit_is_flagged_and_skipped_only_when_asked():
    env = {"TARGET_DEVICE": "h100", "FRAMEWORK": "mega", "MODELS": "llama70b"}
    runs = build_plan(node("nvd", **env))
    lines = table(node("nvd", **env), runs)
    assert not runs[0].skipped and any("WILL NOT FIT: " in line and "will not fit (" in line for line in lines)
    assert any("run anyway unless SKIP_WONT_FIT=1" in line for line in lines)
    (skipped,) = build_plan(node("nvd", SKIP_WONT_FIT="1", **env))
    assert skipped.skipped.startswith("predicted not to fit (SKIP_WONT_FIT=1): predicted peak ")


def test_without_a_detected_gpu_or_target_device_the_plan_says_so_once(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi
    import train.plan

    train.plan._target.cache_clear()
    cfg = node("nvd", FRAMEWORK="mega")
    lines = table(cfg, build_plan(cfg))
    train.plan._target.cache_clear()  # the next test's PATH may hold a (fake) nvidia-smi
    assert lines.count(NO_DEVICE) == 1 and not any("predicted for" in line for line in lines)
    assert all(" of " not in line for line in lines if "predicted peak" in line)


def test_the_cpu_plans_against_host_memory_per_worker():
    cfg = node("cpu", 0, FRAMEWORK="fsdp", MODELS="llama")
    lines = table(cfg, build_plan(cfg))
    assert any(line.startswith("predicted for: host memory per worker (2 worker(s) share") for line in lines)
    assert any("no step-time bound" in line for line in lines)


def test_compute_is_the_flops_formula_at_the_dense_peak():
    req = run_request("nvd", "mega", "llama", TARGET_DEVICE="h100")
    found = predict(req, H100)
    t, spec = req.training, get_model("llama")
    expected = spec.flops_per_token(t.seq_len) * t.gbs * t.seq_len / req.parallelism.num_gpus / 989.4e12
    assert found.time.compute_s == pytest.approx(expected, rel=1e-12)


def test_the_bubble_is_pp_minus_one_over_ga_of_the_busy_time_and_tp_crosses_the_intra_node_link():
    spec = get_model("llama")
    lay = Layout(memory_model="megatron", tp=2, pp=4, dp=1, ga=8, mbs=1, seq_len=4096, precision="bf16",
                 grad_fp32=False, distributed_optimizer=True, overlap_grad_reduce=False)
    found = bound(spec, lay, H100.spec, links(H100.spec, 8, 1, None))
    assert found.bubble_s == pytest.approx((found.compute_s + found.tp_s) * 3 / 8)
    per_gpu = 4 * 2 * 1 * 4096 * 4096 * 2 * (32 // 4) * 8 * (1 / 2)  # 4 all-reduces x layers x GA, (t-1)/t of 2x
    assert found.tp_s == pytest.approx(per_gpu / 450e9)
    assert found.dp_s == 0 and found.step_s == pytest.approx(found.compute_s + found.tp_s + found.bubble_s)


def test_data_parallel_time_uses_the_inter_node_link_and_net_link_gbps_overrides_it():
    spec = get_model("llama")
    lay = Layout(memory_model="megatron", tp=1, pp=1, dp=16, ga=1, mbs=1, seq_len=4096, precision="bf16",
                 grad_fp32=False, distributed_optimizer=True, overlap_grad_reduce=False)
    default, slower = (bound(spec, lay, H100.spec, links(H100.spec, 8, 2, gbps)) for gbps in (None, 100.0))
    assert slower.dp_s > default.dp_s > 0
    n = spec.param_count()
    within, across = 7 / 8 * 4 * n / 450e9, 1 / 2 * 4 * n / 8 / (400e9 / 8)
    assert default.dp_s == pytest.approx(within + across)


def cpu_layout(memory_model: str, **changes) -> Layout:
    settings = dict(memory_model=memory_model, tp=1, pp=1, dp=1, ga=1, mbs=2, seq_len=128, precision="bf16",
                    grad_fp32=False, distributed_optimizer=True, overlap_grad_reduce=False, on_gpu=False)
    return Layout(**{**settings, **changes})


def test_zero_shards_optimizer_state_over_data_parallel_ranks():
    spec = get_model("llama", "tiny")
    one, four = (memory(spec, cpu_layout("deepspeed", dp=dp, zero_stage=1)) for dp in (1, 4))
    assert four.optimizer == pytest.approx(one.optimizer / 4, rel=1e-4) and four.weights == one.weights


def test_each_framework_takes_its_memory_model_from_the_registry():
    assert set(MEMORY_MODELS) == set(frameworks.MEMORY_MODELS)
    for framework in ("mega", "fsdp", "autotp"):
        req = run_request("cpu", framework, "llama", FRAMEWORK=framework)
        assert layout(req, on_gpu=False).memory_model == frameworks.TABLE[framework].memory_model
    assert Layout(framework="nemo", **{k: v for k, v in vars(cpu_layout("fsdp2")).items()
                                       if k not in ("memory_model", "framework")}).memory_model == "megatron"
    with pytest.raises(ValueError, match="memory model 'zero' is not one of"):
        cpu_layout("zero")


@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_a_tied_head_is_counted_once_except_on_a_later_pipeline_stage(model):
    spec = get_model(model, "tiny")
    tied = replace(spec, tied_embeddings=True)
    head = spec.vocab_size * spec.hidden_size
    assert tied.param_count() == spec.param_count() - head
    for each in (spec, tied):  # every memory model holds what param_count counts
        assert sum(megatron_numels(each, 1, each.num_layers, True, True)) == each.param_count()
        assert sum(r * c for r, c in hf_shapes(each, 1, False)) == each.param_count()
    # PP > 1: the last stage keeps its own copy of the tied head (megatron-core's shared embedding)
    assert megatron_numels(tied, 1, 1, False, True) == megatron_numels(spec, 1, 1, False, True)
    assert megatron_numels(tied, 1, 1, True, False) == megatron_numels(spec, 1, 1, True, False)
    # weights, gradients and optimizer state lose the head once, as each framework holds them
    fsdp, fsdp_tied = (memory(each, cpu_layout("fsdp2")) for each in (spec, tied))
    assert (fsdp.weights - fsdp_tied.weights, fsdp.optimizer - fsdp_tied.optimizer) == (4 * head, 8 * head + 4)
    autotp, autotp_tied = (memory(each, cpu_layout("deepspeed")) for each in (spec, tied))
    assert autotp.weights - autotp_tied.weights == pytest.approx(2 * head, abs=4)
    assert autotp.optimizer - autotp_tied.optimizer == pytest.approx(12 * head, abs=24)
    mega, mega_tied = (memory(each, cpu_layout("megatron")) for each in (spec, tied))
    buffers = [megatron_buffer(megatron_numels(each, 1, each.num_layers, True, True), 1, None, True).numel
               for each in (spec, tied)]
    assert buffers[0] - buffers[1] == pytest.approx(head, abs=128)
    assert mega.weights - mega_tied.weights == 2 * (buffers[0] - buffers[1])
    assert mega.optimizer - mega_tied.optimizer == 12 * head + 4
    at_step = [megatron_stage(each, cpu_layout("megatron"), True, True)[-1].parts["gradients"] for each in (spec, tied)]
    assert at_step[0] - at_step[1] == 2 * (buffers[0] - buffers[1]) + 4 * head  # the buffer and its fp32 copy


def test_the_step_time_reads_the_parameters_each_memory_model_holds():
    spec = get_model("qwen", "tiny")
    assert stage_parameters(spec, cpu_layout("megatron")) == spec.param_count()
    assert stage_parameters(spec, cpu_layout("fsdp2", tp=2)) < spec.param_count()
    # autotp splits the head over the vocabulary, fsdp (torchtitan's plan) the embedding too
    half_table = spec.vocab_size // 2 * spec.hidden_size
    assert stage_parameters(spec, cpu_layout("fsdp2", tp=2)) == stage_parameters(spec, cpu_layout("deepspeed", tp=2)) \
        - half_table


@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_fsdp_at_tp_2_shards_the_embedding_head_and_logits_and_the_norms_over_the_sequence(model):
    """train/native/tensor_parallel.py's plan: embedding and head V/TP rows, loss parallel's fp32 buffers over
    V/TP, each norm's saved tensors over the sequence shard while the gathered projection inputs stay whole."""
    spec, tied = get_model(model, "tiny"), replace(get_model(model, "tiny"), tied_embeddings=True)
    one, two = (memory(spec, cpu_layout("fsdp2", tp=tp, dp=1)) for tp in (1, 2))
    v, h, tokens, w = spec.vocab_size, spec.hidden_size, 2 * 128, 2
    assert two.logits == one.logits // 2 == tokens * v // 2 * 12
    table = v * h
    layers = [r * c for r, c in hf_shapes(spec, 2, False)[1:-2]]
    assert two.weights == 4 * (table + sum(layers) + h)  # two half tables, layers split, the norm whole
    assert memory(tied, cpu_layout("fsdp2", tp=2, dp=1)).weights == 4 * (table // 2 + sum(layers) + h)
    d, f, a, g = spec.head_dim, spec.ffn_hidden_size, spec.num_attention_heads, spec.num_kv_heads
    split = (w * (2 * a * d + 2 * g * d) + 4 * a + 4 * w * f) // 2  # heads and FFN over TP, as before
    layer = 2 * (4 * h + 4 + w * h) / 2 + 2 * w * h + split  # norms on the sequence shard, gathered inputs whole
    model_level = 8 + 2 * w * d + (4 * h + 4 + w * h) / 2 + w * h  # RoPE whole, the final norm sharded
    assert two.activations == math.ceil((spec.num_layers * layer + model_level) * tokens)
    assert two.activations < one.activations


def test_the_optimizer_temporaries_are_torch_adamws_on_the_cpu_and_none_under_megatrons_fused_adam():
    spec = get_model("qwen", "tiny")
    embedding = spec.vocab_size * spec.hidden_size
    cpu, gpu = (megatron_stage(spec, cpu_layout("megatron", on_gpu=on_gpu), True, True)[-1].parts["temporaries"]
                for on_gpu in (False, True))
    assert cpu == 2 * 4 * embedding and gpu == 0  # sqrt and its quotient of the largest tensor; FusedAdam: none
    foreach = memory(spec, cpu_layout("fsdp2", on_gpu=True))  # one sqrt of every decayed tensor at once
    assert foreach.temporaries == 4 * sum(r * c for r, c in hf_shapes(spec, 1, False) if c > 1)


def test_megatron_cores_fallback_to_torchs_adamw_on_a_gpu_holds_one_sqrt_of_the_whole_shard():
    spec = get_model("qwen", "tiny")
    lay = replace(cpu_layout("megatron", on_gpu=True), fused_optimizer=False)  # DP 1: the shard is the buffer
    step = megatron_stage(spec, lay, True, True)[-1]
    shard = megatron_buffer(megatron_numels(spec, 1, spec.num_layers, True, True), 1, None, True).shard_numel
    assert step.phase == "optimizer step" and step.parts["temporaries"] == 4 * shard


def test_the_results_prediction_counts_the_fallback_optimizer_the_run_read_back():
    req = run_request("nvd", "mega", "llama", TARGET_DEVICE="h100")
    said = {fused: result_section(req, {"system": {}, "performance": {}, "features": {"optimizer_fusion": fused}})
            for fused in (True, False)}
    unsaid = result_section(req, {"system": {}, "performance": {}})
    assert unsaid["memory"] == said[True]["memory"]  # a result that does not say: the GPU stack's fused Adam
    optimizer = said[False]["memory"]["optimizer_gib"]  # the shard's fp32 master and two moments: 3 x its sqrt
    assert said[False]["memory"]["temporaries_gib"] == pytest.approx(optimizer / 3, rel=1e-3)


def test_megatron_core_without_transformer_engine_or_apex_takes_torchs_adamw_and_the_run_says_so():
    """megatron-core 0.19.2 optimizer/__init__.py:13-35: TE's FusedAdam, else Apex's, else torch's AdamW."""
    import importlib.util

    from megatron.core import optimizer

    from train.common import local_kernels

    fused = any(importlib.util.find_spec(name) for name in ("transformer_engine", "apex"))
    assert local_kernels.fused_optimizer() is fused is (not optimizer.USING_PYTORCH_OPTIMIZER)


def test_the_prediction_says_which_parts_it_models_and_which_are_an_allowance():
    cfg = node("nvd", TARGET_DEVICE="h100", FRAMEWORK="mega,fsdp,autotp", MODELS="llama")
    rows = [line for line in table(cfg, build_plan(cfg)) if "predicted peak" in line]
    assert any("[megatron model: weights, gradients, optimizer, activations, logits, temporaries; + 1.5 GiB "
               "workspace allowance]" in row for row in rows)
    assert any("[deepspeed model: weights, gradients, optimizer, activations, logits, buffers, temporaries; + 1.5 GiB "
               "workspace allowance]" in row for row in rows)
    req = run_request("nvd", "mega", "llama", TARGET_DEVICE="h100")
    section = result_section(req, {"system": {}, "performance": {}})["memory"]
    assert section["memory_model"] == "megatron" and section["allowance"] == "workspace"
    assert section["modelled"] == ["weights", "gradients", "optimizer", "activations", "logits", "temporaries"]
    assert section["workspace_gib"] == GPU_WORKSPACE_BYTES / 2 ** 30 and section["not_modelled"]
    cpu = predict(run_request("cpu", "fsdp", "llama", FRAMEWORK="fsdp"), host_target(2)).memory
    assert cpu.workspace == 0 and "allowance" not in cpu.describe()
