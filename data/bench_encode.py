"""Encode benchmark: TPrimat's data.encode against Megatron-LM's tools/preprocess_data.py, side by side.

    python3 -m data.bench_encode --tokenizer DATA_DIR/tokenizers/llama [--megabytes 20] [--workers 2] \\
        [--input FILE.jsonl] [--megatron /path/to/Megatron-LM [--megatron-pythonpath DIR]]

Both tools get the same JSON lines (default: the bundled sample corpus repeated to --megabytes, each
copy numbered so no document repeats), the same tokenizer directory and the same --workers. For each
it prints tokens/s, documents/s, wall time and peak memory (proportional set size summed over the
tool's whole process tree, so pages forked workers share are counted once; sampled every 20 ms), and whether the two outputs are byte-identical. Megatron-LM
is not a dependency: pass a checkout (git clone https://github.com/NVIDIA/Megatron-LM; the release
matching requirements' megatron-core is core_v0.16.1) and, through --megatron-pythonpath, a directory
with the few packages it imports beyond ours (pip install --target DIR six triton).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample" / "sample.jsonl.gz"


@dataclass
class Run:
    tool: str
    seconds: float
    peak_bytes: int
    documents: int
    tokens: int


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
            copy += 1


def measure(tool: str, command: list[str], env: dict, prefix: Path) -> Run:
    """Run a command, sampling the resident memory of its process tree; read the counts from its .idx."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            tree = [root] + root.children(recursive=True)
            peak = max(peak, sum(p.memory_full_info().pss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.02)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{tool} failed (exit {proc.returncode}):\n{proc.stderr.read()[-2000:]}")
    idx = Path(f"{prefix}_text_document.idx").read_bytes()
    sequences, documents = np.frombuffer(idx, np.uint64, 2, 18)
    tokens = int(np.frombuffer(idx, np.int32, int(sequences), 34).sum(dtype=np.int64))
    return Run(tool, seconds, peak, int(documents) - 1, tokens)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python3 -m data.bench_encode", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=Path, required=True, help="Hugging Face tokenizer directory")
    parser.add_argument("--input", type=Path, help="JSON lines to encode (default: a corpus made from the sample)")
    parser.add_argument("--megabytes", type=float, default=20.0, help="size of the generated corpus (MB)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--megatron", type=Path, help="a Megatron-LM checkout: run its preprocess_data.py too")
    parser.add_argument("--megatron-pythonpath", default="", help="extra PYTHONPATH for Megatron-LM's imports")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tprimat-bench-") as tmp:
        work = Path(tmp)
        corpus = args.input or work / "corpus.jsonl"
        if args.input is None:
            make_corpus(corpus, args.megabytes)
        common = ["--input", str(corpus), "--tokenizer-model", str(args.tokenizer), "--workers", str(args.workers),
                  "--append-eod"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        ours = [sys.executable, "-m", "data.encode", *common, "--output-prefix", str(work / "tprimat"), "--quiet"]
        runs = [measure("TPrimat data.encode", ours, env, work / "tprimat")]
        commands = [ours]
        if args.megatron:
            tool = args.megatron / "tools" / "preprocess_data.py"
            theirs = [sys.executable, str(tool), *common, "--tokenizer-type", "HuggingFaceTokenizer",
                      "--output-prefix", str(work / "megatron")]
            if "tokenizer-hf-include-special-tokens" in tool.read_text() or any(
                    "tokenizer-hf-include-special-tokens" in p.read_text(errors="ignore")
                    for p in (args.megatron / "megatron" / "training").glob("arguments.py")):
                theirs.append("--tokenizer-hf-include-special-tokens")  # 0.16.x: keep BOS as main does
            path = os.pathsep.join(filter(None, [str(args.megatron), args.megatron_pythonpath]))
            runs.append(measure("Megatron-LM preprocess_data.py", theirs, {**env, "PYTHONPATH": path}, work / "megatron"))
            commands.append(["PYTHONPATH=" + path, *theirs])
        size = corpus.stat().st_size
        print(f"input: {size / 1e6:,.1f} MB of JSON lines, tokenizer {args.tokenizer}, {args.workers} workers, "
              f"{os.cpu_count()} cores")
        print(f"{'tool':32} {'tokens/s':>12} {'documents/s':>12} {'seconds':>8} {'peak memory':>12}")
        for run in runs:
            print(f"{run.tool:32} {run.tokens / run.seconds:>12,.0f} {run.documents / run.seconds:>12,.0f} "
                  f"{run.seconds:>8.1f} {run.peak_bytes / 2**20:>9,.0f} MiB")
        if len(runs) == 2:
            same = all((work / f"tprimat_text_document{s}").read_bytes() == (work / f"megatron_text_document{s}").read_bytes()
                       for s in (".bin", ".idx"))
            print(f"speed-up: {runs[1].seconds / runs[0].seconds:.1f}x; outputs byte-identical: {same}")
        print("reproduce:")
        for command in commands:
            print("  " + " ".join(shlex.quote(c) for c in command).replace(str(work), "$OUT"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
