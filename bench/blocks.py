"""What the overhead benchmarks (bench.breakdown, bench.instrumentation, bench.telemetry) share: their command line
and the comparison of alternating blocks of steps with an instrument on and off. Adjacent blocks are paired, so the
machine's drift cancels; the median of the pairs' relative differences is the instrument's cost, given with its
standard error. bench.breakdown and bench.telemetry also share their fsdp trainer on synthetic tokens."""

from __future__ import annotations

import argparse
import math
import os
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Iterator, Sequence

from train.common import cli as trainer_cli
from train.common.megatron_data import locate
from train.native import trainer as native_trainer
from train.fsdp.engine import FsdpEngine
from utils.machine import platform_env
from utils.spec.models import MODEL_KEYS
from utils.spec.request import Request


def block_parser(prog: str, description: str, block_steps: int, warmup_steps: int) -> argparse.ArgumentParser:
    """The command line of an alternating-blocks benchmark, with its own defaults for the block and warm-up steps."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--model", default="llama", choices=MODEL_KEYS)
    parser.add_argument("--blocks", type=int, default=6, help="blocks per mode (alternating on/off)")
    parser.add_argument("--block-steps", type=int, default=block_steps, help="steps per block")
    parser.add_argument("--warmup-steps", type=int, default=warmup_steps, help="untimed steps first")
    return parser


def parse_blocks(parser: argparse.ArgumentParser, argv: list[str] | None) -> tuple[argparse.Namespace, int]:
    """The arguments, checked, and the steps the benchmark trains in all (the warm-up and both modes' blocks)."""
    args = parser.parse_args(argv)
    if min(args.blocks, args.block_steps) < 1 or args.warmup_steps < 0:
        parser.error("--blocks and --block-steps must be at least 1, --warmup-steps at least 0")
    return args, args.warmup_steps + 2 * args.blocks * args.block_steps


def alternating(blocks: int) -> Iterator[tuple[int, bool]]:
    """(block index, instrument on) in the order on off, off on, on off, ...: neither mode always goes first."""
    for index in range(blocks):
        for on in ((True, False) if index % 2 == 0 else (False, True)):
            yield index, on


def fsdp_trainer(model: str, steps: int, scratch: Path) -> tuple[Request, native_trainer.NativeTrainer]:
    """One built fsdp trainer with the configuration's settings and `steps` steps of synthetic tokens (the warm-up
    shortened to fit), and its request."""
    planned = trainer_cli.planned_request("fsdp", model, None, scratch)
    req = replace(planned, training=replace(planned.training, steps=steps, warmup_steps=min(
        planned.training.warmup_steps, steps - 1)), data=replace(planned.data, mock_data=True))
    platform_env.apply(req.identity.platform)
    trainer = native_trainer.starter(FsdpEngine)(req, locate(req.data, req.model), scratch,
                                                 None)
    trainer.build()
    return req, trainer


def paired_difference(on: Sequence[float], off: Sequence[float]) -> tuple[float, float]:
    """The median relative difference (on - off) / off over adjacent block pairs, and its standard error."""
    pairs = [(a - b) / b for a, b in zip(on, off)]
    error = statistics.stdev(pairs) / math.sqrt(len(pairs)) if len(pairs) > 1 else float("inf")
    return statistics.median(pairs), error


def block_lines(instrument: str, on: Sequence[float], off: Sequence[float]) -> list[str]:
    """The benchmark's step-time lines: each mode's median and blocks (ms), then the paired difference."""
    difference, error = paired_difference(on, off)
    width = len(instrument) + 4
    lines = [f"  step time, {f'{instrument} {mode}':<{width}}: median {statistics.median(times) * 1000:9.2f} ms  "
             "blocks " + " ".join(f"{s * 1000:.1f}" for s in times) for mode, times in (("on", on), ("off", off))]
    return lines + [f"  on - off: median {difference * 100:+.2f}% of step time over adjacent block pairs "
                    f"(standard error {error * 100:.2f}%)"]


def verdict(within: bool, budget: float, digits: int, command: str, context: str) -> int:
    """The budget line and the command that reproduces the figures (run from the repository's root, with `context`
    and this process's OMP_NUM_THREADS said after it); 0 within the budget, 1 over it."""
    print(f"  budget {budget * 100:.{digits}f}%: {'met' if within else 'EXCEEDED'}")
    print(f"  reproduce: cd {Path(__file__).resolve().parent.parent} && {command}   ({context}; "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})")
    return 0 if within else 1
