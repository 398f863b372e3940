"""The summary table of a run set: run, status, tokens/s/GPU, TFLOP/s/GPU, time.

    python3 -m train.launch.summary RUN_SET_DIR [RUN_NAME...] [--skipped "RUN_NAME: why"...]

Reads each run directory's launch.json (status, wall time) and result.json (figures). Runs are
listed in the order given (default: every run directory, by name), then the runs of the plan that
were skipped (train.plan.skip_reason), counted apart. Exit 1 when any run is not ok.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from utils import run_files
from utils.cli import Parser
from utils.spec.metrics import figure_text


@dataclass(frozen=True)
class Row:
    run: str
    status: str  # ok | failed | incomplete | interrupted | dry run | unfinished | not run | skipped
    tokens_per_s_per_gpu: float | None
    tflop_per_s_per_gpu: float | None
    wall_s: float | None
    reason: str

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "dry run", "skipped")


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def row(run_dir: Path) -> Row:
    """One run's line, from what its launcher and result recorded."""
    launch, result = _read(run_dir / run_files.LAUNCH), _read(run_dir / run_files.RESULT)
    if launch is None:
        return Row(run_dir.name, "not run", None, None, None, "no launch.json")
    if launch.get("dry_run"):
        return Row(run_dir.name, "dry run", None, None, None, "")
    status = launch.get("status", "unfinished")
    perf = (result or {}).get("performance") or {}
    excerpt = ((result or {}).get("run") or {}).get("error_excerpt") or ""
    reason = excerpt.strip().splitlines()[0] if status != "ok" and excerpt.strip() else ""
    if status == "unfinished":
        reason = "the launcher did not record an end (killed?)"
    return Row(run_dir.name, status, perf.get("tokens_per_s_per_gpu"), perf.get("tflop_per_s_per_gpu"),
               launch.get("wall_s"), reason)


def _number(value: float | None) -> str:
    return "-" if value is None else figure_text(value)


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def table(rows: list[Row]) -> list[str]:
    width = max([len(r.run) for r in rows] + [3])
    lines = [f"{'run':<{width}}  {'status':<11} {'tokens/s/GPU':>13} {'TFLOP/s/GPU':>12} {'time':>8}  reason",
             "-" * (width + 56)]
    for r in rows:
        lines.append(f"{r.run:<{width}}  {r.status:<11} {_number(r.tokens_per_s_per_gpu):>13} "
                     f"{_number(r.tflop_per_s_per_gpu):>12} {_time(r.wall_s):>8}  {r.reason[:100]}")
    bad = sum(not r.ok for r in rows)
    skipped = sum(r.status == "skipped" for r in rows)
    lines.append(f"{len(rows) - skipped} run(s), {len(rows) - skipped - bad} ok, {bad} not ok"
                 + (f", {skipped} skipped" if skipped else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m train.launch.summary", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_set", type=Path, help="the run set directory (OUTPUT_DIR/<timestamp>-<platform>)")
    parser.add_argument("runs", nargs="*", help="run names in order (default: every run directory)")
    parser.add_argument("--skipped", action="append", default=[], metavar="'RUN: WHY'",
                        help="a run of the plan that was not started, and why (repeatable)")
    args = parser.parse_args(argv)
    if not args.run_set.is_dir():
        print(f"train.launch.summary: {args.run_set}: no such run set directory", file=sys.stderr)
        return 2
    names = args.runs or sorted(p.parent.name for p in args.run_set.glob("*/config.json"))
    rows = [row(args.run_set / name) for name in names]
    rows += [Row(name.strip(), "skipped", None, None, None, why.strip())
             for name, _, why in (text.partition(":") for text in args.skipped)]
    print("\n".join(table(rows)))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
