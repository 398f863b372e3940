"""The upstream-fact table's Primus sections (utils/upstream/table.py holds the table; Primus is not on the package
index, so these facts are re-read from a checkout: `python3 -m utils.upstream check --checkout AMD-AGI/Primus=DIR`).
One section per release, a fact added where its release's section is; last, the lines of the Megatron-LM the releases
train through that prim's MoE read-back relies on (`--checkout NVIDIA/Megatron-LM=DIR`). Standard library only."""

from __future__ import annotations

from utils.upstream.kinds import Fact

_LOG = "tests/test_evaluate_logs_primus_v26_5.py::"
_RENDER = "primus/backends/megatron/patches/training_log/print_rank_last_patches.py"
_AMAX = "primus/backends/megatron/patches/te_patches/delayed_scaling_patches.py"
_BF16_RULE = "tests/test_train_prim_layout.py::test_megatrons_bf16_rule_leaves_the_gradient_reduction_the_profile_asks_for"
_MOE = "tests/test_train_prim_moe.py::"
_QWEN3 = "examples/megatron/configs/MI300X/qwen3_30B_A3B-BF16-pretrain.yaml"
_QWEN3_MI355X = "examples/megatron/configs/MI355X/qwen3_30B_A3B-BF16-pretrain.yaml"
_OFF = _MOE + "test_the_debugging_router_and_primus_turbo_the_shipped_files_turn_on_are_off"
_ROUTING = _MOE + "test_every_routing_key_is_written_because_the_releases_presets_route_otherwise"
_FOLDERS = _MOE + "test_the_mi355x_file_trains_what_the_mi300x_file_does_its_optimizer_recompute_and_kernels_overridden"
_PRESET = _MOE + "test_the_model_preset_is_the_shipped_default_whatever_the_node_sets"
_DUMP = _MOE + "test_the_argument_dump_names_every_routing_setting_and_a_primus_log_gives_it_as_effective_moe"

PRIMUS_FACTS: tuple[Fact, ...] = (
    # --- AMD-AGI/Primus release/v26.5 (ca7ddda3) -------------------------------------------------------------
    Fact("runs megatron's validate_args", "primus-v26.5", "primus/backends/megatron/patches/args/validate_args_patches.py",
         (43, 50), "39386dc45f0c776ea1bd54324239e79ace9dc1563dfcf83d28553d253351ff2e",
         "Primus wraps Megatron-LM's validate_args and runs it first, so Megatron-LM's bf16 gradient-reduction rule "
         "applies to a prim run", _BF16_RULE),
    Fact("console prefix", "primus-v26.5", "primus/core/utils/logger.py", (35, 40),
         "01ba7a10810b524d5f53f9acdcd3ca633980441313456da27d291413e4d75d59",
         "a worker's console line starts [YYYYMMDD HH:mm:ss][rank-R/W] then its padded level, in ANSI colour",
         _LOG + "test_primus_v26_5_rank_0_console_gives_every_forwarded_step"),
    Fact("console level padding", "primus-v26.5", "primus/core/utils/logger.py", (170, 176),
         "90a219f971246f3c6b6a8247cc5911c2a6073bc31915619a1d2120ffdce05172",
         "the level is bracketed and padded with spaces to 11 characters ('[DEBUG]    ')",
         _LOG + "test_primus_v26_5_rank_0_console_gives_every_forwarded_step"),
    Fact("console level filter", "primus-v26.5", "primus/core/utils/logger.py", (205, 217),
         "2bf82494c261b3af4024281552d10a15cc33c4e1798607a639308dbdde3123cb",
         "the console shows a DEBUG line only at stderr_sink_level DEBUG (module_base.yaml: INFO); rank 0's "
         "forwarded line may be missing, the last rank's own print is not",
         "tests/test_train_prim_config.py::"
         "test_v26_5_on_one_node_shows_local_rank_0_and_the_last_one_whose_validation_lines_only_it_prints"),
    Fact("shipped console level", "primus-v26.5", "examples/megatron/configs/MI300X/llama3.1_8B-BF16-pretrain.yaml",
         (18, 18), "854c163f1096a297d8c139d2a76334fd8e71fe5d7e4ee59c4a37db92329c9e7e",
         "the shipped Llama 3.1 8B experiment (which TPrimat keeps) sets stderr_sink_level DEBUG, so rank 0's "
         "console shows the forwarded line", _LOG + "test_primus_v26_5_rank_0_console_gives_every_forwarded_step"),
    Fact("module location", "primus-v26.5", "primus/core/utils/logger.py", (284, 291),
         "d27247ef6ede937826137ef5903ccc08105d6e3f2869f869f2f5e5b842cb4e22",
         "the message's '[---module.py:line] ' is dash-padded to the longest location seen so far: its width varies",
         _LOG + "test_primus_v26_5_rank_0_console_gives_every_forwarded_step"),
    Fact("forwarded to rank 0", "primus-v26.5", _RENDER, (181, 193),
         "09745a23a62537fde851b6577ce4723d3920c32e3d6b95662d6d5567ab2ba656",
         "on one node the last rank's iteration line is broadcast and rank 0 logs it at DEBUG on its console only, "
         "labelled with the last rank", _LOG + "test_primus_v26_5_rank_0_console_gives_every_forwarded_step"),
    Fact("forwarded prefix", "primus-v26.5", _RENDER, (556, 563),
         "149857e3470eb0bbf26583a268960798e2a581f11c0dc72fc9c10b647d2ed76a",
         "the forwarded message starts with Megatron's print_rank_last location and ': ', then Megatron-LM's own "
         "timestamped line", _LOG + "test_primus_v26_5_rank_0_console_gives_every_forwarded_step"),
    Fact("last rank prints too", "primus-v26.5", _RENDER, (603, 606),
         "40865c5a89ccb8e066324c81c67f2ec48a887240a12908b828aefe17c3eed761",
         "after forwarding, the last rank prints the same line itself: a console showing both has each step twice",
         _LOG + "test_primus_v26_5_console_with_the_last_rank_shown_reads_each_step_once_and_the_validation_losses"),
    Fact("only inside training_log", "primus-v26.5", _RENDER, (608, 621),
         "278acc57e2f0b94862a05c831b6b49751cd8ca9e318414337fe07ad2b30b2eaf",
         "only training_log's print_rank_last is replaced: the validation reports stay the last rank's plain prints, "
         "never forwarded", "tests/test_train_prim_config.py::"
         "test_v26_5_on_one_node_shows_local_rank_0_and_the_last_one_whose_validation_lines_only_it_prints"),
    Fact("rendered line", "primus-v26.5", _RENDER, (133, 136),
         "f71b8f431bbd63da3ec85e39cdf236a2770dae991286ef10ae23959d02e5dcbe",
         "the line is re-rendered from its non-empty segments joined by ' | ': no trailing '|'",
         _LOG + "test_primus_v26_5_memory_as_the_last_field_counts_only_where_its_line_is_whole"),
    Fact("elapsed segment", "primus-v26.5", _RENDER, (347, 349),
         "c0ca13191cbce79a50935ba020d75f2b60693ed36a152330d3fc918b51651e30",
         "the step time is 'elapsed time per iteration (ms): inst/avg' once averaging starts",
         _LOG + "test_primus_v26_5_rank_0_console_gives_every_forwarded_step"),
    Fact("compute segment", "primus-v26.5", _RENDER, (427, 429),
         "eafbbefd3ce405309b72f055e10912cc2c77d3342bb4cb2109804ba731a47f9e",
         "Megatron-LM's TFLOP/s field becomes 'compute per GPU (TFLOP/s/GPU): X (avg Y)' once averaging starts",
         _LOG + "test_primus_v26_5_compute_field_gives_its_tflops_and_average_and_the_memory_field_its_use"),
    Fact("tokens segment", "primus-v26.5", _RENDER, (483, 488),
         "77f08fa4f4bc3d852900ab1efddcaf5371650b9ca3f47caedd93b80e459ebda8",
         "'tokens/s/GPU inst/harmonic mean: X/Y' follows the compute field as its own '|' segment",
         _LOG + "test_primus_v26_5_compute_field_gives_its_tflops_and_average_and_the_memory_field_its_use"),
    Fact("memory field", "primus-v26.5", _RENDER, (227, 233),
         "5bc4902b88c09301f65642bc7a38809e783da112b1be716044d75640814a651d",
         "'hip mem usage/free/total/usage_ratio: aGB/bGB/cGB/d%': GiB values spelt GB, the ratio a percentage",
         _LOG + "test_primus_v26_5_compute_field_gives_its_tflops_and_average_and_the_memory_field_its_use"),
    Fact("memory segment last", "primus-v26.5", _RENDER, (282, 291),
         "b1708d54f0e7e1e032ce39b39ce62f3241447dc7bd6004660106a6f75c334909",
         "the HIP (and ROCm SMI) memory is appended as the last segment: the last field has no '|' after it",
         _LOG + "test_primus_v26_5_memory_as_the_last_field_counts_only_where_its_line_is_whole"),
    Fact("local ranks filter", "primus-v26.5", "runner/primus-cli-direct.sh", (690, 711),
         "82a5eccee546a9f1057634b377e7ec363cdc8600c8b71d2bfba4a8307c1edf2f",
         "on one node torchrun gets --local-ranks-filter 0, then LOCAL_RANKS unquoted: a later filter there wins; "
         "on several nodes the last node adds its last local rank itself", "tests/test_train_prim_config.py::"
         "test_v26_5_on_one_node_shows_local_rank_0_and_the_last_one_whose_validation_lines_only_it_prints"),
    Fact("MXFP8 switch", "primus-v26.5", "runner/helpers/envs/base_env.sh", (237, 238),
         "14b5704a24e6ba861b11db994b33c4dc6e25a7b3a574af5f682f1b677206c87e",
         "NVTE_ROCM_ENABLE_MXFP8=1 is exported for every run, whatever the precision",
         "tests/test_utils_platform_env.py::"
         "test_mxfp8_on_amd_is_switched_on_as_primus_does_without_which_its_arguments_check_refuses_the_recipe"),
    Fact("MXFP8 refused without it", "primus-v26.5", "primus/backends/megatron/patches/args/rocm_arg_validation.py",
         (146, 150), "d7df6bee9a71c526acfae4ae628a90920cdc5dfb7ec882d60d948e97c43b32a3",
         "Primus's ROCm argument check asserts NVTE_ROCM_ENABLE_MXFP8=1 for fp8_recipe mxfp8",
         "tests/test_utils_platform_env.py::"
         "test_mxfp8_on_amd_is_switched_on_as_primus_does_without_which_its_arguments_check_refuses_the_recipe"),
    Fact("delayed scaling reduce_amax", "primus-v26.5", _AMAX, (40, 43),
         "db72c9e66d8b0d33584b57369591e6f63f63c458f3806bb2eca95e413ac29d21",
         "the delayed FP8 recipe reduces the amax exactly with sequence parallelism at TP > 1",
         _LOG + "test_primus_v26_5_fp8_amax_reduction_is_what_its_delayed_scaling_patch_says_it_set"),
    Fact("delayed scaling reduce_amax line", "primus-v26.5", _AMAX, (66, 69),
         "f49a3d1337fcd212988e116285f99e0c1aaebc2ed63094e3c2a707d1fcc648c5",
         "rank 0 logs '[Patch:megatron.te.delayed_scaling_reduce_amax] ... set reduce_amax=True|False'",
         _LOG + "test_primus_v26_5_fp8_amax_reduction_is_what_its_delayed_scaling_patch_says_it_set"),
    Fact("checkout marker", "primus-v26.5", "primus-cli", (10, 14),
         "ededf9edd8d5c9aea82f1a45f963a91aeaf42b66bdd62c526f4d42920bf14b1f",
         "the checkout's root holds primus-cli, the launcher TPrimat starts (v25.11 has none)",
         "tests/test_evaluate_probe.py::test_a_primus_checkout_is_the_one_that_holds_its_release_s_launcher"),
    Fact("v26.5 scratch reclaim kept", "primus-v26.5", "runner/helpers/envs/base_env.sh", (200, 200),
         "9ae4c3a1b0fb3ef2091752e0da2e8b14c928250992dacc75ccdb14377ed27523",
         "v26.5 runs with HSA_NO_SCRATCH_RECLAIM=1 unless the caller sets it",
         "tests/test_utils_stacks.py::test_each_amd_row_runs_its_primus_releases_own_scratch_and_attention_defaults"),
    Fact("v26.5 CK attention backward v3 on", "primus-v26.5", "runner/helpers/envs/base_env.sh", (240, 240),
         "beb9cecbfb84fed1b0deab84ff68c88f73fc4c0f67218e3aa22e2b9d71b8aa94",
         "v26.5 runs with NVTE_CK_USES_BWD_V3=1 unless the caller sets it",
         "tests/test_utils_stacks.py::test_each_amd_row_runs_its_primus_releases_own_scratch_and_attention_defaults"),
    Fact("qwen3 30B-A3B model placeholder", "primus-v26.5", _QWEN3, (12, 12),
         "4f986a2d787e6722d4877a73c20901004e7444e450a951cea339ab549dd5fa3f",
         "the Qwen3 30B-A3B experiments name their model preset ${PRIMUS_MODEL:qwen3_30B_A3B}.yaml", _PRESET),
    Fact("placeholder from the environment first", "primus-v26.5", "primus/core/config/yaml_loader.py", (97, 98),
         "d7f63be70a845ba7df5c6e771e9d81d3393bf526d4fa29a309fbd82e939ea4f8",
         "a ${VAR:default} in an experiment is the environment's VAR where it is set, else the default", _PRESET),
    Fact("qwen3 30B-A3B debugging router", "primus-v26.5", _QWEN3, (18, 19),
         "4f432e63bfa10799ba50f2ac250dd83f8ae7e6246de0f54cdb2b5abc8b412541",
         "the Qwen3 30B-A3B experiments turn moe_router_force_load_balancing on, under '# debug'", _OFF),
    Fact("qwen3 30B-A3B Primus-Turbo", "primus-v26.5", _QWEN3, (70, 87),
         "36d1c52a7492c747f3fea87df063de8aaed9ee55188ef8e5df8ec508ed45f09c",
         "the MI300X Qwen3 30B-A3B experiments turn Primus-Turbo, its attention, grouped GEMM and DeepEP dispatcher "
         "on, with sync-free MoE stage 2", _OFF),
    Fact("sync-free MoE needs Primus-Turbo", "primus-v26.5",
         "primus/backends/megatron/patches/args/rocm_arg_validation.py", (171, 172),
         "1879e67d4791d4d4a08f22688a824a38e4d0ba05bb2fa0982b8b768f0ea28647",
         "Primus's ROCm argument check refuses a sync-free MoE stage without enable_primus_turbo",
         _MOE + "test_the_shipped_sync_free_stage_without_primus_turbo_is_what_primus_refuses"),
    Fact("sync-free MoE sets arguments after the dump", "primus-v26.5",
         "primus/backends/megatron/patches/args/rocm_arg_validation.py", (178, 185),
         "6d93c4dcb7e0153284a5d39a41b8b04265815a5cfde3639af5aa466a8b71066f",
         "a sync-free stage sets its MoE options on the arguments after Megatron-LM's validate_args printed them",
         _OFF),
    Fact("DeepEP sets the flex dispatcher", "primus-v26.5",
         "primus/backends/megatron/patches/turbo/moe_dispatcher_patches.py", (59, 61),
         "8c7618d3b3ee578211b6e7fa93b0ebf6661f93fbc7fc9ddf09a6e9c774608e3c",
         "with Primus-Turbo's DeepEP, a before-train patch makes the dispatcher flex: not the one the dump printed",
         _OFF),
    Fact("qwen3 30B-A3B MI355X optimizer", "primus-v26.5", _QWEN3_MI355X, (59, 67),
         "ed9a3ae5e208ab0789b87abf0e59312d070dcf720b93d9373a9842c373211780",
         "the MI355X Qwen3 30B-A3B experiment runs the precision-aware optimizer with bf16 main gradients and moments, "
         "and enable_experimental", _FOLDERS),
    Fact("qwen3 30B-A3B MI355X legacy grouped GEMM", "primus-v26.5", _QWEN3_MI355X, (106, 107),
         "02e2add03226735f245c31fd75459b939b657d11199d86736f0ad7683b5dc641",
         "the MI355X Qwen3 30B-A3B experiment runs megatron-core's legacy grouped GEMM", _FOLDERS),
    Fact("qwen routing preset", "primus-v26.5", "primus/configs/models/megatron/qwen2.5_base.yaml", (29, 32),
         "a40d2740e735064cb4ce9e82e95f96f7dbe8e28928a960da0f750c772a4e178c",
         "v26.5's Qwen base preset routes with alltoall, the grouped GEMM and the fused permutation", _ROUTING),
    Fact("no load-balancing loss by default", "primus-v26.5", "primus/configs/models/megatron/language_model.yaml",
         (132, 132), "34475fb58e6a813caddd18aab9e6aabac1b0538f08fc6e3f00461091a6adea96",
         "the presets' moe_aux_loss_coeff is 0.0, which the Qwen3 30B-A3B preset keeps", _ROUTING),
    # --- AMD-AGI/Primus clairlee/release/v25.11 (66bed3ce) ----------------------------------------------------
    Fact("v25.11 runs megatron's validate_args", "primus-v25.11", "primus/modules/trainer/megatron/trainer.py",
         (1231, 1232), "edad043d4281da965fe026d4ca6c2fe2916257ce91c930a8cdc4f7290495979b",
         "Primus v25.11's trainer runs Megatron-LM's validate_args on the experiment's arguments", _BF16_RULE),
    Fact("v25.11 MXFP8 switch", "primus-v25.11", "examples/run_pretrain.sh", (314, 315),
         "14b5704a24e6ba861b11db994b33c4dc6e25a7b3a574af5f682f1b677206c87e",
         "v25.11 exports NVTE_ROCM_ENABLE_MXFP8=1 for every run too",
         "tests/test_utils_platform_env.py::"
         "test_mxfp8_on_amd_is_switched_on_as_primus_does_without_which_its_arguments_check_refuses_the_recipe"),
    Fact("v25.11 delayed scaling reduce_amax", "primus-v25.11", "primus/modules/trainer/megatron/trainer.py",
         (466, 469), "016e1c75f0b978a6c0d0355aaf4be0131d8f837323e181da2426119f91a04dd7",
         "v25.11's trainer builds the delayed FP8 recipe with reduce_amax=False at every layout",
         "tests/test_evaluate_effective_settings.py::"
         "test_a_prim_fp8_result_says_primus_keeps_each_ranks_amax_and_validate_warns_with_the_reason"),
    Fact("v25.11 scratch reclaim", "primus-v25.11", "examples/run_pretrain.sh", (223, 223),
         "3d70239a562eeebcad682c1acff61d6b4151a8df2cf748b1b8f85100fc039e5c",
         "v25.11 runs with HSA_NO_SCRATCH_RECLAIM=0 unless the caller sets it",
         "tests/test_utils_stacks.py::test_each_amd_row_runs_its_primus_releases_own_scratch_and_attention_defaults"),
    Fact("v25.11 CK attention backward v3 off", "primus-v25.11", "examples/run_pretrain.sh", (318, 318),
         "96cfbca19596dc75b159f93c89d3c848088e0a10a2643830ed96e06b761389b2",
         "v25.11 runs with NVTE_CK_USES_BWD_V3=0 unless the caller sets it",
         "tests/test_utils_stacks.py::test_each_amd_row_runs_its_primus_releases_own_scratch_and_attention_defaults"),
    Fact("v25.11 launch installs requirements", "primus-v25.11", "examples/run_pretrain.sh", (87, 92),
         "b06ff31b9d955b9aeb66feb3df217551caf2ef28a2cdaf522ecad22a9e112620",
         "every v25.11 launch pip-installs requirements.txt, with no switch to skip it",
         "tests/test_train_prim_config.py::test_v25_11s_launch_time_pip_installs_install_nothing_and_download_nothing"),
    Fact("v25.11 launch builds Emerging-Optimizers", "primus-v25.11", "examples/megatron/prepare.py", (173, 173),
         "2515fc27765cc41dfce8ed5327e1674509967ef2df1f41f0d042d1301fbf2f9b",
         "every v25.11 launch pip-installs the Emerging-Optimizers checkout in editable mode, failing the launch if "
         "pip fails",
         "tests/test_train_prim_config.py::test_v25_11s_launch_time_pip_installs_install_nothing_and_download_nothing"),
    Fact("v25.11 qwen3 30B-A3B under MI355X", "primus-v25.11", _QWEN3_MI355X, (6, 13),
         "7a6c81025501fab6334277f84c7124bd28d4e659036fffe3ffc5a5de86c28420",
         "v25.11 ships its Qwen3 30B-A3B experiments under configs/MI355X/ (its MI300X/ holds none), model preset by "
         "placeholder", _MOE + "test_primus_ships_qwen3_30b_a3b_under_mi300x_in_v26_5_and_under_mi355x_only_in_v25_11"),
    Fact("v25.11 qwen3 30B-A3B debugging router", "primus-v25.11", _QWEN3_MI355X, (18, 19),
         "4f432e63bfa10799ba50f2ac250dd83f8ae7e6246de0f54cdb2b5abc8b412541",
         "v25.11's Qwen3 30B-A3B experiments turn moe_router_force_load_balancing on too", _OFF),
    Fact("v25.11 routing defaults", "primus-v25.11", "primus/configs/models/megatron/language_model.yaml", (112, 146),
         "f760de71d351772266a8c517893e215ec7e0a85507639346dc1508f3c88e8326",
         "v25.11's presets (its Qwen base sets none) route with allgather, no grouped GEMM or fused permutation, "
         "moe_aux_loss_coeff 0.0", _ROUTING),
    Fact("v25.11 sync-free MoE needs Primus-Turbo", "primus-v25.11", "primus/modules/trainer/megatron/utils.py",
         (498, 499), "1879e67d4791d4d4a08f22688a824a38e4d0ba05bb2fa0982b8b768f0ea28647",
         "v25.11's ROCm argument check refuses a sync-free MoE stage without enable_primus_turbo too",
         _MOE + "test_the_shipped_sync_free_stage_without_primus_turbo_is_what_primus_refuses"),
    Fact("v25.11 DeepEP sets the flex dispatcher", "primus-v25.11", "primus/modules/trainer/megatron/trainer.py",
         (288, 291), "844cf2102a2c2763e3e0dce0ca7e0b1d2f307497fbcb0da5f5ecc24170064ecc",
         "v25.11 makes the dispatcher flex for Primus-Turbo's DeepEP while patching, after the argument dump", _OFF),
    # --- NVIDIA/Megatron-LM as Primus v26.5 (d3528a21) and v25.11 (847781764) train through it --------------------
    Fact("num_experts", "megatron-lm-d3528a21", "megatron/training/arguments.py", (1605, 1605),
         "703327bb1d0d451a69aed352d02caad1ffbdaba3d5683b2dc3aa5bcbd287a81e",
         "the num_experts argument is TransformerConfig's num_moe_experts; every other MoE name is the same", _DUMP),
    Fact("v25.11 num_experts", "megatron-lm-847781764", "megatron/training/arguments.py", (1230, 1230),
         "703327bb1d0d451a69aed352d02caad1ffbdaba3d5683b2dc3aa5bcbd287a81e",
         "v25.11's Megatron-LM hands num_experts to num_moe_experts the same way", _DUMP),
    Fact("argument dump", "megatron-lm-d3528a21", "megatron/training/arguments.py", (1566, 1577),
         "c69a5f5d3f0ca40f165edebda8fc3478c6115691aae23d5950c045e4980f95d1",
         "rank 0 prints every argument as '  name ..... value', sorted, between dashed arguments lines", _DUMP),
    Fact("forced load balancing is random routing", "megatron-lm-d3528a21", "megatron/core/transformer/moe/router.py",
         (696, 698), "7e4676040a8171ece0577768f4c1e5f6a7ecbaf0457f608d5c27d1d025a13670",
         "with moe_router_force_load_balancing the router routes on random logits instead of its own", _OFF),
)
