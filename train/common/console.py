"""Every rank of a run writes to the one console that train.log records, so each line must reach it in one write, or
two ranks' lines splice. Megatron-Bridge's rank 0 prints its "Step Time" line while the last rank prints the
iteration line; on the CPU the log then held "...MODEL_TFLOP/s/GPU [2026-11-28 10:07:43] iteration 4/30 | ...", a
step the log reader cannot count. The launcher runs Python unbuffered (PYTHONUNBUFFERED, train/launch/builder.py) so
that the console streams as it happens, and an unbuffered print writes its text and its line end in two writes; a
line-buffered stream writes them in one (atomic on a pipe below its 4 KiB PIPE_BUF) and still streams each line."""

from __future__ import annotations

import sys


def whole_lines() -> None:
    """stdout and stderr line-buffered instead of written through: each printed line leaves in one write."""
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True, write_through=False)
