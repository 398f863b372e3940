"""TPrimat's pretraining loop on megatron-core (framework `mega`): the same code on AMD, NVIDIA and the CPU.

    torchrun --nproc_per_node=N ... train/train_mega.py --request RUN_DIR/config.json --run-dir RUN_DIR  # the launcher
    eval "$(python3 -m utils.machine.platform_env)"   # PLATFORM, GPUS_PER_NODE and the platform's environment, as the launcher resolves them
    torchrun --nproc_per_node=N [--nnodes=M --node_rank=R --master_addr=A --master_port=P] \\
        train/train_mega.py --model MODEL --run-dir DIR [--strategy NAME]
    python3 train/train_mega.py --model llama --run-dir DIR  # one process (TP x PP x DP = 1), no torchrun

Every setting comes from the run's request (utils.spec.request): the config.json the launcher wrote (--request),
or, started by hand, the request train.plan builds from the configuration (config.env + environment,
utils.config) for --model and --strategy, as the launcher would: the layout (TP, PP, DP, GA), MBS, SL, the
optimizer and LR schedule, SEED, the data, the fairness profile, WARMUP_SKIP and PROFILING. GBS = MBS x DP x GA.

The loop is Megatron-LM's (train/mega/trainer.py); each step is written to DIR/steps.jsonl and the console
(train/common/step_log.py); the last rank then writes DIR/result.json (train/common/outcome.py). PROFILING=true adds
DIR/profile/ (rank 0's Chrome trace and top-kernels table). A crash, an out-of-memory error or a NaN loss
still ends in a result with status failed (a failing rank leaves its traceback in DIR/error_rank<N>.txt); the
exit status is then non-zero.

The command line is train/common/cli.py's, shared by every TPrimat trainer.

Exit status: 0 trained every step; 1 the training failed; 2 bad input (request, configuration, missing data);
128+signal stopped. On a machine without an accelerator train/common/cpu_compat.py adapts megatron-core (gloo, the
CPU as device).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script by torchrun: the project's packages importable from its root, and
    # train/ itself off the path, where a subpackage (train/nemo/) would shadow a framework's own package
    TRAIN_DIR = Path(__file__).resolve().parent
    sys.path[:] = [str(TRAIN_DIR.parent), *(p for p in sys.path if Path(p or ".").resolve() != TRAIN_DIR)]

from typing import TYPE_CHECKING  # noqa: E402

from train.common import cli as trainer_cli  # noqa: E402 - after the path, as every import of the project's packages
from utils.spec.request import Request  # noqa: E402

if TYPE_CHECKING:  # torch comes with it: imported as the run starts, so that --help needs none
    from train.common.megatron_data import DataSource

FRAMEWORK = "mega"
TOOL = "train_mega"


def start(req: Request, source: DataSource, run_dir: Path, inject_nan_step: int | None):
    """megatron-core made ready (on the CPU through train/common/cpu_compat.py), distributed started, the trainer."""
    from train.common import cpu_compat
    from train.mega.trainer import Trainer, init_distributed

    cpu_compat.apply()
    init_distributed(req)
    trainer = Trainer(req, source, run_dir, inject_nan_step)
    if cpu_compat.needed():
        trainer.notes.append("no accelerator: megatron-core ran on the CPU through train/common/cpu_compat.py (gloo)")
    return trainer


def planned_request(model: str, strategy: str | None, run_dir: Path) -> Request:
    """The request the launcher would write for a mega run of this model and strategy (train/common/cli.py)."""
    return trainer_cli.planned_request(FRAMEWORK, model, strategy, run_dir)


def main(argv: list[str] | None = None) -> int:
    return trainer_cli.main(FRAMEWORK, TOOL, __doc__, start, argv)


if __name__ == "__main__":
    trainer_cli.leave(main())
