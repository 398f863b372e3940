"""train.prim.presets: a Primus checkout's presets read as Primus merges them, and the override keys they lack.

tests/fixtures/train_matrix/presets_extends is a checkout's primus/configs in miniature, shaped as Primus v26.5's
and v25.11's are: a module preset that `extends` files beside it and one a folder up (../module_base.yaml), a
model preset that `extends` its family's base, a later file's value winning over an earlier one's.
"""

from __future__ import annotations

import pytest

from tests.fixtures.train_matrix import primus_v26_5
from tests.fixtures.train_matrix.requests import FIXTURES
from train.prim.presets import PresetsMissing, accepted_keys, merged, preset_files, unknown_keys

TREE = FIXTURES / "presets_extends"
CONFIGS = TREE / "primus" / "configs"
MODULE = {"framework": "megatron", "config": "pre_trainer.yaml", "model": "llama3.1_8B.yaml"}


def test_extends_merge_in_order_and_the_file_itself_wins():
    assert merged(CONFIGS / "modules" / "megatron" / "pre_trainer.yaml") == {
        "trainable": True, "sink_level": None, "enable_primus_turbo": False, "use_turbo_grouped_gemm": False,
        "seed": 42, "train_iters": 1000}


def test_a_model_preset_takes_its_family_base_and_keeps_placeholders_as_written():
    assert merged(CONFIGS / "models" / "megatron" / "llama3.1_8B.yaml") == {
        "num_layers": 32, "init_method_std": 0.02, "tokenizer_type": "HuggingFaceTokenizer"}
    assert merged(CONFIGS / "models" / "megatron" / "language_model.yaml")["tokenizer_type"] == \
        "${TOKENIZER:GPT2BPETokenizer}"


def test_an_override_may_set_a_key_of_the_module_or_of_the_model():
    assert accepted_keys(TREE, MODULE) == {"trainable", "sink_level", "enable_primus_turbo", "use_turbo_grouped_gemm",
                                           "seed", "train_iters", "num_layers", "init_method_std", "tokenizer_type"}


def test_unknown_keys_are_those_neither_preset_holds_in_the_experiments_order():
    module = {**MODULE, "overrides": {"seed": 1, "use_turbo_grouped_mlp": True, "num_layers": 2, "sead": 3}}
    assert unknown_keys(TREE, module) == ["use_turbo_grouped_mlp", "sead"]
    assert unknown_keys(TREE, MODULE) == []


def test_the_presets_are_found_by_framework_module_and_model():
    assert preset_files(TREE, MODULE) == (CONFIGS / "modules" / "megatron" / "pre_trainer.yaml",
                                          CONFIGS / "models" / "megatron" / "llama3.1_8B.yaml")


def test_a_missing_preset_is_named(tmp_path):
    with pytest.raises(PresetsMissing, match="no Primus preset .*/primus/configs/modules/megatron/pre_trainer.yaml"):
        accepted_keys(tmp_path, MODULE)


def test_the_stand_ins_presets_are_primus_v26_5_s_merged_ones():
    """The stand-in checkout's presets are already merged (no extends): read as a checkout, they are the facts."""
    stand_in = FIXTURES / "primus"
    assert accepted_keys(stand_in, {**MODULE, "model": "qwen2.5_7B.yaml"}) == \
        primus_v26_5.MODULE_KEYS | primus_v26_5.MODEL_KEYS
    assert len(primus_v26_5.MODULE_KEYS) == 449 and len(primus_v26_5.MODEL_KEYS) == 150
