"""Hold DATA_DIR's lock for the shell that calls this: one ./shell/run_data.sh at a time per DATA_DIR.

    exec {fd}<>"$DATA_DIR/.run_data.lock"; python3 -m data.lock --fd "$fd" --pid $$ --data-dir "$DATA_DIR"

Two runs on one DATA_DIR would write the same files at once; the second waits instead (saying so,
with the first's pid) and then finds every stage up to date, which is what running the command
twice should give. The flock(2) lock belongs to the open file the calling shell keeps open, so it
is held until that shell ends, however it ends; on a shared filesystem it holds across nodes.
Ctrl-C while waiting: one line, exit 130.

    python3 -m data.lock --create --data-dir "$DATA_DIR"   # first: DATA_DIR and the lock file, for the shell to open

creates them, so that a disk refusing them (read-only, full, a file where a folder should be) is utils.files' one
line naming the path and the fix (exit 1), not the shell's redirection error.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

from utils.cli import Parser, run
from utils.files import writing

LOCK_FILE = ".run_data.lock"


def holder(fd: int) -> str:
    """The pid the lock's holder wrote, or "unknown"."""
    return os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"


def create(data_dir: Path) -> None:
    """DATA_DIR and its lock file, made here so that a refused write is one line (DiskError)."""
    lock = data_dir / LOCK_FILE
    with writing(lock):
        data_dir.mkdir(parents=True, exist_ok=True)
        with open(lock, "a"):
            pass


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m data.lock", description=__doc__.split("\n\n")[0])
    parser.add_argument("--create", action="store_true", help="create DATA_DIR and its lock file, then exit")
    parser.add_argument("--fd", type=int, help="the calling shell's open descriptor of the lock file")
    parser.add_argument("--pid", type=int, help="the calling shell's pid, shown to a second run")
    parser.add_argument("--data-dir", required=True, help="what the lock guards, for the message")
    args = parser.parse_args(argv)
    if args.create:
        create(Path(args.data_dir))
        return 0
    if args.fd is None or args.pid is None:
        parser.error("--fd and --pid are required to take the lock")
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
