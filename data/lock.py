"""Hold DATA_DIR's lock for the shell that calls this: one ./shell/run_data.sh at a time per DATA_DIR.

    exec {fd}<>"$DATA_DIR/.run_data.lock"; python3 -m data.lock --fd "$fd" --pid $$ --data-dir "$DATA_DIR"

Two runs on one DATA_DIR would write the same files at once; the second waits instead (saying so,
with the first's pid) and then finds every stage up to date, which is what running the command
twice should give. The flock(2) lock belongs to the open file the calling shell keeps open, so it
is held until that shell ends, however it ends; on a shared filesystem it holds across nodes.
Ctrl-C while waiting: one line, exit 130.
"""

from __future__ import annotations

import fcntl
import os
import sys

from utils.cli import Parser, run


def holder(fd: int) -> str:
    """The pid the lock's holder wrote, or "unknown"."""
    return os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m data.lock", description=__doc__.split("\n\n")[0])
    parser.add_argument("--fd", type=int, required=True, help="the calling shell's open descriptor of the lock file")
    parser.add_argument("--pid", type=int, required=True, help="the calling shell's pid, shown to a second run")
    parser.add_argument("--data-dir", required=True, help="what the lock guards, for the message")
    args = parser.parse_args(argv)
    try:
        fcntl.flock(args.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"[tprimat] another run_data.sh is preparing {args.data_dir} (pid {holder(args.fd)}); waiting for it "
              "to finish (Ctrl-C to stop)", file=sys.stderr, flush=True)
        fcntl.flock(args.fd, fcntl.LOCK_EX)
    except OSError as err:
        parser.error(f"--fd {args.fd}: not a lockable open file ({err.strerror})")
    os.ftruncate(args.fd, 0)
    os.pwrite(args.fd, f"{args.pid}\n".encode(), 0)
    return 0


if __name__ == "__main__":
    run(main, "data.lock")
