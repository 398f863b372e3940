"""The upstream-fact table's megatron-core 0.19.2 facts behind a mixture of experts' predicted memory
(utils/predict/moe.py: what a MoE layer keeps for backward and the buffers of its token dispatch; issue 47).
utils/upstream/table.py holds the table and re-reads these from the installed package (`check --installed`).
Standard library only."""

from __future__ import annotations

from utils.upstream.kinds import Fact

_MOE = "megatron/core/transformer/moe/"
_MEASURED = "tests/test_utils_predict_measured.py::test_the_predicted_peak_is_within_10_percent_of_the_measured_one"
_DISPATCH = ("tests/test_utils_predict_measured.py::"
             "test_a_megatron_moe_layers_token_dispatch_is_within_1_percent_of_its_measured_forward")
_UNIT = "tests/test_utils_predict_moe.py::"

MOE_MEMORY_FACTS: tuple[Fact, ...] = (
    Fact("mcore-moe-router-keeps-its-input", "megatron-core-0.19.2", _MOE + "moe_utils.py", (1319, 1319),
         "7595f1a0932deef1e8b482953651cbba824d9ed8f0926492d17ebe603d1e2f8d",
         "the router's gating linear keeps its input (the pre-MLP norm's output) for backward, not its fp32 logits",
         _MEASURED),
    Fact("mcore-moe-routing-probs-and-map", "megatron-core-0.19.2", _MOE + "moe_utils.py", (893, 894),
         "9731621e18f7fff6c32f587ebcfbd4c856174710565881d399c93aec01f36cdc",
         "the top-k probabilities are scattered over every expert (fp32, tokens x experts) beside a boolean routing "
         "map of the same shape", _MEASURED),
    Fact("mcore-moe-dispatcher-holds-probs-and-map", "megatron-core-0.19.2", _MOE + "token_dispatcher.py", (636, 637),
         "40ddde11cbd6e872a16ed4ffec53ef2c28e1bc30f7b5d59c6629199137419ae3",
         "the all-to-all dispatcher keeps both as attributes, alive until the layer's next forward", _MEASURED),
    Fact("mcore-moe-aux-loss-softmax-over-every-expert", "megatron-core-0.19.2", _MOE + "moe_utils.py", (936, 936),
         "2386a252255e3e9970849c857a4cdc2c5af445c2a4f7a892ee141f7054d0882a",
         "the load-balancing loss takes an fp32 softmax over every expert, which its backward keeps", _MEASURED),
    Fact("mcore-moe-unfused-permute-indices", "megatron-core-0.19.2", _MOE + "moe_utils.py", (459, 465),
         "90c50a869bf4bf60ad637c15127d75c15bda6ed3707543535cf13a10d477901c",
         "without the fused permutation (the CPU) the tokens are permuted by an argsort over tokens x experts and "
         "their int64 indices, which index_select's backward keeps", _MEASURED),
    Fact("mcore-moe-sorts-tokens-by-local-expert", "megatron-core-0.19.2", _MOE + "token_dispatcher.py", (775, 781),
         "30f08925764e040f1726b29ebdaca47944b3997c620c9ebb86c7522334666a60",
         "with more than one local expert the dispatched tokens and probabilities are sorted by expert into new "
         "tensors: the experts' input, the one copy of the dispatched tokens kept for backward", _MEASURED),
    Fact("mcore-moe-gathers-tokens-over-tp", "megatron-core-0.19.2", _MOE + "token_dispatcher.py", (739, 744),
         "c2e09327b65b2555479b9cb8efbb4bea4f04cdc9e463672a7964fa76a8b41c87",
         "at TP > 1 the dispatched tokens and probabilities are gathered from the sequence shards: the experts' input "
         "is whole on every TP rank", _UNIT + "test_under_tensor_parallelism_the_experts_input_stays_whole_and_their_"
         "swiglu_splits"),
    Fact("mcore-moe-sorts-back-and-reduce-scatters-in-fp32", "megatron-core-0.19.2", _MOE + "token_dispatcher.py",
         (810, 826), "f508aa0eb4054c860674a2229990bc2f801a87d7b8708e313e8c40b98dc3770b",
         "the experts' output is sorted back into a new tensor and, at TP > 1, cast to the probabilities' dtype (fp32) "
         "for the reduce-scatter over the sequence shards", _DISPATCH),
    Fact("mcore-moe-forward-holds-the-dispatch-buffers", "megatron-core-0.19.2", _MOE + "moe_layer.py", (656, 678),
         "025d75ed9ad94c17d9c57f6a396cd9b200d5ca94093197392d14e8d4beae0760",
         "the MoE layer's forward holds the permuted tokens and the all-to-all's output in its locals through the "
         "experts and the combine", _DISPATCH),
    Fact("mcore-all-to-all-receive-buffer", "megatron-core-0.19.2", "megatron/core/tensor_parallel/mappings.py",
         (435, 448), "b1a7090d71c55c99394f49c17d4f7fbb948a52232b66cbfa61b0de1383eaa9a4",
         "the all-to-all returns its input over one rank (EP = 1) and otherwise a new receive buffer",
         _UNIT + "test_the_dispatch_holds_the_all_to_alls_send_and_receive_buffers_beside_the_experts_output"),
    Fact("mcore-grouped-mlp-weighted-swiglu", "megatron-core-0.19.2", _MOE + "experts.py", (828, 835),
         "7b5a0ce1fd7fb1fd7900338eaf51814cf5b30ced70bb4fa0fc6fc156b277fc8e",
         "with bias_activation_fusion TEGroupedMLP's SwiGLU and probability scaling are one fused function",
         _UNIT + "test_the_fused_swiglu_keeps_fc1s_output_and_the_unfused_one_its_steps_too"),
    Fact("mcore-weighted-swiglu-keeps-input-and-probs", "megatron-core-0.19.2",
         "megatron/core/fusions/fused_bias_swiglu.py", (196, 196),
         "830caef8d294efbf92ce5cbcb184b937de7baa10213a48e4ddf0c8e8f7aeb034",
         "which keeps only fc1's output and the probabilities for backward",
         _UNIT + "test_the_fused_swiglu_keeps_fc1s_output_and_the_unfused_one_its_steps_too"),
    Fact("mcore-grouped-mlp-unfused-glu", "megatron-core-0.19.2", _MOE + "experts.py", (866, 879),
         "e282c9cf5329cc02233de73c8fcf37413dd128b63825c7a02b3303ae565344ca",
         "without it the SiLU, the up half plus glu_linear_offset and their product are separate tensors, scaled by "
         "the probabilities and cast back", _UNIT + "test_the_fused_swiglu_keeps_fc1s_output_and_the_unfused_one_its_"
         "steps_too"),
    Fact("mcore-expert-mlp-scales-and-casts-back", "megatron-core-0.19.2", "megatron/core/transformer/mlp.py",
         (337, 340), "54d1b234d3b75d4933eb9e99a4a906ff7c660650d51483cf50cb42389e9a959e",
         "the local layers' experts (SequentialMLP of MLPs, the CPU) scale their SwiGLU output by the probabilities "
         "and cast it back, fc2 keeping the cast", _MEASURED),
    Fact("mcore-query-reshape-to-heads", "megatron-core-0.19.2", "megatron/core/transformer/attention.py",
         (1906, 1906), "74ada9d76179ee29628b0c324e38ff82f33c8659d667a86e3c57c7297a8d168b",
         "the queries are reshaped from query groups to heads before QK-norm (a copy where 1 < groups < heads), the "
         "keys stay a view of the QKV projection's output", _MEASURED),
)
