"""utils.machine.platform_env on AMD: the environment Primus gives a Megatron run, for mega, fsdp and autotp as for
prim, with each stack's Primus release's own values where the releases differ."""

from __future__ import annotations

import pytest

from tests.fixtures.train_matrix.requests import run_request
from train.launch.command import vendor_env
from utils.machine.platform_env import apply, platform_env
from utils.spec import stacks

# Primus's run environment for a Megatron pretrain when the caller sets none, read in github.com/AMD-AGI/Primus:
# v25.11 examples/run_pretrain.sh at 66bed3ce (line): NCCL_CHECKS_DISABLE (148), HSA_NO_SCRATCH_RECLAIM (223),
# RCCL_MSCCL_ENABLE (226), TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK (234), GPU_MAX_HW_QUEUES (289),
# CUDA_DEVICE_MAX_CONNECTIONS (298), TORCH_NCCL_HIGH_PRIORITY (301), NCCL_PXN_DISABLE (307),
# NVTE_USE_CAST_TRANSPOSE_TRITON (311), NVTE_CK_USES_BWD_V3 (318); v26.5 runner/helpers/envs/base_env.sh at ca7ddda3
# (143-240) sets the same but HSA_NO_SCRATCH_RECLAIM=1 and NVTE_CK_USES_BWD_V3=1, and v26.5's notes for MI300X
# (docs/02-user-guide/megatron-lm-training.md at fd1eeabb) add NVTE_CK_IS_V3_ATOMIC_FP32=1. Both export
# NVTE_ROCM_ENABLE_MXFP8=1 (utils/upstream/table.py: primus-v26.5 "MXFP8 switch").
PRIMUS_COMMON = {"NVTE_ROCM_ENABLE_MXFP8": "1",
                 "NCCL_CHECKS_DISABLE": "1", "RCCL_MSCCL_ENABLE": "0", "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "0",
                 "GPU_MAX_HW_QUEUES": "2", "CUDA_DEVICE_MAX_CONNECTIONS": "1", "TORCH_NCCL_HIGH_PRIORITY": "1",
                 "NCCL_PXN_DISABLE": "1", "NVTE_USE_CAST_TRANSPOSE_TRITON": "1"}
PRIMUS = {"primus-v25.11": {**PRIMUS_COMMON, "HSA_NO_SCRATCH_RECLAIM": "0", "NVTE_CK_USES_BWD_V3": "0"},
          "primus-v26.5": {**PRIMUS_COMMON, "HSA_NO_SCRATCH_RECLAIM": "1", "NVTE_CK_USES_BWD_V3": "1",
                           "NVTE_CK_IS_V3_ATOMIC_FP32": "1"}}


@pytest.mark.parametrize("stack", sorted(PRIMUS))
@pytest.mark.parametrize("framework", ["mega", "prim", "fsdp", "autotp", "torchtitan"])
def test_every_amd_framework_gets_the_environment_its_stacks_primus_runs_megatron_with(stack, framework):
    assert PRIMUS[stack].items() <= platform_env("amd", framework, stack).items()


@pytest.mark.parametrize("stack", sorted(PRIMUS))
@pytest.mark.parametrize("framework", ["mega", "fsdp"])
def test_mxfp8_on_amd_is_switched_on_as_primus_does_without_which_its_arguments_check_refuses_the_recipe(stack,
                                                                                                        framework):
    req = run_request("amd", framework, "llama", PRECISION="mxfp8", STACK=stack)
    assert vendor_env(req)["NVTE_ROCM_ENABLE_MXFP8"] == "1"


def test_without_a_stack_the_platforms_default_stack_is_meant():
    row = stacks.default("amd")
    assert platform_env("amd") == platform_env("amd", stack=row.name) != platform_env("amd", stack="primus-v25.11")
    assert row.env.items() <= platform_env("amd").items()


def test_a_callers_value_wins_as_in_primus_and_is_what_the_run_records():
    environ = {"NVTE_CK_USES_BWD_V3": "0"}
    assert apply("amd", environ, stack="primus-v26.5") == {**PRIMUS["primus-v26.5"], "NVTE_CK_USES_BWD_V3": "0"}


def test_the_torch_native_frameworks_add_their_stacks_variables_on_top_of_the_platforms():
    assert platform_env("amd", "fsdp") == {**platform_env("amd"), "DISABLE_ADDMM_HIP_LT": "0"}
    assert platform_env("amd", "autotp") == {**platform_env("amd"), "DISABLE_ADDMM_HIP_LT": "0",
                                             "DS_ACCELERATOR": "cuda"}  # ROCm torch reports itself as cuda
    assert platform_env("nvd", "autotp") == {**platform_env("nvd"), "DS_ACCELERATOR": "cuda"}
    assert platform_env("cpu", "autotp") == {**platform_env("cpu"), "DS_ACCELERATOR": "cpu"}
    assert all(platform_env(p, f) == platform_env(p) for p in ("amd", "nvd", "cpu") for f in ("mega", "prim", "nemo"))
    assert platform_env("nvd", "fsdp") == platform_env("nvd")


def test_a_trainer_started_by_hand_gets_its_frameworks_variables_and_a_users_value_wins():
    environ: dict[str, str] = {"DS_ACCELERATOR": "cpu"}
    assert apply("amd", environ, framework="autotp", stack="primus-v25.11") == \
        {**PRIMUS["primus-v25.11"], "DISABLE_ADDMM_HIP_LT": "0", "DS_ACCELERATOR": "cpu"}
    assert apply("cpu", {}, framework="autotp") == {"DS_ACCELERATOR": "cpu"}  # glibc and OpenMP: process start only


# Megatron-Bridge 0.6.2's COMMON_RECIPE_ENV_VARS (utils/upstream/table.py fact mbridge-common-recipe-env-vars), which its
# recipes would set inside the mbridge process only; tests/test_train_mbridge_build.py reads them from the package
MEGATRON_BRIDGE_RECIPES = {"NCCL_GRAPH_REGISTER": "0", "NCCL_NVLS_ENABLE": "0",
                           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                           "TORCH_NCCL_AVOID_RECORD_STREAMS": "1", "TORCH_NCCL_HIGH_PRIORITY": "1"}


@pytest.mark.parametrize("framework", ["mega", "mbridge", "fsdp", "autotp", "torchtitan"])
def test_every_framework_on_the_megatron_bridge_stack_gets_its_recipes_environment(framework):
    assert MEGATRON_BRIDGE_RECIPES.items() <= platform_env("nvd", framework, "nemo-26.08").items()


def test_the_nemo_2_stack_keeps_the_platforms_environment_alone():
    assert platform_env("nvd", "nemo", "nemo-25.04") == platform_env("nvd", stack="nemo-25.04")
    assert not MEGATRON_BRIDGE_RECIPES.keys() & platform_env("nvd", stack="nemo-25.04").keys()
