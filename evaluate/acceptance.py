"""Node acceptance: each GPU's GEMM throughput per precision and memory bandwidth, and the node's collective bus
bandwidth, measured against the device's specification before the matrix spends hours on a slow node.

    python3 -m evaluate.acceptance [--strict] [--json] [--record SYSTEM_JSON] [--platform amd|nvd|cpu]
                                   [--models VARIANTS --tokens N --workers N --floors GEMM,MEMORY,BUSBW]
                                   [--measured DIR]

One worker per GPU (on the CPU: per worker process, over gloo) under torchrun measures with torch's own matmul,
copies and collectives (utils/machine/acceptance_worker.py), the same code on NVIDIA (NCCL), AMD (RCCL) and the
CPU; utils/machine/acceptance.py makes the figures and verdicts (pass, warn, fail; "no specification" on the CPU
and on a device the table lacks, which never fails). Without --models, the planned models, MBS x SL, the worker
count and the ACCEPT_*_FLOOR knobs come from the configuration (config.env and the environment); the matrix passes
them instead. --record merges the section into a run set's system.json ("acceptance"), so every result of the set
carries it; --measured judges rank<R>.json records already made (a previous measurement, or a test's) instead of
measuring. The matrix runs it on every node after node health, as ACCEPTANCE says (strict: a failing node stops
the matrix; warn: record and go on; off: nothing). Exit: 0 checked, 1 with --strict when a GPU or the node fails,
2 bad arguments, 3 the measurement itself failed (its output is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evaluate.health import node_check_parser
from utils import ROOT
from utils.cli import UsageError, now_iso, quoted, run
from utils.config import detect
from utils.files import read_json
from utils.runset import merge_into_system
from utils.machine import acceptance, hardware, vendor_tools
from utils.spec.models import by_variant

# How much each platform measures: (memory buffer bytes, collective sizes in bytes, warm-up, repeats). The CPU's is
# small so that the front door pays seconds for it.
PROFILES = {"gpu": (1 << 30, (1 << 20, 32 << 20, 256 << 20), 5, 20),
            "cpu": (32 << 20, (64 << 10, 1 << 20, 8 << 20), 1, 3)}
TIMEOUT_S = 600
TAG = "[tprimat] acceptance"
RECORD_KEYS = {"rank", "local_rank", "host", "device", "gemm", "memory"}
MEASURED_ENV = "TPRIMAT_ACCEPTANCE_MEASURED"  # records to judge instead of measuring (tests)


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quoted(text, 40)} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{quoted(text, 40)}: give a fraction from 0 to 1")
    return value


def floors(text: str) -> acceptance.Floors:
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{quoted(text, 60)}: give three fractions GEMM,MEMORY,BUSBW (0.46,0.38,0.22)")
    return acceptance.Floors(*(fraction(part) for part in parts))


def from_config(args: argparse.Namespace) -> None:
    """What the arguments leave out, from the configuration (the matrix gives everything: it loaded it already)."""
    from utils.config import ConfigError, load_config
    try:
        cfg = load_config()
    except ConfigError as err:
        raise UsageError(f"the configuration has problems ({err}); python3 -m utils.config check lists them") from None
    given = acceptance.arguments(cfg)
    for key, value in vars(parse(given)).items():
        if getattr(args, key) is None:
            setattr(args, key, value)


def gpu_names(platform: str) -> list[str]:
    """The names the vendor's tool gives this node's GPUs (empty on the CPU, or when no tool answers)."""
    found = {"nvd": vendor_tools.nvidia_gpus, "amd": vendor_tools.amd_gpus}.get(platform, lambda: None)()
    return [device["name"] for device in (found or {}).get("devices", []) if device.get("name")]


def precisions(platform: str, spec: hardware.DeviceSpec | None) -> tuple[list[str], dict[str, str]]:
    """The GEMM precisions to measure on this device, and those not measured with why."""
    if platform == "cpu":
        native, why = hardware.cpu_precision()
        return list(dict.fromkeys([native, "fp32"])), {"fp8": f"the CPU has no FP8 matrix units ({why})"}
    if spec is None:
        return ["bf16"], {"fp8": "the device is not in the device table (utils/machine/hardware.py)"}
    scaled = {fmt: f"the {spec.name} has {fmt.upper()} matrix units, but the stage measures only torch's bf16 matmul "
                   "and per-tensor FP8 (torch._scaled_mm); block-scaled formats need their stack's own kernels"
              for fmt in spec.formats if fmt not in ("bf16", "fp8")}
    if "fp8" in spec.formats:  # measured; judged only where the table gives an FP8 peak
        return ["bf16", "fp8"], scaled
    return ["bf16"], {"fp8": hardware.lacks(spec, "fp8"), **scaled}


def measure(args: argparse.Namespace, shapes: list[tuple[int, int, int]], wanted: list[str], out: Path,
            across_nodes: bool = False) -> None:
    """torchrun with one worker per GPU (or CPU worker), on this node alone, or across_nodes with every node's
    workers for the all-reduce alone (the multi-node path's rendezvous at MASTER_ADDR:MASTER_PORT, which no run
    holds yet); its output printed only when it fails (exit 3)."""
    memory_bytes, sizes, warmup, repeats = PROFILES["cpu" if args.platform == "cpu" else "gpu"]
    where = [f"--nnodes={args.nnodes}", f"--node-rank={args.node_rank}", f"--master-addr={args.master_addr}",
             f"--master-port={args.master_port}"] if across_nodes else ["--standalone"]
    command = [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc-per-node={args.workers}",
               "-m", "utils.machine.acceptance_worker", "--out", str(out),
               "--shapes", ",".join(":".join(map(str, shape)) for shape in shapes), "--precisions", ",".join(wanted),
               "--memory-bytes", str(memory_bytes), "--sizes", ",".join(map(str, sizes)),
               "--warmup", str(warmup), "--repeats", str(repeats), *(["--gpu"] if args.platform != "cpu" else []),
               *(["--across-nodes"] if across_nodes else [])]
    try:
        done = subprocess.run(command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"{TAG}: the measurement did not end within {TIMEOUT_S} s", file=sys.stderr)
        raise SystemExit(3) from None
    if done.returncode != 0:
        print(done.stdout[-4000:], file=sys.stderr)
        print(f"{TAG}: the measurement failed (exit code {done.returncode}; its output is above)", file=sys.stderr)
        raise SystemExit(3)


def ranks(folder: Path) -> list[dict]:
    paths = sorted(folder.glob("rank*.json"))
    records = [read_json(path) for path in paths]
    for path, item in zip(paths, records):
        if not isinstance(item, dict) or not RECORD_KEYS <= set(item):
            raise UsageError(f"{path}: not a worker's record (it needs {', '.join(sorted(RECORD_KEYS))})")
    if not records:
        raise UsageError(f"{folder}: no rank<R>.json records to judge; give the folder the workers wrote")
    return records


def section(args: argparse.Namespace) -> dict:
    """Measure (or read) and judge: the acceptance section."""
    started = time.monotonic()
    names = gpu_names(args.platform)
    spec = hardware.find_device(names[0]) if names else None
    wanted, not_measured = precisions(args.platform, spec)
    shapes = acceptance.gemm_shapes([by_variant(v) for v in args.models.split(",")], args.tokens)
    across = None
    if args.measured:
        records = ranks(args.measured)
    else:
        with tempfile.TemporaryDirectory(prefix="tprimat-acceptance-") as tmp:
            measure(args, shapes, wanted, Path(tmp) / "node")
            records = ranks(Path(tmp) / "node")
            if args.nnodes > 1:
                measure(args, shapes, wanted, Path(tmp) / "across", across_nodes=True)
                across = across_nodes_section(args.nnodes, Path(tmp) / "across")
    if spec is None and args.platform != "cpu" and records:
        spec = hardware.find_device(records[0]["device"])
    for record in records:  # what the worker could not run (no such op on this stack) is said, not measured
        for precision, found in list(record["gemm"].items()):
            if "not_measured" in found:
                not_measured[precision] = found["not_measured"]
                del record["gemm"][precision]
    judged = acceptance.judge(records, None if args.platform == "cpu" else spec, args.floors, not_measured)
    extra = {"checked_at": now_iso(), "platform": args.platform, "models": args.models.split(","),
             "tokens": args.tokens, "workers": len(records), "seconds": round(time.monotonic() - started, 3)}
    if args.platform == "cpu":
        extra["cpu_flags"] = sorted(hardware.cpu_flags() & acceptance.CPU_FLAGS)
    return {**extra, **judged, **({"across_nodes": across} if across else {})}


def across_nodes_section(nnodes: int, folder: Path) -> dict:
    """The all-reduce across the nodes, as this node's first worker recorded it: bus bandwidth over every node's
    workers, measured and not judged (the device table has no figure of the links between nodes)."""
    written = sorted(folder.glob("rank*.json")) if folder.is_dir() else []
    if not written:
        raise UsageError(f"{folder}: the all-reduce across the nodes left no record")
    return {"nodes": nnodes, "collectives": acceptance.collective_figures(read_json(written[0])["collectives"]),
            "verdict": "no specification",
            "why": "the device table has no bandwidth of the links between nodes to judge it against"}


def record(found: dict, system_json: Path) -> None:
    """Merge the section into system.json (written atomically; a missing file gets a system of its own)."""
    merge_into_system(system_json, "acceptance", found)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = node_check_parser("evaluate.acceptance", __doc__, "a GPU or the node fails", "section")
    parser.add_argument("--models", help="the planned models' variants, comma-separated (llama3.1-8b,qwen2.5-7b)")
    parser.add_argument("--tokens", type=int, help="rows of each GEMM: MBS x SL")
    parser.add_argument("--workers", type=int, help="worker processes: the node's GPUs (the CPU's workers)")
    parser.add_argument("--floors", type=floors, help="GEMM,MEMORY,BUSBW: fractions of the specification below "
                                                      "which a figure fails (ACCEPT_*_FLOOR)")
    parser.add_argument("--nnodes", type=int, default=1, help="nodes of the run set (NNODES): above 1, the all-reduce "
                        "is also measured across them, every node starting this stage with its --node-rank")
    parser.add_argument("--node-rank", type=int, default=0, help="this node's rank (NODE_RANK)")
    parser.add_argument("--master-addr", default="127.0.0.1", help="node 0's address (MASTER_ADDR)")
    parser.add_argument("--master-port", type=int, default=29500, help="node 0's port (MASTER_PORT)")
    parser.add_argument("--measured", type=Path, metavar="DIR", default=os.environ.get(MEASURED_ENV) or None,
                        help=f"judge the rank<R>.json records in DIR (default: ${MEASURED_ENV}, where a test stands "
                             "in for the device)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if None in (args.models, args.tokens, args.workers, args.floors):
        from_config(args)
    if args.tokens < 1 or args.workers < 1:
        raise UsageError(f"--tokens {args.tokens} and --workers {args.workers}: give whole numbers above 0")
    try:
        [by_variant(v) for v in args.models.split(",")]
    except ValueError as err:
        raise UsageError(f"--models: {err}") from None
    platform = args.platform or os.environ.get("PLATFORM", "auto")
    args.platform = detect(dict(os.environ))[0] if platform == "auto" else platform
    found = section(args)
    if args.record:
        record(found, args.record)
    if args.json:
        print(json.dumps(found, indent=1))
    else:
        print(f"{TAG} ({args.platform}, {found['workers']} worker(s), {found['seconds']:.1f} s): {found['verdict']}"
              + (f" (CPU flags: {' '.join(found['cpu_flags']) or 'none of them'})" if "cpu_flags" in found else ""),
              flush=True)
        for line in acceptance.summary(found):
            print(f"{TAG}: {line}", flush=True)
        for line in acceptance.warnings(found) + acceptance.problems(found):
            print(f"{TAG}: {line}", file=sys.stderr, flush=True)
    return 1 if args.strict and found["verdict"] == "fail" else 0


if __name__ == "__main__":
    run(main, "evaluate.acceptance")
