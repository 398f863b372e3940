"""The run set: the directory one matrix (or one run started alone) writes its runs into.

A new run set is `OUTPUT_DIR/<YYYYmmdd-HHMMSS>-<platform>`, claimed by mkdir itself (which fails on an
existing directory), so two commands started in the same second never share one: the second takes
`...-2`, then `...-3`. A run set given by a launcher (RUN_SET_DIR, e.g. Slurm's for every node) is used
as it is, created if need be.

    python3 -m utils.runset OUTPUT_DIR PLATFORM   # claim a new run set and print its path (shell/slurm.sh)
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Mapping

from utils.cli import Parser, UsageError, run
from utils.files import read_json, write_json

SYSTEM_FILE = "system.json"  # the probe's description of the machine (utils.machine.probe), written once per run set
NODE_CHECKS = ("health", "acceptance")  # the sections each node's checks before the first run record


def make_run_set(output_dir: str | os.PathLike, platform: str, given: str | os.PathLike | None = None,
                 now: datetime | None = None) -> Path:
    """The run set's absolute path, created: `given` (RUN_SET_DIR) when set, else a new one under output_dir.
    UsageError (one line naming the knob) when it cannot be created."""
    if given:
        try:
            os.makedirs(given, exist_ok=True)
        except OSError as err:
            raise UsageError(f"RUN_SET_DIR={given}: cannot create the run set: {err.strerror}") from None
        return Path(os.path.abspath(given))
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as err:
        raise UsageError(f"OUTPUT_DIR={output_dir}: cannot create the run set there: {err.strerror}") from None
    base = Path(os.path.abspath(output_dir)) / f"{(now or datetime.now()).strftime('%Y%m%d-%H%M%S')}-{platform}"
    candidate, suffix = base, 1
    while True:
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            suffix += 1
            candidate = base.with_name(f"{base.name}-{suffix}")
        except OSError as err:
            raise UsageError(f"OUTPUT_DIR={output_dir}: cannot create the run set there: {err.strerror}") from None


def system_path(run_dir: Path) -> Path | None:
    """A run's system.json: the run directory's own, else its run set's (the parent); None when neither exists."""
    return next((path for path in (run_dir / SYSTEM_FILE, run_dir.parent / SYSTEM_FILE) if path.is_file()), None)


def node_system_path(run_set: Path, node_rank: int) -> Path:
    """Where a node's checks before the first run (health, acceptance) are recorded: node 0's in the run set's
    system.json, every other node's in node<N>/system.json of the run set (a multi-node run set is shared)."""
    return run_set / SYSTEM_FILE if node_rank == 0 else run_set / f"node{node_rank}" / SYSTEM_FILE


def other_nodes(run_set: Path) -> list[dict]:
    """The other nodes' checks as they recorded them (node_system_path), in node-rank order, each with its rank;
    a file that is not a JSON object is left out (the run's record matters more than its description)."""
    found = []
    for path in run_set.glob(f"node*/{SYSTEM_FILE}"):
        rank = path.parent.name.removeprefix("node")
        try:
            checks = read_json(path) if rank.isdigit() and int(rank) > 0 else None
        except ValueError:
            checks = None
        if isinstance(checks, dict):
            found.append({"node_rank": int(rank), **{k: v for k, v in checks.items() if k in NODE_CHECKS}})
    return sorted(found, key=lambda node: node["node_rank"])


def node_sections(system: Mapping, key: str) -> list[tuple[int, object]]:
    """Each node's recorded `key` section (NODE_CHECKS) of a result's system, with its rank: node 0's (system[key]),
    then each other node's (other_nodes, as the judge gathers them); a section may be None or any shape a file held,
    which its reader checks."""
    others = system.get("other_nodes")
    return [(0, system.get(key))] + [(node.get("node_rank"), node.get(key))
                                     for node in (others if isinstance(others, list) else [])
                                     if isinstance(node, Mapping)]


def merge_into_system(system_json: Path, key: str, section: dict) -> None:
    """One section (node health, acceptance) merged into a run set's system.json (or a node's, node_system_path),
    written atomically; a missing file gets a system of its own."""
    system_json.parent.mkdir(parents=True, exist_ok=True)
    try:
        system = read_json(system_json) if system_json.exists() else {}
    except ValueError as err:
        raise UsageError(f"{system_json}: not a system description ({err}); run the probe again") from None
    write_json(system_json, {**system, key: section})


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m utils.runset", description=__doc__.split("\n\n")[0])
    parser.add_argument("output_dir")
    parser.add_argument("platform")
    args = parser.parse_args(argv)
    print(make_run_set(args.output_dir, args.platform))
    return 0


if __name__ == "__main__":
    run(main, "utils.runset")

