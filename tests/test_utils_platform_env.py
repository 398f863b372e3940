"""utils.machine.platform_env on AMD: the environment Primus v25.11 gives a Megatron run, for mega as for prim."""

from __future__ import annotations

from utils.machine.platform_env import apply, platform_env


def test_amd_runs_get_primus_v25_11s_own_defaults_for_megatron():
    """Primus v25.11's examples/run_pretrain.sh: HSA_NO_SCRATCH_RECLAIM and NVTE_CK_USES_BWD_V3 default to 0
    (the CK backward v3 kernel "disabled due to accuracy issues"), CUDA_DEVICE_MAX_CONNECTIONS to 1."""
    assert platform_env("amd") == {"HSA_NO_SCRATCH_RECLAIM": "0", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                                   "NVTE_CK_USES_BWD_V3": "0"}


def test_a_callers_value_wins_as_in_primus_and_is_what_the_run_records():
    environ = {"NVTE_CK_USES_BWD_V3": "1"}
    assert apply("amd", environ) == {"HSA_NO_SCRATCH_RECLAIM": "0", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                                     "NVTE_CK_USES_BWD_V3": "1"}


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
    assert apply("amd", environ, framework="autotp") == {"HSA_NO_SCRATCH_RECLAIM": "0",
                                                         "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                                                         "NVTE_CK_USES_BWD_V3": "0", "DISABLE_ADDMM_HIP_LT": "0",
                                                         "DS_ACCELERATOR": "cpu"}
    assert apply("cpu", {}, framework="autotp") == {"DS_ACCELERATOR": "cpu"}  # glibc and OpenMP: process start only
