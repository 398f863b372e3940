"""Megatron-LM's pretrain_gpt.py run as it is, save one step: its start-up's compile_helpers() is answered without
make where megatron-core's dataset helpers are compiled (utils.datafiles.answer_compile_helpers), since the
megatron-core wheel the GPU check carries ships them compiled and without the Makefile that make needs.

    python3 -m torch.distributed.run ... -m bench.megatron_lm_pretrain CHECKOUT/pretrain_gpt.py ARGUMENT...

The script's arguments go to it untouched; its folder comes first on sys.path, as when the script is run itself.
Exit: the script's; 2 when no script is named.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

from utils.cli import Parser
from utils.datafiles import answer_compile_helpers


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="python3 -m bench.megatron_lm_pretrain", description=__doc__.split("\n\n")[0])
    parser.add_argument("script", type=Path, help="Megatron-LM's pretrain_gpt.py in its checkout")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="the script's own arguments")
    args = parser.parse_args(argv)
    if not args.script.is_file():
        parser.error(f"{args.script}: no such script; give Megatron-LM's pretrain_gpt.py")
    script = args.script.resolve()
    sys.argv = [str(script), *args.arguments]
    sys.path.insert(0, str(script.parent))
    if answered := answer_compile_helpers(("megatron.core.datasets.utils",)):  # Megatron-LM imports it from there
        print(f"[tprimat] compile_helpers() in {answered[0]} answered without make: helpers_cpp is compiled",
              flush=True)
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
