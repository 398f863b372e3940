"""The FP8 amax reduction as a fairness setting: megatron-core leaves it to Transformer Engine (reduced across the
ranks), Primus turns it off; a prim FP8 result says so, with Primus's reason, and validate warns of it."""

import importlib.util
import re
import sys
import types
from pathlib import Path

from evaluate import effective_settings, extract
from train.common.fp8 import te_reduce_amax
from utils import frameworks
from utils.spec.fairness import FIXED, fp8_recipe, profile

FP8_REQUEST = {"fairness_profile": "spec", "precision": "fp8", "fp8_recipe": fp8_recipe(profile("spec"))}
PROFILE_DDP = {"tp": 1, "overlap_grad_reduce": False, "overlap_param_gather": False, "grad_reduce_in_fp32": False,
               "average_in_collective": False, "fp8_amax_history_len": 1024, "fp8_amax_compute_algo": "max"}


def fp8_result(effective: dict) -> dict:
    return {"parallelism": {}, "training": dict(FP8_REQUEST), "effective": effective}


def test_megatron_core_builds_the_delayed_scaling_recipe_without_reduce_amax():
    """So mega, NeMo and Megatron-Bridge run Transformer Engine's default (reduced): their read-backs say so."""
    origin = Path(importlib.util.find_spec("megatron.core").origin).parent / "extensions" / "transformer_engine.py"
    recipe_class = re.search(r"class TEDelayedScaling\(.*?(?=\nclass )", origin.read_text(), re.S).group(0)
    assert "super().__init__(" in recipe_class and "reduce_amax" not in recipe_class


def test_the_read_back_takes_the_installed_transformer_engines_default(monkeypatch):
    assert te_reduce_amax() is None  # no Transformer Engine here: no FP8 either
    recipe = types.ModuleType("transformer_engine.common.recipe")
    recipe.DelayedScaling = type("DelayedScaling", (), {"reduce_amax": True})
    for name, module in {"transformer_engine": types.ModuleType("transformer_engine"),
                         "transformer_engine.common": types.ModuleType("transformer_engine.common"),
                         "transformer_engine.common.recipe": recipe}.items():
        monkeypatch.setitem(sys.modules, name, module)
    assert te_reduce_amax() is True


def test_a_prim_fp8_result_says_primus_keeps_each_ranks_amax_and_validate_warns_with_the_reason():
    assert frameworks.TABLE["prim"].fixed == ("primus",)
    effective = extract._with_fixed("prim", dict(PROFILE_DDP))
    assert effective["fp8_reduce_amax"] is False
    assert effective["profile_fixed"] == {"fp8_reduce_amax": FIXED["primus"]["fp8_reduce_amax"][1]}
    [(message, fatal)] = effective_settings.problems(fp8_result(effective))
    assert not fatal
    assert message.startswith("fp8_reduce_amax is False in the framework, True in the fairness profile spec (the "
                              "framework has no switch for it: Primus builds Transformer Engine's DelayedScaling")


def test_what_the_log_says_wins_over_what_the_framework_is_known_to_fix():
    assert extract._with_fixed("prim", {**PROFILE_DDP, "fp8_reduce_amax": True})["profile_fixed"] == {}
    assert extract._with_fixed("mega", dict(PROFILE_DDP)) == PROFILE_DDP  # mega fixes nothing


def test_megas_nested_fp8_recipe_is_read_and_a_missing_reduction_fails():
    nested = {**PROFILE_DDP, "fp8_recipe": fp8_recipe(profile("spec"))}  # train/mega/model.py's fp8_recipe_of
    del nested["fp8_amax_history_len"], nested["fp8_amax_compute_algo"]
    assert effective_settings.problems(fp8_result(nested)) == []
    assert effective_settings.problems(fp8_result(dict(PROFILE_DDP))) == [
        ("fp8_reduce_amax is not reported by the framework, True in the fairness profile spec", True)]


def test_every_frameworks_fixed_kinds_are_in_the_table():
    assert {kind for entry in frameworks.TABLE.values() for kind in entry.fixed} <= set(FIXED)


def test_the_attention_softmax_is_held_to_the_profile_where_the_framework_reports_it():
    """The Megatron paths report megatron-core's attention_softmax_in_fp32 (mega, mbridge, nemo, Primus's argument
    dump); a torch-native framework has no such switch and is not asked for it."""
    bf16 = {"parallelism": {}, "training": {"fairness_profile": "spec", "precision": "bf16"}}
    assert profile("spec")["attention_softmax_in_fp32"] is True
    assert effective_settings.problems({**bf16, "effective": dict(PROFILE_DDP)}) == []
    assert effective_settings.problems({**bf16, "effective": {**PROFILE_DDP, "attention_softmax_in_fp32": True}}) == []
    assert effective_settings.problems({**bf16, "effective": {**PROFILE_DDP, "attention_softmax_in_fp32": False}}) \
        == [("attention_softmax_in_fp32 is False in the framework, True in the fairness profile spec", True)]
