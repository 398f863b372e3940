"""The upstream-fact table's torchtitan 0.3.0 mixture-of-experts section (utils/upstream/table.py holds the table and
its source, "torchtitan-0.3.0"): what train/torchtitan/moe.py relies on to build Qwen3 30B-A3B as torchtitan's qwen3
MoE model with megatron-core's load-balancing loss, and what train/torchtitan/gpt_oss.py relies on to build GPT-OSS-20B
as its gpt_oss model with every feature of the spec, re-read from the installed package (`check --installed`).
Standard library only."""

from __future__ import annotations

from utils.upstream.kinds import Fact

TITAN_MOE = "tests/test_train_torchtitan_moe.py::"
GPT_OSS = "tests/test_train_torchtitan_gpt_oss.py::"
BUILT, SAME_AS_20B = GPT_OSS + "test_torchtitans_own_classes_build_the_specs_gpt_oss_and_read_it_back", \
    GPT_OSS + "test_the_full_model_is_torchtitans_own_20b_but_for_its_expert_bias"
ATTENTION, EXPERTS = GPT_OSS + "test_the_tiny_models_attention_is_hugging_faces_window_sinks_yarn_and_biases", \
    GPT_OSS + "test_the_tiny_models_router_and_experts_are_hugging_faces"
NOT_HERE = GPT_OSS + "test_torchtitans_gpt_oss_trains_neither_on_the_cpu_nor_in_fp32"
EP_PLAN = "tests/test_train_plan_moe_nodes.py::test_each_framework_plans_both_moe_models_at_ep_8_or_says_why_not"
GPT_OSS_INIT, GPT_OSS_MODEL = "torchtitan/models/gpt_oss/__init__.py", "torchtitan/models/gpt_oss/model.py"

TORCHTITAN_MOE_FACTS: tuple[Fact, ...] = (
    Fact("torchtitan-0.3.0-qwen3-moe-layers", "torchtitan-0.3.0", "torchtitan/models/qwen3/__init__.py", (134, 149),
         "f3347e21e549814ad163eb089595062313f6f65f37ffab5c3ceecc5df222ae82",
         "the Qwen3 MoE layers' builder takes the layer count, width, heads, KV heads, head_dim, expert width, "
         "experts, top-k, attention backend, RoPE and token-dispatch backend as keywords",
         TITAN_MOE + "test_torchtitans_own_classes_build_the_specs_model_and_read_it_back"),
    Fact("torchtitan-0.3.0-qwen3-moe-router", "torchtitan-0.3.0", "torchtitan/models/qwen3/__init__.py", (172, 181),
         "9d5a143a295ed1a3659fdc55fac5689fb84064deb64eedda52e649f4ad4dda1b",
         "each Qwen3 MoE layer gets a softmax router renormalising its top-k and make_moe_config's default "
         "load_balance_coeff (TPrimat sets the router from the spec and the coefficient to None on every layer)",
         TITAN_MOE + "test_torchtitans_own_classes_build_the_specs_model_and_read_it_back"),
    Fact("torchtitan-0.3.0-qwen3-model-spec", "torchtitan-0.3.0", "torchtitan/models/qwen3/__init__.py", (627, 635),
         "bb542001c3a6cdf0af2d38f9345c417c5d0e7d249fbe1e1b2694fbb707c150f1",
         "torchtitan's qwen3 model is parallelised by parallelize_qwen3, pipelined by pipeline_llm and given the MoE "
         "load-balancing hook after its optimizer is built, as TPrimat's config function wires it",
         TITAN_MOE + "test_torchtitans_own_classes_build_the_specs_model_and_read_it_back"),
    Fact("torchtitan-0.3.0-moe-bias-default", "torchtitan-0.3.0", "torchtitan/models/common/config_utils.py",
         (317, 317), "6e0162544f5903223371160abb31f7b801a731494c7bda691d83fb5039dbd362",
         "make_moe_config's load_balance_coeff is 1e-3 unless given: the expert bias is on by default",
         TITAN_MOE + "test_torchtitans_own_classes_build_the_specs_model_and_read_it_back"),
    Fact("torchtitan-0.3.0-moe-expert-bias", "torchtitan-0.3.0", "torchtitan/models/common/moe.py", (386, 395),
         "38ea712839e1e88a51a0e818a77e14f095355d4b10abdbe086ee14ca1ff84246",
         "a MoE layer holds an expert bias only where load_balance_coeff is set; None leaves it out",
         TITAN_MOE + "test_the_tiny_qwen3_moe_trains_on_the_cpu_and_passes_the_gate"),
    Fact("torchtitan-0.3.0-moe-bias-update", "torchtitan-0.3.0", "torchtitan/components/optimizer/optimizer.py",
         (512, 518), "3b8e771f3f20ad50ca594b31cdb7600b5353bb2ffd6ff195045f2aaf1a92be4a",
         "torchtitan's load balancing is no loss: before each optimizer step each expert's bias moves by the "
         "coefficient times the sign of the mean load minus its own (auxiliary-loss-free), not the spec's aux_loss",
         TITAN_MOE + "test_the_tiny_qwen3_moe_trains_on_the_cpu_and_passes_the_gate"),
    Fact("torchtitan-0.3.0-moe-bias-hook", "torchtitan-0.3.0", "torchtitan/components/optimizer/optimizer.py",
         (521, 526), "9110cbdcaa6ab54d10cd72f90bfd4b4ee99d314429bc792845ba3e1a7f15b05e",
         "the bias update is registered only where the MoE layers have a load_balance_coeff",
         TITAN_MOE + "test_the_tiny_qwen3_moe_trains_on_the_cpu_and_passes_the_gate"),
    Fact("torchtitan-0.3.0-moe-router-fp32", "torchtitan-0.3.0", "torchtitan/models/common/moe.py", (297, 299),
         "73b5146ddf92cc22e86904861f8d089c89c12ba5f27944e2cabce32b78a4807b",
         "the router's gate runs under autocast to float32 (on a GPU; the CPU's autocast has no float32)",
         TITAN_MOE + "test_torchtitans_own_classes_build_the_specs_model_and_read_it_back"),
    Fact("torchtitan-0.3.0-moe-router-outputs", "torchtitan-0.3.0", "torchtitan/models/common/moe.py", (338, 342),
         "52bd6708080a30fe8abb4766a0bb9df23247e79a39c542cdff92b63247c8d7c4",
         "the router returns the top-k scores, the chosen experts and every expert's score, in that order: the hook "
         "that adds megatron-core's aux loss reads the last two and passes the first on",
         TITAN_MOE + "test_the_router_hook_trains_megatron_cores_aux_loss_and_leaves_the_outputs"),
    Fact("torchtitan-0.3.0-moe-combine-scores", "torchtitan-0.3.0", "torchtitan/models/common/token_dispatcher.py",
         (158, 161), "defa58e06d6bfaa868656e5c87c1479208cf95e4734e5d47d9c5cbf0115b6d78",
         "the experts' outputs are multiplied by the top-k scores, so the scores' backward carries the aux loss's "
         "gradient into the training step",
         TITAN_MOE + "test_the_tiny_qwen3_moe_trains_on_the_cpu_and_passes_the_gate"),
    Fact("torchtitan-0.3.0-moe-experts-bf16", "torchtitan-0.3.0", "torchtitan/models/common/moe.py", (94, 108),
         "dbcaa93e9d7e4aac0705382cdb440ef23d8bb871274054c4f383d6e3dc165c59",
         "the experts run torch's grouped GEMM on bf16 casts of their tokens and weights, whatever the run's "
         "precision (read back as experts_dtype)",
         TITAN_MOE + "test_the_tiny_qwen3_moe_trains_on_the_cpu_and_passes_the_gate"),
    Fact("torchtitan-0.3.0-moe-local-dispatch", "torchtitan-0.3.0", "torchtitan/models/common/token_dispatcher.py",
         (402, 404), "94a1061809b4e304d9310652abc20f4794801a971fc92bd315c8de231c502842",
         "the all-to-all dispatcher without an EP mesh (EP=1) reorders the tokens on the rank, no all-to-all",
         TITAN_MOE + "test_the_tiny_qwen3_moe_trains_on_the_cpu_and_passes_the_gate"),
    Fact("torchtitan-0.3.0-ep-from-fsdp", "torchtitan-0.3.0", "torchtitan/config/configs.py", (279, 287),
         "6d6dd405ea40aa31e6bf4507bc70dc6ede59ee1a86247a8bab62812e40046d7b",
         "expert parallelism takes its ranks from FSDP's (and TP's), not from replicated data parallelism",
         TITAN_MOE + "test_expert_parallelism_over_replicated_data_parallelism_is_refused_in_one_line"),
    Fact("torchtitan-0.3.0-loss-over-global-tokens", "torchtitan-0.3.0", "torchtitan/trainer.py", (830, 830),
         "eea290d96f54a187e43799bd3b0f6a2351f9f61125aaa62a1ecf03cc32087833",
         "each microbatch's loss is its token sum over the step's global token count (its gradients summed over DP: "
         "the fsdp-divide-factor fact), so megatron-core's aux-loss gradient is scaled 1 / (GA x DP)",
         TITAN_MOE + "test_experts_split_over_two_ranks_give_the_losses_of_the_experts_on_both"),
    # --- GPT-OSS-20B as torchtitan's gpt_oss model (train/torchtitan/gpt_oss.py) ---------------------------------
    Fact("torchtitan-0.3.0-gpt-oss-layers", "torchtitan-0.3.0", GPT_OSS_INIT, (184, 197),
         "832dba85e1b7a489e6f4ef0ec7e458c4c64e29445ba1e1cc7943d58636d1b53e",
         "the GPT-OSS layers' builder takes the width, layer count, expert width, experts, top-k, load_balance_coeff, "
         "attention backend, fused QKV, token-dispatch backend and RoPE as keywords", BUILT),
    Fact("torchtitan-0.3.0-gpt-oss-fixed-attention", "torchtitan-0.3.0", GPT_OSS_INIT, (204, 212),
         "7f4f2c9b7648f333a8b2873406d29d37d06a48c5437c65dfdbb3fb2f0f5a665b",
         "the builder gives each layer the attention helper's default heads, KV heads and head_dim and a 128-token "
         "window on even layers (counted from 0): TPrimat rebuilds every layer's attention from the spec",
         SAME_AS_20B),
    Fact("torchtitan-0.3.0-gpt-oss-attention-helper", "torchtitan-0.3.0", GPT_OSS_INIT, (69, 80),
         "b78ec8accaaa10a9da2cf7f43ffe6e5e56c81d6691dfdb3f8e457d45a3f1a7a1",
         "the attention helper takes the width, layer id, backend, heads, KV heads, head_dim, window, fused QKV and "
         "RoPE as keywords", SAME_AS_20B),
    Fact("torchtitan-0.3.0-gpt-oss-varlen-window", "torchtitan-0.3.0", GPT_OSS_INIT, (90, 95),
         "87306dd59e3371dcabf288a43109e178979494abbc3c4ac493000d6baec23a47",
         "with flash attention a window W is (W - 1, 0): the token and the W - 1 before it, the spec's meaning",
         ATTENTION),
    Fact("torchtitan-0.3.0-gpt-oss-biases-sinks", "torchtitan-0.3.0", GPT_OSS_INIT, (101, 146),
         "fbca7c33074db79a7e6409c1b3b81c8785df043c852d61a251e3e6db76e5e0a6",
         "the QKV and output projections always have biases, the sinks an initialisation, the layer its window", BUILT),
    Fact("torchtitan-0.3.0-gpt-oss-router", "torchtitan-0.3.0", GPT_OSS_INIT, (222, 238),
         "2af0e5ac7a7cc372899d1e167854222b719d03c30baf4185c066f08b959e4b51",
         "each GPT-OSS MoE gets the builder's load_balance_coeff (TPrimat's None: no expert bias, the spec's none) and "
         "a softmax router with a biased gate renormalising its top-k", EXPERTS),
    Fact("torchtitan-0.3.0-gpt-oss-20b", "torchtitan-0.3.0", GPT_OSS_INIT, (293, 333),
         "7e84768dd9223ea497ecf14d6dd6ca72514885aa810da5571341266c61fea512",
         "torchtitan's own GPT-OSS-20B (its expert bias at 1e-3), which TPrimat's full model is field by field but "
         "for that bias", SAME_AS_20B),
    Fact("torchtitan-0.3.0-gpt-oss-model-spec", "torchtitan-0.3.0", GPT_OSS_INIT, (388, 410),
         "aa06b61677b040e53af3de30d5750e8556ffde2dba1321a107cd9154c2095be4",
         "torchtitan's gpt_oss model is parallelised by parallelize_gptoss, pipelined by pipeline_llm and given the "
         "MoE load-balancing hook, as TPrimat wires it (its registry's default attention, varlen, TPrimat's is flex)",
         BUILT),
    Fact("torchtitan-0.3.0-gpt-oss-sinks", "torchtitan-0.3.0", GPT_OSS_MODEL, (34, 40),
         "b52086fc82225366f90174244e672c6c3f8dff91407fb2d0e37eed8c490343cf",
         "the sinks scale the attention's output by sigmoid(lse - sink): each head's sink takes its share of the "
         "softmax, from the attention's log-sum-exp", ATTENTION),
    Fact("torchtitan-0.3.0-gpt-oss-yarn-mscale", "torchtitan-0.3.0", GPT_OSS_MODEL, (72, 78),
         "eb836667b85567d6ce3d7ea2929250339f1f7b0afe47542d5c362a5583583a74",
         "YaRN's attention factor 0.1 ln(factor) + 1 is folded into the softmax scale, squared", ATTENTION),
    Fact("torchtitan-0.3.0-gpt-oss-mask-per-layer", "torchtitan-0.3.0", GPT_OSS_MODEL, (146, 150),
         "a27d304077145f7f759c4ecee670c2fffadb46b0e4cdc1a9174a1a22fc467d5f",
         "a layer with a window takes the sliding-window mask, one without the full causal mask", ATTENTION),
    Fact("torchtitan-0.3.0-gpt-oss-masks", "torchtitan-0.3.0", GPT_OSS_MODEL, (255, 276),
         "7df2ad227392869033b3dfa2957f8d8596c1dc792b0084cbbab3f44187844f49",
         "FlexAttention's sliding-window mask is the first windowed layer's window; an attention other than flex or "
         "varlen (the CPU's SDPA) is refused", ATTENTION),
    Fact("torchtitan-0.3.0-sliding-window-mask", "torchtitan-0.3.0", "torchtitan/models/common/attention.py",
         (610, 615), "52c017cd191ebfc80ae182a520556d5b88cf2246a3b5e48eab7e5d2d5e200f32",
         "FlexAttention's window W keeps q - kv < W: the token and the W - 1 before it, the spec's meaning", ATTENTION),
    Fact("torchtitan-0.3.0-yarn-frequencies", "torchtitan-0.3.0", "torchtitan/models/common/rope.py", (43, 83),
         "8fad1e18bc84b3a75b305009e09277a1a31ed71c946f4ec617db7ae682efdd62",
         "YaRN's frequencies from the factor, betas, original length and truncation, without the attention factor",
         ATTENTION),
    Fact("torchtitan-0.3.0-yarn-cos-sin", "torchtitan-0.3.0", "torchtitan/models/common/rope.py", (287, 296),
         "a6612e0ba5d144feaa5ee58fe74c46ca86b232e31dac1d5fd2a1678eda8cff9c",
         "CosSinRoPE applies YaRN where its factor is above 1", ATTENTION),
    Fact("torchtitan-0.3.0-gpt-oss-swiglu", "torchtitan-0.3.0", "torchtitan/models/gpt_oss/moe.py", (67, 74),
         "12839e905b2437308cf0d4a12062e20f15b6432fae2d2288c2cfdd23df03adbc",
         "the clamped SwiGLU: interleaved gate and up, the gate clamped above, up on both sides, alpha 1.702, up + 1",
         EXPERTS),
    Fact("torchtitan-0.3.0-gpt-oss-experts", "torchtitan-0.3.0", "torchtitan/models/gpt_oss/moe.py", (77, 97),
         "809842c79ea607f159d9a257fe6b3249931e8d3743a8fac818f6dd3c58ef92a1",
         "GPT-OSS's experts have biases on both projections and take the clamp from their config", EXPERTS),
    Fact("torchtitan-0.3.0-gpt-oss-experts-bf16", "torchtitan-0.3.0", "torchtitan/models/gpt_oss/moe.py", (160, 188),
         "0f2a430d1e5cc148a535945c0f88e79b09f1e1c56ac6677dd6dd32e69ecac80d",
         "GPT-OSS's experts compute in bf16 and return bf16 whatever the run's precision (read back as experts_dtype)",
         NOT_HERE),
    Fact("torchtitan-0.3.0-combine-into-input-dtype", "torchtitan-0.3.0",
         "torchtitan/models/common/token_dispatcher.py", (156, 167),
         "54ee3cb7ede2116bc2f1ca2f46ac742076460cd3b65f722d1d580be1d5d98a13",
         "the combine adds the experts' outputs into a tensor of the layer input's dtype: bf16 into fp32 is refused, "
         "so GPT-OSS trains in bf16 only", NOT_HERE),
    Fact("torchtitan-0.3.0-gpt-oss-ep", "torchtitan-0.3.0", "torchtitan/models/gpt_oss/parallelize.py", (86, 87),
         "9d390a2e06e0818baacb397b44853b6aa7b7dc9f1fb086744fa19b2d9cfb65c2",
         "with expert parallelism the gpt_oss model splits its experts over the EP ranks (its sharding config)",
         EP_PLAN),
    Fact("torchtitan-0.3.0-gpt-oss-efsdp", "torchtitan-0.3.0", "torchtitan/models/gpt_oss/parallelize.py", (119, 125),
         "bcfcc48ac5335198f85281ceda9db5923f05e7a69c462e00a900d1d6769ac3b8",
         "its experts are sharded over the FSDP ranks left beside EP (efsdp), as Qwen3's", EP_PLAN),
)
