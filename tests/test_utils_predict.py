"""utils/predict*.py: memory per GPU held against what the frameworks really allocate and against PyTorch's own
memory tracker, and the step-time bound's parts from their formulas.

Tolerances (also in README, "Will it fit, and how fast could it be"):
- weights, gradients, optimizer state: equal to the byte to the tensors mega, fsdp and autotp hold for the tiny
  models on the CPU (autotp's gradients: its fp32 shard, plus at most the undecayed vectors' gradients DeepSpeed
  has not yet flattened when its first group steps);
- fsdp's whole step, full-size Llama 3.1 8B, Qwen 2.5 7B and Llama 3.1 70B at SL 8192 on 8 ranks under
  FakeTensorMode: weights and optimizer state to the byte, each layer's activations to the byte, the peak within
  0.01%; fsdp's measured CPU peak (MemTracker on real tensors) within 1%;
- mega's and autotp's measured CPU peaks: within 35% and 50% (the loss's and the weight gradients' temporaries of
  Megatron's fused cross-entropy and DeepSpeed's reduction buffers are not modelled tensor by tensor).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.train_matrix.requests import node, run_request
from train.plan import build_plan, table
from utils.machine.hardware import TARGET_DEVICES
from utils.spec.models import get_model
from utils.predict import NO_DEVICE, gpu_target, predict
from utils.predict.memory import Layout, autotp_states, hf_shapes, memory
from utils.predict.step_time import bound, links

ROOT = Path(__file__).resolve().parent.parent
H100 = gpu_target(TARGET_DEVICES["h100"], None, "TARGET_DEVICE=h100")
ONE_PROCESS = {"CPU_DP": "1", "CPU_GPUS_PER_NODE": "1", "CPU_TRAIN_ITERS": "3", "CPU_WARMUP_SKIP": "1",
               "CPU_WARMUP_STEPS": "1", "HF_HUB_OFFLINE": "1", "DS_ACCELERATOR": "cpu"}


def allocated(framework: str, model: str, precision: str) -> dict:
    """tests/fixtures/train/allocated.py's census of one framework's real tensors, with the prediction."""
    env = {**os.environ, **ONE_PROCESS, "CPU_PRECISION": precision, "FRAMEWORK": framework, "MODELS": model}
    out = subprocess.run([sys.executable, "-m", "tests.fixtures.train.allocated", framework, model], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("framework, model, precision", [
    ("mega", "qwen", "bf16"), ("mega", "llama", "fp32"), ("fsdp", "qwen", "bf16"), ("autotp", "qwen", "bf16")])
def test_weights_gradients_and_optimizer_state_are_what_the_framework_allocates(framework, model, precision):
    found = allocated(framework, model, precision)
    predicted = found["predicted"]
    assert (found["weights"], found["optimizer"]) == (predicted["weights"], predicted["optimizer"])
    if framework == "autotp":
        vectors = sum(r for r, c in hf_shapes(get_model(model, "tiny"), 1, False) if c == 1) * 4
        assert 0 <= found["gradients"] - predicted["gradients"] <= vectors
    else:
        assert found["gradients"] == predicted["gradients"]
    tolerance = {"fsdp": 0.01, "mega": 0.35, "autotp": 0.50}[framework]
    assert abs(found["peak"] - predicted["peak"]) <= tolerance * found["peak"], found


def tracked(model: str, layers: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.fixtures.train.fake_tracked", model, str(layers), "8", "8192",
                          "1"], cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def fsdp_layout() -> Layout:
    return Layout("fsdp", tp=1, pp=1, dp=8, ga=1, mbs=1, seq_len=8192, precision="bf16", grad_fp32=False,
                  distributed_optimizer=True, overlap_grad_reduce=False, on_gpu=False)


@pytest.mark.parametrize("model", ["llama", "qwen", "llama70b"])
def test_full_size_fsdp_step_matches_pytorchs_fake_tensor_tracker(model):
    """One and two full-width layers are tracked; every layer is the same, and the peak (the start of backward at
    the loss) holds every layer's activations, so the whole model's peak is the two-layer one plus one layer's
    increment per further layer: exact, not an approximation."""
    one, two = tracked(model, 1), tracked(model, 2)
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
    lay = Layout("mega", tp=2, pp=4, dp=1, ga=8, mbs=1, seq_len=4096, precision="bf16", grad_fp32=False,
                 distributed_optimizer=True, overlap_grad_reduce=False)
    found = bound(spec, lay, H100.spec, links(H100.spec, 8, 1, None))
    assert found.bubble_s == pytest.approx((found.compute_s + found.tp_s) * 3 / 8)
    per_gpu = 4 * 2 * 1 * 4096 * 4096 * 2 * (32 // 4) * 8 * (1 / 2)  # 4 all-reduces x layers x GA, (t-1)/t of 2x
    assert found.tp_s == pytest.approx(per_gpu / 450e9)
    assert found.dp_s == 0 and found.step_s == pytest.approx(found.compute_s + found.tp_s + found.bubble_s)


def test_data_parallel_time_uses_the_inter_node_link_and_net_link_gbps_overrides_it():
    spec = get_model("llama")
    lay = Layout("mega", tp=1, pp=1, dp=16, ga=1, mbs=1, seq_len=4096, precision="bf16", grad_fp32=False,
                 distributed_optimizer=True, overlap_grad_reduce=False)
    default, slower = (bound(spec, lay, H100.spec, links(H100.spec, 8, 2, gbps)) for gbps in (None, 100.0))
    assert slower.dp_s > default.dp_s > 0
    n = spec.param_count()
    within, across = 7 / 8 * 4 * n / 450e9, 1 / 2 * 4 * n / 8 / (400e9 / 8)
    assert default.dp_s == pytest.approx(within + across)


def test_zero_shards_optimizer_state_over_data_parallel_ranks():
    spec = get_model("llama", "tiny")
    base = dict(framework="autotp", tp=1, pp=1, ga=1, mbs=1, seq_len=128, precision="bf16", grad_fp32=False,
                distributed_optimizer=True, overlap_grad_reduce=False)
    one, four = (autotp_states(spec, Layout(dp=dp, zero_stage=1, **base)) for dp in (1, 4))
    assert four.optimizer == pytest.approx(one.optimizer / 4, rel=1e-4) and four.weights == one.weights
