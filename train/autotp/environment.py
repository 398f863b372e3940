"""autotp's environment on the CPU: DeepSpeed's shared-memory collective op, built once into TORCH_EXTENSIONS_DIR.

    python3 -m train.autotp.environment   # build it now (tests/autotp/install.sh does, before the tests)

DeepSpeed's torch backend builds that op as it starts on the CPU accelerator (deepspeed 0.19.8, deepspeed/comm/torch.py
lines 47-53 and 207: TorchBackend.__init__ calls build_shm_op, a JIT compilation through torch's cpp_extension): about
25 s on a 2-core machine, once per machine for each set of host pins (shell/lib.sh keeps it in the user's cache).
train.matrix builds it where it is not built yet before the run set, beside the data preparation, so that it stays
out of the first autotp run's time. It runs in the platform's Python as it is
(the registry entry's `environment` hook adds no variables); on GPUs DeepSpeed uses the vendor's collectives and
nothing is built. A build that fails is a warning: autotp's runs then build it again, or fail saying why.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from utils.cli import Parser, say, warn

OP_BUILDER = "ShareMemCommBuilder"  # DeepSpeed's CPU accelerator's name for it (deepspeed/ops/op_builder/cpu/comm.py)
OP_NAME = "deepspeed_shm_comm"  # its builder's NAME: the folder and the library torch's JIT writes
BUILD = ("from deepspeed.accelerator import get_accelerator; "
         f"get_accelerator().create_op_builder({OP_BUILDER!r}).load()")


def built() -> bool:
    """The op's library lies in TORCH_EXTENSIONS_DIR (shell/lib.sh's tp_ensure_venv sets it: the user's cache, one
    folder per host pins, Python and CPU, so a machine builds it once for every clone). Where the variable is unset,
    torch's default folder depends on the Python and CUDA versions: asked of torch by the build itself instead."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    return bool(root) and (Path(root) / OP_NAME / f"{OP_NAME}.so").is_file()


def build() -> bool:
    """Build the op in a process of its own (the caller imports neither torch nor DeepSpeed); False, with a warning
    naming the error, when it did not build."""
    where = os.environ.get("TORCH_EXTENSIONS_DIR") or "torch's extensions folder"
    say(f"[tprimat] building DeepSpeed's CPU collective op into {where} (autotp on the CPU; once)")
    out = subprocess.run([sys.executable, "-c", BUILD], env={**os.environ, "DS_ACCELERATOR": "cpu"},
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
    if out.returncode == 0:
        return True
    last = next((line.strip() for line in reversed(out.stderr.splitlines()) if line.strip()), "no message")
    warn(f"DeepSpeed's CPU collective op did not build ({last}); autotp cannot train on the CPU until it does")
    return False


def environment(platform: str, build_now: bool = True) -> dict[str, str]:
    """The registry's hook (utils.frameworks.Framework.environment): on the CPU the op is built (build_now) unless it
    is, where TORCH_EXTENSIONS_DIR says where it goes (shell/lib.sh sets it; without it the first autotp run builds
    it, as DeepSpeed does); no variables are added on any platform."""
    if platform == "cpu" and build_now and os.environ.get("TORCH_EXTENSIONS_DIR") and not built():
        build()
    return {}


def main(argv: list[str] | None = None) -> int:
    Parser(prog="python3 -m train.autotp.environment", description=__doc__,
           formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    return 0 if built() or build() else 1


if __name__ == "__main__":
    sys.exit(main())
