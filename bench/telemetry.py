"""Show that the node's telemetry sampler (utils/machine/telemetry.py) costs under 0.5% of a training step.

    DP=1 GPUS_PER_NODE=1 python3 -m bench.telemetry --model llama [--blocks 6 --block-steps 10]
    torchrun --standalone --nproc_per_node=2 -m bench.telemetry --model llama    # two processes

One fsdp model is built once (the configuration's settings with FRAMEWORK=fsdp, synthetic tokens), then trained
in alternating blocks of steps with the sampler running (the launcher's own: `python3 -m utils.machine.telemetry` started
as a run starts it, at TELEMETRY_INTERVAL_MS or --interval-ms, sampling this node's GPUs or CPU) and without it.
The sampler is started before its block and stopped after it, outside the timed steps (its start and stop happen
once per run, not per step). Each block is timed between device synchronisations; alternating blocks cancel slow
drifts of a shared machine. Printed: both step times, their difference with the block-to-block noise, and the
sampler's own CPU time per second of wall time (/proc's scheduler clock) as a share of a step: on a GPU node it takes that from one
of the host's cores, on the CPU node it takes it from the training itself (an upper bound there). Exit 0 when the
direct cost is under the budget and the on/off difference is not above it by more than twice its standard error;
1 otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import psutil  # noqa: E402
import torch  # noqa: E402

from bench.blocks import (alternating, block_lines, block_parser, fsdp_trainer,  # noqa: E402
                          paired_difference, parse_blocks, verdict)
from train.native import trainer as native_trainer  # noqa: E402
from utils.machine import telemetry  # noqa: E402

BUDGET = 0.005  # the target: 0.5% of a step
START_WAIT_S = 30.0


def start_sampler(out: Path, platform: str, interval_ms: int) -> subprocess.Popen:
    """The launcher's sampler, once its first line is written (its start-up is not the steady cost measured)."""
    process = telemetry.start(out, platform, interval_ms, dict(os.environ))
    if process is None:
        raise SystemExit(f"bench.telemetry: the sampler did not start: {telemetry.read(out).error}")
    deadline = time.monotonic() + START_WAIT_S
    while not (out.exists() and telemetry.read(out).samples):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("bench.telemetry: the sampler wrote no sample "
                             f"({telemetry.read(out).error or 'no error'})")
        time.sleep(0.05)
    return process


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far: /proc's scheduler clock (nanoseconds) where Linux has it, else psutil's (clock
    ticks of 10 ms, too coarse for a sampler's milliseconds per second)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return sum(psutil.Process(pid).cpu_times()[:2])


def block(trainer: native_trainer.NativeTrainer, first_step: int, steps: int) -> float:
    """Seconds per step of one block."""
    native_trainer.synchronize(trainer.device)
    start = time.perf_counter()
    for step in range(first_step, first_step + steps):
        trainer.step(step)
    native_trainer.synchronize(trainer.device)
    return (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> int:
    parser = block_parser("python3 -m bench.telemetry", __doc__.split("\n\n")[0], block_steps=10, warmup_steps=2)
    parser.add_argument("--interval-ms", type=int, default=None, help="the sampler's interval (default: the "
                        "configuration's TELEMETRY_INTERVAL_MS)")
    args, total = parse_blocks(parser, argv)
    if args.interval_ms is not None and args.interval_ms < 100:
        parser.error(f"--interval-ms {args.interval_ms}: give 100 or more")
    with tempfile.TemporaryDirectory() as scratch:
        req, trainer = fsdp_trainer(args.model, total, Path(scratch))
        interval_ms = args.interval_ms or req.environment.telemetry_interval_ms
        platform = req.identity.platform
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        sampling = rank == world - 1  # one sampler per node, as the launcher starts it
        times: dict[bool, list[float]] = {True: [], False: []}
        cpu_share: list[float] = []
        method = None
        with contextlib.redirect_stdout(io.StringIO()):
            for step in range(1, args.warmup_steps + 1):
                trainer.step(step)
            step = args.warmup_steps + 1
            for index, on in alternating(args.blocks):
                record = Path(scratch) / f"telemetry{index}.jsonl"
                sampler = start_sampler(record, platform, interval_ms) if on and sampling else None
                if sampler is not None:
                    used, wall = cpu_seconds(sampler.pid), time.monotonic()
                times[on].append(block(trainer, step, args.block_steps))
                if sampler is not None:
                    cpu_share.append((cpu_seconds(sampler.pid) - used) / (time.monotonic() - wall))
                    if telemetry.stop(sampler):
                        raise SystemExit("bench.telemetry: the sampler failed during a block")
                    method = telemetry.read(record).method
                step += args.block_steps
    torch.distributed.destroy_process_group()
    if not sampling:
        return 0
    on, off = times[True], times[False]
    difference, error = paired_difference(on, off)
    share = statistics.fmean(cpu_share)  # CPU seconds the sampler used per second of wall time
    # The cores it competes for: on the CPU node those the training runs on, elsewhere the host's.
    cores = min(os.cpu_count() or 1, world * torch.get_num_threads()) if platform == "cpu" else (os.cpu_count() or 1)
    direct = share / cores
    lay, t = req.parallelism, req.training
    print(f"telemetry sampler benchmark: {req.identity.variant} on {platform}, TP{lay.tp} DP{lay.dp} GA{lay.ga} "
          f"MBS{t.mbs} SL{t.seq_len} {t.precision}, {world} process(es), synthetic tokens, sampler every "
          f"{interval_ms} ms, {args.blocks} blocks of {args.block_steps} steps per mode after {args.warmup_steps} "
          f"untimed, read through {method}")
    print("\n".join(block_lines("sampler", on, off)))
    print(f"  the sampler's own CPU time: {share * 1000:.2f} ms per second of wall time = {direct * 100:.3f}% of the "
          f"{cores} core(s) {'the training runs on' if platform == 'cpu' else 'of the host'}")
    within = direct <= BUDGET and difference - 2 * error <= BUDGET
    return verdict(within, BUDGET, 1, f"DP={lay.dp} GPUS_PER_NODE={world} torchrun --standalone "
                   f"--nproc_per_node={world} -m bench.telemetry --model {args.model} --blocks {args.blocks} "
                   f"--block-steps {args.block_steps} --interval-ms {interval_ms}", f"PLATFORM={platform}")


if __name__ == "__main__":
    sys.exit(main())
