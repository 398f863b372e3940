"""torchtitan's own entry point on the CPU: the stand-ins of train/torchtitan/cpu_stand_ins.py, then torchtitan.train
as `python -m torchtitan.train` runs it, with the same arguments.

    torchrun ... -m train.torchtitan.on_cpu --module train.torchtitan --config tprimat

TPrimat's launcher starts this instead of torchtitan.train on the CPU only (train/torchtitan/launch.py); on GPUs
torchtitan.train runs unchanged. Run it from the repository root with torchtitan importable (the CPU's torchtitan
environment, train/torchtitan/environment.py).
"""

from __future__ import annotations

import runpy
import sys

from utils.cli import Parser

ENTRY_POINT = "torchtitan.train"


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m train.torchtitan.on_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", required=True, help="the package of the config function (train.torchtitan)")
    parser.add_argument("--config", required=True, help="the config function's name (tprimat)")
    args = parser.parse_args(argv)
    from train.torchtitan import cpu_stand_ins
    cpu_stand_ins.apply()
    sys.argv = [ENTRY_POINT, "--module", args.module, "--config", args.config]
    runpy.run_module(ENTRY_POINT, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
