"""A mixture-of-experts layer's activations in place of a dense MLP's (utils/predict/activations.py places them in a
decoder layer), and the token-dispatch buffers a Megatron MoE layer's forward holds for a moment
(utils/predict/memory.py's dispatch moment). Per token of the microbatch (T tokens on the rank, k = top_k, E routed
experts, f the expert width, h hidden, w the compute dtype's bytes); the routed experts see T x k tokens on every
rank whatever EP, the mean of a balanced router (dropless: megatron-core's capacity factor is off, MOE_ROUTING). Each
tensor from the sources (megatron-core 0.19.2, its facts in utils/upstream/table.py; Transformer Engine 2.17.1;
transformers 5's Qwen3MoE) and held against every live tensor of a real CPU step where the CPU runs it
(tests/test_utils_predict_measured.py: the local layers and Hugging Face's, TP = EP = 1). Standard library only.

megatron-core's MoELayer with the all-to-all dispatcher (mega, NeMo, Megatron-Bridge, Primus), what it keeps for
backward:
- routing, on the tokens of this rank's sequence shard (T / TP under sequence parallelism): the router's fp32 top-k
  softmax and its top-k indices (4 k + 8 k: moe_utils.py topk_routing_with_score_function), the probabilities
  scattered over all experts and the routing map, which the dispatcher holds as attributes until the layer's next
  forward (4 E + E: token_dispatcher.py dispatch_preprocess), and the load-balancing loss's softmax over all experts
  (4 E: compute_routing_scores_for_aux_loss). The router's fp32 logits are not kept (router_gating_linear keeps its
  input, the pre-MLP norm's output that a dense MLP's first projection keeps too). The permutation: torch's on the CPU
  (moe_utils.py permute: the argsort of the transposed routing map, 8 E, and the tokens' indices, 8 k), Transformer
  Engine's fused one on a GPU (moe_permute_fusion: one int32 row map of 2 E + 1 per token, which the unpermutation
  reuses);
- the experts' input, sorted by local expert (k h w, with its fp32 probabilities 4 k; on a GPU the fused chunk
  sort's two int32 maps, 8 k): the only copy of the dispatched tokens kept, whole over TP (gathered from the
  sequence shards: expert tensor parallelism is TP). Each expert a SwiGLU MLP over f / TP (TEGroupedMLP on a GPU,
  SequentialMLP of megatron-core's MLP on the CPU): fc1's gate-and-up output (2 w f) and fc2's input (w f) with the
  fused weighted bias-SwiGLU (fusions/fused_bias_swiglu.py keeps fc1's output and the probabilities), else also the
  SiLU, the up half plus glu_linear_offset and their product before the probabilities scale it and the product is
  cast back (3 w f more: 6 w f in all, the CPU's). Left out: the aux loss's per-expert counts (under 300 bytes a
  layer).

Hugging Face's Qwen3MoE (fsdp, TP = 1, every expert on every rank; transformers' grouped_mm experts, its default where
torch has grouped_mm): the router's input cast to fp32 (4 h: train/native/moe.py's fp32 router; the post-attention
norm's output is then kept by nothing else), its softmax over all experts (4 E), the top-k indices (8 k), the top-k
probabilities renormalised in place (a saved copy and their sum: 4 k + 4); the experts' input gathered by expert
(k h w) with its probabilities (4 k), the sort's three int64 index tensors (24 k), fc1's output (2 w f), the SiLU
and its product with the up half (2 w f), and fc2's output (w h), kept for the probabilities' product. The
load-balancing loss's branch of backward runs first, and the gradient it sends each layer's router logits (4 E)
waits in autograd's input buffer until that layer's backward: alive at the loss's backward, the fsdp step's peak.
"""

from __future__ import annotations

from utils.predict.layout import Layout
from utils.spec.models import ModelSpec


def megatron_moe_bytes_per_token(spec: ModelSpec, tp: int, width: int, on_gpu: bool, fused_swiglu: bool) -> float:
    """What one megatron-core MoE layer keeps for backward, per token of the microbatch (module docstring): the
    routing over the sequence shard (1 / TP of the tokens), the experts' input whole, their SwiGLU over f / TP."""
    moe, h, w = spec.moe, spec.hidden_size, width
    k, e, f = moe.top_k, moe.num_experts, moe.expert_ffn_size
    permutation = 4 * (2 * e + 1) if on_gpu else 8 * e + 8 * k
    routing = 12 * k + 9 * e + permutation
    swiglu = 3 if on_gpu and fused_swiglu else 6
    experts = k * h * w + 4 * k + (8 * k if on_gpu else 0) + swiglu * k * w * f / tp
    return routing / tp + experts


def hf_moe_bytes_per_token(spec: ModelSpec, width: int) -> float:
    """What one Hugging Face Qwen3MoE sparse block keeps for backward, per token, with the load-balancing loss's
    gradient waiting for it (module docstring); at TP = 1, the only layout fsdp builds it at."""
    moe, h, w = spec.moe, spec.hidden_size, width
    k, e, f = moe.top_k, moe.num_experts, moe.expert_ffn_size
    router = 4 * h + 4 * e + 8 * k + 4 * k + 4 + 4 * e
    return router + k * (h * w + 4 + 24 + 4 * w * f + w * h)


def dispatch_bytes_per_token(spec: ModelSpec, lay: Layout) -> float:
    """The buffers of one megatron-core MoE layer's forward beyond what it keeps, at their largest, per token of the
    microbatch: MoELayer.forward holds the permuted tokens (the all-to-all's send buffer) and, at EP > 1, the
    all-to-all's receive buffer until it returns; meanwhile the experts' output is sorted back into a new tensor (at
    TP > 1 cast to fp32 for the reduce-scatter over the sequence shards, whose output is 1 / TP of it), and at EP > 1
    all-to-all'd back into another. At TP = 1: 3 k h w at EP = 1 (the all-to-all is the identity), 4 k h w at EP > 1."""
    moe, w, tp = spec.moe, lay.width, lay.tp
    tokens_hw = moe.top_k * spec.hidden_size
    split = lay.ep > 1
    sent = w / tp * (1 + split)  # the permuted tokens and the received ones (1 / TP of the tokens: their shard)
    sorted_back = moe.num_experts // lay.ep > 1  # the experts' output sorted back by source rank
    if tp == 1:
        return tokens_hw * (sent + max(w + w * sorted_back, 2 * w * split))
    reduce_scatter = w + w * sorted_back + (4 if w < 4 else 0) + 4 / tp
    return tokens_hw * (sent + max(reduce_scatter, 2 * w / tp * split))
