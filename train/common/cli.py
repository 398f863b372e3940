"""The command line every TPrimat trainer shares (train_mega.py, train_fsdp.py, train_autotp.py).

    torchrun ... train/train_<framework>.py --request RUN_DIR/config.json --run-dir RUN_DIR   # the launcher
    torchrun ... train/train_<framework>.py --model MODEL --run-dir DIR [--strategy NAME] # by hand, then
    python3 -m evaluate.judge DIR                                                          # its result.json

Every setting comes from the run's request (utils.spec.request): the config.json the launcher wrote (--request), or,
started by hand, the request train.plan builds from the configuration (config.env + environment, utils.config)
for --model and --strategy, as the launcher would. Bad input (a request of another framework, model or strategy,
an unreadable request, a taken run directory) is one line and exit status 2; the run itself is
train/common/outcome.py's train_and_report. A trainer records its run (steps.jsonl, evals.jsonl, trainer.json) and
the judge writes its result: the launcher runs it; started by hand, the run directory also gets the request
(config.json) the judge reads.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from train.common import console
from utils import run_files
from utils.cli import Parser
from utils.config import ConfigError, load_config
from utils.spec.models import MODEL_KEYS
from utils.spec.request import Request, RequestError

if TYPE_CHECKING:  # torch comes with it: imported when a run starts, so that --help needs none
    from train.common.outcome import Start


class RequestMismatch(ValueError):
    """A command line that names another run than its request (exit 2)."""


def parse_args(tool: str, doc: str, argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog=f"train/{tool}.py", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog="Without --request, settings come from config.env and the environment (utils.config).")
    parser.add_argument("--request", type=Path, metavar="CONFIG_JSON",
                        help="the run's request (config.json, as train.launch.run writes it)")
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


def planned_request(framework: str, model: str, strategy: str | None, run_dir: Path) -> Request:
    """The request the launcher would write for this run (train.plan), for a trainer started by hand: one run
    named after its directory."""
    from train.plan import Run, request  # by hand only: a launched worker is given its request

    cfg = load_config()
    name = strategy or cfg.strategies[0]
    return request(cfg, Run(run_dir.name, framework, model, name, 1, cfg.layout(model, name)))


def given_request(framework: str, path: Path, model: str | None, strategy: str | None) -> Request:
    """The launcher's request; a command line naming another model, strategy or framework is refused."""
    req = Request.read(path)
    if req.identity.framework != framework:
        raise RequestMismatch(f"{path}: the request is for framework {req.identity.framework}, not {framework}; "
                              f"give a {framework} run's config.json")
    for option, wanted, requested in (("model", model, req.identity.model),
                                      ("strategy", strategy, req.parallelism.strategy)):
        if wanted is not None and wanted != requested:
            raise RequestMismatch(f"{path}: the request is for {option} {requested}, not {wanted}; "
                                  "give the matching request or leave the option out")
    return req


def main(framework: str, tool: str, doc: str, start: Start, argv: list[str] | None = None) -> int:
    """One trainer's whole command: its request, a fresh run directory, then the run; the exit status."""
    args = parse_args(tool, doc, argv)
    console.whole_lines()
    run_dir = args.run_dir.resolve()
    try:
        req = given_request(framework, args.request, args.model, args.strategy) if args.request is not None \
            else planned_request(framework, args.model, args.strategy, run_dir)
    except ConfigError as err:
        err.report(tool)
        return 2
    except (RequestError, RequestMismatch) as err:
        print(f"{tool}: {err}", file=sys.stderr)
        return 2
    except KeyError as err:  # a strategy without a layout for this model and platform
        print(f"{tool}: {err.args[0]}", file=sys.stderr)
        return 2
    taken = [name for name in (run_files.STEPS, run_files.EVALS, run_files.TRAINER, run_files.RESULT)
             if (run_dir / name).exists()]
    if taken:
        print(f"{tool}: {run_dir} already holds a run ({', '.join(taken)}); give a new --run-dir", file=sys.stderr)
        return 2
    run_dir.mkdir(parents=True, exist_ok=True)
    by_hand = args.request is None
    if by_hand and int(os.environ.get("RANK", "0")) == 0:  # the request the judge reads, as a launcher leaves it
        req.write(run_dir / run_files.REQUEST)
    from train.common.outcome import train_and_report

    code = train_and_report(req, run_dir, start, tool, args.inject_nan_at_step)
    if by_hand and int(os.environ.get("RANK", "0")) == int(os.environ.get("WORLD_SIZE", "1")) - 1:
        print(f"[tprimat] {tool}: python3 -m evaluate.judge {run_dir} writes the run's result.json", flush=True)
    return code


def leave(code: int) -> NoReturn:
    """Exit a trainer with the run's status, without the interpreter's teardown, once the run is recorded and the
    process group destroyed: native threads (DeepSpeed's, and torch's under FSDP2 + DTensor) can abort it after a
    finished run ("terminate called without an active exception", seen in CI after all steps and result.json, for
    autotp and for fsdp), and for mega it took 1.3 s of every run's wall time on a 2-core EPYC (tearing down torch's
    and megatron-core's modules), which a user waits for and nothing needs."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
