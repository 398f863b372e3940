"""TPrimat's pretraining loop on megatron-core (framework `mega`): the same code on AMD, NVIDIA and the CPU.

    torchrun --nproc_per_node=N ... train/train_mega.py --request RUN_DIR/config.json --run-dir RUN_DIR  # the launcher
    eval "$(python3 -m utils.platform_env)"   # PLATFORM, GPUS_PER_NODE and the platform's environment, as the launcher resolves them
    torchrun --nproc_per_node=N [--nnodes=M --node_rank=R --master_addr=A --master_port=P] \\
        train/train_mega.py --model llama|qwen --run-dir DIR [--strategy NAME]
    python3 train/train_mega.py --model llama --run-dir DIR  # one process (TP x PP x DP = 1), no torchrun

Every setting comes from the run's request (utils.request): the config.json the launcher wrote (--request),
or, started by hand, the request train.plan builds from the configuration (config.env + environment,
utils.config) for --model and --strategy, as the launcher would: the layout (TP, PP, DP, GA), MBS, SL, the
optimizer and LR schedule, SEED, the data, the fairness profile, WARMUP_SKIP and PROFILING. GBS = MBS x DP x GA.

The loop is Megatron-LM's (train/mega_trainer.py); each step is written to DIR/steps.jsonl and the console
(train/step_log.py); the last rank then writes DIR/result.json (train/mega_outcome.py). PROFILING=true adds
DIR/profile/ (rank 0's Chrome trace and top-kernels table). A crash, an out-of-memory error or a NaN loss
still ends in a result with status failed (a failing rank leaves its traceback in DIR/error_rank<N>.txt); the
exit status is then non-zero.

Exit status: 0 trained every step; 1 the training failed; 2 bad input (request, configuration, missing data);
128+signal stopped. On a machine without an accelerator train/cpu_compat.py adapts megatron-core (gloo, the
CPU as device).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script by torchrun: make the project's packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse  # noqa: E402 - after the path, as every import of the project's packages

from train.mega_outcome import train_and_report  # noqa: E402
from train.plan import Run, request  # noqa: E402
from utils.cli import Parser  # noqa: E402
from utils.config import ConfigError, load_config  # noqa: E402
from utils.models import MODEL_KEYS  # noqa: E402
from utils.request import Request, RequestError  # noqa: E402

FRAMEWORK = "mega"
TOOL = "train_mega"


class RequestMismatch(ValueError):
    """A command line that names another run than its request (exit 2)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="train/train_mega.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog="Without --request, settings come from config.env and the environment (utils.config).")
    parser.add_argument("--request", type=Path, metavar="CONFIG_JSON",
                        help="the run's request (config.json, as train.launch writes it)")
    parser.add_argument("--run-dir", required=True, type=Path, help="run directory (created if missing)")
    parser.add_argument("--model", choices=MODEL_KEYS,
                        help="model key (required without --request; with it, must be the request's)")
    parser.add_argument("--strategy", help="parallelism strategy (default: the configuration's first; with "
                                           "--request, must be the request's)")
    parser.add_argument("--inject-nan-at-step", type=int, metavar="N",
                        help="testing only: make the loss of step N nan, to exercise the failure path")
    args = parser.parse_args(argv)
    if args.request is None and args.model is None:
        parser.error("give --request CONFIG_JSON, or --model for a run of the configuration")
    return args


def planned_request(model: str, strategy: str | None, run_dir: Path) -> Request:
    """The request the launcher would write for this run (train.plan), for a trainer started by hand: one run
    named after its directory."""
    cfg = load_config()
    name = strategy or cfg.strategies[0]
    return request(cfg, Run(run_dir.name, FRAMEWORK, model, name, 1, cfg.layout(model, name)))


def given_request(path: Path, model: str | None, strategy: str | None) -> Request:
    """The launcher's request; a command line naming another model, strategy or framework is refused."""
    req = Request.read(path)
    if req.identity.framework != FRAMEWORK:
        raise RequestMismatch(f"{path}: the request is for framework {req.identity.framework}, not {FRAMEWORK}; "
                              "give a mega run's config.json")
    for option, wanted, requested in (("model", model, req.identity.model),
                                      ("strategy", strategy, req.parallelism.strategy)):
        if wanted is not None and wanted != requested:
            raise RequestMismatch(f"{path}: the request is for {option} {requested}, not {wanted}; "
                                  "give the matching request or leave the option out")
    return req


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run_dir = args.run_dir.resolve()
    try:
        req = given_request(args.request, args.model, args.strategy) if args.request is not None \
            else planned_request(args.model, args.strategy, run_dir)
    except ConfigError as err:
        err.report(TOOL)
        return 2
    except (RequestError, RequestMismatch) as err:
        print(f"{TOOL}: {err}", file=sys.stderr)
        return 2
    except KeyError as err:  # a strategy without a layout for this model and platform
        print(f"{TOOL}: {err.args[0]}", file=sys.stderr)
        return 2
    taken = [name for name in ("steps.jsonl", "result.json") if (run_dir / name).exists()]
    if taken:
        print(f"{TOOL}: {run_dir} already holds a run ({', '.join(taken)}); give a new --run-dir", file=sys.stderr)
        return 2
    run_dir.mkdir(parents=True, exist_ok=True)
    return train_and_report(req, run_dir, args.inject_nan_at_step)


if __name__ == "__main__":
    sys.exit(main())
