"""utils.platform_env on AMD: the environment Primus v25.11 gives a Megatron run, for mega as for prim."""

from __future__ import annotations

from utils.platform_env import apply, platform_env


def test_amd_runs_get_primus_v25_11s_own_defaults_for_megatron():
    """Primus v25.11's examples/run_pretrain.sh: HSA_NO_SCRATCH_RECLAIM and NVTE_CK_USES_BWD_V3 default to 0
    (the CK backward v3 kernel "disabled due to accuracy issues"), CUDA_DEVICE_MAX_CONNECTIONS to 1."""
    assert platform_env("amd") == {"HSA_NO_SCRATCH_RECLAIM": "0", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                                   "NVTE_CK_USES_BWD_V3": "0"}


def test_a_callers_value_wins_as_in_primus_and_is_what_the_run_records():
    environ = {"NVTE_CK_USES_BWD_V3": "1"}
    assert apply("amd", environ) == {"HSA_NO_SCRATCH_RECLAIM": "0", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                                     "NVTE_CK_USES_BWD_V3": "1"}
