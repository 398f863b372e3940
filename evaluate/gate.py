"""The one gate between results and every figure: a result counts only if it passes evaluate.validate's checks.

    found = gated(inputs)   # evaluate.collect's Collection, each result's failed checks in its `failures`

compare, the report (its tables, its AMD vs NVIDIA line, energy and cost, the decision and the projection), wrap's
notes and validate itself read results through here, so a result that validate fails is counted "failed", with its
reason, wherever it appears, and enters no figure, ranking or decision (evaluate.collect.Loaded.ok).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from evaluate.collect import Collection, Loaded, collect
from evaluate.validate import Finding, check_result


def judged(item: Loaded) -> list[Finding]:
    """Every check of one result; its failed ones recorded on it (item.failures)."""
    findings = check_result(item)
    item.failures = [f"{f.check}: {f.message}" for f in findings if f.fatal]
    return findings


def gated(inputs: Sequence[str | Path]) -> Collection:
    """collect(inputs), every result judged."""
    found = collect(inputs)
    for item in found.results:
        judged(item)
    return found
