"""TPrimat's DeepSpeed AutoTP pretraining (framework `autotp`): DeepSpeed's tensor parallelism with ZeRO 0-2 on a
Hugging Face model.

    DS_ACCELERATOR=cpu|cuda torchrun --nproc_per_node=N ... train/train_autotp.py --request RUN_DIR/config.json \
        --run-dir RUN_DIR                                                          # the launcher
    torchrun --nproc_per_node=N train/train_autotp.py --model MODEL --run-dir DIR [--strategy NAME]

The loop is train/native/trainer.py's (the same data, loss and LR schedule as mega and fsdp), the parallelism
train/autotp/engine.py's (ZERO_STAGE; DS_ACCELERATOR is cuda on NVIDIA and ROCm GPUs, cpu on the CPU, set when
unset); each step goes to DIR/steps.jsonl and the console with its forward/backward/optimizer breakdown, and the
last rank writes DIR/result.json (train/common/outcome.py). The command line is train/common/cli.py's.

Exit status: 0 trained every step; 1 the training failed; 2 bad input (request, configuration, missing data,
a setting autotp refuses: PP > 1, FP8, COMPILE or SAC_FREQ, a DS_ACCELERATOR for another device);
128+signal stopped.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script by torchrun: the project's packages importable from its root, and
    # train/ itself off the path, where a subpackage (train/nemo/) would shadow a framework's own package
    TRAIN_DIR = Path(__file__).resolve().parent
    sys.path[:] = [str(TRAIN_DIR.parent), *(p for p in sys.path if Path(p or ".").resolve() != TRAIN_DIR)]

from train.common import cli as trainer_cli  # noqa: E402 - after the path, as every project import
from train.native import lazy_start  # noqa: E402

FRAMEWORK = "autotp"
TOOL = "train_autotp"


def main(argv: list[str] | None = None) -> int:
    return trainer_cli.main(FRAMEWORK, TOOL, __doc__, lazy_start("train.autotp.engine:AutotpEngine"), argv)


if __name__ == "__main__":
    trainer_cli.leave(main())
