"""utils/config/native.py: the torch-native knobs and their rules apply only when a torch-native framework runs."""

from __future__ import annotations

import pytest

from utils.config import ConfigError, load_config
from utils.config.native import sac_every

GPU_NODE = {"TPRIMAT_DETECTED_PLATFORM": "nvd", "TPRIMAT_DETECTED_GPUS": "8", "HOME": "/home/u"}


@pytest.mark.parametrize("text, every", [("", 0), ("1/1", 1), ("1/4", 4), (" 1/12 ", 12)])
def test_sac_freq_is_every_nth_layer(text, every):
    assert sac_every(text) == every


@pytest.mark.parametrize("value", ["1/0", "2/4", "1/", "4", "every 4"])
def test_a_sac_freq_that_is_not_1_over_n_is_refused(value):
    with pytest.raises(ConfigError) as err:
        load_config({**GPU_NODE, "FRAMEWORK": "fsdp", "SAC_FREQ": value})
    assert [p.split(":")[0] for p in err.value.problems] == [f"SAC_FREQ={value}"]


def test_the_rules_do_not_touch_a_matrix_without_a_torch_native_framework():
    config = load_config({**GPU_NODE, "FRAMEWORK": "mega,nemo", "PRECISION": "fp8", "COMPILE": "1",
                          "SAC_FREQ": "1/2", "DATA_PARALLEL": "ddp", "TP": "2", "DP": "4", "GA": "16"})
    assert config.frameworks == ["mega", "nemo"]


def test_zero_0_is_accepted_where_autotp_has_no_tp_or_trains_fp32():
    assert load_config({**GPU_NODE, "FRAMEWORK": "autotp", "ZERO_STAGE": "0"})["ZERO_STAGE"] == 0  # TP1
    cpu = {"TPRIMAT_DETECTED_PLATFORM": "cpu", "TPRIMAT_DETECTED_GPUS": "0", "HOME": "/home/u"}
    config = load_config({**cpu, "FRAMEWORK": "autotp", "ZERO_STAGE": "0", "PRECISION": "fp32", "STRATEGY": "balanced"})
    assert config.layout("llama", "balanced").tp == 2


def test_ddp_at_tp_1_and_sac_under_fsdp_are_accepted():
    assert load_config({**GPU_NODE, "FRAMEWORK": "fsdp", "DATA_PARALLEL": "ddp"})["DATA_PARALLEL"] == "ddp"
    config = load_config({**GPU_NODE, "FRAMEWORK": "fsdp", "SAC_FREQ": "1/4", "COMPILE": "1",
                          "COMPILE_MODE": "max-autotune", "TP": "2", "DP": "4", "GA": "16"})
    assert (config["SAC_FREQ"], config["COMPILE"], config["COMPILE_MODE"]) == ("1/4", True, "max-autotune")


@pytest.mark.parametrize("knob, value", [("ZERO_STAGE", "3"), ("ATTN_IMPL", "flash"), ("DATA_PARALLEL", "zero"),
                                         ("COMPILE_MODE", "fast")])
def test_an_unknown_native_knob_value_is_one_line(knob, value):
    with pytest.raises(ConfigError) as err:
        load_config({**GPU_NODE, knob: value})
    (problem,) = err.value.problems
    assert problem.startswith(f"{knob}={value}: ")


@pytest.mark.parametrize("framework", ["fsdp", "torchtitan"])
def test_ddp_with_a_tensor_parallel_layout_is_refused_for_both_frameworks_that_replicate_with_it(framework):
    with pytest.raises(ConfigError) as err:
        load_config({**GPU_NODE, "FRAMEWORK": framework, "DATA_PARALLEL": "ddp", "TP": "2", "DP": "4", "GA": "16"})
    assert [p.split(":")[0] for p in err.value.problems] == ["DATA_PARALLEL=ddp"]
