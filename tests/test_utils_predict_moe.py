"""utils/predict/moe.py: a mixture of experts' activations and token-dispatch buffers in the memory models. What the
CPU runs (megatron-core's local layers and Hugging Face's Qwen3MoE at TP = EP = 1) is held against every live tensor
of a real step in tests/test_utils_predict_measured.py; here, what the sources say of the layouts the CPU cannot run
in one process (EP > 1, TP > 1, pipeline stages, Transformer Engine's layers) and of the full-size model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from utils.predict.activations import activations
from utils.predict.layout import GIB, Layout
from utils.predict.memory import DISPATCH, megatron_stages, memory
from utils.predict.moe import dispatch_bytes_per_token, megatron_moe_bytes_per_token
from utils.spec.models import get_model

QWEN3_MOE = get_model("qwen3moe")


def gpu_layout(memory_model: str = "megatron", **changes) -> Layout:
    settings = dict(memory_model=memory_model, tp=1, pp=1, dp=8, ga=8, mbs=1, seq_len=2048, precision="bf16",
                    grad_fp32=False, distributed_optimizer=True, overlap_grad_reduce=False)
    return Layout(**{**settings, **changes})


@pytest.mark.parametrize("lay", [gpu_layout(), gpu_layout(on_gpu=False), gpu_layout("fsdp2")],
                         ids=["megatron on a GPU", "megatron on the CPU", "fsdp"])
def test_a_moe_layer_keeps_its_experts_tensors_not_the_dense_width_no_layer_uses(lay):
    wider = replace(QWEN3_MOE, ffn_hidden_size=2 * QWEN3_MOE.ffn_hidden_size)
    assert activations(wider, lay) == activations(QWEN3_MOE, lay)
    for moe in (replace(QWEN3_MOE.moe, expert_ffn_size=1536), replace(QWEN3_MOE.moe, top_k=16)):
        assert activations(replace(QWEN3_MOE, moe=moe), lay) > activations(QWEN3_MOE, lay)


def test_the_dispatch_holds_the_all_to_alls_send_and_receive_buffers_beside_the_experts_output():
    """Tokens x top-k x hidden each: at EP = 1 (the all-to-all is the identity) the permuted tokens, the experts'
    output and its copy sorted back; at EP > 1 the all-to-all's receive buffers too, forward and back."""
    moe, h = QWEN3_MOE.moe, QWEN3_MOE.hidden_size
    one_copy = moe.top_k * h * 2
    assert dispatch_bytes_per_token(QWEN3_MOE, gpu_layout()) == 3 * one_copy
    assert dispatch_bytes_per_token(QWEN3_MOE, gpu_layout(ep=8)) == 4 * one_copy
    # TP = 2 (sequence parallel): the permuted and received tokens are the rank's sequence shard (2 bytes / TP each);
    # the experts' output and its sorted copy are whole (2 + 2) until the reduce-scatter over the shards, which takes
    # an fp32 copy of it (4) and gives back an fp32 shard (4 / TP)
    assert dispatch_bytes_per_token(QWEN3_MOE, gpu_layout(tp=2, ep=4)) == moe.top_k * h * (1 + 1 + 2 + 2 + 4 + 2)


def test_under_tensor_parallelism_the_experts_input_stays_whole_and_their_swiglu_splits():
    """Expert tensor parallelism is TP: each rank gathers every token routed to its experts and runs f / TP of their
    width; the routing runs on the rank's sequence shard."""
    one, two = (megatron_moe_bytes_per_token(QWEN3_MOE, tp, 2, True, True) for tp in (1, 2))
    moe, h = QWEN3_MOE.moe, QWEN3_MOE.hidden_size
    whole = moe.top_k * h * 2 + 4 * moe.top_k + 8 * moe.top_k  # the input, its probabilities, the chunk-sort maps
    assert one - whole == 2 * (two - whole)


def test_the_fused_swiglu_keeps_fc1s_output_and_the_unfused_one_its_steps_too():
    moe = QWEN3_MOE.moe
    fused, unfused = (megatron_moe_bytes_per_token(QWEN3_MOE, 1, 2, True, fused) for fused in (True, False))
    assert unfused - fused == 3 * moe.top_k * moe.expert_ffn_size * 2


def test_on_a_pipeline_stage_without_the_lm_head_the_token_dispatch_sets_the_peak():
    first, last = megatron_stages(QWEN3_MOE, gpu_layout(pp=2))
    forward_backward = [moment for moment in first if moment.phase == "forward-backward"]
    assert max(forward_backward, key=lambda moment: moment.total).name == DISPATCH
    loss = next(moment for moment in last if moment.parts.get("logits"))
    assert loss.total > next(moment for moment in last if moment.name == DISPATCH).total


def test_qwen3_30b_a3b_on_8_h100s_keeps_its_peak_at_the_optimizer_step_with_the_experts_activations():
    """TP1 PP1 DP8 GA8, MBS 1, SL 2048: the MoE layers' activations (10.7 GiB, where the dense width counted 6.6)
    stay below the optimizer step's fp32 gradient shard: 172 GiB at EP 1, 77.6 GiB at EP 8."""
    for ep, peak, forward_backward in ((1, 172.1, 168.8), (8, 77.6, 74.3)):
        found = memory(QWEN3_MOE, gpu_layout(ep=ep))
        assert (round(found.peak / GIB, 1), found.phase) == (peak, "optimizer step")
        assert round(found.phase_peak("forward-backward") / GIB, 1) == forward_backward
        assert round(found.activations / GIB, 1) == 10.7


def test_qwen3_30b_a3b_under_fsdp_peaks_at_the_loss_with_every_experts_weights_and_activations():
    """fsdp at TP1 DP8 (every expert on every rank, sharded over DP): 122.8 GiB at the loss, 18.3 GiB of it the
    sparse blocks' activations (the router's fp32 input, the experts' gathered input, fc1's and fc2's outputs)."""
    found = memory(QWEN3_MOE, gpu_layout("fsdp2"))
    assert (round(found.peak / GIB, 1), found.phase, round(found.activations / GIB, 1)) == \
        (122.8, "forward-backward", 18.3)
