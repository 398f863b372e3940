"""evaluate.validate's check that a framework ran what it was asked: the settings it reports back (a result's
`effective` section) against the request's parallelism and training sections, and against the fairness profile's
DDP settings and FP8 recipe (utils.spec.fairness).

A profile key the framework does not report fails where it reports its layout at all (a log that reports none is
evaluate.judge's REQUIRED_READBACK problem): nothing confirms it was applied. One that differs fails, unless the
framework has no switch for it and says why (effective's profile_fixed, utils.spec.fairness.FIXED): then a warning
names the difference and its reason.
"""

from __future__ import annotations

import math

from utils.spec.fairness import PROFILES, profile

PROFILE_KEYS = ("overlap_grad_reduce", "overlap_param_gather", "grad_reduce_in_fp32", "average_in_collective")
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


def problems(result: dict) -> list[Problem]:
    """Every requested setting and profile setting the framework reports otherwise, or does not report."""
    effective = result["effective"]
    found: list[Problem] = [(f"{key} is {effective[key]!r} in the framework, {wanted!r} requested", True)
                            for section in READ_BACK_SECTIONS for key, wanted in result[section].items()
                            if key not in NOT_READ_BACK and effective.get(key) is not None
                            and not same(effective[key], wanted)]
    return found + _profile_applied(result["training"], effective)


def _reported(effective: dict, key: str):
    nested = effective.get("fp8_recipe") if isinstance(effective.get("fp8_recipe"), dict) else {}
    return effective[key] if effective.get(key) is not None else nested.get(key)


def _profile_applied(training: dict, effective: dict) -> list[Problem]:
    wanted: dict = {}
    if training.get("fairness_profile") in PROFILES:
        table = profile(training["fairness_profile"])
        wanted.update({key: table[key] for key in PROFILE_KEYS})
    if training.get("precision") == "fp32":
        wanted.pop("grad_reduce_in_fp32", None)  # fp32 gradients are reduced in fp32 whatever the profile says
    if (training.get("fp8_recipe") or {}).get("fp8_recipe") == "delayed":  # the amax history is delayed scaling's
        wanted.update({key: training["fp8_recipe"][key] for key in FP8_KEYS if key in training["fp8_recipe"]})
    fixed, found = effective.get("profile_fixed") or {}, []
    for key, value in wanted.items():
        where = f"{value!r} in the fairness profile {training['fairness_profile']}"
        reported = _reported(effective, key)
        if reported is None:
            if "tp" in effective:
                found.append((f"{key} is not reported by the framework, {where}", True))
        elif not same(reported, value):
            why = f" (the framework has no switch for it: {fixed[key]})" if key in fixed else ""
            found.append((f"{key} is {reported!r} in the framework, {where}{why}", key not in fixed))
    return found
