"""The upstream-fact table's Megatron-Bridge section (utils/upstream/table.py holds the table): the facts of
megatron-bridge 0.6.2, re-read from the installed package by tests/test_train_mbridge_build.py (`check --installed`),
and the tests that hold TPrimat to them, which the table's megatron-core facts name too. Standard library only."""

from __future__ import annotations

from utils.upstream.kinds import Fact

# The tests that hold TPrimat to a fact (tests/<file>.py::<test function>)
BUILD = "tests/test_train_mbridge_build.py::"
OVERLAP = "test_the_finalized_ddp_overlap_is_the_profiles_with_no_communication_overlap_setup_or_manual_gc"
ENVIRONMENT = "test_the_recipes_process_environment_is_the_stacks_for_every_framework_and_none_is_left_in_the_container"
READBACK = "test_the_read_back_the_run_writes_is_the_finalized_containers"
HELPERS = "test_megatron_bridges_start_up_makes_the_dataset_helpers_the_wheel_ships_built_so_the_run_answers_it"
TOKENIZER = "test_the_tokenizer_setup_builds_next_leaves_the_requested_vocabulary_as_it_is"
LOCAL_NORMS = "test_the_local_layers_norms_build_from_the_finalized_container_without_apex"
STAND_INS = "test_the_environment_holds_megatron_bridge_0_6_and_only_named_transformer_engine_answers_are_stood_in"
CPU = "tests/test_train_mbridge_cpu.py::test_megatron_bridge_trains_on_the_cpu_with_only_its_gpu_steps_stood_in"
SOFTMAX_HELD = ("tests/test_evaluate_effective_settings.py::"
                "test_the_attention_softmax_is_held_to_the_profile_where_the_framework_reports_it")
MBRIDGE_MEMORY = ("tests/test_train_mbridge_recipe.py::"
                  "test_megatron_bridges_iteration_and_gb_memory_lines_are_read_as_megatrons")
_READ = BUILD + "test_the_finalized_experts_and_routing_are_moe_settings_and_the_layout_the_requests"
_BESIDE = BUILD + "test_the_moe_recipe_runs_its_experts_as_megatron_cores_defaults_do_beside_moe_settings"
_RECIPE = "src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py"
_GPT_OSS = BUILD + "test_the_gpt_oss_recipe_finalizes_the_specs_features_and_runs_as_the_others"
_GPT_OSS_RECIPE = "src/megatron/bridge/recipes/gpt_oss/h100/gpt_oss.py"

BRIDGE_FACTS: tuple[Fact, ...] = (
    # --- NVIDIA-NeMo/Megatron-Bridge, megatron-bridge 0.6.2 --------------------------------------------------
    Fact("mbridge-mxfp8-preset-reuses-grad-buffer", "megatron-bridge-0.6.2",
         "src/megatron/bridge/training/mixed_precision.py", (255, 266),
         "5b288fa5e6f2cf2799040b8553026b4d2427c257a1581d1d287a297e5dda9282",
         "bf16_with_mxfp8_mixed gathers parameters in FP8 and reuses the grad buffer for that gather; TPrimat sets "
         "both from the profile's fp8_param_gather", BUILD + "test_mxfp8_reuses_the_grad_buffer_only_when_the_profile_"
         "gathers_parameters_in_fp8"),
    Fact("mbridge-llama31-70b-comm-overlap", "megatron-bridge-0.6.2",
         "src/megatron/bridge/recipes/llama/h100/llama3.py", (1185, 1189),
         "fd79c264300c1b325b3150a1c5f731d2f92a9e0c9c5c130ddc94e983671883fc",
         "llama31_70b_pretrain_config sets a CommOverlapConfig with TP communication overlap on; TPrimat sets "
         "comm_overlap None", BUILD + OVERLAP),
    Fact("mbridge-comm-overlap-tp-conditions", "megatron-bridge-0.6.2", "src/megatron/bridge/training/comm_overlap.py",
         (442, 451), "ee99225b7e290f974702850f2680bc3a0947407e25ac4a063b5467c86ccac541",
         "TP communication overlap stays on at TP >= 2 with sequence parallelism where Transformer Engine imports (so "
         "on the GPU, not on a CPU without it: the build test's probe answers as the stack's TE)", BUILD + OVERLAP),
    Fact("mbridge-comm-overlap-ddp-at-dp-above-1", "megatron-bridge-0.6.2",
         "src/megatron/bridge/training/comm_overlap.py", (576, 579),
         "a767fb071e4d425c9858108b405e42cc7a5a452e29161ba3dbaf2135fa334174",
         "at DP > 1 the comm-overlap setup turns on gradient-reduce and parameter-gather overlap with a 128 MiB bucket",
         BUILD + OVERLAP),
    Fact("mbridge-comm-overlap-writes-ddp", "megatron-bridge-0.6.2", "src/megatron/bridge/training/comm_overlap.py",
         (635, 643), "a9a0f427f77a2df7ab875ef074f5ef17bf4f18247adffc2c26707ad240edbc2a",
         "with the distributed optimizer those overlap settings are written over the optimizer and DDP configs",
         BUILD + OVERLAP),
    Fact("mbridge-common-recipe-env-vars", "megatron-bridge-0.6.2",
         "src/megatron/bridge/recipes/utils/environment_utils.py", (22, 33),
         "d66d3498634963ecbcb992c9870d8c92caadf3155fe83492da98802b61461759",
         "the recipes' process environment: NCCL_GRAPH_REGISTER=0, NCCL_NVLS_ENABLE=0, PYTORCH_CUDA_ALLOC_CONF="
         "expandable_segments:True, TORCH_NCCL_AVOID_RECORD_STREAMS=1, TORCH_NCCL_HIGH_PRIORITY=1: the nemo-26.08 "
         "stack row's env", BUILD + ENVIRONMENT),
    Fact("mbridge-llama31-70b-env-vars", "megatron-bridge-0.6.2", "src/megatron/bridge/recipes/llama/h100/llama3.py",
         (1193, 1196), "bc1eb2fbd3222fba6a259256892efd79ee1af57eb8e732378d0375da0cd9cff2",
         "a recipe carries that environment as cfg.env_vars (TPrimat clears it)", BUILD + ENVIRONMENT),
    Fact("mbridge-env-vars-applied-in-process", "megatron-bridge-0.6.2", "src/megatron/bridge/training/config.py",
         (1845, 1850), "cd0c1c97748298002998c855c141e36364374a1e0280e79dbe285a5b68f4bc32",
         "cfg.env_vars is applied inside the training process, where unset", BUILD + ENVIRONMENT),
    Fact("mbridge-recipes-manual-gc", "megatron-bridge-0.6.2", "src/megatron/bridge/recipes/common.py", (64, 71),
         "96940736891ccaaa3a3500fbd611db73c0b8f8eeeba19da3e5e39d1d619e83df",
         "_pretrain_common, under every recipe TPrimat runs, collects garbage by hand every 100 steps; TPrimat sets "
         "manual_gc False", BUILD + OVERLAP),
    Fact("mbridge-pretrain-finalizes-first", "megatron-bridge-0.6.2", "src/megatron/bridge/training/pretrain.py",
         (74, 74), "22bf86e78feb7e6c87c89738b8ea925b04a6f61b2ee85edad2f1aa9068a335ec",
         "pretrain() finalizes the container it is given (runtime_config_update) before anything else",
         BUILD + "test_every_case_finalizes_as_pretrain_finalizes_it_and_keeps_every_setting"),
    Fact("mbridge-runtime-config-update", "megatron-bridge-0.6.2", "src/megatron/bridge/training/config.py",
         (1869, 1888), "be41b29de07858dee96f71eff4e9201939e5f64483872f8caa4e8cf087aa273d",
         "finalization: the recipe's environment, the mixed-precision setup, the DP size, the comm-overlap setup, "
         "validate(); the build test's probe runs it", BUILD + "test_every_case_finalizes_as_pretrain_finalizes_it_"
         "and_keeps_every_setting"),
    Fact("mbridge-setup-before-training", "megatron-bridge-0.6.2", "src/megatron/bridge/training/pretrain.py",
         (136, 136), "bad27634567ccb94cf84f31c754487cdf1574caa33a2eee680209816e3f39686",
         "setup() (initialize_megatron, the vocabulary) runs after finalization and before training",
         BUILD + READBACK),
    Fact("mbridge-on-train-start", "megatron-bridge-0.6.2", "src/megatron/bridge/training/train.py", (349, 351),
         "9c1edce7c17055326bf4d6565f30dc5356ca56202ac3fdd17a1666855841ce20",
         "on_train_start fires in train(), after setup(): train_mbridge's read-back runs there", BUILD + READBACK),
    Fact("mbridge-dp-from-world-size", "megatron-bridge-0.6.2", "src/megatron/bridge/training/config.py",
         (1035, 1037), "1aca643f16feb683b719d9dd941a92747cfbff8062f563814c7786754566c584",
         "finalization takes DP from the world size (megatron-core's safe_get_world_size)",
         BUILD + "test_the_effective_settings_are_the_requests_layout_and_workload"),
    Fact("mbridge-fp4-needs-te", "megatron-bridge-0.6.2", "src/megatron/bridge/training/mixed_precision.py",
         (110, 111), "4180befc95a419ad20e692bb02b810bcf95f7e4ac36c476b77bd120961d89679",
         "NVFP4 finalization asks Transformer Engine's version (the probe answers the stack's)", BUILD + STAND_INS),
    Fact("mbridge-initialize-imports-compile-helpers", "megatron-bridge-0.6.2",
         "src/megatron/bridge/training/initialize.py", (28, 28),
         "eb6d37061be7d51c4cb3b885bf1599c756124089fc397cd50512169728a2d822",
         "Megatron-Bridge's start-up holds megatron-core's compile_helpers under its own module's name, so answering "
         "it means answering it there too (utils.datafiles.COMPILE_HELPERS_CALLERS)", BUILD + HELPERS),
    Fact("mbridge-initialize-compiles-helpers", "megatron-bridge-0.6.2", "src/megatron/bridge/training/initialize.py",
         (143, 147), "f299549141784255c2891c06303d0e360e634e41bf02582ea0619482dba2b2bc",
         "initialize_megatron calls compile_helpers on each node's local rank 0 whatever is installed",
         BUILD + HELPERS),
    Fact("mbridge-setup-builds-tokenizer", "megatron-bridge-0.6.2", "src/megatron/bridge/training/setup.py",
         (293, 299), "506410afaa07804ebd902e60a8b857f8e98c34519a5e917fb249f8c6f7d0d973",
         "after initialize_megatron, setup() builds the tokenizer and sets the model's vocabulary from it and the preset",
         BUILD + TOKENIZER),
    Fact("mbridge-preset-vocab-kept-unpadded", "megatron-bridge-0.6.2", "src/megatron/bridge/training/setup.py",
         (702, 722), "a12675b9b11d63a364c77e5a3e363daa68a4cbde3639e37db1e4af46551b2374",
         "a preset vocabulary below the tokenizer's is refused; with use_tokenizer_vocab_size False a preset at or "
         "above it is kept, unpadded (TPrimat presets the padded one)", BUILD + TOKENIZER),
    Fact("mbridge-llama-bridge-persist-layer-norm", "megatron-bridge-0.6.2",
         "src/megatron/bridge/models/llama/llama_bridge.py", (69, 69),
         "11719b7a7081af68662d0f122f25aada49f600d0c71056fa0ebc0533ca98c869",
         "the Llama bridge turns persist_layer_norm on, which torch's norm refuses (the local layers without Apex)",
         BUILD + LOCAL_NORMS),
    # what a CPU run stands in for (train/mbridge/cpu_stand_ins.py) or installs (requirements/mbridge.txt)
    Fact("mbridge-initialize-asserts-cuda", "megatron-bridge-0.6.2", "src/megatron/bridge/training/initialize.py",
         (89, 91), "55def04dc9df6689b78b39c9e009873cfa41bc4f70ef797f06047728c66c5797",
         "initialize_megatron asserts CUDA unless allow_no_cuda", CPU),
    Fact("mbridge-setup-initializes-with-cuda", "megatron-bridge-0.6.2", "src/megatron/bridge/training/setup.py",
         (253, 257), "ca9f30c8653e81399455e55628492b2bb521b1a3e6ee2d187a816808124d56a3",
         "setup() calls initialize_megatron without allow_no_cuda (the CPU passes it)", CPU),
    Fact("mbridge-rng-tracker-seeded-only-with-cuda", "megatron-bridge-0.6.2",
         "src/megatron/bridge/training/initialize.py", (869, 880),
         "01491acca30f981bd04dd7e81370cf56c9379f1ae5b75cab0dbba28fefe3cc10",
         "_set_random_seed seeds the model-parallel RNG tracker only where torch counts a CUDA device (the CPU seeds "
         "it after, from the seed given to torch and the process groups' ranks)", CPU),
    Fact("mbridge-pretrain-imports-resiliency", "megatron-bridge-0.6.2", "src/megatron/bridge/training/pretrain.py",
         (19, 19), "49eeb3f46347ca9a9d4b43be64ef39c4de564907232a8f9acbbf1ee4294b115e",
         "pretrain.py imports nvidia_resiliency_ext.inprocess unguarded (the CPU answers it inertly)", CPU),
    Fact("mbridge-gpt-step-imports-modelopt", "megatron-bridge-0.6.2", "src/megatron/bridge/training/gpt_step.py",
         (19, 19), "1ab17ae81ab803ee8ac18968523a3e3ab7d914ab92a6871c8250f15252fd5a25",
         "the GPT forward step imports modelopt, whose package imports scipy (requirements/mbridge.txt has it)", CPU),
    Fact("mbridge-gpt-provider-softmax-in-bf16", "megatron-bridge-0.6.2", "src/megatron/bridge/models/gpt_provider.py",
         (160, 160), "85df3c32346a119158834a9518ff9773016ccf4331fc60ec7dd541c81123ffbd",
         "the GPT provider's attention softmax defaults to bf16 (megatron-core's own default is fp32): TPrimat sets "
         "the profile's attention_softmax_in_fp32 and reads it back", SOFTMAX_HELD),
    Fact("mbridge-memory-report-names", "megatron-bridge-0.6.2", "src/megatron/bridge/training/utils/train_utils.py",
         (258, 269), "b4a0ab0e95562c3875e6d88e032605df0bef2869b0aad0b649ef0aefcf414328",
         "the memory report names torch's allocated and reserved peaks mem-max-allocated-bytes and "
         "mem-max-reserved-bytes, printed with 'bytes' replaced by 'gigabytes'", MBRIDGE_MEMORY),
    Fact("mbridge-memory-report-units", "megatron-bridge-0.6.2", "src/megatron/bridge/training/utils/train_utils.py",
         (1288, 1289), "7d1c5fef9adafd9a144fcf7fc42464a9a412975e56155e581eddd2e016b64ac9",
         "those byte counts are printed in units of 10^9 bytes", MBRIDGE_MEMORY),
    # the Qwen3 30B-A3B recipe (train/mbridge/recipe.py MOE_AS_THE_OTHERS, moe_settings)
    Fact("mbridge-qwen3-30b-a3b-pretrain-is-16gpu", "megatron-bridge-0.6.2",
         "src/megatron/bridge/recipes/qwen/qwen3_moe.py", (22, 24),
         "e78e34401cf549536a4825e436bee1c397bcfc26bbb87be9f6f46844fc8b64aa",
         "qwen3_30b_a3b_pretrain_config is the 16-GPU H100 recipe (built over the 8-GPU one)", _BESIDE),
    Fact("mbridge-qwen3-30b-a3b-8gpu", "megatron-bridge-0.6.2", _RECIPE, (59, 95),
         "d2a189ec95044c119990e9e956746eed694ece222446d7ce0560669ceab90d74",
         "the 8-GPU recipe splits no expert over TP, asks for the DeepEP flex dispatcher and recomputes every layer "
         "in full (TPrimat: ETP = TP, megatron-core's default; alltoall; no recompute)", _BESIDE),
    Fact("mbridge-qwen3-30b-a3b-16gpu", "megatron-bridge-0.6.2", _RECIPE, (153, 220),
         "b43614b37d6d46d02e024cb90df39361dcd8396d90354adefb6efb7342b1cc41",
         "the 16-GPU recipe turns on the precision-aware optimizer, the fused router, the HybridEP flex dispatcher, "
         "Transformer Engine's CUDA graphs of the router with its RNG tracker, TP communication overlap (TPrimat: "
         "off, alltoall, none, comm_overlap None)", _BESIDE),
    Fact("mbridge-flex-dispatcher-without-cuda", "megatron-bridge-0.6.2",
         "src/megatron/bridge/training/flex_dispatcher_backend.py", (53, 57),
         "f5791d89235f2c7df783979989f9939ddceef3117dbdae59a4efe6e790ce924e",
         "without CUDA the flex dispatcher is set as asked, unchecked: the CPU's build shows what a GPU's would",
         _BESIDE),
    Fact("mbridge-qwen3-moe-bridge-routing", "megatron-bridge-0.6.2",
         "src/megatron/bridge/models/qwen/qwen3_moe_bridge.py", (60, 68),
         "cc01aa2290f718b6011037581f4f5fb1cae7ccf24dff505ee6d46bf97b203f05",
         "the Qwen3 MoE bridge sets QK-norm, a fixed aux-loss weight, the router's pre-softmax from norm_topk_prob, "
         "the dispatcher and the MoE kernels (TPrimat: moe_settings' values)", _READ),
    Fact("mbridge-hf-config-mapping", "megatron-bridge-0.6.2",
         "src/megatron/bridge/models/conversion/model_bridge.py", (444, 465),
         "f995efd0dee18136a272ca081fbe097992a687892a9abbf95292735cefbe1fff",
         "a model's kv_channels and experts are read from the Hugging Face config's head_dim, num_experts, "
         "num_experts_per_tok, moe_intermediate_size, router_aux_loss_coef (launch.write_model_dir writes them)",
         "tests/test_train_mbridge_moe.py::test_the_model_folder_is_a_qwen3_moe_config_its_bridge_reads_as_the_spec"),
    # the GPT-OSS-20B recipe (train/mbridge/recipe.py RUN_AS_THE_OTHERS, MOE_AS_THE_OTHERS; readback's model_features)
    Fact("mbridge-gpt-oss-20b-pretrain-is-16gpu", "megatron-bridge-0.6.2",
         "src/megatron/bridge/recipes/gpt_oss/gpt_oss.py", (32, 34),
         "28d69d7bd3f5e2fd5f70b5b933d770d0da4d7d766c528387836255d5a1ab94aa",
         "gpt_oss_20b_pretrain_config is the 16-GPU H100 bf16 recipe", _GPT_OSS),
    Fact("mbridge-gpt-oss-20b-hub-id", "megatron-bridge-0.6.2", _GPT_OSS_RECIPE, (45, 45),
         "4c9a941c671bf29c0570337d2095adc24a7576fd2a16800d8955bc43e6441293",
         "its model is AutoBridge's over the Hugging Face config openai/gpt-oss-20b (launch.write_model_dir writes the "
         "spec's there)", _GPT_OSS),
    Fact("mbridge-gpt-oss-20b-per-token-loss-and-deepep", "megatron-bridge-0.6.2", _GPT_OSS_RECIPE, (76, 81),
         "a3d2baa96df415e2b483942412a07c939893800cde89609ebbf84f7116862d5d",
         "the recipe normalizes the loss per token of the step and asks for the DeepEP flex dispatcher (TPrimat: "
         "calculate_per_token_loss off, alltoall)", _GPT_OSS),
    Fact("mbridge-gpt-oss-bridge-variant", "megatron-bridge-0.6.2",
         "src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py", (60, 100),
         "0d8c058427985fc6c4ee9d9cd69f380ef7e824bc027e4b45852aab6027261f76",
         "the GPT-OSS bridge sets biases, YaRN, no load balancing, quick_gelu clamped at 7 with the GLU offset 1, "
         "learnable softmax sinks, window (sliding_window - 1, 0) on all but every 2nd layer, the experts "
         "intermediate_size wide: the finalized model's features are the spec's", _GPT_OSS),
    Fact("mcore-biased-experts-need-etp-1", "megatron-core-0.19.2", "megatron/core/transformer/transformer_config.py",
         (2279, 2282), "1fe178623d3f357e316f7a31fe71806dac132c785ff6b1d7bcf38f62cc56fb3f",
         "experts with biases (add_bias_linear) need expert_tensor_parallel_size 1: a megatron-core framework "
         "plans GPT-OSS at TP=1 only (utils.frameworks model_refusal)",
         "tests/test_train_mbridge_gptoss.py::test_megatron_core_refuses_biased_experts_over_tp_so_its_frameworks_"
         "plan_gpt_oss_at_tp_1"),
)
