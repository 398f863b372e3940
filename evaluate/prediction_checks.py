"""The prediction section again, from the run's own request: a result's predicted memory, time bound, efficiency and
measured-against-predicted figures are not taken on faith (issue 45).

The evidence is the run's config.json beside result.json (evaluate.collect hands it over in Loaded.beside, from a
directory or a zip). The request is read back and handed, with the result, to the writer's own function,
utils.predict.result_section, which the judge calls, so a figure edited in result.json differs from its
recomputation and is named with both values. A result without its config.json beside it (a lone result.json, a zip
without it) or read without its run directory has nothing to recompute from and is not checked here.

A mismatch is a warning, not a failure: the recomputation runs this checkout's prediction model and device table,
which are refined often (the memory model by framework, precision and layout), so an older result whose prediction
no longer recomputes is as likely a model revised since the run as an edit, and failing it would overturn every
stored run's status on each revision; its measured figures, which rank, are checked elsewhere. The warning names
the recomputed values, so a report beside the prediction (evaluate.comparison.prediction) is never the only word.
"""

from __future__ import annotations

import math
import zipfile
from typing import Any, BinaryIO, Callable, Mapping

from evaluate.collect import CONFIG_NAME
from evaluate.telemetry_checks import SHOWN
from utils.files import MAX_JSON_BYTES, parse_json
from utils.predict import result_section
from utils.spec.request import Request
from utils.spec.result_types import Section, typed

Problem = tuple[str, str]  # (check, message), as evaluate.integrity's
CHECK = "prediction evidence"
# The section's figures, as dotted paths under prediction (the rest are names and notes the figures come with).
FIGURES = tuple(f"memory.{part}_gib" for part in ("weights", "gradients", "optimizer", "activations", "logits",
                                                   "workspace", "buffers", "temporaries", "peak", "device")) + \
    tuple(f"time_bound.{key}" for key in ("step_s", "compute_s", "tp_s", "ep_s", "dp_s", "bubble_s", "dp_total_s")) + \
    ("efficiency", "measured_peak_gib", "memory_error")
REL_TOL = 1e-9  # the same computation on the same inputs: only a JSON round trip lies between them, which is exact


def _figure(section: Section | dict | None, path: str) -> Any:
    """One figure by its dotted path, in the result's typed section or in the recomputed plain one."""
    for key in path.split("."):
        section = (getattr(section, key) if isinstance(section, Section)
                   else section.get(key) if isinstance(section, dict) else None)
    return section


def _request(opened: Callable[[], BinaryIO]) -> Request:
    """The request of config.json, refused (ValueError) beyond what any TPrimat file holds."""
    with opened() as handle:
        data = handle.read(MAX_JSON_BYTES + 1)
    return Request.from_json(parse_json(data), CONFIG_NAME)


def _same(ours, theirs) -> bool:
    if ours is None or theirs is None:
        return ours is theirs
    return math.isclose(float(ours), float(theirs), rel_tol=REL_TOL, abs_tol=0.0)


def problems(result: Mapping | Section, beside: dict[str, Callable[[], BinaryIO]] | None) -> list[Problem]:
    """The prediction's figures against utils.predict.result_section on the run's config.json; none for a result
    without a prediction section or without its config.json beside it. The writer's function reads the plain result:
    pass it (evaluate.validate does) rather than a typed one, which would be written out again, series and all."""
    if not beside or CONFIG_NAME not in beside:
        return []
    section = typed(result).prediction
    if not section:
        return []
    plain = result.as_dict() if isinstance(result, Section) else result
    try:
        again = result_section(_request(beside[CONFIG_NAME]), plain)
    except (OSError, ValueError, zipfile.BadZipFile) as err:  # RequestError is a ValueError
        return [(CHECK, f"the request beside the result cannot be read, the prediction is not recomputed: {err}")]
    differing = [f"prediction.{path} is {_figure(section, path)} in the result, {_figure(again, path)} from "
                 f"{CONFIG_NAME}" for path in FIGURES if not _same(_figure(section, path), _figure(again, path))]
    if not differing:
        return []
    more = f" and {len(differing) - SHOWN} more" if len(differing) > SHOWN else ""
    return [(CHECK, "; ".join(differing[:SHOWN]) + more)]
