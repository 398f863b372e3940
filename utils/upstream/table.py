"""The upstream-fact table itself (utils/upstream/__init__.py says what a fact is, how it is hashed and re-read):
one section per source, a fact added where its source's section is (the Primus sections in
utils/upstream/primus_facts.py, Megatron-Bridge's in utils/upstream/bridge_facts.py, torchtitan's mixture of experts
in utils/upstream/torchtitan_moe_facts.py, megatron-core's behind the MoE memory prediction in
utils/upstream/moe_memory_facts.py). Standard library only."""

from __future__ import annotations

from utils.upstream.bridge_facts import BRIDGE_FACTS, BUILD, CPU, LOCAL_NORMS, SOFTMAX_HELD, STAND_INS
from utils.upstream.kinds import Fact, Source
from utils.upstream.moe_memory_facts import MOE_MEMORY_FACTS
from utils.upstream.primus_facts import PRIMUS_FACTS
from utils.upstream.torchtitan_moe_facts import TORCHTITAN_MOE_FACTS


SOURCES = {
    "primus-v26.5": Source("AMD-AGI/Primus", "ca7ddda370ae10afa1a714a357cdf3e98d64456f"),
    "primus-v25.11": Source("AMD-AGI/Primus", "66bed3ce8bd4086d00741c4aa35dbf08b7e4c962"),
    "torchtitan-0.3.0": Source("pytorch/torchtitan", "v0.3.0", package="torchtitan==0.3.0"),
    "torch-2.13.0": Source("pytorch/pytorch", "v2.13.0", package="torch==2.13.0"),
    # megatron-bridge 0.6.2 was built from an r0.6.0 commit no public copy read here holds (no v0.6.2 tag; its
    # training/config.py matches no stored version): v0.6.0 is the nearest tag. Every fact below is hashed from the
    # installed 0.6.2 files (check --installed, run by tests/test_train_mbridge_build.py); at v0.6.0 the same lines
    # hash alike but for training/config.py's three facts, which sit 5 lines higher there.
    "megatron-bridge-0.6.2": Source("NVIDIA-NeMo/Megatron-Bridge", "v0.6.0", package="megatron-bridge==0.6.2",
                                    prefix="src/"),
    "deepspeed-0.19.8": Source("deepspeedai/DeepSpeed", "v0.19.8", package="deepspeed==0.19.8"),
    "megatron-core-0.19.2": Source("NVIDIA/Megatron-LM", "core_v0.19.2", package="megatron-core==0.19.2"),
    # the head of core_r0.19.0, whose pretrain_gpt.py bench/gpu_check.sh runs beside mega (MEGATRON_LM_COMMIT)
    "megatron-lm-f8837c04": Source("NVIDIA/Megatron-LM", "f8837c04ef6cbef6cdefb8de001aad63178aebbf"),
    # the Megatron-LM that Primus v25.11 and v26.5 train through (their third_party/Megatron-LM)
    "megatron-lm-847781764": Source("NVIDIA/Megatron-LM", "847781764fe468c90caec16309deded245c1022c"),
    "megatron-lm-d3528a21": Source("NVIDIA/Megatron-LM", "d3528a21301db2d12e92912b3ec025dc8a2ed4d6"),
}

# The tests that hold TPrimat to a fact (tests/<file>.py::<test function>; Megatron-Bridge's in bridge_facts.py)
MOE = "tests/test_train_mega_moe.py::"
GPT_OSS = ("tests/test_train_mega_gpt_oss.py::test_the_tiny_gpt_oss_trains_over_gloo_as_the_spec_builds_it_and_"
           "passes_the_gate")
ONE_RANK_REDUCE = ("tests/test_train_mega_gpt_oss.py::test_megatron_cores_one_rank_reduction_refuses_the_in_place_"
                   "expert_bias_that_mega_skips_it_for")
EP_RULES = "tests/test_utils_config_expert_parallel.py::"

COMPILE_ASIDE = "tests/test_compile_aside.py::"
NEGATED = "tests/test_bench_megatron_lm_args.py::test_a_switch_the_parser_holds_as_its_negation_is_set_through_it"
PRETRAIN_GPT_PROFILE = ("tests/test_bench_megatron_lm_args.py::"
                        "test_pretrain_gpt_reduces_gradients_and_computes_the_softmax_as_the_profile_says")
PRIMUS_BF16_RULE = ("tests/test_train_prim_layout.py::"
                    "test_megatrons_bf16_rule_leaves_the_gradient_reduction_the_profile_asks_for")

# One section per source; a fact is added where its source's section is.
FACTS: tuple[Fact, ...] = (
    *PRIMUS_FACTS,
    *TORCHTITAN_MOE_FACTS,
    *MOE_MEMORY_FACTS,  # megatron-core 0.19.2's, behind a mixture of experts' predicted memory
    # --- deepspeedai/DeepSpeed v0.19.8 (requirements/host.txt) ---------------------------------------------------
    Fact("deepspeed-zero-check-imports-muon", "deepspeed-0.19.8", "deepspeed/runtime/zero/utils.py", (66, 77),
         "4a381236f9c7b805b42148465c2c1b91a20449c88117cf82fe806169f731c900",
         "ZeRO's supported-optimizer check, which initialize runs, imports the Muon optimizer's module to add it to "
         "the list: autotp imports that module first with torch.compile standing aside "
         "(utils/machine/compile_aside.py)",
         COMPILE_ASIDE + "test_deepspeeds_muon_module_imported_aside_keeps_its_kernels_plain_and_torch_compile_real"),
    Fact("deepspeed-compile-is-torch-compile", "deepspeed-0.19.8", "deepspeed/runtime/compiler.py", (125, 129),
         "a7ffdbcaa4b587fa9ffb5ce12a1e2fe442781dc1c42c537a5bc5e717634b3041",
         "DeepSpeed's compile() decorator factory, which the Muon kernels are wrapped in as their module is imported, "
         "returns torch.compile as it is at that moment",
         COMPILE_ASIDE + "test_deepspeeds_muon_module_imported_aside_keeps_its_kernels_plain_and_torch_compile_real"),
    # --- pytorch/torchtitan v0.3.0 (requirements/torchtitan.txt) ----------------------------------------------
    Fact("torchtitan-0.3.0-trainer-imports-full-dtensor", "torchtitan-0.3.0", "torchtitan/trainer.py", (40, 40),
         "8ee9787acffd26cfb736172eda5640a385313b09426f6d4b3d0d911ebd59eb32",
         "the trainer that torchtitan.train (the run's entry point) imports imports torchtitan.distributed's "
         "full_dtensor, so importing the entry point is what shows whether the run can start",
         "tests/test_train_torchtitan.py::test_importing_torchtitans_entry_point_imports_what_needs_torch_2_13"),
    Fact("torchtitan-0.3.0-mesh-dims", "torchtitan-0.3.0", "torchtitan/distributed/full_dtensor.py", (23, 23),
         "bc07fd4409183ed53d1c6a48e86c3f8cc3e150d587f6650a30078f9beda89f5e",
         "full_dtensor imports DataParallelMeshDims from torch.distributed.fsdp at module level",
         "tests/test_utils_stacks.py::test_no_stack_lists_a_framework_its_published_torch_is_too_old_for"),
    Fact("torchtitan-0.3.0-block-mask", "torchtitan-0.3.0", "torchtitan/models/common/decoder.py", (274, 274),
         "092e86476bdb93e65eae007eafb68292aa561db2befed6bd10b2a64c64f30300",
         "the decoder's block mask is built with create_block_mask's separate_full_blocks argument",
         "tests/test_utils_stacks.py::test_no_stack_lists_a_framework_its_published_torch_is_too_old_for"),
    # What stands in for these on the CPU: train/torchtitan/cpu_stand_ins.py (each names its lines here)
    Fact("torchtitan-0.3.0-cuda-without-accelerator", "torchtitan-0.3.0", "torchtitan/tools/utils.py", (55, 55),
         "a0cd384c355bd7da14ecf04f6cf4ebdc04a93bac60ea19a0121f7257b8a5dc6b",
         "with no accelerator torchtitan picks the cuda device type (the CPU's stand-in makes torch's device probe "
         "answer cpu before torchtitan is imported)",
         "tests/test_train_torchtitan.py::test_without_the_stand_in_torchtitan_picks_cuda_on_a_cpu"),
    Fact("torchtitan-0.3.0-cuda-memory-monitor", "torchtitan-0.3.0", "torchtitan/components/metrics.py", (95, 95),
         "9f1f11a245f7942357af1f294911af272bf6f86665d8d30265d3a3cdee3d294f",
         "the metrics processor's memory monitor is built by one module-level function, which reads the device's "
         "memory statistics (on the CPU a monitor reporting no figure stands in for it)",
         "tests/test_train_torchtitan_cpu.py::test_its_memory_is_recorded_as_not_measured"),
    Fact("torchtitan-0.3.0-barrier-device-ids", "torchtitan-0.3.0", "torchtitan/distributed/utils.py", (586, 587),
         "1c7c67a43a223b1c6d3f35e6fe28edec96f514029b6ec72a63b027bc3da3223e",
         "set_pg_timeouts, called after the first step, waits at a barrier given the current device's id, which "
         "gloo refuses (on the CPU the same call runs with the barrier's device_ids left out)",
         "tests/test_train_torchtitan_cpu.py::test_torchtitan_trains_on_the_cpu_through_its_own_loop_and_log"),
    Fact("torchtitan-0.3.0-fsdp-divide-factor", "torchtitan-0.3.0", "torchtitan/distributed/fsdp.py", (41, 41),
         "dfe0acf3bbd38bede39c2fbcffc7abfe9c1b81bfb5c96cfa1a2c62e91d55ad08",
         "every FSDP module gets a gradient divide factor of 1.0, which makes FSDP2 reduce with PREMUL_SUM, which "
         "gloo refuses at 2 or more ranks (on the CPU each module also forces SUM: the same arithmetic)",
         "tests/test_train_torchtitan_cpu.py::test_torchtitan_trains_on_the_cpu_through_its_own_loop_and_log"),
    Fact("torchtitan-0.3.0-no-sdpa-backend", "torchtitan-0.3.0", "torchtitan/models/common/config_utils.py",
         (97, 101), "f6d3e660e74a8d54e8238e3f2a59fa0b9a0a61fc691d5ec0871f95c17e0f6a9e",
         "the attention backend name sdpa is refused for language models, so a CPU run builds the layers with flex "
         "and sets each layer's inner attention to ScaledDotProductAttention's config afterwards",
         "tests/test_train_torchtitan_cpu.py::test_torchtitan_trains_on_the_cpu_through_its_own_loop_and_log"),
    # --- pytorch/pytorch v2.13.0 (the Megatron-Bridge test environment's torch, requirements/mbridge.txt) -----
    Fact("torch-2.13-mesh-dims", "torch-2.13.0", "torch/distributed/fsdp/__init__.py", (53, 53),
         "61083ced4f3f57fd2dd20746b55e6968c58694c3887dd1b1a0e0a176d3e69e93",
         "torch 2.13 exports DataParallelMeshDims from torch.distributed.fsdp (torch 2.11 on a lent H100 did not)",
         "tests/test_utils_stacks.py::test_no_stack_lists_a_framework_its_published_torch_is_too_old_for"),
    Fact("torch-2.13-block-mask", "torch-2.13.0", "torch/nn/attention/flex_attention.py", (1838, 1847),
         "37979171e0ba37ce197182687e9b0cad1369fe4dabec930de51f9a20b2951f25",
         "create_block_mask takes separate_full_blocks in torch 2.13",
         "tests/test_utils_stacks.py::test_no_stack_lists_a_framework_its_published_torch_is_too_old_for"),
    *BRIDGE_FACTS,  # NVIDIA-NeMo/Megatron-Bridge, megatron-bridge 0.6.2 (utils/upstream/bridge_facts.py)
    # --- NVIDIA/Megatron-LM, megatron-core 0.19.2 --------------------------------------------------------------
    Fact("mcore-softmax-type-learnable", "megatron-core-0.19.2", "megatron/core/transformer/transformer_config.py",
         (163, 163), "f9ea8c11d5e15d7cd8f87cb691ab7de6d28d0194414bd07af6f1868d3098e3a0",
         "softmax_type 'learnable' gives each attention head a learned offset in its softmax: GPT-OSS's sinks",
         GPT_OSS),
    Fact("mcore-glu-offset-and-clamp", "megatron-core-0.19.2", "megatron/core/transformer/transformer_config.py",
         (224, 228), "fbc5a74b98cf35b5035e72e2be837527e903363532391e0b8523334d8e0c5b31",
         "glu_linear_offset adds to the GLU's linear half and activation_func_clamp_value clamps it (GPT-OSS's "
         "SwiGLU: offset 1, clamp 7, quick_gelu)", GPT_OSS),
    Fact("mcore-glu-clamp-semantics", "megatron-core-0.19.2", "megatron/core/transformer/mlp.py", (326, 330),
         "b01d10892aa3f3ada5f54ee72ecfcc1bd0fd601a9446433f8d6f14f5bdf94354",
         "the clamp caps the gate from above and the linear half both ways, and the offset is added to the linear "
         "half, as GPT-OSS's SwiGLU does", GPT_OSS),
    Fact("mcore-window-attn-skip-freq", "megatron-core-0.19.2", "megatron/core/transformer/utils.py", (503, 504),
         "88fda4d42d6fd1b96cb282b3b5f4fb4992c5f252a7ca710533766a95d16ea139",
         "with window_attn_skip_freq N, layers whose 1-based number N divides attend to every earlier token and the "
         "others within the window (GPT-OSS: N = 2, the odd layers windowed)", GPT_OSS),
    Fact("mcore-yarn-from-config-attributes", "megatron-core-0.19.2", "megatron/core/models/gpt/gpt_model.py",
         (190, 208), "30534baedacd5b48938a5f0b4d1e5c95d478347e34828edd5640b6eda39288c3",
         "GPTModel's yarn position embedding reads its numbers off the config as yarn_* attributes, which "
         "TransformerConfig does not declare: mega sets them on the config it builds the model from", GPT_OSS),
    Fact("mcore-expert-fc2-bias-added-in-place", "megatron-core-0.19.2", "megatron/core/transformer/mlp.py",
         (351, 354), "d09bcb160065115ef57e82e82701fcac0aec146037c1cf1ba8f2f557f76d1eca",
         "an expert MLP adds its fc2 bias, scaled by the token's probability, in place on fc2's output",
         ONE_RANK_REDUCE),
    Fact("mcore-one-rank-reduce-returns-input", "megatron-core-0.19.2", "megatron/core/tensor_parallel/mappings.py",
         (26, 28), "f46717b56babb93e5b071753b704ff59d20cb9601d8860b63ad4b829db1fa23b",
         "the TP reduction hands a one-rank group's input back as it is, from inside an autograd Function: torch "
         "then refuses the in-place bias above (mega skips the Function there for local experts with biases)",
         ONE_RANK_REDUCE),
    Fact("mcore-attention-softmax-in-fp32-default", "megatron-core-0.19.2",
         "megatron/core/transformer/transformer_config.py", (471, 471),
         "bdf8fab106ba6eff26c3ba9afe443fb0e97e33ef6d160dea78085751a677e3f7",
         "TransformerConfig computes the unfused attention softmax in fp32 by default (mega sets the profile's value)",
         SOFTMAX_HELD),
    Fact("mcore-compile-helpers-runs-make", "megatron-core-0.19.2", "megatron/core/datasets/utils.py", (20, 30),
         "02c160f0fa9c75902c535a2e67e7d4ead610c01d0dacbb37a5a8e1e143cb8b40",
         "compile_helpers runs make in the datasets folder and exits 1 when make fails (the wheel has no Makefile)",
         "tests/test_utils_datafiles.py::test_a_megatron_core_wheels_compile_helpers_cannot_make_what_it_ships_built_"
         "and_is_answered_without_make"),
    Fact("mcore-torch-adamw-fallback", "megatron-core-0.19.2", "megatron/core/optimizer/__init__.py", (13, 35),
         "b58634cdef3e9c6c746229479d8020915505ee9b4d3c4aee3748c576b5a14984",
         "Adam is Transformer Engine's FusedAdam, else Apex's, else torch's AdamW under the same name, which the "
         "memory prediction counts where a run records it (features.optimizer_fusion)",
         "tests/test_utils_predict.py::test_megatron_core_without_transformer_engine_or_apex_takes_torchs_adamw_and_"
         "the_run_says_so"),
    Fact("mcore-ddp-reuse-needs-fp8-param-gather", "megatron-core-0.19.2",
         "megatron/core/distributed/distributed_data_parallel_config.py", (253, 254),
         "f08775cef223e0857b084ed66c18c0a81f1011498a74445cb6256fc03fb906b4",
         "the DDP config refuses the MXFP8 grad-buffer reuse without fp8_param_gather",
         BUILD + "test_every_case_finalizes_as_pretrain_finalizes_it_and_keeps_every_setting"),
    Fact("mcore-rope-fusion-needs-te", "megatron-core-0.19.2", "megatron/core/transformer/transformer_config.py",
         (2179, 2187), "7a1cbc4072c8a9a1f8ec028fa16d2cce843684f0857d654567208a0a86393618",
         "apply_rope_fusion (the profile's) needs Transformer Engine's fused RoPE kernel (the probe answers it)",
         BUILD + STAND_INS),
    Fact("mcore-te-version-cache", "megatron-core-0.19.2", "megatron/core/utils.py", (317, 323),
         "aeebc2457181b3e89d18df19bb242a32ae2b0f7596f05bbde0ee859976038aa2",
         "Transformer Engine's version is cached in _te_version, which every is_te_min_version reads",
         BUILD + STAND_INS),
    Fact("mcore-world-size-from-env", "megatron-core-0.19.2", "megatron/core/_rank_utils.py", (60, 64),
         "87901edc02c3d3baacbe5f6ea25dfe8f25061de54dab7342f288b34954db9d92",
         "without a process group the world size is WORLD_SIZE, as torchrun exports it (the probe sets it)",
         BUILD + "test_the_effective_settings_are_the_requests_layout_and_workload"),
    Fact("mcore-jit-fuser-is-torch-compile", "megatron-core-0.19.2", "megatron/core/jit.py", (16, 33),
         "1174c75cbfc89992a03428dc8d253c81c25e39998ae53e7ed76f1acea49f05cc",
         "jit_fuser, which megatron-core's fusion kernels are wrapped in as their modules are imported, is "
         "torch.compile as megatron.core.jit is imported (torch 2.2 and later): utils/machine/compile_aside.py "
         "imports it for the data pipeline with torch.compile standing aside",
         COMPILE_ASIDE + "test_megatron_core_imported_for_its_data_leaves_torchs_compiler_unloaded_and_torch_"
         "compile_as_it_was"),
    Fact("mcore-mock-data-even-split", "megatron-core-0.19.2",
         "megatron/core/datasets/blended_megatron_dataset_config.py", (137, 144),
         "a845a4a06ecd135e8b61a32aea10a1cfbab1985356dc974dfa922a267855f374",
         "with no blend (mock data) the dataset config takes split 1,1,1 of its own",
         BUILD + "test_every_case_finalizes_as_pretrain_finalizes_it_and_keeps_every_setting"),
    Fact("mcore-local-norm-without-apex", "megatron-core-0.19.2", "megatron/core/models/backends.py", (26, 37),
         "9b7b34701dbc2d4ae137d0411afba023337cd0e4adbcd48d872a995684dd4b3c",
         "without Apex the local layers' norm is WrappedTorchNorm (torch's), not Apex's FusedLayerNorm",
         BUILD + LOCAL_NORMS),
    Fact("mcore-torch-norm-refuses-persist", "megatron-core-0.19.2", "megatron/core/transformer/torch_norm.py",
         (48, 48), "266afe95f5b043dedecb94f2a2b535e3a03afc76636ed4e4437cacd6c9d4e0f1",
         "torch's norm asserts persist_layer_norm off: every Megatron path turns it off without Apex "
         "(train/common/local_kernels.py)", BUILD + LOCAL_NORMS),
    Fact("mcore-rng-fork-needs-a-state", "megatron-core-0.19.2", "megatron/core/tensor_parallel/random.py",
         (314, 316), "242a43ff60430fa8e9716f15b0fd0fc64471c74ede1681b15e1e4a7fbcf5af4b",
         "the model-parallel RNG tracker's fork raises for a state never added (an unseeded tracker)", CPU),
    Fact("mcore-ddp-wrap-cuda-stream", "megatron-core-0.19.2", "megatron/training/models/dist_utils.py", (303, 306),
         "4a9608f499a9684d3b5515d4b1303981772f9fde9b946b2df739b22dcdc96683",
         "the DDP wrap makes a CUDA stream and wraps the model on it (the CPU's is in order)", CPU),
    # train/mega/model.py's MoE layer (issue 47): tests/test_train_mega_moe.py trains it on the CPU
    Fact("mcore-moe-softmax-after-topk-renormalises", "megatron-core-0.19.2",
         "megatron/core/transformer/moe/moe_utils.py", (839, 853),
         "fa4a7a14c497ecae5bb4698cee55ffdb4445aedb8c54306a1d2445cebc829098",
         "with the softmax score function and moe_router_pre_softmax off, the router takes the top-k of the logits and "
         "softmaxes those k only: the top-k probabilities renormalised, Hugging Face's norm_topk_prob",
         MOE + "test_the_moe_settings_are_read_back_from_megatron_cores_config"),
    Fact("mcore-alltoall-dispatcher-side-stream", "megatron-core-0.19.2",
         "megatron/core/transformer/moe/token_dispatcher.py", (468, 469),
         "df632eb7ec4f2d354dbe69f728386c412f5fd77464cb859986db6138bc9b1253",
         "the all-to-all token dispatcher makes a CUDA side stream for its host copies when it is built (the CPU's "
         "is its in-order stream: train/common/cpu_compat.py, 11)",
         MOE + "test_the_tiny_qwen3_moe_trains_over_gloo_and_passes_the_gate"),
    Fact("mcore-permute-fusion-needs-te", "megatron-core-0.19.2", "megatron/core/transformer/transformer_config.py",
         (2651, 2667), "b36889c0bcb8fe40726095b53dbbf59079684a5be4b5f8dd47be20ffe3ef7ec0",
         "moe_permute_fusion refuses to build without Transformer Engine's fused permutation (TE >= 2.1): mega asks "
         "for it only where Transformer Engine is", MOE + "test_the_cpu_says_which_moe_kernels_it_runs_without"),
    # EP, the expert-parallel size (issue 47): utils/config/layout.py holds a layout to these before anything starts
    Fact("mcore-ep-divides-dp", "megatron-core-0.19.2", "megatron/core/parallel_state.py", (871, 884),
         "8e014bb62732a8f25ef43d5aad41268c7b9b36dd55c3e57866cb0f125b430b03",
         "initialize_model_parallel builds the experts' grid as expert TP (TP unless given) x EP x PP and raises when "
         "the world size is no multiple of it: with TP x PP x DP GPUs, EP must divide DP, whose ranks the experts' "
         "EP x expert-DP split again", EP_RULES + "test_ep_that_does_not_divide_dp_is_megatron_cores_rule_with_the_"
         "valid_values"),
    Fact("mcore-ep-divides-experts", "megatron-core-0.19.2", "megatron/core/transformer/moe/moe_layer.py", (185, 186),
         "b16fe320bfa1074e73071fb4178be5f0730d0628858bab29c88f1a1d20af0ed1",
         "the MoE layer asserts that EP divides the routed experts, each EP rank building experts / EP of them",
         EP_RULES + "test_ep_that_does_not_divide_the_experts_names_their_count_and_the_valid_values"),
    Fact("mcore-ep-needs-experts", "megatron-core-0.19.2", "megatron/core/transformer/transformer_config.py",
         (1468, 1469), "a446b29c41077dfc224323160ff51532ad0022734b2228bf9726db865746d073",
         "TransformerConfig refuses expert_model_parallel_size > 1 without num_moe_experts: a dense model runs at EP=1",
         EP_RULES + "test_ep_above_one_on_a_dense_model_is_one_line_naming_the_fix"),
    Fact("mcore-moe-splits-numbers-from-cuda-only", "megatron-core-0.19.2", "megatron/core/transformer/moe/moe_utils.py",
         (1184, 1190), "dc91390e8bc955cd046febefc5a204b5d35c9014c93a99a76f05c7be5a36fc7c",
         "the all-to-all dispatcher's split sizes become host numbers only from a CUDA tensor: on the CPU they stay "
         "tensors, which torch's all_to_all_single refuses (train/common/cpu_compat.py, 12)",
         MOE + "test_experts_split_over_expert_parallel_ranks_give_the_same_losses_and_are_read_back"),
    # --- NVIDIA/Megatron-LM f8837c04 (core_r0.19.0): the reference bench/gpu_check.sh runs -----------------------
    Fact("megatron-lm-initialize-compiles-helpers", "megatron-lm-f8837c04", "megatron/training/initialize.py",
         (173, 178), "c38ebc1216d8d319eed1f32e82a0b5a5f15f5aa4caacf369d64aefe1c95d4b0a",
         "pretrain_gpt.py's start-up imports compile_helpers from megatron-core inside the call and runs it on rank "
         "0 whatever is installed (bench/megatron_lm_pretrain.py answers it there)",
         "tests/test_bench_gpu_check.py::test_megatron_lms_script_runs_as_itself_with_compile_helpers_answered_where_"
         "the_helpers_are_built"),
    Fact("megatron-lm-no-persist-layer-norm", "megatron-lm-f8837c04", "megatron/training/arguments.py", (2802, 2806),
         "21329eb3777bf81367cacdbea65aabfe08f50bf06091a867f4b782242cfb18f6",
         "pretrain_gpt.py's parser holds persist_layer_norm as --no-persist-layer-norm (store_true, its own "
         "destination), on by default", NEGATED),
    Fact("megatron-lm-persist-from-negation", "megatron-lm-f8837c04", "megatron/training/argument_utils.py",
         (304, 304), "9ae82bb5d12fded48c513c1260104872f69f994fa9e9947d94acd9c96cc6789c",
         "the model's persist_layer_norm is the negation of no_persist_layer_norm", NEGATED),
    Fact("megatron-lm-bf16-reduces-in-fp32", "megatron-lm-f8837c04", "megatron/training/arguments.py", (1190, 1193),
         "ee7b7d207c4ce5557053d11023cf4661d2ebeab2f0c9c8f33a78acdf8bad4b2a",
         "under bf16, validate_args turns accumulate_allreduce_grads_in_fp32 on unless grad_reduce_in_bf16 (with fp32 "
         "main gradients, the default): the profile's bf16 reduction is written as --grad-reduce-in-bf16",
         PRETRAIN_GPT_PROFILE),
    Fact("megatron-lm-softmax-in-fp32-is-an-option", "megatron-lm-f8837c04", "megatron/training/arguments.py",
         (2919, 2920), "e79eba3f0a029456bb0f445b89ee8b6f227f832e108fcd72f9ec137eceb5c162",
         "pretrain_gpt.py's attention softmax is bf16 unless --attention-softmax-in-fp32 (store_true)",
         PRETRAIN_GPT_PROFILE),
    # --- NVIDIA/Megatron-LM at Primus v25.11's (847781764) and v26.5's (d3528a21) third_party/Megatron-LM -------
    Fact("primus-v25.11-megatron-lm-bf16-reduces-in-fp32", "megatron-lm-847781764", "megatron/training/arguments.py", (717, 720),
         "ee7b7d207c4ce5557053d11023cf4661d2ebeab2f0c9c8f33a78acdf8bad4b2a",
         "the same bf16 rule in the Megatron-LM Primus v25.11 trains through: prim writes grad_reduce_in_bf16 from "
         "the profile", PRIMUS_BF16_RULE),
    Fact("primus-v26.5-megatron-lm-bf16-reduces-in-fp32", "megatron-lm-d3528a21", "megatron/training/arguments.py", (953, 956),
         "ee7b7d207c4ce5557053d11023cf4661d2ebeab2f0c9c8f33a78acdf8bad4b2a",
         "the same bf16 rule in the Megatron-LM Primus v26.5 trains through", PRIMUS_BF16_RULE),
)
