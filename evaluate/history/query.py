"""A history query for evaluate.compare: the stored results it compares (`--history DB [--where KEY=VALUE,...]`)
and the History section its report gains."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from evaluate.collect import Collection, Loaded
from evaluate.history import records, section
from evaluate.history.sql import Location
from evaluate.history.store import FILTERS, open_store
from utils.cli import quoted


def where_filter(text: str) -> dict[str, str]:
    """--where KEY=VALUE,...: each KEY one of the store's FILTERS (an argparse type)."""
    found = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, equals, value = (s.strip() for s in part.partition("="))
        if not equals or key not in FILTERS:
            raise argparse.ArgumentTypeError(f"{quoted(part, 60)}: give KEY=VALUE with KEY one of {', '.join(FILTERS)}")
        if key in records.INTEGER_IDENTITY and not (value.isascii() and value.isdigit() and len(value) <= 9):
            raise argparse.ArgumentTypeError(f"{quoted(part, 60)}: {key} is a whole number (0 to 999999999)")
        found[key] = value
    return found


@dataclass
class HistoryQuery:
    """A store and which of its results to compare: those matching `where` when it is given or no path is."""

    where: Location
    filters: dict[str, str] = field(default_factory=dict)
    with_paths: bool = False

    def __str__(self) -> str:
        return str(self.where)

    def join(self, found: Collection) -> None:
        """Add the chosen stored results to what the paths gave (a run read from both counted once: the copy that
        passes validate, so that a failed copy never hides the honest one)."""
        if self.with_paths and not self.filters:
            return
        with open_store(self.where) as store:
            stored = [records.loaded(row) for row in store.chosen(self.filters)]
        given = {item.identity(): index for index, item in enumerate(found.results)}
        for item in stored:
            index = given.get(item.identity())
            if index is None:
                found.results.append(item)
            elif item.ok and not found.results[index].ok:
                found.results[index] = item

    def section(self, items: Sequence[Loaded], outdir: Path) -> list[str]:
        with open_store(self.where) as store:
            return section.section(store, items, outdir)
