"""Named parallelism strategies (issue 8): the table, user additions and validation."""

from __future__ import annotations

import json

import pytest

from utils.config import ConfigError, load_config

NVD = {"TPRIMAT_DETECTED_PLATFORM": "nvd", "TPRIMAT_DETECTED_GPUS": "8"}
AMD = {"TPRIMAT_DETECTED_PLATFORM": "amd", "TPRIMAT_DETECTED_GPUS": "8"}
CPU = {"TPRIMAT_DETECTED_PLATFORM": "cpu", "TPRIMAT_DETECTED_GPUS": "0"}


@pytest.mark.parametrize("node, strategy, model, layout", [
    (NVD, "minimal_communication", "llama", (1, 1, 8, 8)),
    (AMD, "minimal_communication", "qwen", (1, 1, 8, 8)),
    (NVD, "balanced", "llama", (2, 1, 4, 16)),
    (AMD, "balanced", "qwen", (2, 2, 2, 32)),
    (NVD, "truly_identical", "llama", (4, 1, 2, 32)),
    (AMD, "truly_identical", "qwen", (4, 2, 1, 64)),
    (AMD, "memory_optimized", "llama", (4, 2, 1, 64)),
    (NVD, "maximum_performance", "llama", (4, 1, 2, 32)),
    (NVD, "maximum_performance", "qwen", (4, 2, 1, 64)),
    (AMD, "maximum_performance", "llama", (1, 1, 8, 8)),
    (CPU, "balanced", "qwen", (2, 1, 1, 2)),
    (CPU, "memory_optimized", "llama", (1, 2, 1, 2)),
])
def test_builtin_strategy_resolves_and_keeps_the_global_batch(node, strategy, model, layout):
    config = load_config({**node, "STRATEGY": strategy})
    got = config.layout(model)
    assert (got.tp, got.pp, got.dp, got.ga) == layout
    assert config["MBS"] * got.dp * got.ga == config.gbs


def test_no_strategy_means_custom_from_tp_pp_dp_ga():
    config = load_config({**NVD, "TP": "2", "DP": "4", "GA": "4"})
    assert config.strategies == ["custom"]
    assert (config.layout("llama").tp, config.layout("llama").dp) == (2, 4)


def test_all_sweeps_every_strategy_that_fits():
    config = load_config({**CPU, "STRATEGY": "all"})
    assert config.strategies == ["minimal_communication", "balanced", "truly_identical", "memory_optimized",
                                 "maximum_performance"]


def test_user_strategy_file_adds_a_strategy(tmp_path):
    extra = tmp_path / "strategies.json"
    extra.write_text(json.dumps({"pipeline_heavy": {"*": {"*": [1, 4, 2]}, "cpu": {"*": [1, 2, 1]}}}))
    config = load_config({**NVD, "STRATEGY": "pipeline_heavy", "STRATEGIES_FILE": str(extra)})
    assert (config.layout("qwen").pp, config.layout("qwen").dp, config.layout("qwen").ga) == (4, 2, 32)


def test_user_strategy_that_breaks_a_rule_is_rejected_naming_the_rule(tmp_path):
    extra = tmp_path / "strategies.json"
    extra.write_text(json.dumps({"wide": {"*": {"*": [8, 1, 1]}}}))
    with pytest.raises(ConfigError) as caught:
        load_config({**NVD, "STRATEGY": "wide", "STRATEGIES_FILE": str(extra)})
    assert any(p.startswith("STRATEGY=wide: TP=8: Qwen 2.5 7B has 28 attention heads") for p in caught.value.problems)


def test_malformed_strategy_file_is_one_clear_line(tmp_path):
    extra = tmp_path / "strategies.json"
    extra.write_text(json.dumps({"odd": {"*": {"*": [1, 1]}}}))
    with pytest.raises(ConfigError) as caught:
        load_config({**NVD, "STRATEGY": "odd", "STRATEGIES_FILE": str(extra)})
    assert caught.value.problems == [f"STRATEGIES_FILE={extra}: odd.*.* must be [TP, PP, DP] or [TP, PP, DP, EP] of "
                                     "positive integers, got [1, 1]"]


def test_strategy_that_does_not_fit_the_gpu_count_is_reported_before_anything_runs():
    with pytest.raises(ConfigError) as caught:
        load_config({**NVD, "STRATEGY": "balanced", "NNODES": "2", "LAUNCHER": "slurm"})
    assert any("STRATEGY=balanced: TP x PP x DP" in p and "NNODES x GPUS_PER_NODE = 16" in p
               for p in caught.value.problems)


def test_unknown_strategy_lists_the_valid_names():
    with pytest.raises(ConfigError) as caught:
        load_config({**NVD, "STRATEGY": "fastest"})
    assert caught.value.problems[0].startswith("STRATEGY=fastest: unknown fastest; valid: a comma list of all, "
                                                "minimal_communication")


@pytest.mark.parametrize("content, problem", [
    (b'{"x": {"*": {"*": [true, 1, 8]}}}', "x.*.* must be [TP, PP, DP] or [TP, PP, DP, EP] of positive integers, got [true, 1, 8]"),
    (b'{"x\xe9": {}}', "byte 0xe9 at offset 3 is not UTF-8; save it as UTF-8"),
    (b"", "empty; write {name: {platform: {model: [TP, PP, DP]}}} or leave STRATEGIES_FILE empty"),
    (b'{"x": {"*": {"*": [1, 1, 8]}}, "x": {"*": {"*": [2, 1, 4]}}}', "x appears twice in one object; keep one"),
    (b'{"x": {"*": {"llama": [1, 1, 8], "llama": [2, 1, 4]}}}', "llama appears twice in one object; keep one"),
    (b'{"all": {"*": {"*": [1, 1, 8]}}}', "a strategy cannot be named all or custom (they mean every strategy "
                                          "and TP/PP/DP/GA)"),
    (b'{"a,b": {"*": {"*": [1, 1, 8]}}}', "strategy name 'a,b' must be letters, digits, _ . - (STRATEGY is a "
                                          "comma list)"),
    (b'{"x": {"nvidia": {"*": [1, 1, 8]}}}', "x.nvidia: unknown platform; valid: *, amd, nvd, cpu"),
    (b'{"x": {"*": {"lama": [1, 1, 8]}}}', "x.*.lama: unknown model; valid: *, llama, qwen, llama70b, mistral, llama32, "
     "qwen3moe, gptoss"),
    (b'{"x": {"*": {"*": [1.0, 1, 8]}}}', "x.*.* must be [TP, PP, DP] or [TP, PP, DP, EP] of positive integers, got [1.0, 1, 8]"),
    (b'{"x": {"*": {"*": [NaN, 1, 8]}}}', "x.*.* must be [TP, PP, DP] or [TP, PP, DP, EP] of positive integers, got [NaN, 1, 8]"),
])
def test_a_strategy_file_mistake_is_one_line_even_when_that_strategy_is_not_chosen(tmp_path, content, problem):
    extra = tmp_path / "strategies.json"
    extra.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_config({**NVD, "STRATEGIES_FILE": str(extra)})
    assert caught.value.problems == [f"STRATEGIES_FILE={extra}: {problem}"]


def test_every_strategy_file_mistake_is_reported_at_once(tmp_path):
    extra = tmp_path / "strategies.json"
    extra.write_text(json.dumps({"x": {"nvidia": {"*": [1, 1, 8]}}, "y": {"*": {"*": [0, 1, 8]}}}))
    with pytest.raises(ConfigError) as caught:
        load_config({**NVD, "STRATEGIES_FILE": str(extra)})
    assert len(caught.value.problems) == 2


def test_a_strategy_file_mistake_is_reported_with_the_other_problems(tmp_path):
    extra = tmp_path / "strategies.json"
    extra.write_text('{"x": {"*": {"*": [true, 1, 8]}}}')
    with pytest.raises(ConfigError) as caught:
        load_config({**NVD, "STRATEGIES_FILE": str(extra), "SEED": "-1"})
    assert [p.split(":")[0] for p in caught.value.problems] == ["SEED=-1", f"STRATEGIES_FILE={extra}"]
