"""The upstream-fact table's torchtitan 0.3.0 mixture-of-experts section (utils/upstream/table.py holds the table and
its source, "torchtitan-0.3.0"): what train/torchtitan/moe.py relies on to build Qwen3 30B-A3B as torchtitan's qwen3
MoE model with megatron-core's load-balancing loss, re-read from the installed package (`check --installed`).
Standard library only."""

from __future__ import annotations

from utils.upstream.kinds import Fact

TITAN_MOE = "tests/test_train_torchtitan_moe.py::"

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
)
