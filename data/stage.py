"""Run one pipeline stage only when its outputs are missing or stale (shell/data.sh calls this).

    python3 -m data.stage --name NAME [--input PATH]... [--output PATH]... [--param KEY=VALUE]... \\
        [--force] -- MODULE ARG...

A stage is current when its stamp (DATA_DIR/stamps/NAME.json) records the same parameters, the
same sha256 of every input (files, or directories hashed file by file; the stage's own code is
passed as inputs too) and outputs that still exist with the sha256 recorded. Otherwise
`python -m MODULE ARG...` runs and, on success, the stamp is rewritten; on failure the stamp is
removed so a rerun starts the stage again. --force (FORCE=1) reruns regardless. Ctrl-C reaches the
tool (same process group), which reports it; SIGTERM is passed on to it; either way the tool's exit
code (130, 143) comes back with no second line.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from utils import ROOT
from utils.cli import Parser, run
from utils.files import read_json, sha256_file, sha256_listing, write_json


def digest(path: Path) -> str | None:
    """sha256 of a file, of a directory's files (names and hashes), or None if absent."""
    if path.is_file():
        return sha256_file(path)
    if path.is_dir():
        return sha256_listing((str(p.relative_to(path)), sha256_file(p)) for p in sorted(path.rglob("*")) if p.is_file())
    return None


def is_current(stamp: Path, params: dict, inputs: list[Path], outputs: list[Path]) -> tuple[bool, str]:
    """(current?, why not) for a stage."""
    if not stamp.is_file():
        return False, "never run"
    try:
        recorded = read_json(stamp)
    except (OSError, ValueError) as err:
        return False, f"its record {stamp} is damaged ({err})"
    if recorded.get("params") != params:
        return False, "parameters changed"
    for path in inputs:
        if recorded.get("inputs", {}).get(str(path)) != digest(path):
            return False, f"input {path} changed"
    if set(recorded.get("outputs", {})) != {str(p) for p in outputs}:
        return False, "outputs changed"
    for path in outputs:
        if recorded["outputs"][str(path)] != digest(path):
            return False, f"output {path} is missing or was modified"
    return True, ""


def call_tool(command: list[str]) -> int:
    """Run `python -m COMMAND` to its end; its exit code (128 + N when signal N killed it)."""
    child = subprocess.Popen([sys.executable, "-m", *command], cwd=ROOT)
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
                signal.SIGTERM: signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))}
    try:
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)  # what follows -- is the stage's own command line
    parser = Parser(prog="python3 -m data.stage", description=__doc__.split("\n\n")[0],
                    usage="%(prog)s --name NAME --stamps DIR [--input PATH]... [--output PATH]... "
                          "[--param KEY=VALUE]... [--force] -- MODULE ARG...",
                    epilog=__doc__.split("\n\n")[2].replace("\n", " "))
    parser.add_argument("--name", required=True, help="stage name, unique within DATA_DIR")
    parser.add_argument("--stamps", type=Path, required=True, metavar="DIR",
                        help="directory of stamps (DATA_DIR/stamps)")
    parser.add_argument("--input", type=Path, action="append", default=[], dest="inputs", metavar="PATH",
                        help="a file or directory the stage reads (its code too); repeat for each")
    parser.add_argument("--output", type=Path, action="append", default=[], dest="outputs", metavar="PATH",
                        help="a file or directory the stage writes; repeat for each")
    parser.add_argument("--param", action="append", default=[], dest="params", metavar="KEY=VALUE",
                        help="a setting that changes the outputs; repeat for each")
    parser.add_argument("--force", action="store_true", help="rerun even when current (FORCE=1)")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        parser.error("no -- MODULE ARG... after the stage options" if split == len(argv) else "no MODULE after --")
    if bad := [p for p in args.params if "=" not in p]:
        parser.error(f"--param {bad[0]}: expected KEY=VALUE")
    params = dict(p.split("=", 1) for p in args.params)
    stamp = args.stamps / f"{args.name}.json"
    current, why = is_current(stamp, params, args.inputs, args.outputs)
    if current and not args.force:
        print(f"[tprimat] {args.name}: up to date, skipped (FORCE=1 redoes it)", file=sys.stderr)
        return 0
    print(f"[tprimat] {args.name}: running ({'FORCE=1' if args.force else why})", file=sys.stderr)
    stamp.unlink(missing_ok=True)
    code = call_tool(command)
    if code != 0:
        return code
    missing = [str(p) for p in args.outputs if digest(p) is None]
    if missing:
        print(f"[tprimat] {args.name}: error: finished without writing {', '.join(missing)}", file=sys.stderr)
        return 1
    write_json(stamp, {"params": params, "inputs": {str(p): digest(p) for p in args.inputs},
                       "outputs": {str(p): digest(p) for p in args.outputs}})
    return 0


if __name__ == "__main__":
    run(main, "data.stage")
