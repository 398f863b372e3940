"""train/common/console.py: under the launcher's unbuffered Python (PYTHONUNBUFFERED) a printed line leaves in one
write once whole_lines() ran, so two ranks sharing the console cannot splice their lines (Megatron-Bridge's rank 0
"Step Time" line and the last rank's iteration line did on the CPU, and the log reader lost those steps)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRINT = "from train.common import console; {call}; print('a rank line', flush=True)"


def writes_to_stdout(code: str) -> list[str]:
    """The write calls on file descriptor 1 of a Python running `code` unbuffered, as strace shows them."""
    out = subprocess.run(["strace", "-e", "trace=write", sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    return [line.split(")")[0] for line in out.stderr.splitlines() if line.startswith("write(1,")]


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace counts the writes; install it to run this test")
def test_a_printed_line_leaves_in_one_write_where_unbuffered_python_would_split_it():
    assert writes_to_stdout(PRINT.format(call="pass")) == ['write(1, "a rank line", 11', 'write(1, "\\n", 1']
    assert writes_to_stdout(PRINT.format(call="console.whole_lines()")) == ['write(1, "a rank line\\n", 12']
