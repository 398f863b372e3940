"""What the overhead benchmarks (bench.breakdown, bench.telemetry) share: the comparison of alternating blocks of
steps with an instrument on and off. Adjacent blocks are paired, so the machine's drift cancels; the median of the
pairs' relative differences is the instrument's cost, given with its standard error."""

from __future__ import annotations

import math
import statistics
from typing import Sequence


def paired_difference(on: Sequence[float], off: Sequence[float]) -> tuple[float, float]:
    """The median relative difference (on - off) / off over adjacent block pairs, and its standard error."""
    pairs = [(a - b) / b for a, b in zip(on, off)]
    error = statistics.stdev(pairs) / math.sqrt(len(pairs)) if len(pairs) > 1 else float("inf")
    return statistics.median(pairs), error


def block_lines(instrument: str, on: Sequence[float], off: Sequence[float]) -> list[str]:
    """The benchmark's step-time lines: each mode's median and blocks (ms), then the paired difference."""
    difference, error = paired_difference(on, off)
    width = len(instrument) + 4
    lines = [f"  step time, {f'{instrument} {mode}':<{width}}: median {statistics.median(times) * 1000:9.2f} ms  "
             "blocks " + " ".join(f"{s * 1000:.1f}" for s in times) for mode, times in (("on", on), ("off", off))]
    return lines + [f"  on - off: median {difference * 100:+.2f}% of step time over adjacent block pairs "
                    f"(standard error {error * 100:.2f}%)"]
