"""evaluate.validate's check that a result's model numbers are its variant's spec (utils.spec.models).

The FLOPs per token, TFLOP/s and MFU are recomputed from the spec of the result's model.variant (evaluate.validate's
figures check): so the parameter counts and the MoE numbers the result shows beside them must be that spec's too, or a
reader compares figures made from one model against numbers describing another. A MoE model's FLOPs count its active
parameters (docs/results.md, "FLOPs"): model.active_parameters is recomputed with the same function the FLOPs use.

The features a framework reports it built (effective.model_features: a sliding window, attention sinks, ...) are
the spec's. A MoE run's read-back (effective.moe, in megatron-core's names) is held to the same spec and to the
routing every framework runs (utils.spec.fairness.moe_settings): a setting that changes the loss and differs fails
the run; one that changes only the speed (MOE_SPEED_SETTINGS: the dispatcher, the grouped GEMM, the fused
permutation, the shared-expert overlap) is compared between the runs of a model and named where it differs
(moe_differences).
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from typing import Sequence

from utils.spec.fairness import MOE_SPEED_SETTINGS, moe_settings
from utils.spec.models import by_variant
from utils.spec.result_types import Section

Problem = tuple[str, str]  # (check, message), as evaluate.integrity's


def problems(r: Section) -> list[Problem]:
    """Each model number that differs from the spec of the result's variant (an unknown variant: the figures check
    names it)."""
    try:
        spec = by_variant(r.model.variant)
    except ValueError:
        return []
    model = r.model
    expected = {"parameters": spec.param_count(), "active_parameters": spec.active_param_count(),
                "moe": dataclasses.asdict(spec.moe) if spec.moe else None}
    recorded = {"parameters": model.parameters, "active_parameters": model.active_parameters,
                "moe": model.moe.as_dict() if model.moe is not None else None}
    skipped = set() if model.holds("active_parameters") else {"active_parameters"}  # a result before schema 1.7
    return [("model", f"model.{key} is {recorded[key]} in the result, {value} for {spec.variant} in "
                      "utils/spec/models.py") for key, value in expected.items()
            if key not in skipped and recorded[key] != value] + moe_routing(r, spec) + features(r, spec)


def features(r: Section, spec) -> list[Problem]:
    """The model features (utils.spec.models.FEATURES: windows, attention sinks, biases, ...) the framework reports it
    built (effective.model_features), where it reports them, against the spec's: a model that lacks one the spec has
    trains other work under the spec's name."""
    read = r.effective.extra.get("model_features") if r.effective is not None else None
    if read is None or sorted(read) == sorted(spec.features):
        return []
    return [("model features", f"effective.model_features is {sorted(read)} in the framework, "
             f"{sorted(spec.features)} for {spec.variant} in utils/spec/models.py")]


def moe_read_back(r: Section) -> dict | None:
    """The experts and routing the framework reported (effective.moe, megatron-core's names), None where it did not."""
    return r.effective.extra.get("moe") if r.effective is not None else None


def moe_routing(r: Section, spec) -> list[Problem]:
    """A MoE run's read-back settings that change the loss and differ from the spec's numbers and the routing, or no
    read-back where the framework reports its layout; a dense run's that reports experts."""
    read = moe_read_back(r)
    if spec.moe is None:
        return [("moe routing", f"effective.moe reports experts for the dense {spec.variant}")] if read else []
    if read is None:
        reported = r.effective is not None and "tp" in r.effective.extra
        return [("moe routing", "effective.moe is not reported: nothing shows the experts and routing the run "
                 "applied")] if reported else []
    wanted = {key: value for key, value in moe_settings(spec.moe).items() if key not in MOE_SPEED_SETTINGS}
    return [("moe routing", f"effective.moe.{key} is {read.get(key)!r} in the framework, {value!r} for "
             f"{spec.variant} and utils.spec.fairness.MOE_ROUTING") for key, value in wanted.items()
            if key in read and read[key] != value]


def moe_differences(model: str, items: Sequence) -> list[str]:
    """One line for each MOE_SPEED_SETTINGS value that differs between the runs of one MoE model that report it
    (evaluate.collect's Loaded items): not an unfairness of the work, but of the kernels it ran on."""
    found = []
    for key in MOE_SPEED_SETTINGS:
        values: dict[str, list[str]] = defaultdict(list)
        for item in items:
            read = moe_read_back(item.typed)
            if read and key in read:
                values[json.dumps(read[key])].append(item.name)
        if len(values) > 1:
            spread = "; ".join(f"{value} in {', '.join(names)}" for value, names in values.items())
            found.append(f"{model}: MoE {key} differs: {spread} (the experts' speed, not their work: a framework or "
                         "stack without that kernel or dispatcher)")
    return found
