"""Keep every result and compare it over time: a results store (SQLite by default, PostgreSQL when shared).

    python3 -m evaluate.history add PATH... [--tag TAG]   # run sets, output folders, output.zip files, result.json
    python3 -m evaluate.history list [--where KEY=VALUE,...]
    python3 -m evaluate.history show ID
    python3 -m evaluate.history regressions [--by run-set|stack] [--baseline NAME] [--since DATE]
    python3 -m evaluate.history export --format csv|jsonl [-o FILE]

The store is --db, else HISTORY_DB (environment, then config.env), else OUTPUT_DIR/history.sqlite; a
postgresql://USER@HOST/DB URL stores into a PostgreSQL server. A result that fails evaluate.validate is stored as
failed with its reasons, never as a figure; the same result added twice is stored once. regressions exits 1 when
a configuration's newest runs are slower than the ones before by more than the test's thresholds
(evaluate/history/regressions.py), 0 when none is.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path

from evaluate.collect import CollectError
from evaluate.gate import gated
from evaluate.history import export, records
from evaluate.history.regressions import ALPHA, GROUPINGS, MIN_CHANGE, regressions
from evaluate.history.sql import location
from evaluate.history.query import where_filter
from evaluate.history.store import COLUMNS, FILTERS, open_store
from utils.cli import Parser, UsageError, now_iso, output_file, positive_number, quoted, run, warn
from utils.files import atomic_open
from utils.spec.metrics import figure_text

TOOL = "evaluate.history"


def date(text: str) -> datetime:
    """--since: an ISO date or date and time (UTC unless it says otherwise)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quoted(text, 40)} is not a date: give 2026-11-26 or 2026-11-26T12:00") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def add(args) -> int:
    try:
        found = gated(args.paths)
    except CollectError as err:
        raise UsageError(str(err)) from None
    for rejected in found.rejected:
        warn(rejected.line())
    if not found.results:
        raise UsageError(f"no result this checkout reads under {', '.join(map(str, args.paths))}; run a benchmark "
                         "first (./shell/run_train.sh)")
    added_at = now_iso()
    rows, kept = [], []
    for item in found.results:
        row = records.row(item, added_at, args.tag)
        nul = [name for name, value in row.items() if isinstance(value, str) and "\x00" in value]
        if nul:  # PostgreSQL keeps no NUL in text: refused here, by name, not as the whole set's failure
            warn(f"{quoted(item.where, 300)}: {item.name} has a NUL character in its {', '.join(nul)}, which no "
                 "store keeps; left out")
            continue
        rows.append(row)
        kept.append(item)
    if not rows:
        raise UsageError(f"no result under {', '.join(map(str, args.paths))} can be stored (see above)")
    with open_store(location(args.db), create=True) as store:
        new, replaced, known = store.add(rows)
        where = store.where
    failed = [item for item in kept if not item.ok]
    for item in failed:
        reason = item.failures[0] if item.failures else f"status {item.verdict}"
        warn(f"{quoted(item.where, 300)}: {item.name} stored as {quoted(item.verdict, 40)}: {quoted(reason)}; it is "
             "in no figure")
    print(f"stored {new} new result(s) in {where} ({replaced} replacing a failed copy of the same run; {known} "
          f"already stored; {len(failed)} of all {len(rows)} not ok, kept without figures)")
    return 0


def _figure(value: float | None) -> str:
    return "-" if value is None else figure_text(value)


def list_results(args) -> int:
    with open_store(location(args.db)) as store:
        stored = store.rows(args.where)
    print(f"{'ID':<12}  {'date':<25}  {'run set':<22}  {'status':<10}  {'stack':<14}  configuration  "
          "step time (s)  tokens/s/GPU")
    for row in stored:
        print(f"{row['content_key'][:12]}  {quoted(str(row['run_date']), 25):<25}  {quoted(row['run_set'], 22):<22}  "
              f"{quoted(row['verdict'], 10):<10}  {quoted(row['stack'], 14):<14}  {quoted(records.label(row))}  "
              f"{_figure(row['step_time_median_s'])}  {_figure(row['tokens_per_s_per_gpu'])}")
    print(f"{len(stored)} stored result(s)")
    return 0


def show(args) -> int:
    with open_store(location(args.db)) as store:
        row = store.find(args.id)
    for name in (*records.ORIGIN, *records.IDENTITY, *records.FIGURES):
        print(f"{name:<22} {quoted(str(row[name]), 400)}")
    series = records.loaded(row).typed.series
    recorded = [name for name, values in series.as_dict().items() if name != "step" and values]
    print(f"{'series':<22} {len(series.step)} steps of {', '.join(recorded)}")
    return 0


def find_regressions(args) -> int:
    with open_store(location(args.db)) as store:
        stored = store.chosen(args.where)
        if args.baseline is not None and not any(args.baseline in (r["stack"], r["tag"], r["run_set"]) for r in stored):
            raise UsageError(f"--baseline {quoted(args.baseline, 60)} is no stored stack, tag or run set (stacks: "
                             f"{store.values('stack')}; tags: {store.values('tag')}; run sets: "
                             f"{store.values('run_set')})")
    verdicts, left_out = regressions(stored, args.by, args.baseline, args.since, args.alpha, args.min_change)
    for verdict in verdicts:
        print(verdict.line())
    for line in left_out:
        print(f"not compared: {line}")
    found = [v for v in verdicts if v.kind == "regression"]
    print(f"{len(found)} regression(s) in {len(verdicts)} configuration(s) compared (Mann-Whitney U p < "
          f"{args.alpha:g} and a change of {args.min_change:.0%} or more, beyond the runs' own spread)")
    return 1 if found else 0


def export_results(args) -> int:
    with open_store(location(args.db)) as store:
        text = export.FORMATS[args.format](store.chosen(args.where))
    if args.output is None:
        sys.stdout.write(text)
    else:
        with atomic_open(args.output, encoding="utf-8", newline="") as out:
            out.write(text)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog=f"python3 -m {TOOL}", description=__doc__.split("\n\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", metavar="PATH_OR_URL", help="the store (default HISTORY_DB, else "
                        "OUTPUT_DIR/history.sqlite); postgresql://USER@HOST/DB for a PostgreSQL server")
    selected = argparse.ArgumentParser(add_help=False)
    selected.add_argument("--where", type=where_filter, default={}, metavar="KEY=VALUE,...",
                          help=f"only stored results with these values (keys: {', '.join(FILTERS)})")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")
    adding = commands.add_parser("add", parents=[common], help="store the results under the paths")
    adding.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="run sets, output folders, output.zip "
                        "files or result.json files")
    adding.add_argument("--tag", help="a name to give these results (e.g. rocm7.0), for --baseline")
    adding.set_defaults(handler=add)
    listing = commands.add_parser("list", parents=[common, selected], help="print what is stored")
    listing.set_defaults(handler=list_results)
    showing = commands.add_parser("show", parents=[common], help="print one stored result")
    showing.add_argument("id", metavar="ID", help="its ID as list prints it (a prefix that names one)")
    showing.set_defaults(handler=show)
    judging = commands.add_parser("regressions", parents=[common, selected], help="newest runs against the ones "
                                  "before, per configuration; exit 1 when one is slower")
    judging.add_argument("--by", choices=list(GROUPINGS), default="run-set", help="what the newest runs are: the "
                         "newest run set (default) or the newest stack of each configuration")
    judging.add_argument("--baseline", metavar="NAME", help="compare with the runs of this stack, tag or run set")
    judging.add_argument("--since", type=date, metavar="DATE", help="the newest runs are those from DATE on")
    judging.add_argument("--alpha", type=positive_number, default=ALPHA, help=f"p-value threshold (default {ALPHA})")
    judging.add_argument("--min-change", type=positive_number, default=MIN_CHANGE,
                         help=f"smallest change of the median step time reported (default {MIN_CHANGE})")
    judging.set_defaults(handler=find_regressions)
    exporting = commands.add_parser("export", parents=[common, selected], help="write the stored results as "
                                    "madengine's perf.csv or JSON lines")
    exporting.add_argument("--format", choices=list(export.FORMATS), required=True)
    exporting.add_argument("-o", "--output", type=output_file, metavar="FILE", help="file to write (default: stdout)")
    exporting.set_defaults(handler=export_results)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    run(main, TOOL)
