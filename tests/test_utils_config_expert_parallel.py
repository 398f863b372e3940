"""EP, the expert-parallel size, as a layout dimension (issue 47): the EP knob and a strategy's optional fourth number
give it, and the configuration holds it to megatron-core's own rules before anything starts, one line per problem
naming the fix (utils/upstream/table.py: mcore-ep-needs-experts, mcore-ep-divides-dp, mcore-ep-divides-experts)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from utils.config import ROOT, ConfigError, load_config
from utils.spec.strategies import Layout

GPU_NODE = {"TPRIMAT_DETECTED_PLATFORM": "nvd", "TPRIMAT_DETECTED_GPUS": "8"}
SIX_GPUS = {"TPRIMAT_DETECTED_PLATFORM": "nvd", "TPRIMAT_DETECTED_GPUS": "6", "GPUS_PER_NODE": "6", "DP": "6"}
CPU_MACHINE = {"TPRIMAT_DETECTED_PLATFORM": "cpu", "TPRIMAT_DETECTED_GPUS": "0"}


def problems_of(env: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(env)
    return caught.value.problems


def test_ep_is_one_by_default_and_the_ep_knob_splits_a_mixture_of_experts_within_dp():
    assert load_config(GPU_NODE).layout("llama").ep == 1
    layout = load_config({**GPU_NODE, "MODELS": "qwen3moe", "EP": "8"}).layout("qwen3moe")
    assert (layout.tp, layout.pp, layout.dp, layout.ep, layout.gpus) == (1, 1, 8, 8, 8)  # EP is no factor of GPUs


def test_ep_above_one_on_a_dense_model_is_one_line_naming_the_fix():
    assert problems_of({**GPU_NODE, "EP": "2", "MODELS": "llama"}) == ["EP=2: llama3.1-8b has no experts; set EP=1"]


def test_ep_that_does_not_divide_dp_is_megatron_cores_rule_with_the_valid_values():
    assert problems_of({**GPU_NODE, "EP": "16", "MODELS": "qwen3moe"}) == [
        "EP=16: the expert-parallel ranks are carved out of DP=8 (megatron-core), so EP must divide DP for qwen3moe; "
        "valid EP: 1, 2, 4, 8"]


def test_ep_that_does_not_divide_the_experts_names_their_count_and_the_valid_values():
    assert problems_of({**SIX_GPUS, "EP": "3", "MODELS": "qwen3moe"}) == [
        "EP=3: Qwen3 30B-A3B has 128 experts per layer, which EP must divide; valid EP for qwen3moe: 1, 2, 4, 8, 16, "
        "32, 64, 128"]


def test_a_strategy_may_give_ep_as_a_fourth_number_and_is_held_to_the_same_rules(tmp_path):
    extra = tmp_path / "strategies.json"
    extra.write_text(json.dumps({"experts": {"*": {"*": [1, 1, 8, 4]}, "cpu": {"*": [1, 1, 2]}}}))
    config = load_config({**GPU_NODE, "STRATEGY": "experts", "STRATEGIES_FILE": str(extra), "MODELS": "qwen3moe"})
    assert config.layout("qwen3moe") == Layout(tp=1, pp=1, dp=8, ga=8, ep=4)
    assert load_config({**CPU_MACHINE, "STRATEGY": "experts", "STRATEGIES_FILE": str(extra)}).layout("llama").ep == 1
    assert problems_of({**GPU_NODE, "STRATEGY": "experts", "STRATEGIES_FILE": str(extra), "MODELS": "qwen"}) == [
        "STRATEGY=experts: EP=4: qwen2.5-7b has no experts; set EP=1"]


def test_a_strategy_of_five_numbers_is_refused_naming_both_shapes(tmp_path):
    extra = tmp_path / "strategies.json"
    extra.write_text(json.dumps({"x": {"*": {"*": [1, 1, 8, 2, 1]}}}))
    assert problems_of({**GPU_NODE, "STRATEGIES_FILE": str(extra)}) == [
        f"STRATEGIES_FILE={extra}: x.*.* must be [TP, PP, DP] or [TP, PP, DP, EP] of positive integers, "
        "got [1, 1, 8, 2, 1]"]


def test_the_layout_label_shows_ep_only_where_it_splits_the_experts():
    assert Layout(1, 1, 2, 1).label == "TP1 PP1 DP2 GA1"
    assert Layout(1, 1, 2, 1, ep=2).label == "TP1 PP1 DP2 EP2 GA1"


def test_the_check_exits_2_with_one_line_and_no_traceback_for_ep_on_a_dense_model():
    run = subprocess.run([sys.executable, "-m", "utils.config", "check"], cwd=ROOT, capture_output=True, text=True,
                         env={**CPU_MACHINE, "PATH": "/usr/bin:/bin", "EP": "2", "MODELS": "llama"})
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert [line for line in run.stderr.splitlines() if line.startswith("config error:")] == [
        "config error: EP=2: llama3.1-8b-tiny has no experts; set EP=1"]
