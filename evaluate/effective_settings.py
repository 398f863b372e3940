"""evaluate.validate's check that a framework ran what it was asked: the settings it reports back (a result's
`effective` section) against the request's parallelism and training sections, and against the fairness profile's
DDP settings and FP8 recipe (utils.spec.fairness).

A profile key the framework does not report fails where it reports its layout at all (a log that reports none is
evaluate.judge's REQUIRED_READBACK problem): nothing confirms it was applied. One that differs fails, unless the
framework has no switch for it and says why (effective's profile_fixed, utils.spec.fairness.FIXED): then a warning
names the difference and its reason.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from utils.spec.fairness import PROFILES, profile
from utils.spec.result_types import Section, typed

PROFILE_KEYS = ("overlap_grad_reduce", "overlap_param_gather", "grad_reduce_in_fp32", "average_in_collective")
# Profile keys only the Megatron paths have a switch for (megatron-core's unfused attention softmax): compared where
# the framework reports them; a torch-native framework's attention has no such setting.
REPORTED_PROFILE_KEYS = ("attention_softmax_in_fp32",)
# Printed flat by Megatron/Primus/NeMo/Megatron-Bridge; mega's read-back nests them under fp8_recipe.
FP8_KEYS = ("fp8_amax_history_len", "fp8_amax_compute_algo", "fp8_reduce_amax")
# The effective settings are named like the result's parallelism and training fields, and each one the framework
# reports is compared with the requested value, but for the fields that are no setting a framework applies: a
# layout's name, the node count, the data's identity (validate's fingerprint check) and mock_data (its real-data check).
NOT_READ_BACK = frozenset({"strategy", "nnodes", "dataset", "dataset_fingerprint", "tokenizer_fingerprint", "mock_data"})
READ_BACK_SECTIONS = ("parallelism", "training")

Problem = tuple[str, bool]  # (message, fatal)


def same(a, b) -> bool:
    """Equal, floats within rounding (a value printed by one framework, parsed back)."""
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return a == b


def given(section: Section | Mapping | None, name: str) -> bool:
    """Whether a section holds the field, a null included: the typed result reads an absent field as None too, and a
    check that tells "not recorded" from "recorded as none" (no FP8 recipe) asks here."""
    if isinstance(section, Mapping):
        return name in section
    return section is not None and section.holds(name)


def held(section: Section) -> dict[str, Any]:
    """A closed section's fields that hold a value, by name, in the schema's order (the arrays not copied, as
    as_dict would: a series can hold 200,000 steps)."""
    return {item.name: value for item in dataclasses.fields(section)
            if not item.name.startswith("_") and (value := getattr(section, item.name)) is not None}


def plain(value: Any) -> Any:
    """A field's value as JSON (a section as its dict), to print, hash or compare with a plain value."""
    return value.as_dict() if isinstance(value, Section) else value


def problems(result: Mapping | Section) -> list[Problem]:
    """Every requested setting and profile setting the framework reports otherwise, or does not report."""
    r = typed(result)
    reported = r.effective.extra  # the read-back settings, named like the request's fields
    found: list[Problem] = [(f"{key} is {reported[key]!r} in the framework, {wanted!r} requested", True)
                            for section in (r.parallelism, r.training) for key, wanted in section.as_dict().items()
                            if key not in NOT_READ_BACK and reported.get(key) is not None
                            and not same(reported[key], wanted)]
    return found + _profile_applied(r.training, reported)


def _reported(effective: Mapping, key: str):
    nested = effective.get("fp8_recipe") if isinstance(effective.get("fp8_recipe"), dict) else {}
    return effective[key] if effective.get(key) is not None else nested.get(key)


def _profile_applied(training: Section, effective: Mapping) -> list[Problem]:
    """The fairness profile's DDP settings and a delayed FP8 recipe's amax settings against the read-back
    (effective: the section's settings beyond the schema's names, raw JSON as the framework reported them)."""
    wanted: dict = {}
    if training.fairness_profile in PROFILES:
        table = profile(training.fairness_profile)
        wanted.update({key: table[key] for key in PROFILE_KEYS})
        wanted.update({key: table[key] for key in REPORTED_PROFILE_KEYS if _reported(effective, key) is not None})
    if training.precision == "fp32":
        wanted.pop("grad_reduce_in_fp32", None)  # fp32 gradients are reduced in fp32 whatever the profile says
    recipe = training.fp8_recipe
    if recipe is not None and recipe.fp8_recipe == "delayed":  # the amax history is delayed scaling's
        wanted.update({key: getattr(recipe, key) for key in FP8_KEYS if given(recipe, key)})
    fixed, found = effective.get("profile_fixed") or {}, []
    for key, value in wanted.items():
        where = f"{value!r} in the fairness profile {training.fairness_profile}"
        reported = _reported(effective, key)
        if reported is None:
            if "tp" in effective:
                found.append((f"{key} is not reported by the framework, {where}", True))
        elif not same(reported, value):
            why = f" (the framework has no switch for it: {fixed[key]})" if key in fixed else ""
            found.append((f"{key} is {reported!r} in the framework, {where}{why}", key not in fixed))
    return found
