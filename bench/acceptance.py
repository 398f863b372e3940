"""What the acceptance stage costs the front door: `python3 -m evaluate.acceptance` as the matrix runs it on this
machine (the configuration's planned models, MBS x SL, workers and floors), timed end to end, against its budget
of 10 s on the CPU default; and the figures it measured.

    python3 -m bench.acceptance [--repeats N]

Prints each repeat's wall time (torchrun, the workers' start, the measurements, the verdicts), their median against
the budget, the stage's own account of its seconds, and the last repeat's figures (GEMM TFLOP/s per precision,
memory GB/s, bus bandwidth per collective and size) with the CPU flags they came from. Exit 0 within budget, 1
over it, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from utils import ROOT
from utils.cli import Parser, run
from utils.machine import acceptance

BUDGET_S = 10.0


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m bench.acceptance", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, choices=range(1, 21), metavar="N",
                        help="times to run the stage (1-20, default 3)")
    args = parser.parse_args(argv)
    walls, section = [], {}
    for repeat in range(args.repeats):
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "evaluate.acceptance", "--json"], cwd=ROOT,
                              capture_output=True, text=True)
        walls.append(time.monotonic() - started)
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            print(f"bench.acceptance: the stage failed (exit code {done.returncode})", file=sys.stderr)
            return 1
        section = json.loads(done.stdout)
        print(f"repeat {repeat + 1}: {walls[-1]:.1f} s wall, the stage's own account {section['seconds']:.1f} s")
    median = statistics.median(walls)
    flags = " ".join(section.get("cpu_flags", [])) or "-"
    print(f"acceptance on {section['platform']} ({section['workers']} workers, CPU flags: {flags}): median "
          f"{median:.1f} s of a {BUDGET_S:g} s budget")
    for line in acceptance.summary(section):
        print(f"  {line}")
    return 0 if median <= BUDGET_S else 1


if __name__ == "__main__":
    run(main, "bench.acceptance")
