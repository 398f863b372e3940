"""Benchmark: evaluate.logs.parse parses a 1 GB training log in seconds, with memory that does not grow.

    python3 -m bench.extract                 # 1024 MB mixed log, and a 64 MB one for comparison
    python3 -m bench.extract --size-mb 256 --dense

The log is written to a temporary folder (deleted afterwards): Megatron iteration lines among the
noise of a real run (NCCL INFO lines, warnings from other ranks, ANSI colours, progress bars with
carriage returns), with the iteration counter restarting every 500 steps as when runs are appended.
--dense writes iteration lines only (the parser's worst case). Each size is parsed in a fresh
child process so that its peak resident memory (ru_maxrss) is its own; CPU seconds are shown beside
wall seconds because a shared machine's load inflates the latter.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS_PER_RUN = 500
NOISE = (
    "node-3:1234:5678 [3] NCCL INFO Channel 07/32 : 3[3] -> 4[4] via P2P/IPC/read\n",
    "[rank5]:[W501 12:00:01.123456] Warning: TensorFloat32 tensor cores available but not enabled (function operator())\n",
    "\x1b[33m[20251218 10:11:12][rank-2/8][WARNING] [----utils.py:42] : deprecated option ignored\x1b[0m\n",
    "Epoch 0:  45%|####5     | 225/500 [03:45<04:35,  1.00s/it]\rEpoch 0:  46%|####6     | 230/500 [03:50<04:30]\n",
)


def iteration_line(step: int) -> str:
    return (f" [2025-05-01 12:00:00] iteration {step:8d}/{STEPS_PER_RUN:8d} | consumed samples: {step * 128:12d} | "
            f"elapsed time per iteration (ms): {9300.0 + step % 7:.1f} | throughput per GPU (TFLOP/s/GPU): 612.3 | "
            f"learning rate: {3e-4 * step / STEPS_PER_RUN:E} | global batch size:   128 | lm loss: {11 - step / 100:E} | "
            "loss scale: 1.0 | grad norm: 3.142 | number of skipped iterations:   0 | number of nan iterations:   0 |\n")


def write_log(path: Path, size_mb: int, dense: bool) -> int:
    """Write about size_mb MB; returns the number of iteration lines."""
    target, written, steps = size_mb * 2 ** 20, 0, 0
    noise_block = "".join(NOISE) * 6
    with open(path, "w", buffering=16 << 20) as out:
        while written < target:
            chunk = []
            for step in range(1, STEPS_PER_RUN + 1):
                chunk.append(iteration_line(step))
                if not dense:
                    chunk.append(noise_block)
            text = "".join(chunk)
            out.write(text)
            written += len(text)
            steps += STEPS_PER_RUN
    return steps


def child(path: str) -> None:
    """Parse one log and print its figures as JSON (run in a fresh process)."""
    from evaluate.logs.parse import parse_logs

    start, cpu = time.perf_counter(), time.process_time()
    parsed = parse_logs([path])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "lines": parsed.lines_read, "steps_kept": len(parsed.records),
                      "runs": parsed.runs_found, "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def measure(size_mb: int, dense: bool, folder: Path) -> dict:
    path = folder / f"bench-{size_mb}mb.log"
    start = time.perf_counter()
    iterations = write_log(path, size_mb, dense)
    written = time.perf_counter() - start
    out = subprocess.run([sys.executable, "-m", "bench.extract", "--child", str(path)], capture_output=True,
                         text=True, check=True)
    figures = json.loads(out.stdout)
    size = path.stat().st_size
    path.unlink()
    return {"size_mib": size / 2 ** 20, "iteration_lines": iterations, "write_s": written, **figures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.extract", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="size of the large log (MB, default 1024)")
    parser.add_argument("--small-mb", type=int, default=64, help="size of the comparison log (MB, default 64)")
    parser.add_argument("--dense", action="store_true", help="iteration lines only (worst case)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    print(f"evaluate.logs.parse.parse_logs on {'dense' if args.dense else 'mixed'} Megatron logs "
          f"(python {sys.version.split()[0]}); reproduce: python3 -m bench.extract"
          + (" --dense" if args.dense else "") + f" --size-mb {args.size_mb}")
    with tempfile.TemporaryDirectory(prefix="tprimat-bench-") as folder:
        for size in (args.small_mb, args.size_mb):
            r = measure(size, args.dense, Path(folder))
            print(f"  {r['size_mib']:8.0f} MiB, {r['lines']:>10,} lines, {r['iteration_lines']:>9,} iteration lines: "
                  f"parsed in {r['seconds']:6.1f} s wall, {r['cpu_seconds']:6.1f} s CPU "
                  f"({r['size_mib'] / r['cpu_seconds']:4.0f} MiB per CPU second), "
                  f"peak RSS {r['max_rss_mib']:6.1f} MiB, {r['runs']} runs found, {r['steps_kept']} steps kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
