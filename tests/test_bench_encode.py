"""bench.encode: start-up and steady state reported apart for both tools, the outputs compared, and how to
reproduce it. Speed itself is the benchmark's to show, never a test's: a stand-in plays Megatron-LM's tool."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.test_data_tokenizer import offline_tokenizer

REPO = Path(__file__).resolve().parent.parent
STAND_IN = '''"""Plays core_v0.16.1's tools/preprocess_data.py, which knows --tokenizer-hf-include-special-tokens."""
import os
import sys

os.execv(sys.executable, [sys.executable, "-m", "data.encode", *sys.argv[1:]])
'''


def test_both_tools_get_the_same_arguments_and_are_reported_side_by_side(tmp_path_factory, tmp_path):
    tokenizer = offline_tokenizer("qwen", tmp_path_factory.getbasetemp())
    checkout = tmp_path / "megatron-lm"
    (checkout / "tools").mkdir(parents=True)
    (checkout / "tools" / "preprocess_data.py").write_text(STAND_IN)
    out = subprocess.run([sys.executable, "-m", "bench.encode", "--tokenizer", str(tokenizer),
                          "--megabytes", "0.3", "--repeats", "1", "--workers", "2", "--megatron", str(checkout)],
                         cwd=REPO, capture_output=True, text=True, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert re.fullmatch(r"input: 0\.3 MB of JSON lines, \d+ documents, [\d,]+ tokens; tokenizer .*; 2 workers",
                        lines[0])
    assert lines[1].startswith("cpu: ") and "avx512/amx flags: " in lines[1]
    row = r" +\d+\.\d\d s +\d+\.\d\d s +[\d,]+ tokens/s +[\d,]+ MiB"
    assert re.fullmatch("TPrimat data.encode" + row, lines[4])
    assert re.fullmatch("Megatron-LM preprocess_data.py" + row, lines[5])
    assert re.fullmatch(r"TPrimat's first use of this tokenizer \(the tiktoken proof, then cached\): \d+\.\d\d s",
                        lines[6])
    assert re.fullmatch(r"TPrimat is faster by: start-up [\d.]+x, whole run [\d.]+x, steady state [\d.]+x; "
                        r"outputs byte-identical: True", lines[7])
    ours, theirs = [re.split(r" -m data\.encode |/tools/preprocess_data\.py ", line)[1] for line in lines
                    if "--output-prefix" in line]
    assert ours == theirs.replace("$OUT/megatron", "$OUT/tprimat")  # the very same arguments
    assert ours.startswith("--tokenizer-type HuggingFaceTokenizer --tokenizer-model")
    assert "--tokenizer-hf-include-special-tokens" in ours
    assert "-m bench.encode --tokenizer" in out.stdout
