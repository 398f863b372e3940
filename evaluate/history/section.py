"""The History section of evaluate.compare's report.md (with a store given: `--history DB`) and history.png.

Per configuration of the compared runs (evaluate/history/records.py: alike but for the stack and the date), every
stored run oldest first: its date, run set, stack, verdict, steady-state median step time and tokens/s/GPU; and
history.png beside compare.png, tokens/s/GPU over time per configuration, referenced from the section.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Sequence

from evaluate.collect import Loaded
from evaluate.comparison.plot import plain_text_figures
from evaluate.history import records
from evaluate.history.store import Store
from utils.cli import markdown_text
from utils.files import atomic_open
from utils.spec.metrics import figure_text

PNG = "history.png"


def stored_for(store: Store, items: Sequence[Loaded]) -> list[list[dict]]:
    """Each compared configuration's stored runs, oldest first (configurations in the order first compared)."""
    wanted = []
    for item in items:
        key = records.configuration(records.row(item, "", None))
        if key not in wanted:
            wanted.append(key)
    found: dict[str, list[dict]] = {key: [] for key in wanted}
    for row in store.rows():
        key = records.configuration(row)
        if key in found:
            found[key].append(row)
    return [rows for rows in found.values() if rows]


def _figure(value: float | None) -> str:
    return "-" if value is None else figure_text(value)


def section(store: Store, items: Sequence[Loaded], outdir: Path) -> list[str]:
    """The report's History lines; writes history.png into outdir when any stored run has figures."""
    groups = stored_for(store, items)
    out = ["## History", "", f"Every run of the compared configurations kept in the results store {markdown_text(str(store.where))} "
           "(python3 -m evaluate.history), oldest first; figures over the steady-state steps of runs that pass "
           "validate.", ""]
    if not groups:
        return out + ["- no stored run of these configurations: add them with python3 -m evaluate.history add", ""]
    for rows in groups:
        out += [f"### {markdown_text(records.label(rows[0]))}", "",
                "| Date | Run set | Stack | Status | Step time (s, median) | tokens/s/GPU |", "|---|---|---|---|---|---|"]
        out += [f"| {markdown_text(str(r['run_date']))} | {markdown_text(r['run_set'])} | {markdown_text(r['stack'])} | "
                f"{markdown_text(r['verdict'], 40)} | {_figure(r['step_time_median_s'])} | {_figure(r['tokens_per_s_per_gpu'])} |"
                for r in rows]
        out.append("")
    if plot(groups, outdir / PNG):
        out += [f"![history]({PNG})", ""]
    return out


def plot(groups: list[list[dict]], path: Path) -> bool:
    """tokens/s/GPU over the runs' dates, one line per configuration; False (nothing written) with no figure."""
    series = []
    for rows in groups:
        points = [(datetime.fromisoformat(r["run_date"]), r["tokens_per_s_per_gpu"]) for r in rows
                  if r["run_date"] and r["tokens_per_s_per_gpu"] is not None]
        if points:
            series.append((records.label(rows[0]), points))
    if not series:
        return False
    plain_text_figures()
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(12, 5), dpi=100)
    for name, points in series:
        axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
    axis.set_title("tokens/s/GPU of each stored run, by date")
    axis.set_ylabel("tokens/s/GPU")
    axis.legend(fontsize=8, loc="best")
    fig.autofmt_xdate()
    fig.tight_layout()
    with atomic_open(path, "wb") as out:
        fig.savefig(out, format="png")
    plt.close(fig)
    return True
