"""MODEL_LAYERS: every model of MODELS as a proxy of its first N layers at full width, named in its variant, with
the configuration's rules (1 to the model's depth, PP divides the proxy's layers) and the plan's requests."""

from __future__ import annotations

import pytest

from tests.fixtures.train_matrix.requests import node, run_request
from utils.config import ConfigError
from utils.spec.models import by_variant


def problems_of(platform: str = "cpu", gpus: int = 0, **env: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        node(platform, gpus, **env)
    return caught.value.problems


def test_empty_keeps_each_models_own_depth():
    config = node("nvd", MODELS="llama,llama70b,mistral")
    assert config["MODEL_LAYERS"] == ""
    assert [(m.variant, m.num_layers, m.proxy_of) for m in config.models] == [
        ("llama3.1-8b", 32, None), ("llama3.1-70b", 80, None), ("mistral-7b-v0.1", 32, None)]


def test_a_layer_count_makes_every_model_a_proxy_named_in_its_variant():
    config = node("nvd", MODELS="llama70b,qwen", MODEL_LAYERS="8")
    assert [(m.variant, m.num_layers, m.hidden_size, m.proxy_of) for m in config.models] == [
        ("llama3.1-70b-L8", 8, 8192, "llama3.1-70b"), ("qwen2.5-7b-L8", 8, 3584, "qwen2.5-7b")]
    assert config.model("llama70b") == config.models[0]
    assert config.as_dict()["MODEL_VARIANTS"] == {"llama70b": "llama3.1-70b-L8", "qwen": "qwen2.5-7b-L8"}


def test_the_tiny_models_take_it_too_on_the_cpu():
    config = node("cpu", 0, MODELS="llama,mistral", MODEL_LAYERS="1")
    assert [m.variant for m in config.models] == ["llama3.1-8b-tiny-L1", "mistral-7b-v0.1-tiny-L1"]
    assert config.models[1].sliding_window == 64


def test_a_count_deeper_than_a_model_is_one_line_per_model():
    found = problems_of("nvd", 8, MODELS="llama,llama70b,qwen", MODEL_LAYERS="40")
    assert found == [
        "MODEL_LAYERS=40: Llama 3.1 8B has 32 layers; give 1 to 32 for a proxy of llama, empty for every model's "
        "own depth, or leave it out of MODELS",
        "MODEL_LAYERS=40: Qwen 2.5 7B has 28 layers; give 1 to 28 for a proxy of qwen, empty for every model's "
        "own depth, or leave it out of MODELS"]


@pytest.mark.parametrize("value", ["0", "-1", "x", "8.0", "08", "1234567"])
def test_a_count_that_is_none_is_one_line_naming_the_rule(value):
    assert problems_of(MODEL_LAYERS=value) == [
        f"MODEL_LAYERS={value}: must be a layer count from 1 (a proxy of each model: its first N layers at full "
        "width), or empty for each model's own depth"]


def test_pipeline_parallelism_must_divide_the_proxys_layers():
    found = problems_of("nvd", 8, MODELS="llama70b", MODEL_LAYERS="6", TP="1", PP="4", DP="2")
    assert found == ["PP=4: Llama 3.1 70B (6-layer proxy) has 6 layers; valid PP for llama70b: 1, 2, 3, 6"]
    assert node("nvd", MODELS="llama70b", MODEL_LAYERS="8", TP="1", PP="4", DP="2").layout("llama70b").pp == 4


def test_the_request_names_the_proxy_and_reads_back_to_its_spec():
    req = run_request("nvd", "mega", "llama70b", MODELS="llama70b", MODEL_LAYERS="8")
    assert req.identity.variant == "llama3.1-70b-L8"
    assert by_variant(req.identity.variant).num_layers == 8
