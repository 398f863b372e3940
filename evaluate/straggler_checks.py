"""The stragglers section again, from the run's own step times: a result's slowest GPU and node are not taken on faith
(issue 45).

The evidence is each rank's rank_steps/rank<R>.jsonl beside result.json (the trainers mega, fsdp, autotp write them),
else the telemetry section's per_gpu entries (which evaluate.telemetry_checks recomputes from the samples), as
evaluate.collect hands them over in Loaded.beside from a directory or a zip. The section is made again by the
judge's own functions (utils.machine.stragglers: read_rank_steps, section, on steady_window), so a figure edited in
result.json differs from its recomputation and is named with both values.

Every mismatch is fatal: the report's fairness section names a flagged straggler as the reason a run is slow, so a
straggler forged onto a healthy run, or one hidden from a slow run, misleads the comparison it is read beside. A
result read without its run directory (the judge's own check, the history store) has no Loaded.beside, so no rank
file can be told absent from not carried, and it is not checked here.
"""

from __future__ import annotations

import zipfile
from pathlib import PurePosixPath
from typing import Any, BinaryIO, Callable, Mapping

from evaluate.effective_settings import same
from evaluate.telemetry_checks import named, side_text, steady_steps
from utils.machine import stragglers
from utils.spec.result_types import Section, typed

Problem = tuple[str, str]  # (check, message), as evaluate.integrity's
CHECK = "straggler evidence"


def _leaves(value: Any, where: str) -> dict[str, Any]:
    """Every value of a section by its path (stragglers.members[3].value), to name a differing one."""
    if isinstance(value, dict):
        return {path: leaf for key, item in value.items() for path, leaf in _leaves(item, f"{where}.{key}").items()}
    if isinstance(value, list):
        return {path: leaf for n, item in enumerate(value) for path, leaf in _leaves(item, f"{where}[{n}]").items()}
    return {where: value}


def recomputed(r: Section, beside: dict[str, Callable[[], BinaryIO]]) -> dict[str, Any] | None:
    """The section the judge writes from the rank files beside the result, else from its telemetry's per_gpu (as
    the plain entries the judge hands utils.machine.stragglers)."""
    files = {name: (lambda opened=opened: side_text(opened)) for name, opened in beside.items()
             if PurePosixPath(name).parent.as_posix() == stragglers.RANK_STEPS_DIR}
    per_gpu = [gpu.as_dict() for gpu in (r.telemetry.per_gpu or ())] if r.telemetry else []
    return stragglers.section(stragglers.read_rank_steps(files), steady_steps(r), per_gpu)


def problems(result: Mapping | Section, beside: dict[str, Callable[[], BinaryIO]] | None) -> list[Problem]:
    """The stragglers section against its recomputation: every figure, a section without evidence, and a section
    the evidence gives but the result lacks; none for a result read without its run directory (beside None)."""
    if beside is None:
        return []
    r = typed(result)
    ours = r.stragglers
    try:
        again = recomputed(r, beside)
    except (OSError, ValueError, zipfile.BadZipFile) as err:  # the judge leaves the section out of such files
        return [(CHECK, f"a stragglers section, but the rank files beside it cannot be read: {err}")] if ours else []
    if ours is None:
        return [] if again is None else [
            (CHECK, f"no stragglers section, but the evidence beside the result gives one ({again['method']}: "
                    f"slowest GPU {again['slowest']['index']} on {again['slowest']['host']}, "
                    f"{again['slowest']['slower_than_median']:.1%} slower than the median): a straggler hidden")]
    if again is None:
        return [(CHECK, "a stragglers section, but neither rank_steps/ nor the telemetry beside the result give one: "
                        "a straggler verdict without evidence")]
    theirs, mine = _leaves(again, "stragglers"), _leaves(ours.as_dict(), "stragglers")
    found = [f"{path} is {mine.get(path)} in the result, {theirs.get(path)} from the {again['method']}"
             for path in dict.fromkeys([*mine, *theirs]) if not same(mine.get(path), theirs.get(path))]
    return [(CHECK, named(found))] if found else []
