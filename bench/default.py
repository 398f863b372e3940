"""Benchmark: the embedded default (./shell/run_train.sh on a machine without GPUs) and CI, against their budgets.

    python3 -m bench.default              # prepare the sample data (untimed), then time ./shell/run_train.sh
    python3 -m bench.default --repeats 3  # three timed default runs: min, median, max
    python3 -m bench.default --ci         # also clone HEAD into a temporary folder and time .ci/run there
    python3 -m bench.default --fresh      # also time a fresh clone's default all in: .venv, data, runs, report
    python3 -m bench.default --fresh --repeats 0   # only the fresh clone
    python3 -m bench.default --fresh --cold --repeats 0   # the first clone on this machine (DeepSpeed's op built)

The budgets a newcomer and CI are promised on a 2-core machine whose CPU has no bf16 instructions
(AVX2 only), the slowest kind this project runs on: the default run, with .venv built and the sample
data prepared, trains both tiny models with every framework the CPU runs and writes the plot and the report in
at most 2 minutes per framework: 6 with mega, fsdp and autotp (5m42s measured; the first promise, 4 minutes,
was made when mega alone ran);
.ci/run from a fresh clone (building its own .venv) finishes in at most 25 minutes. A faster machine
proves little, so the figures are printed with the CPU model, core count and the flags that decide
the precision. Each default run writes into a temporary OUTPUT_DIR (deleted afterwards), so earlier
results neither slow it nor change its time estimate; --ci measures the committed HEAD, not
uncommitted changes. The machine is shared and noisy: run it on a quiet one and repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from utils import run_files
from utils import ROOT
from utils.config import selection
from utils.machine.hardware import cpu_flags, cpu_precision
from utils.machine.probe import host_info
from utils.spec import stacks

# Per framework of the CPU's default (FRAMEWORK=all): the two tiny models' runs with one framework.
DEFAULT_BUDGET_S = 2 * 60 * len(selection.stack_frameworks(stacks.default("cpu")))
CI_BUDGET_S = 25 * 60
PRECISION_FLAGS = re.compile(r"avx512.*|amx.*|bf16|avx2")


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{seconds % 60:04.1f}s"


def verdict(seconds: float, budget_s: float) -> str:
    return f"within the {budget_s / 60:.0f} min budget" if seconds <= budget_s else \
        f"OVER the {budget_s / 60:.0f} min budget by {minutes(seconds - budget_s)}"


def describe_machine() -> list[str]:
    """The CPU the figures came from: model, cores, and the flags that decide the training precision."""
    model = host_info()["cpu_model"] or "unknown CPU"
    flags = sorted(flag for flag in cpu_flags() if PRECISION_FLAGS.fullmatch(flag))
    precision, why = cpu_precision()
    return [f"machine: {model}, {os.cpu_count()} cores; flags: {' '.join(flags) or 'none of avx2/avx512/amx/bf16'}",
            f"precision of the default run: {precision} ({why})"]


def run(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[int, float]:
    """Run a command with its output in a log file; the exit status and the wall seconds."""
    start = time.perf_counter()
    with log.open("wb") as out:
        code = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    return code, time.perf_counter() - start


def default_run(env: dict[str, str], work: Path) -> dict:
    """One timed ./shell/run_train.sh into a fresh OUTPUT_DIR: total wall time and each run's figures."""
    output = work / "output"
    code, wall = run(["bash", "shell/run_train.sh"], ROOT, {**env, "OUTPUT_DIR": str(output)}, work / "train.log")
    if code != 0:
        raise SystemExit(f"bench.default: ./shell/run_train.sh failed with exit code {code}; "
                         f"its output: {work / 'train.log'}")
    run_set = next(output.iterdir())
    runs = {}
    for launch_file in sorted(run_set.glob("*/launch.json")):
        result = json.loads((launch_file.parent / run_files.RESULT).read_text())
        step = result["performance"]["step_time_s"] or {}
        runs[launch_file.parent.name] = {"wall_s": json.loads(launch_file.read_text())["wall_s"],
                                         "steps": result["run"]["steps_completed"], "median_step_s": step.get("median"),
                                         "precision": result["training"]["precision"]}
    missing = [name for name in ("compare.png", "report.md") if not (run_set / name).is_file()]
    if missing:
        raise SystemExit(f"bench.default: the default run wrote no {', '.join(missing)} in {run_set}")
    return {"wall_s": wall, "runs": runs}


# The lines that end each setup phase of a fresh clone's ./shell/run_train.sh (shell/lib.sh, train/matrix.py).
FRESH_PHASES = ((".venv built (and the bytecode of what the runs import)", re.compile(r"^platform cpu: ")),
                ("sample data prepared (and beside it DeepSpeed's CPU op, autotp's environment)",
                 re.compile(r"^\[tprimat\] run set: ")),
                ("system probe and node health", re.compile(r"^\[tprimat\] run 1/")))


def fresh_run(env: dict[str, str], work: Path, cold: bool = False) -> None:
    """Time ./shell/run_train.sh in a fresh clone of HEAD with an empty DATA_DIR (what a newcomer's first command
    does: .venv from requirements/host.txt, with the package cache this machine has and the torch extensions it built
    for these pins, the sample data, the runs, the report), and print where the time went; cold: as the first clone on
    this machine, DeepSpeed's CPU op built again into an empty folder."""
    clone = work / "fresh"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    env = {**env, "DATA_DIR": str(work / "fresh-data"), "OUTPUT_DIR": str(work / "fresh-output")}
    env.pop("TPRIMAT_VENV", None)
    env.pop("TORCH_EXTENSIONS_DIR", None)
    if cold:
        env["TORCH_EXTENSIONS_DIR"] = str(work / "fresh-extensions")
    built = False
    marks, start = [], time.perf_counter()
    with (work / "fresh.log").open("w") as log, subprocess.Popen(
            ["bash", "shell/run_train.sh"], cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace") as proc:
        for line in proc.stdout:
            log.write(line)
            built = built or "building DeepSpeed's CPU collective op" in line
            phase = FRESH_PHASES[len(marks)] if len(marks) < len(FRESH_PHASES) else None
            if phase and phase[1].search(line):
                marks.append(time.perf_counter() - start)
    wall = time.perf_counter() - start
    if proc.returncode != 0 or len(marks) < len(FRESH_PHASES):
        raise SystemExit(f"bench.default: the fresh clone's ./shell/run_train.sh failed (exit code {proc.returncode}); "
                         f"its output: {work / 'fresh.log'}")
    run_set = next((work / "fresh-output").iterdir())
    in_runs = sum(json.loads(path.read_text())["wall_s"] for path in run_set.glob("*/launch.json"))
    print(f"fresh clone's ./shell/run_train.sh: {minutes(wall)} in all (DeepSpeed's CPU op "
          f"{'built in this run: a first clone on this machine' if built else 'found built for these pins'})")
    for (name, _), begun, ended in zip(FRESH_PHASES, [0.0, *marks], marks):
        print(f"  {name}: {minutes(ended - begun)}")
    print(f"  the runs (launcher, training, judge): {minutes(in_runs)}")
    print(f"  between and after the runs (summary, validate, plot, report): {minutes(wall - marks[-1] - in_runs)}")


def ci_run(env: dict[str, str], work: Path) -> tuple[float, str, list[str]]:
    """.ci/run in a fresh clone of HEAD: wall seconds, pytest's summary line and its slowest tests."""
    clone = work / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    log = work / "ci.log"
    code, wall = run([".ci/run"], clone, {**env, "PYTEST_ADDOPTS": "--durations=10"}, log)
    lines = log.read_text(errors="replace").splitlines()
    summary = lines[-1] if lines else "(no output)"
    slowest = [line for line in lines if re.match(r"\s*\d+\.\d+s (call|setup|teardown) ", line)]
    if code != 0:
        summary += f" (exit code {code}; log kept at {log})"
    return wall, summary, slowest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.default", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=1,
                        help="timed default runs (default 1; 0 with --fresh or --ci times only those)")
    parser.add_argument("--ci", action="store_true", help="also time .ci/run in a fresh clone of HEAD (about 20 min)")
    parser.add_argument("--fresh", action="store_true",
                        help="also time a fresh clone of HEAD's ./shell/run_train.sh all in, with an empty DATA_DIR")
    parser.add_argument("--cold", action="store_true",
                        help="with --fresh: as the first clone on this machine (DeepSpeed's CPU op built again)")
    args = parser.parse_args(argv)
    if args.repeats < (0 if args.fresh or args.ci else 1):
        parser.error("--repeats must be at least 1 (0 only with --fresh or --ci)")
    if args.cold and not args.fresh:
        parser.error("--cold times the fresh clone: give --fresh too")
    env = {**os.environ, "PLATFORM": "cpu"}
    print("\n".join(describe_machine()), flush=True)
    with tempfile.TemporaryDirectory(prefix="tprimat-bench-") as tmp:
        work = Path(tmp)
        print("preparing .venv and the sample data (not timed) ...", flush=True)
        code, _ = run(["bash", "shell/run_data.sh"], ROOT, env, work / "data.log")
        if code != 0:
            print(f"bench.default: ./shell/run_data.sh failed with exit code {code}:\n"
                  + (work / "data.log").read_text()[-3000:], file=sys.stderr)
            return 1
        walls = []
        for repeat in range(1, args.repeats + 1):
            (work / str(repeat)).mkdir()
            measured = default_run(env, work / str(repeat))
            walls.append(measured["wall_s"])
            in_runs = sum(r["wall_s"] for r in measured["runs"].values())
            print(f"default run {repeat}: {minutes(measured['wall_s'])} in all; "
                  f"outside the runs (plan, probe, validate, plot, report) {minutes(measured['wall_s'] - in_runs)}")
            for name, r in measured["runs"].items():
                print(f"  {name}: {minutes(r['wall_s'])} for {r['steps']} steps in {r['precision']}, "
                      f"median step {r['median_step_s']:.2f} s")
        if walls:
            summary = f"min {minutes(min(walls))}, median {minutes(statistics.median(walls))}, " \
                      f"max {minutes(max(walls))}" if len(walls) > 1 else minutes(walls[0])
            print(f"default ./shell/run_train.sh (.venv and data ready): {summary}: "
                  f"{verdict(statistics.median(walls), DEFAULT_BUDGET_S)}")
        if args.fresh:
            print("timing a fresh clone's ./shell/run_train.sh all in ...", flush=True)
            fresh_run(env, work, cold=args.cold)
        if args.ci:
            print("timing .ci/run in a fresh clone of HEAD ...", flush=True)
            wall, line, slowest = ci_run(dict(os.environ), work)
            print(f".ci/run from a fresh clone: {minutes(wall)}: {verdict(wall, CI_BUDGET_S)}\n  pytest: {line}")
            print("\n".join(["  slowest tests:"] + [f"  {item.strip()}" for item in slowest]))
    print("reproduce: python3 -m bench.default [--repeats N] [--fresh [--cold]] [--ci]  (on a quiet 2-core AVX2-only "
          "machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
