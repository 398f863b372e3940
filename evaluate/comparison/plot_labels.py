"""Bar labels that never overlap, however many bars and however long their names (compare.png's panels).

A bar's label (device, framework, model, strategy: one per line) is wrapped to the width of its bar's slot,
between words and after a "_" or "-" inside one, at the largest font size at which it fits; where none does,
the labels stand upright, rewrapped into as many lines as the slot holds side by side. The figures above the
bars shrink the same way, and stand upright only when no size fits. Each choice is measured with the figure's
renderer, not guessed from character counts: the first that keeps every neighbour apart is kept (the smallest
upright one when none does).
"""

from __future__ import annotations

import math
import re
from typing import Sequence

from matplotlib.text import Annotation

SIZES = (8, 7, 6, 5)  # font sizes tried, largest first (points)
LEVEL_SIZES = SIZES[:3]  # the sizes tried level: a label smaller than these reads better upright at a larger one
SHARE = 0.9  # of a slot a label may fill, so that neighbours keep a gap
EM = 0.6  # a mean character's width, in font sizes: the first guess that measuring confirms
LINE = 1.25  # a line's height, in font sizes
GAP = 3  # points between neighbours, so that two figures never read as one ("13,10713,107")


def fit(ax, labels: Sequence[str]) -> None:
    """Set ax's bar labels (one per bar at x = 0, 1, ...) and its figures above the bars so that none overlap."""
    renderer = ax.figure.canvas.get_renderer()
    pixels_per_point = ax.figure.dpi / 72
    (left, _), (right, _) = ax.transData.transform([(0, 0), (1, 0)])
    slot = abs(right - left)
    for rotation, size, texts in _candidates(labels, slot, pixels_per_point):
        ax.set_xticks(range(len(labels)), texts, fontsize=size, rotation=rotation)
        if _apart([label.get_window_extent(renderer) for label in ax.get_xticklabels()], pixels_per_point):
            break
    values = [text for text in ax.texts if isinstance(text, Annotation)]
    for rotation, size in [(0, size) for size in SIZES] + [(90, SIZES[0])]:
        for value in values:
            value.set(fontsize=size, rotation=rotation, verticalalignment="bottom")
        if _apart([value.get_window_extent(renderer) for value in values], pixels_per_point):
            break


def _apart(boxes: Sequence, pixels_per_point: float) -> bool:
    """No two of these window extents come within GAP points of each other."""
    padded = [box.padded(GAP * pixels_per_point / 2) for box in boxes]
    return not any(a.overlaps(b) for n, a in enumerate(padded) for b in padded[n + 1:])


def _candidates(labels: Sequence[str], slot: float, pixels_per_point: float):
    """(rotation, font size, labels) to try, in order of preference: level down to LEVEL_SIZES' smallest, then
    upright."""
    for size in LEVEL_SIZES:
        width = int(SHARE * slot / (EM * size * pixels_per_point))
        yield 0, size, ["\n".join(_wrap(line, width) for line in label.split("\n")) for label in labels]
    for size in SIZES:
        lines = max(1, int(SHARE * slot / (LINE * size * pixels_per_point)))
        yield 90, size, [_upright(label, lines) for label in labels]


def _wrap(line: str, width: int) -> str:
    """Lines of at most width characters, broken between words and after a "_" or "-" inside one (a strategy's
    minimal_communication, a run's id); a piece longer than width stays whole."""
    out = [""]
    for word in line.split():
        for n, piece in enumerate(re.findall(r"[^_-]*[_-]|[^_-]+", word)):
            joined = out[-1] + (" " if n == 0 and out[-1] else "") + piece
            if len(joined) <= width or not out[-1]:
                out[-1] = joined
            else:
                out.append(piece)
    return "\n".join(out)


def _upright(label: str, lines: int) -> str:
    """The label in at most `lines` lines where its words allow: its own lines where they are few enough, else its
    words rewrapped to the narrowest width that needs no more lines (the upright label's shortest height)."""
    if label.count("\n") < lines:
        return label
    words = " ".join(label.split())
    widths = range(math.ceil(len(words) / lines), len(words) + 1)  # the last: one line
    return next(wrapped for wrapped in (_wrap(words, width) for width in widths) if wrapped.count("\n") < lines)
