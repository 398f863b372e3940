"""Measure what proving a pair costs (utils.datafiles) on this machine, and extrapolate to a 20 GB pair.

    python3 -m bench.proof [--size-gib 2] [--dir DIR] [--repeat 3]
    python3 -m bench.proof --prefix DATA_DIR/c4_llama_text_document   # an existing, verified pair

Writes a pair of --size-gib of random tokens under --dir (default: a temporary directory; put it on
the disk DATA_DIR lives on), then times: the full sha256 of both files from the page cache (warm)
and, after asking the kernel to drop the files' pages (posix_fadvise DONTNEED, no root needed), from
the disk (cold); and the remembered proof (inode, size, mtime, ctime unchanged: no file is read).
A run pays the full hash once after the data is (re)prepared, in the launcher; every later check,
on every rank and node, pays the remembered proof. With --prefix nothing is written and the pair's
remembered hashes are left as they were.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from utils import datafiles
from utils.cli import Parser, UsageError, run
from utils.files import sha256_file

TWENTY_GB = 20e9
CHUNK = 1 << 26  # 64 MiB of random tokens written at a time


def cpu_description() -> str:
    """CPU model and the instruction sets that decide sha256's speed (SHA extensions, AVX-512)."""
    model, flags = platform.processor() or "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = sorted(f for f in flags if f in ("sha_ni", "avx2") or f.startswith(("avx512", "amx")))
    return f"{model}, {os.cpu_count()} cores; {' '.join(wanted) or 'no sha_ni/avx2/avx512 flags'}"


def write_pair(prefix: Path, size: int) -> None:
    """A .bin of `size` bytes of random int32 tokens and a small .idx (the proof reads bytes, not structure)."""
    rng = np.random.default_rng(0)
    with open(datafiles.sibling(prefix, ".bin"), "wb") as out:
        left = size
        while left > 0:
            n = min(CHUNK, left)
            out.write(rng.integers(0, 128256, n // 4 + 1, dtype=np.int32).tobytes()[:n])
            left -= n
        out.flush()
        os.fsync(out.fileno())
    datafiles.sibling(prefix, ".idx").write_bytes(rng.bytes(max(size // 1000, 34)))


def drop_cache(path: Path) -> bool:
    """Ask the kernel to forget the file's cached pages; False where it cannot."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        return False
    return True


def time_full_hash(prefix: Path, repeat: int, cold: bool) -> float:
    """Median seconds to sha256 both files."""
    times = []
    for _ in range(repeat):
        files = [datafiles.sibling(prefix, s) for s in datafiles.SUFFIXES]
        if cold and not all(drop_cache(p) for p in files):
            return float("nan")
        start = time.perf_counter()
        for path in files:
            sha256_file(path)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_remembered(prefix: Path, repeat: int) -> float:
    """Median seconds of datafiles.pair_hashes once the hashes are remembered (no file read)."""
    datafiles.pair_hashes(prefix)
    times = []
    for _ in range(max(repeat, 20)):
        start = time.perf_counter()
        _, hashed = datafiles.pair_hashes(prefix)
        times.append(time.perf_counter() - start)
        if hashed:
            raise UsageError(f"{prefix}: the hashes were not remembered (files changed in the last "
                             f"{datafiles.RACY_NS / 1e9:.0f} s, or the directory is read-only)")
    return statistics.median(times)


def report(prefix: Path, repeat: int) -> list[str]:
    size = sum(datafiles.sibling(prefix, s).stat().st_size for s in datafiles.SUFFIXES)
    warm = time_full_hash(prefix, repeat, cold=False)
    cold = time_full_hash(prefix, repeat, cold=True)
    remembered = time_remembered(prefix, repeat)
    lines = [f"machine: {cpu_description()}", f"pair: {prefix} ({size / 1e9:.2f} GB)"]
    for name, seconds in (("full sha256, page cache (warm)", warm), ("full sha256, from disk (cold)", cold)):
        if seconds != seconds:  # NaN: the pages could not be dropped
            lines.append(f"{name}: not measured (the kernel refused to drop the pages)")
            continue
        rate = size / seconds
        lines.append(f"{name}: {seconds:.2f} s = {rate / 1e9:.2f} GB/s -> a 20 GB pair: {TWENTY_GB / rate:.1f} s")
    lines.append(f"remembered proof (stat of 2 files + the hash record): {remembered * 1e6:.0f} us, "
                 "whatever the size")
    lines.append(f"reproduce: python3 -m bench.proof --size-gib {size / 2 ** 30:.0f} --repeat {repeat}"
                 " (--dir on DATA_DIR's disk)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m bench.proof", description=__doc__.split("\n\n")[0],
                    epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--size-gib", type=float, default=2.0, help="size of the pair written (default 2 GiB)")
    parser.add_argument("--dir", type=Path, help="where to write it (default: a temporary directory)")
    parser.add_argument("--prefix", type=Path, help="measure this existing pair instead of writing one")
    parser.add_argument("--repeat", type=int, default=3, help="timings per figure, the median is shown")
    args = parser.parse_args(argv)
    if args.size_gib <= 0 or args.repeat < 1:
        parser.error("--size-gib and --repeat must be positive")
    if args.prefix:
        if not all(datafiles.sibling(args.prefix, s).is_file() for s in datafiles.SUFFIXES):
            raise UsageError(f"--prefix {args.prefix}: .bin or .idx missing")
        print("\n".join(report(args.prefix, args.repeat)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="tprimat-bench-proof-", dir=args.dir))
    try:
        prefix = work / "bench_text_document"
        write_pair(prefix, int(args.size_gib * 2 ** 30))
        time.sleep(datafiles.RACY_NS / 1e9 + 0.1)  # out of the racy window, as data prepared earlier is
        print("\n".join(report(prefix, args.repeat)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    run(main, "bench.proof")
