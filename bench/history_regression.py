"""Demonstration: the results store finds a slower run set on the CPU, and none between two equal ones.

    python3 -m bench.history_regression                  # 3 run sets of FRAMEWORK=mega, 20 steps each
    python3 -m bench.history_regression --steps 30

Three default CPU run sets (`FRAMEWORK=mega ./shell/run_train.sh`: tiny Llama and Qwen, DP 2 over two worker
processes) go into a fresh store. The first two run as they are; the third runs under `taskset -c 0`, both workers
pinned to one core (the stated slowdown: on a 2-core machine about a quarter slower per step, +23% to +32%
measured; its size is printed). `python3 -m evaluate.history regressions` is asked twice: after the two equal sets
(expected: no regression, exit 0) and after the third (expected: both configurations named, exit 1). Each run
set writes into a temporary OUTPUT_DIR (deleted afterwards). About 6 minutes on a 2-core machine; a shared,
busy one is noisier and slower: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.default import describe_machine, minutes, run
from utils import ROOT

PINNED = ["taskset", "-c", "0"]  # both workers on one core: the third run set's slowdown


def run_set(env: dict[str, str], output: Path, log: Path, pinned: bool) -> tuple[Path, float]:
    """One ./shell/run_train.sh into output; its run set and wall seconds."""
    before = set(output.iterdir()) if output.exists() else set()
    code, wall = run([*(PINNED if pinned else []), "bash", "shell/run_train.sh"], ROOT, env, log)
    if code != 0:
        raise SystemExit(f"bench.history_regression: ./shell/run_train.sh failed with exit code {code}; its output: {log}")
    (made,) = set(output.iterdir()) - before
    return made, wall


def medians(folder: Path) -> dict[str, float]:
    """Each run's median steady-state step time."""
    return {path.parent.name: json.loads(path.read_text())["performance"]["step_time_s"]["median"]
            for path in sorted(folder.glob("*/result.json"))}


def history(db: Path, *argv: str) -> tuple[int, str]:
    out = subprocess.run([sys.executable, "-m", "evaluate.history", *argv, "--db", str(db)], cwd=ROOT,
                         capture_output=True, text=True)
    return out.returncode, (out.stdout + out.stderr).strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.history_regression", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="TRAIN_ITERS of each run (default 20; the first 5 "
                        "are the CPU's warm-up, left out of the statistics)")
    args = parser.parse_args(argv)
    if args.steps < 8:
        parser.error("--steps must be at least 8 (5 warm-up steps, then enough steady ones to test)")
    if shutil.which("taskset") is None:
        print("bench.history_regression: no taskset (util-linux) to slow the third run set", file=sys.stderr)
        return 2
    print("\n".join(describe_machine()), flush=True)
    with tempfile.TemporaryDirectory(prefix="tprimat-history-") as tmp:
        work = Path(tmp)
        output, db = work / "output", work / "history.sqlite"
        env = {**os.environ, "PLATFORM": "cpu", "FRAMEWORK": "mega", "TRAIN_ITERS": str(args.steps), "RUNS": "1",
               "OUTPUT_DIR": str(output)}
        code, _ = run(["bash", "shell/run_data.sh"], ROOT, env, work / "data.log")
        if code != 0:
            print(f"bench.history_regression: ./shell/run_data.sh failed ({code}): {(work / 'data.log').read_text()[-2000:]}",
                  file=sys.stderr)
            return 1
        sets = []
        for number, pinned in ((1, False), (2, False), (3, True)):
            folder, wall = run_set(env, output, work / f"train{number}.log", pinned)
            sets.append(folder)
            shown = ", ".join(f"{name} {median:.3f} s" for name, median in medians(folder).items())
            print(f"run set {number} ({'pinned to one core' if pinned else 'as it is'}): {folder.name}, "
                  f"{minutes(wall)}; median step: {shown}", flush=True)
        base, slow = medians(sets[0]), medians(sets[2])
        print("third set against the first: " + ", ".join(f"{name} {slow[name] / base[name] - 1:+.0%}" for name in base))
        for folder in sets[:2]:
            history(db, "add", str(folder))
        equal_code, equal_text = history(db, "regressions")
        print(f"\nregressions after the two equal sets (expected exit 0): exit {equal_code}\n{equal_text}")
        history(db, "add", str(sets[2]))
        slow_code, slow_text = history(db, "regressions")
        print(f"\nregressions after the pinned third set (expected exit 1): exit {slow_code}\n{slow_text}")
    print(f"\nreproduce: python3 -m bench.history_regression --steps {args.steps}  (on a quiet 2-core machine)")
    return 0 if (equal_code, slow_code) == (0, 1) else 1


if __name__ == "__main__":
    sys.exit(main())
