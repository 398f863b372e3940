"""Node health before benchmarking: one line per problem, naming the GPU, the value, what it should be and the fix.

    python3 -m evaluate.health [--strict] [--json] [--record SYSTEM_JSON] [--platform amd|nvd|cpu]

Checks (utils/machine/node_health.py): per GPU, uncorrectable ECC errors, memory rows pending remap or retirement, power
limit below the default, PCIe link generation or width below the maximum, NVLink/xGMI links down, memory already
in use or other processes on the GPU, temperature at idle, application clocks below the maximum; on the node, the
InfiniBand/RoCE ports' state and the CPU frequency governor. GPUs are read through NVML or amdsmi, else
nvidia-smi or amd-smi (the record's "method"); a query a device does not support is not checked, and what could
not be checked is printed as a note. --record merges the findings into a run set's system.json ("health", layout
in utils/machine/node_health.py), so every result of the set carries them (result.system.health); the matrix runs the
check on every node before the first run and node 0 records it, as HEALTH says (warn: record and go on; strict:
refuse to start, exit 2; off: nothing). Exit: 0 checked (problems are printed as warnings), 1 with --strict when
there is a problem, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from utils.cli import Parser, UsageError, output_file, run  # noqa: F401 (UsageError: what record raises)
from utils.config import PLATFORMS, detect
from utils.runset import merge_into_system
from utils.machine.node_health import Health, check


def record(health: Health, system_json: Path) -> None:
    """Merge the findings into system.json (written atomically; a missing file gets a system of its own)."""
    merge_into_system(system_json, "health", health.record())


def node_check_parser(tool: str, doc: str, failing: str, recorded: str) -> Parser:
    """The options every check of a node before the matrix takes (evaluate.health, evaluate.acceptance): train.matrix
    calls each with --strict and, on node 0, --record."""
    parser = Parser(prog=f"python3 -m {tool}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strict", action="store_true", help=f"exit 1 when {failing}")
    parser.add_argument("--json", action="store_true", help=f"print the {recorded} as JSON instead of lines")
    parser.add_argument("--record", type=output_file, metavar="SYSTEM_JSON", help=f"merge the {recorded} into this file")
    parser.add_argument("--platform", choices=PLATFORMS, help="the platform to check (default: detected)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = node_check_parser("evaluate.health", __doc__, "there is a problem", "findings").parse_args(argv)
    platform = args.platform or os.environ.get("PLATFORM", "auto")
    if platform == "auto":
        platform = detect(dict(os.environ))[0]
    health = check(platform)
    if args.record:
        record(health, args.record)
    if args.json:
        print(json.dumps(health.record(), indent=1))
    else:
        checked = f"{health.gpus} GPU(s) through {health.method}" if health.gpus else \
            "no GPU" if platform == "cpu" else "GPUs not read (why below)"
        print(f"[tprimat] node health ({platform}): {checked}; "
              + ("no problem found" if health.ok else f"{len(health.problems)} problem(s)"), flush=True)
        for problem in health.problems:
            print(f"[tprimat] health: {problem.line}", file=sys.stderr, flush=True)
        for note in health.notes:
            print(f"[tprimat] health: {note}", flush=True)
    return 1 if args.strict and not health.ok else 0


if __name__ == "__main__":
    run(main, "evaluate.health")
