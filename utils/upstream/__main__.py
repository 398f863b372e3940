"""python3 -m utils.upstream: re-check the upstream-fact table, or hash a line range to record a new fact."""

from utils.cli import run
from utils.upstream import main

run(main, "utils.upstream")
