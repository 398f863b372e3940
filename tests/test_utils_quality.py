"""utils.spec.quality through utils.config: QUALITY_PROFILE sets a published time-to-train definition in the knobs,
and refuses in one line what contradicts it."""

from __future__ import annotations

import pytest

from tests.test_utils_config import CPU_MACHINE, GPU_NODE, problems_of
from utils.config import load_config


def test_the_mlperf_quality_profile_sets_its_definition_in_the_knobs_at_the_configured_batch():
    config = load_config({**GPU_NODE, "QUALITY_PROFILE": "mlperf-llama31-8b"})
    assert config.gbs == 64
    assert (config["DATASET"], config["MODELS"], config["MODEL_SIZE"], config["SL"], config["TARGET_LOSS"]) == \
        ("c4", ["llama"], "full", 8192, 3.3)
    assert (config["EVAL_INTERVAL"], config["EVAL_TOKENS"]) == (12288 // 64, 1024 * 8192)  # MLPerf's cadence and size
    assert config.sources["TARGET_LOSS"] == "QUALITY_PROFILE=mlperf-llama31-8b"


@pytest.mark.parametrize("env, problem", [
    ({"SL": "4096"}, "SL=4096: QUALITY_PROFILE=mlperf-llama31-8b sets SL=8192; unset SL or QUALITY_PROFILE"),
    ({"GA": "5"}, "QUALITY_PROFILE=mlperf-llama31-8b: evaluates every 12288 sequences, which GBS"),
])
def test_the_mlperf_quality_profile_refuses_what_contradicts_it_in_one_line(env, problem):
    problems = problems_of({**GPU_NODE, "QUALITY_PROFILE": "mlperf-llama31-8b", **env})
    assert len(problems) == 1 and problems[0].startswith(problem)


def test_the_mlperf_quality_profile_is_refused_on_the_cpu():
    assert problems_of({**CPU_MACHINE, "QUALITY_PROFILE": "mlperf-llama31-8b"}) == [
        "QUALITY_PROFILE=mlperf-llama31-8b: the full Llama 3.1 8B at sequence length 8192 is a GPU workload, not for "
        "the CPU; leave QUALITY_PROFILE empty there"]
