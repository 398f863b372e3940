"""evaluate.validate's check that a result's model numbers are its variant's spec (utils.spec.models).

The FLOPs per token, TFLOP/s and MFU are recomputed from the spec of the result's model.variant (evaluate.validate's
figures check): so the parameter counts and the MoE numbers the result shows beside them must be that spec's too, or a
reader compares figures made from one model against numbers describing another. A MoE model's FLOPs count its active
parameters (docs/results.md, "FLOPs"): model.active_parameters is recomputed with the same function the FLOPs use.
"""

from __future__ import annotations

import dataclasses

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
            if key not in skipped and recorded[key] != value]
