"""Run one training run: the one launcher behind the matrix and every train/train_<platform>_<framework>_<model>.sh.

    python3 -m train.launch.run --request RUN_DIR/config.json       (the matrix: a request it planned)
    python3 -m train.launch.run --platform amd --framework prim --model llama [--run-dir DIR] [--repeat N]
                                                                       (train/launch.sh: one run by hand)

With --request the run is the request train.matrix planned (train.plan.request) and wrote where the launcher reads
it: config.json in the run directory on node 0, node<N>/request.json on node N; nothing is loaded or planned again
(the matrix checked the configuration, the data and the run directory once for the run set). Otherwise the
configuration comes from config.env and the environment (utils.config, loaded once), the run's identity from the
flags, and the launcher plans the run's request itself (train.plan.request) and goes on the same way; the
configuration is exported to what it starts, as the shell exports it to the matrix. Into the run directory go:
config.json (the request), the framework's generated configuration (nemo_settings.json or primus_experiment.yaml),
launch.json (the exact command, then its outcome), train.log (the whole console, also shown on the terminal)
and result.json. After the run, `python3 -m evaluate.judge RUN_DIR` compares the settings the
framework reports in its log with the request; a mismatch, or synthetic data where real data was
requested, fails the run.
By hand, the model's data must be prepared and verified (./shell/run_data.sh; train.plan.data_problems) unless
MOCK_DATA=1: otherwise the run is refused before its directory is created.
DRY_RUN=1 writes the files and prints the command without training; missing data, or a Primus
checkout missing here (the AMD image has it), is then a warning.

A run its framework cannot do (train.plan.skip_reason: fsdp or autotp at PP > 1, a model the framework has no
name for, autotp with FP8 or COMPILE=1) is refused in one line, exit 2.

Frameworks (train/launch/command.py): mega, fsdp and autotp run torchrun on train/train_<framework>.py; nemo runs
torchrun on train/train_nemo.py with the recipe settings of train/nemo/recipe.py; prim runs the launcher of the
stack's Primus release (train/prim/releases.py) from PRIMUS_PATH or the release's checkout with the experiment of
train/prim/config.py. Multi-node: every node runs this with its NODE_RANK; nodes other than 0 keep
their request, log and command in node<N>/ of the run directory, and node 0's judge extracts the result from
every node's log. A multi-node run gets the network settings of utils/machine/netenv.py (the request's network
section: NET_* knobs, the vendor's defaults), also when started by hand; each node's launch.json records its host
name (and Slurm's name for it) and the collective libraries' variables the run was started with. Every result
records, under "effective", the platform's environment (utils/machine/platform_env) the run was started with,
whatever its framework, and the network NCCL/RCCL used where the log names it (collective_transport,
collective_rdma); a multi-node run whose collectives fell back to TCP sockets says so in its warnings.

A write the disk refuses (full, the file-size limit, read-only: utils.files.disk_problem) ends the launcher in that
one line, exit 1: before the run, nothing is started; a train.log cut short mid-run fails the run with the line
(evaluate.judge); launch.json is replaced whole or not at all, and records the line as the failed run's error when
the disk still takes it.

Exit: 0 ok, 1 the run failed, 2 bad input, 128+signal stopped by SIGHUP, SIGINT (Ctrl-C), SIGQUIT or
SIGTERM (129, 130, 131, 143): the run's processes are ended, and launch.json and result.json record it
as interrupted. After a stop the run's console goes on into train.log only (no traceback of the stop on
the terminal).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from utils import run_files
from train.launch.command import REQUEST_FILE, Launch, node_identity, prepare, run_environment
from train.launch.process import hold_stops, judge, run_supervised
from train.plan import Run, data_problems, plan_device, precision_reason, request, run_name, skip_reason
from utils.config.selection import runs_on
from utils.machine import probe
from utils.cli import Parser, UsageError, warn
from utils.config import FRAMEWORKS, PLATFORMS, Config, ConfigError, load_config
from utils.config.show import exports
from utils.datafiles import PREPARE as PREPARE_COMMAND
from utils.files import DiskError, write_json, writing
from utils.fingerprint import project_commit
from utils.frameworks import TABLE
from utils.spec.models import MODEL_KEYS
from utils.machine.platform_env import platform_env
from utils.spec.request import Request, RequestError
from utils.runset import SYSTEM_FILE, make_run_set
from utils.spec.strategies import CUSTOM

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2
NODE_REQUEST_FILE = "request.json"  # a node's own request on nodes other than 0, in node<N>/
PROBE_TIMEOUT_S = 120


def probe_system(path: Path) -> None:
    """system.json for a run started alone (the matrix writes it once per run set)."""
    if probe.main(["-o", str(path)]) != 0:
        warn("the system probe failed: the result will have no system description")


def probe_own_environment(launch: Launch, framework: str, path: Path) -> None:
    """The run's own system.json where its framework brings its own environment (the entry's `environment`: mbridge's
    Python 3.12, torchtitan's overlay, on the CPU): probed by the run's Python with the run's variables, so that the
    result's software (torch, megatron-core, the framework) is what trained, not the launcher's; the judge reads a
    run's own system.json before its run set's."""
    out = subprocess.run([launch.argv[0], "-m", "utils.machine.probe", "-o", str(path)], cwd=launch.cwd,
                         env={**os.environ, **launch.env}, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no message"])[-1]
        warn(f"the system probe in {framework}'s own environment failed ({last}): its result describes the "
             "launcher's Python instead")


def node_dir(run_dir: Path, node_rank: int) -> Path:
    """Where a node keeps its log and command: the run directory on node 0, node<N>/ inside it elsewhere."""
    return run_dir if node_rank == 0 else run_dir / f"node{node_rank}"


def request_path(run_dir: Path, node_rank: int) -> Path:
    """Where a node's request lies: the run's config.json on node 0 (what the trainers and the judge read),
    node<N>/request.json on node N."""
    return run_dir / REQUEST_FILE if node_rank == 0 else node_dir(run_dir, node_rank) / NODE_REQUEST_FILE


def run_dir_of(path: Path, node_rank: int) -> Path:
    """The run directory of a node's request file (request_path's inverse)."""
    path = Path(path).resolve()
    return path.parent if node_rank == 0 else path.parent.parent


def claim(run_dir: Path, node_rank: int, instead: str = "choose a new --run-dir") -> Path:
    """The node's directory of the run, created; UsageError when it already holds a run (node 0: a request, node N:
    a launch record), so that nothing is overwritten. `instead`: what to do then."""
    marker = run_dir / REQUEST_FILE if node_rank == 0 else node_dir(run_dir, node_rank) / run_files.LAUNCH
    if marker.exists():
        raise UsageError(f"{marker.parent} already holds a run; nothing is overwritten: {instead}")
    work_dir = node_dir(run_dir, node_rank)
    with writing(work_dir):
        work_dir.mkdir(parents=True, exist_ok=True)
    return work_dir


def stack_refusal(req: Request) -> str | None:
    """Why this Python cannot train the request's GPU run (utils.machine.probe.stack_problem), or None: a torch that
    sees no GPU would train on the CPU (train/common/cpu_compat.py) a run labelled amd or nvd. A dry run, the CPU
    and a framework that brings its own Python (Primus) are not asked."""
    who = req.identity
    if req.environment.dry_run or who.platform == "cpu" or not TABLE[who.framework].in_this_python:
        return None
    problem = probe.stack_problem(who.platform, [who.framework], sys.executable,
                                  transformer_impl=req.environment.transformer_impl)
    return f"PLATFORM={who.platform}: {problem}" if problem else None


def planned(args: argparse.Namespace, cfg: Config) -> tuple[Request, Path]:
    """A run by hand: its request (train.plan.request, the checkout's commit in its identity) and its directory
    (created), from the configuration and the flags; UsageError when the run cannot be started as asked."""
    if cfg.frameworks != [args.framework]:
        raise UsageError(f"{args.framework} does not run on {args.platform} "
                         f"({'; '.join(cfg.notes)}); use train/train_{args.platform}_<framework>_{args.model}.sh")
    if len(cfg.strategies) != 1:
        raise UsageError(f"STRATEGY={cfg['STRATEGY']} names {len(cfg.strategies)} strategies; one run takes one "
                         "(a sweep is ./shell/run_train.sh)")
    strategy = cfg.strategies[0]
    layout = cfg.layout(args.model, strategy)
    device = plan_device(cfg)
    skipped = skip_reason(args.framework, args.model, layout, cfg.values, stack=cfg.stack, device=device)
    if skipped:  # a framework the stack lacks or a precision it has no switch for: the line names the fix; else the
        # layout is the fix
        own_fix = not runs_on(args.framework, cfg.stack) or precision_reason(args.framework, cfg.values, cfg.stack, device)
        raise UsageError(skipped if own_fix else f"{skipped}; choose another STRATEGY (or TP, PP, DP, GA) or FRAMEWORK")
    missing = "; ".join(data_problems(cfg))
    if missing and not cfg["DRY_RUN"]:
        raise UsageError(f"data not prepared: {missing} (or MOCK_DATA=1 for synthetic tokens)")
    if missing:
        warn(f"dry run: data not prepared: {missing}; a real run stops here until {PREPARE_COMMAND} prepared it")
    given = Path(args.run_dir).resolve() if args.run_dir else None
    name = given.name if given else run_name(args.framework, args.model, strategy, args.repeat,
                                             named_strategy=strategy != CUSTOM, repeats=1)
    req = request(cfg, Run(name, args.framework, args.model, strategy, args.repeat, layout), commit=project_commit())
    refusal = stack_refusal(req)
    if refusal:
        raise UsageError(refusal)
    run_dir = given or make_run_set(cfg["OUTPUT_DIR"], cfg.platform, os.environ.get("RUN_SET_DIR")) / name
    claim(run_dir, req.environment.node_rank)
    return req, run_dir


@contextmanager
def exported(cfg: Config) -> Iterator[None]:
    """The configuration in the environment of what the run starts, as `python3 -m utils.config env` exports it to
    the matrix (the environment as it was afterwards)."""
    saved = dict(os.environ)
    os.environ.update(exports(cfg))
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m train.launch.run", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--request", type=Path, help="the run's request as train.matrix wrote it (config.json, or "
                        "node<N>/request.json); instead of --platform, --framework and --model")
    parser.add_argument("--platform", choices=PLATFORMS)
    parser.add_argument("--framework", choices=FRAMEWORKS)
    parser.add_argument("--model", choices=MODEL_KEYS)
    parser.add_argument("--run-dir", help="directory of this run (default: a new one under OUTPUT_DIR or RUN_SET_DIR)")
    parser.add_argument("--repeat", type=int, default=1, help="repeat number of this run (1-based)")
    args = parser.parse_args(argv)
    by_hand = (args.platform, args.framework, args.model)
    if (args.request is not None and (any(by_hand) or args.run_dir)) or (args.request is None and not all(by_hand)):
        parser.error("give --request FILE (the run directory is its own), or --platform, --framework and --model")
    try:
        return from_request(args.request) if args.request is not None else by_hand_run(args)
    except DiskError as err:
        print(f"[tprimat] error: {err}", file=sys.stderr, flush=True)
        return EXIT_FAILED


def refused(why: object) -> int:
    """A run refused before it started: one line, exit 2."""
    print(f"[tprimat] error: {why}", file=sys.stderr)
    return EXIT_INPUT


def by_hand_run(args: argparse.Namespace) -> int:
    """One run by hand: the configuration loaded once, the run planned from it, then run_node."""
    env = {**os.environ, "PLATFORM": args.platform, "FRAMEWORK": args.framework, "MODELS": args.model}
    try:
        cfg = load_config(env)
    except ConfigError as err:
        return refused("; ".join(err.problems))
    try:
        req, run_dir = planned(args, cfg)
    except UsageError as err:
        return refused(err)
    with exported(cfg):
        return run_node(req, run_dir, written=False)


def from_request(path: Path) -> int:
    """The run of a request the matrix planned and wrote (request_path), as it asks."""
    try:
        req = Request.read(path)
    except RequestError as err:
        return refused(err)
    refusal = stack_refusal(req)
    if refusal:
        return refused(refusal)
    return run_node(req, run_dir_of(path, req.environment.node_rank), written=True)


def run_node(req: Request, run_dir: Path, *, written: bool) -> int:
    """Prepare, run and record one node's run of the request (`written`: its request file is there already); its
    exit status. DiskError when a write is refused."""
    who, lay, node_rank = req.identity, req.parallelism, req.environment.node_rank
    work_dir = node_dir(run_dir, node_rank)
    try:
        launch = prepare(req, run_dir, work_dir)
    except UsageError as err:
        if not any(work_dir.iterdir()):
            work_dir.rmdir()
        return refused(err)
    if not written:
        req.write(request_path(run_dir, node_rank))
    record = started_record(req, launch)
    write_json(work_dir / run_files.LAUNCH, record)
    print(f"[tprimat] {who.run_id}: {who.framework} {who.variant} {lay.strategy} "
          f"TP{lay.tp} PP{lay.pp} DP{lay.dp} GA{lay.ga} node {node_rank}/{lay.nnodes} -> {work_dir}", flush=True)
    print(f"[tprimat] command: {launch.shell()}", flush=True)
    if req.environment.dry_run:
        wrote = [request_path(run_dir, node_rank).name, run_files.LAUNCH, *launch.generated]
        print(f"[tprimat] dry run: wrote {', '.join(wrote)}; nothing trained", flush=True)
        return EXIT_OK
    if node_rank == 0 and not (run_dir.parent / SYSTEM_FILE).exists():
        probe_system(run_dir.parent / SYSTEM_FILE)
    if node_rank == 0 and TABLE[who.framework].environment and (launch.argv[0] != sys.executable
                                                                 or "PYTHONPATH" in launch.env):
        probe_own_environment(launch, who.framework, run_dir / SYSTEM_FILE)
    sampling = req.environment.telemetry_interval_ms if req.environment.telemetry else None
    try:
        outcome = run_supervised(launch, work_dir / run_files.LOG, who.platform, sampling)
    except DiskError as err:  # train.log refused: nothing was started
        try:
            write_json(work_dir / run_files.LAUNCH, {**record, "status": "failed", "error": str(err)})
        except DiskError:
            pass  # launch.json stays as it was; the line about train.log is the reason
        raise
    hold_stops()  # the run has ended: a stop signal now cuts only the judge's wait short, never the record
    record.update(exit_code=outcome.exit_code, stopped_by=outcome.stopped_by, started_at=outcome.started_at,
                  ended_at=outcome.ended_at, wall_s=round(outcome.wall_s, 1), warnings=outcome.warnings,
                  log_error=outcome.log_error, environment=run_environment(launch, who.platform, who.framework,
                                                                        req.stack.name))
    if node_rank == 0:  # node 0 judges the run from every node's log
        write_json(work_dir / run_files.LAUNCH, record)
        judged = judge(run_dir)
    else:
        judged = "ok" if outcome.exit_code == 0 and not outcome.log_error else "failed"
    status = "interrupted" if outcome.interrupted else judged
    write_json(work_dir / run_files.LAUNCH, {**record, "status": status})
    print(f"[tprimat] {who.run_id}: {status} (exit code {outcome.exit_code}, {outcome.wall_s:.0f} s)", flush=True)
    if outcome.interrupted:
        return 128 + outcome.stopped_by
    return EXIT_OK if status == "ok" else EXIT_FAILED


def started_record(req: Request, launch: Launch) -> dict:
    """launch.json as the run starts: which run and node, the exact command and what was generated for it."""
    own = frozenset(platform_env(req.identity.platform, req.identity.framework, req.stack.name))
    return {"run_id": req.identity.run_id, "node_rank": req.environment.node_rank, **node_identity(launch, own),
            "command": launch.argv, "env": launch.env, "cwd": launch.cwd, "shell": launch.shell(),
            "generated": launch.generated, "dry_run": req.environment.dry_run}


if __name__ == "__main__":
    sys.exit(main())
