"""Megatron-LM's pretrain_gpt.py run as it is, save one step: its start-up's compile_helpers() is answered without
make where megatron-core's dataset helpers are compiled (utils.datafiles.answer_compile_helpers), since the
megatron-core wheel the GPU check carries ships them compiled and without the Makefile that make needs.

    python3 -m torch.distributed.run ... -m bench.megatron_lm_pretrain CHECKOUT/pretrain_gpt.py ARGUMENTS...

The checkout's folder comes first on sys.path, as when the script is run itself.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from utils.datafiles import answer_compile_helpers


def main() -> None:
    script = Path(sys.argv[1]).resolve()
    sys.argv = [str(script), *sys.argv[2:]]
    sys.path.insert(0, str(script.parent))
    if answered := answer_compile_helpers(("megatron.core.datasets.utils",)):  # Megatron-LM imports it from there
        print(f"[tprimat] compile_helpers() in {answered[0]} answered without make: helpers_cpp is compiled",
              flush=True)
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
