"""Encode benchmark: TPrimat's data.encode against Megatron-LM's tools/preprocess_data.py, side by side.

    python3 -m bench.encode --tokenizer DATA_DIR/tokenizers/llama [--megabytes 25] [--workers 2] \\
        [--repeats 3] [--input FILE.jsonl] [--megatron /tmp/megatron-lm [--megatron-pythonpath DIR]]

Both tools get the same command line (Megatron-LM's: --input, --output-prefix, --tokenizer-type
HuggingFaceTokenizer, --tokenizer-model, --workers, --append-eod, and --tokenizer-hf-include-special-tokens
where the checkout has it) on the same JSON lines (default: the bundled sample corpus repeated to
--megabytes, each copy numbered so no document repeats). For each tool it reports, as medians of
--repeats runs after one warm-up run:

- start-up: the whole process's wall time on a one-document input (the corpus's first line), what a
  user waits for on every small dataset;
- whole run: the whole process's wall time on the corpus;
- steady state: the corpus's tokens / (whole run - start-up), the rate once started;
- peak memory: proportional set size summed over the process tree (pages forked workers share counted
  once), sampled every 20 ms in one more run of the corpus, apart so that sampling slows no timed run;

then whether the two outputs are byte-identical, and how to reproduce it all. TPrimat runs with an
empty proof cache of its own, so its warm-up is its first use of the tokenizer (the tiktoken proof,
made once per tokenizer and then cached), reported apart.

Megatron-LM is not a dependency: pass a checkout of a release (tag core_v0.16.1, the one the data fixtures were
made with), kept outside the repository, and through --megatron-pythonpath a directory with the
packages it imports beyond ours (pip install --target DIR six triton).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

from utils import ROOT
from utils.cli import Parser, UsageError, WorkError, run
from utils.machine.hardware import cpu_flags

SAMPLE = ROOT / "data" / "sample" / "sample.jsonl.gz"
INCLUDE_FLAG = "--tokenizer-hf-include-special-tokens"
MEGATRON_SETUP = [  # how to get the Megatron-LM tool the benchmark compares with, outside the repository
    "git clone --branch core_v0.16.1 --depth 1 https://github.com/NVIDIA/Megatron-LM /tmp/megatron-lm",
    f"{sys.executable} -m pip install --target /tmp/megatron-extra six triton",
]


@dataclass
class Tool:
    """One tool under test: its name, its command line (input and output prefix added per run), its environment."""

    label: str  # names its output files
    name: str
    command: list[str]
    env: dict[str, str]

    def argv(self, corpus: Path, prefix: Path) -> list[str]:
        return [*self.command, "--input", str(corpus), "--output-prefix", str(prefix)]


@dataclass
class Result:
    tool: str
    startup: float  # seconds, median
    whole: float  # seconds, median
    peak_bytes: int
    documents: int
    tokens: int
    first_use: float | None = None  # TPrimat: the warm-up that made the proof

    @property
    def steady(self) -> float:
        return self.tokens / max(self.whole - self.startup, 1e-9)


def make_corpus(path: Path, megabytes: float) -> None:
    """The sample corpus repeated (copies numbered) until `megabytes` of JSON lines."""
    texts = [json.loads(line)["text"] for line in gzip.open(SAMPLE, "rt", encoding="utf-8")]
    target, size, copy = megabytes * 1e6, 0, 0
    with open(path, "w", encoding="utf-8") as out:
        while size < target:
            for text in texts:
                line = json.dumps({"text": f"[{copy}] {text}"}) + "\n"
                out.write(line)
                size += len(line.encode())
                if size >= target:
                    break
            copy += 1


def execute(tool: Tool, corpus: Path, prefix: Path, sample_memory: bool = False) -> tuple[float, int]:
    """Wall time of one run and, if asked, its process tree's peak PSS; stops the benchmark if the tool fails."""
    with tempfile.TemporaryFile("w+") as errors:
        start = time.perf_counter()
        proc = subprocess.Popen(tool.argv(corpus, prefix), cwd=ROOT, env=tool.env, stdout=subprocess.DEVNULL,
                                stderr=errors, text=True)
        peak = 0
        if sample_memory:
            root = psutil.Process(proc.pid)
            while proc.poll() is None:
                try:
                    tree = [root] + root.children(recursive=True)
                    peak = max(peak, sum(p.memory_full_info().pss for p in tree if p.is_running()))
                except psutil.Error:
                    pass
                time.sleep(0.02)
        proc.wait()
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            errors.seek(0)
            last = (errors.read().strip().splitlines() or ["no message"])[-1]
            raise WorkError(f"{tool.name} failed (exit {proc.returncode}): {last}")
    return seconds, peak


def counts(prefix: Path) -> tuple[int, int]:
    """(documents, tokens) from the .idx."""
    idx = Path(f"{prefix}_text_document.idx").read_bytes()
    sequences, documents = np.frombuffer(idx, np.uint64, 2, 18)
    return int(documents) - 1, int(np.frombuffer(idx, np.int32, int(sequences), 34).sum(dtype=np.int64))


def measure(tools: list[Tool], corpus: Path, one: Path, work: Path, repeats: int) -> list[Result]:
    """A warm-up each, then `repeats` timed runs of the one-document input and of the corpus, then one sampled
    run; the tools take turns, so that a machine busier at one moment than another favours neither."""
    first_use = [execute(tool, one, work / tool.label)[0] for tool in tools]
    timed: dict[tuple[str, Path], list[float]] = {}
    for data in (one, corpus):
        for _ in range(repeats):
            for tool in tools:
                timed.setdefault((tool.label, data), []).append(execute(tool, data, work / tool.label)[0])
    peaks = [execute(tool, corpus, work / tool.label, sample_memory=True)[1] for tool in tools]
    return [Result(tool.name, statistics.median(timed[tool.label, one]), statistics.median(timed[tool.label, corpus]),
                   peak, *counts(work / tool.label), first_use=first)
            for tool, peak, first in zip(tools, peaks, first_use)]


def megatron_tool(checkout: Path, extra_path: str, common: list[str], env: dict[str, str]) -> Tool:
    script = checkout / "tools" / "preprocess_data.py"
    if not script.is_file():
        raise UsageError(f"--megatron {checkout}: no tools/preprocess_data.py; check out Megatron-LM there: "
                         + MEGATRON_SETUP[0])
    path = os.pathsep.join(filter(None, [str(checkout), extra_path]))
    return Tool("megatron", "Megatron-LM preprocess_data.py", [sys.executable, str(script), *common],
                {**env, "PYTHONPATH": path})


def knows_include_flag(checkout: Path) -> bool:
    """core_v0.16.x has the flag (without it, it drops the BOS); Megatron-LM's main keeps the BOS and lacks it."""
    sources = [checkout / "tools" / "preprocess_data.py", checkout / "megatron" / "training" / "arguments.py"]
    return any(INCLUDE_FLAG in p.read_text(errors="ignore") for p in sources if p.is_file())


def cpu_line() -> str:
    """The CPU the figures were measured on: its model, cores and the vector flags that change them."""
    info = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in (info.read_text().splitlines() if info.is_file() else [])
             if line.startswith("model name")]
    flags = cpu_flags()
    wide = " ".join(sorted(f for f in flags if f.startswith(("avx512", "amx")))) or "none"
    return (f"{names[0] if names else 'unknown CPU'}, {os.cpu_count()} cores; avx2: {'avx2' in flags}; "
            f"avx512/amx flags: {wide}")


def report(results: list[Result], work: Path, corpus: Path, args, tools: list[Tool], argv: list[str]) -> None:
    ours = results[0]
    print(f"input: {corpus.stat().st_size / 1e6:,.1f} MB of JSON lines, {ours.documents:,} documents, "
          f"{ours.tokens:,} tokens; tokenizer {args.tokenizer}; {args.workers} workers")
    print(f"cpu: {cpu_line()}")
    print(f"medians of {args.repeats} runs; start-up = whole process on a one-document input; "
          "steady state = tokens / (whole run - start-up)")
    print(f"{'tool':32} {'start-up':>9} {'whole run':>10} {'steady state':>15} {'peak memory':>12}")
    for r in results:
        print(f"{r.tool:32} {r.startup:>7.2f} s {r.whole:>8.2f} s {r.steady:>8,.0f} tokens/s "
              f"{r.peak_bytes / 2**20:>8,.0f} MiB")
    print(f"TPrimat's first use of this tokenizer (the tiktoken proof, then cached): {ours.first_use:.2f} s")
    if len(results) == 2:
        theirs = results[1]
        same = all((work / f"{tools[0].label}_text_document{s}").read_bytes()
                   == (work / f"{tools[1].label}_text_document{s}").read_bytes() for s in (".bin", ".idx"))
        print(f"TPrimat is faster by: start-up {theirs.startup / ours.startup:.1f}x, whole run "
              f"{theirs.whole / ours.whole:.1f}x, steady state {ours.steady / theirs.steady:.1f}x; "
              f"outputs byte-identical: {same}")
    print("reproduce:")
    if len(results) == 1:
        print("  # add Megatron-LM's tool, outside the repository:")
        for line in MEGATRON_SETUP:
            print(f"  {line}")
        print("  # then add: --megatron /tmp/megatron-lm --megatron-pythonpath /tmp/megatron-extra")
    print("  " + shlex.join([sys.executable, "-m", "bench.encode", *argv]))
    print("  # each run, on $OUT/corpus.jsonl and for start-up on $OUT/one.jsonl, its first line ($OUT a temporary "
          "directory; TPrimat with XDG_CACHE_HOME=$OUT/cache):")
    for tool in tools:
        env = "PYTHONPATH=" + shlex.quote(tool.env["PYTHONPATH"]) + " " if "PYTHONPATH" in tool.env else ""
        print("  " + env + shlex.join(tool.argv(corpus, work / tool.label)).replace(str(work), "$OUT"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser(prog="python3 -m bench.encode", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", type=Path, required=True, metavar="DIR", help="Hugging Face tokenizer directory")
    parser.add_argument("--input", type=Path, metavar="FILE",
                        help="JSON lines to encode (default: a corpus made from the sample)")
    parser.add_argument("--megabytes", type=float, default=25.0, metavar="MB",
                        help="size of the generated corpus (default: 25)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="--workers of both tools (default: the core count)")
    parser.add_argument("--repeats", type=int, default=3, metavar="N",
                        help="timed runs per input and tool, medians reported (default: 3)")
    parser.add_argument("--megatron", type=Path, metavar="DIR",
                        help="a Megatron-LM checkout: run its tools/preprocess_data.py too")
    parser.add_argument("--megatron-pythonpath", default="", metavar="DIR",
                        help="extra PYTHONPATH for Megatron-LM's imports (six, triton)")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.repeats < 1 or args.megabytes <= 0:
        parser.error("--workers, --repeats and --megabytes must be positive")
    if args.input and not args.input.is_file():
        parser.error(f"--input {args.input}: no such file")
    with tempfile.TemporaryDirectory(prefix="tprimat-bench-") as tmp:
        work = Path(tmp)
        corpus = args.input or work / "corpus.jsonl"
        if args.input is None:
            make_corpus(corpus, args.megabytes)
        one = work / "one.jsonl"
        with open(corpus, "rb") as handle:
            one.write_bytes(handle.readline())
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        common = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(args.tokenizer),
                  "--workers", str(args.workers), "--append-eod"]
        tools = [Tool("tprimat", "TPrimat data.encode", [sys.executable, "-m", "data.encode", *common],
                      {**env, "XDG_CACHE_HOME": str(work / "cache")})]
        if args.megatron:
            tools.append(megatron_tool(args.megatron, args.megatron_pythonpath, common, env))
            if knows_include_flag(args.megatron):  # keep BOS as main does; TPrimat takes the flag and keeps it anyway
                for tool in tools:
                    tool.command.append(INCLUDE_FLAG)
        results = measure(tools, corpus, one, work, args.repeats)
        report(results, work, corpus, args, tools, argv)
    return 0


if __name__ == "__main__":
    run(main, "bench.encode")
