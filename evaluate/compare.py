"""Turn any set of results into one honest comparison: compare.png, report.md (and the same as one self-contained
report.html, evaluate/comparison/html.py) and a console summary.

    python3 -m evaluate.compare DIR_OR_ZIP... -o OUTDIR

Inputs are run directories, run-set directories, output.zip files or result JSON files, from one
machine or several. Runs of the same platform, device, framework, model, strategy, layout and node
count are repeats: their figures are shown as median [min-max]. Fairness problems (different
workload, data or tokenizer) and mock data are stated in the report, never hidden. Results of one
workload on several node counts also get a Scaling section (evaluate/comparison/scaling.py). Energy per token comes from
each result's telemetry; cost per million tokens and the projection need the prices per GPU-hour and the token
count (--price-amd, --price-nvd, --project-tokens; else PRICE_PER_GPU_HOUR_AMD, PRICE_PER_GPU_HOUR_NVD and
PROJECT_TOKENS from the environment or config.env), checked like the configuration: a bad one is one line, exit 2.
--project-nodes 1,2,4,...,1024 adds the projection to many nodes (evaluate.project's model, for each platform +
framework's fastest strategy) as a panel of compare-strategies.png and a section of report.md.
--history DB takes the results store (python3 -m evaluate.history) as well as or instead of paths (--where
KEY=VALUE,... chooses its results): report.md then gains a History section with each compared configuration's
stored runs, and history.png beside compare.png. Runs of different precisions are UNFAIR unless
--precision-comparison asks for a precision comparison; each low precision is checked against its BF16 twin's
validation loss (--precision-loss-tolerance, else PRECISION_LOSS_TOLERANCE).

The repeats and their figures are evaluate/comparison/repeats.py's, the report evaluate/comparison/report.py's, the plot
evaluate/comparison/plot.py's, and the cross-strategy view evaluate/comparison/strategies.py's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from evaluate.comparison import quality as quality_view
from evaluate.comparison import strategies as strategy_view
from evaluate.collect import Collection, CollectError
from evaluate.gate import gated
from evaluate.comparison.projection import Ask
from evaluate.comparison.html import page as html_page
from evaluate.comparison.plot import plot
from evaluate.comparison.report import report
from evaluate.comparison.repeats import repeats_of
from evaluate import project
from evaluate.history.query import HistoryQuery, where_filter
from evaluate.history.sql import location
from utils.cli import Parser, UsageError, output_dir, positive_number, quoted, run, warn
from utils.config.parse import ConfigError
from utils.machine.energy_cost import FLAGS, CostSettings, cost_settings
from utils.files import atomic_open


def write_text(path: Path, text: str) -> None:
    with atomic_open(path, encoding="utf-8") as out:
        out.write(text)


def compare(inputs: Sequence[str | Path], outdir: Path, costs: CostSettings = CostSettings(),
            ask: Ask | None = None, history: HistoryQuery | None = None,
            quality: quality_view.QualitySettings = quality_view.QualitySettings()) -> str:
    """Write compare.png, report.md, report.html (and compare-strategies.png with several strategies or a projection
    asked for, history.png with a store); returns the report."""
    found = gated(inputs) if inputs else Collection([], [])
    if history is not None:
        history.join(found)
    for rejected in found.rejected:
        warn(rejected.line())
    for line in found.duplicate_lines():
        warn(line)
    for item in found.results:
        if item.failures:
            warn(f"{quoted(item.where, 300)}: {item.name} fails validate ({quoted(item.failures[0])}): counted failed, in no figure")
    items = found.results
    if not items:
        where = ", ".join([*map(str, inputs), *([f"the store {history}"] if history else [])])
        raise CollectError(f"no result this checkout reads under {where} ({len(found.rejected)} file(s) left out, "
                           "see above)" if found.rejected else
                           f"no result.json under {where}; run a benchmark or extract first")
    rows = repeats_of(items)
    outdir.mkdir(parents=True, exist_ok=True)
    plot(items, rows, outdir / "compare.png", costs)
    entries = strategy_view.entries(rows)
    strategies_png = None
    if strategy_view.has_strategies(entries) or ask:
        strategies_png = "compare-strategies.png"
        strategy_view.plot(entries, outdir / strategies_png, ask)
    history_lines = history.section(items, outdir) if history is not None else ()
    text = report(items, "compare.png", strategies_png, costs, ask, history_lines, quality)
    write_text(outdir / "report.md", text)
    write_text(outdir / "report.html", html_page(text, outdir))
    return text


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m evaluate.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="*", metavar="DIR_OR_ZIP", help="run directories, run sets, output.zip files")
    parser.add_argument("-o", "--output", required=True, type=output_dir, metavar="OUTDIR", help="folder for compare.png and report.md")
    for knob, flag in FLAGS.items():
        parser.add_argument(flag, metavar="NUMBER", dest=knob, help=f"overrides {knob} (from the environment, else config.env); empty: none")
    parser.add_argument(quality_view.FLAGS[quality_view.TOLERANCE_KNOB], metavar="NUMBER",
                        dest=quality_view.TOLERANCE_KNOB, help=f"overrides {quality_view.TOLERANCE_KNOB}: the relative "
                        "validation-loss gap to its BF16 twin beyond which a low precision is flagged (default 0.01)")
    parser.add_argument("--precision-comparison", action="store_true", help="compare runs of different precisions "
                        "as a precision comparison (said at the top) instead of marking them UNFAIR")
    parser.add_argument("--project-nodes", metavar="N,N,...", help="project each configuration to these node counts "
                        "(a model-based projection: python3 -m evaluate.project --help)")
    parser.add_argument("--link-gbps", type=positive_number, default=None, help="with --project-nodes: inter-node bandwidth "
                        "per GPU, Gb/s (default NET_LINK_GBPS, else 400)")
    parser.add_argument("--history", metavar="DB", help="a results store (a path or postgresql:// URL; python3 -m "
                        "evaluate.history): its results matching --where are compared when no path is given, and "
                        "report.md gains a History section")
    parser.add_argument("--where", type=where_filter, default={}, metavar="KEY=VALUE,...",
                        help="with --history: only the stored results with these values (framework=mega,model=llama)")
    args = parser.parse_args(argv)
    if not args.inputs and args.history is None:
        raise UsageError("give the results to compare (run sets, output.zip files) or a store with --history DB")
    if args.where and args.history is None:
        raise UsageError("--where chooses results of a store: add --history DB")
    ask = None
    if args.project_nodes is not None:
        link = project.knob("NET_LINK_GBPS", args.link_gbps, "--link-gbps")
        ask = Ask(project.node_counts(args.project_nodes), link)
    elif args.link_gbps is not None:
        raise UsageError("--link-gbps goes with --project-nodes: add --project-nodes 1,2,4,... or leave it out")
    try:
        costs = cost_settings({knob: getattr(args, knob) for knob in FLAGS})
        quality = quality_view.quality_settings({knob: getattr(args, knob) for knob in quality_view.FLAGS},
                                                args.precision_comparison)
    except ConfigError as err:
        err.report("evaluate.compare")
        return 2
    try:
        text = compare(args.inputs, args.output, costs, ask,
                       HistoryQuery(location(args.history), args.where, bool(args.inputs)) if args.history else None,
                       quality)
    except CollectError as err:
        print(f"evaluate.compare: {err}", file=sys.stderr)
        return 2
    print(text)
    print(f"\nwrote {args.output / 'compare.png'} and {args.output / 'report.md'}")
    return 0


if __name__ == "__main__":
    run(main, "evaluate.compare")
