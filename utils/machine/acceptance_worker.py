"""The acceptance stage's measurements, one worker per GPU (or per CPU worker) under torchrun: one code path for
NVIDIA, AMD and the CPU, through torch's own matmul, copies and collectives.

    python3 -m torch.distributed.run --standalone --nproc-per-node N -m utils.machine.acceptance_worker \
        --out DIR --shapes M:K:N[,...] --precisions bf16[,fp8] [--iterations I] [--sizes BYTES[,...]]
    python3 -m torch.distributed.run --nnodes N --node-rank R --master-addr A --master-port P ... \
        -m utils.machine.acceptance_worker --across-nodes --out DIR --shapes - [--sizes BYTES[,...]]

Each rank writes DIR/rank<R>.json: its device, the median time of each GEMM shape per precision, of a large copy
and a triad, and (every rank the same) the time of each collective at each size. Only times and the work done
(FLOPs, bytes) are written; the figures (TFLOP/s, GB/s, bus bandwidth) and verdicts are made from them by
utils.machine.acceptance, so a record can be judged again, and a test can stand in for this module by writing
records of its own. Timing: warm-up iterations first (not counted), the device synchronised (torch.cuda.synchronize
on GPUs, NCCL/RCCL alike) before and after each timed repeat, the median of the repeats; a collective's time is the
slowest rank's median (all ranks start together after a barrier). The process group is NCCL/RCCL on GPUs, gloo on
the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from utils.cli import Parser
from utils.files import write_json

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


class Device:
    """The device this rank measures: its torch device and how to wait until it has done its work."""

    def __init__(self) -> None:
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if torch.cuda.is_available():  # CUDA and ROCm (HIP) alike
            torch.cuda.set_device(self.local_rank)
            self.torch = torch.device("cuda", self.local_rank)
            self.name = torch.cuda.get_device_name(self.local_rank)
            self.backend = "nccl"
        else:
            self.torch, self.name, self.backend = torch.device("cpu"), "cpu", "gloo"

    def sync(self) -> None:
        if self.torch.type == "cuda":
            torch.cuda.synchronize(self.torch)


def timed(device: Device, work: Callable[[], object], warmup: int, repeats: int) -> float:
    """The median seconds of one call of `work` over `repeats` timed calls, after `warmup` untimed ones."""
    for _ in range(warmup):
        work()
    times = []
    for _ in range(repeats):
        device.sync()
        start = time.perf_counter()
        work()
        device.sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def fp8_operands(device: Device, m: int, k: int, n: int) -> Callable[[], object]:
    """An FP8 GEMM through torch._scaled_mm (e4m3; the fnuz variant on CDNA 3, gfx942), per-tensor scales."""
    arch = getattr(torch.cuda.get_device_properties(device.torch), "gcnArchName", "")
    kind = torch.float8_e4m3fnuz if "gfx942" in arch else torch.float8_e4m3fn
    a = torch.randn(m, k, device=device.torch).to(kind)
    b = torch.randn(n, k, device=device.torch).to(kind).t()  # column-major, as _scaled_mm asks
    one = torch.tensor(1.0, device=device.torch)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def gemm(device: Device, shapes: list[tuple[int, int, int]], precisions: list[str], warmup: int,
         repeats: int) -> dict:
    """Per precision: each shape's FLOPs (2*M*K*N) and median seconds, or why it was not measured."""
    found: dict = {}
    for precision in precisions:
        rows = []
        try:
            for m, k, n in shapes:
                if precision == "fp8":
                    work = fp8_operands(device, m, k, n)
                else:
                    a = torch.randn(m, k, device=device.torch, dtype=DTYPES[precision])
                    b = torch.randn(k, n, device=device.torch, dtype=DTYPES[precision])
                    work = lambda a=a, b=b: torch.matmul(a, b)  # noqa: E731
                rows.append({"m": m, "k": k, "n": n, "flops": 2 * m * k * n,
                             "seconds": timed(device, work, warmup, repeats)})
        except (RuntimeError, AttributeError, TypeError) as err:  # no such op or kernel on this device and stack
            found[precision] = {"not_measured": f"torch {torch.__version__}: {str(err).splitlines()[0][:160]}"}
            continue
        found[precision] = {"shapes": rows}
    return found


def memory(device: Device, size_bytes: int, warmup: int, repeats: int) -> dict:
    """A copy (b = a: reads and writes size_bytes each) and a triad (a = b + s*c: reads two, writes one)."""
    count = size_bytes // 4
    a, b, c = (torch.ones(count, device=device.torch) for _ in range(3))
    copy = timed(device, lambda: b.copy_(a), warmup, repeats)
    triad = timed(device, lambda: torch.add(b, c, alpha=2.0, out=a), warmup, repeats)
    return {"copy": {"bytes": 2 * count * 4, "seconds": copy}, "triad": {"bytes": 3 * count * 4, "seconds": triad}}


def collective_work(op: str, size_bytes: int, ranks: int, device: Device) -> Callable[[], object]:
    """One collective on S = size_bytes, S as nccl-tests counts it: the whole buffer of all-reduce, the gathered
    output of all-gather, the input of reduce-scatter, each rank's send buffer of all-to-all."""
    count = max(ranks, size_bytes // 4 // ranks * ranks)
    full = torch.ones(count, device=device.torch)
    part = torch.ones(count // ranks, device=device.torch)
    return {"all_reduce": lambda: dist.all_reduce(full),
            "all_gather": lambda: dist.all_gather_into_tensor(full, part),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, full),
            "all_to_all": lambda: dist.all_to_all_single(torch.empty_like(full), full)}[op]


def collectives(device: Device, sizes: list[int], warmup: int, repeats: int,
                ops: tuple[str, ...] = COLLECTIVES) -> list[dict]:
    """Each collective at each size: bytes, ranks and the slowest rank's median seconds."""
    ranks, rows = dist.get_world_size(), []
    for op in ops:
        for size in sizes:
            work = collective_work(op, size, ranks, device)
            dist.barrier()
            seconds = torch.tensor([timed(device, work, warmup, repeats)], dtype=torch.float64, device=device.torch)
            dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
            rows.append({"op": op, "bytes": (max(ranks, size // 4 // ranks * ranks)) * 4, "ranks": ranks,
                         "seconds": float(seconds.item())})
    return rows


def across_nodes(device: Device, args: argparse.Namespace) -> int:
    """The all-reduce over every node's workers; each node's first rank writes the rows (every rank has the same
    slowest-rank times) as rank<R>.json, R its global rank."""
    rows = collectives(device, numbers(args.sizes), args.warmup, args.repeats, ("all_reduce",))
    if device.local_rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        write_json(args.out / f"rank{dist.get_rank()}.json", {"rank": dist.get_rank(), "host": socket.gethostname(),
                                                               "collectives": rows})
    return 0


def numbers(text: str) -> list[int]:
    return [int(word) for word in text.split(",") if word]


def main() -> int:
    parser = Parser(prog="python3 -m utils.machine.acceptance_worker", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for rank<R>.json")
    parser.add_argument("--shapes", required=True, help="GEMM shapes M:K:N, comma-separated")
    parser.add_argument("--precisions", default="bf16", help="GEMM precisions (bf16, fp32, fp8), comma-separated")
    parser.add_argument("--memory-bytes", type=int, default=1 << 30, help="bytes of each buffer of copy and triad")
    parser.add_argument("--sizes", default=str(1 << 20), help="collective sizes in bytes, comma-separated")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations before each measurement")
    parser.add_argument("--gpu", action="store_true", help="a GPU platform: refuse to measure the CPU instead")
    parser.add_argument("--repeats", type=int, default=5, help="timed iterations; the median is kept")
    parser.add_argument("--across-nodes", action="store_true", help="only the all-reduce, over every node's "
                        "workers (torchrun --nnodes): no GEMM, memory or other collective")
    args = parser.parse_args()
    device = Device()
    if args.gpu and device.torch.type != "cuda":
        raise SystemExit(f"acceptance_worker: torch {torch.__version__} sees no GPU on a GPU platform: nothing to "
                         "measure")
    dist.init_process_group(device.backend)
    try:
        if args.across_nodes:
            return across_nodes(device, args)
        shapes = [tuple(int(x) for x in shape.split(":")) for shape in args.shapes.split(",")]
        started = time.perf_counter()
        record = {"rank": dist.get_rank(), "local_rank": device.local_rank, "host": socket.gethostname(),
                  "device": device.name, "torch": torch.__version__, "backend": device.backend,
                  "threads": torch.get_num_threads(),
                  "gemm": gemm(device, shapes, args.precisions.split(","), args.warmup, args.repeats),
                  "memory": memory(device, args.memory_bytes, args.warmup, args.repeats)}
        if dist.get_world_size() > 1:  # one rank has no one to talk to
            record["collectives"] = collectives(device, numbers(args.sizes), args.warmup, args.repeats)
        record["seconds"] = round(time.perf_counter() - started, 3)
        args.out.mkdir(parents=True, exist_ok=True)
        write_json(args.out / f"rank{record['rank']}.json", json.loads(json.dumps(record)))
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
