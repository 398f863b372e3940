"""Run one training run: the single launcher behind every train/train_<platform>_<framework>_<model>.sh.

    python3 -m train.launch --platform amd --framework prim --model llama [--run-dir DIR] [--repeat N]

The configuration comes from config.env and the environment (utils.config); the run's identity
from the flags. Into the run directory go: config.json (the request, train/plan.py), the
framework's generated configuration (nemo_settings.json or primus_experiment.yaml), launch.json
(the exact command, then its outcome), train.log (the whole console, also shown on the terminal)
and result.json. After the run, the settings the framework reports in its log are compared with
the request; a mismatch, or synthetic data where real data was requested, fails the run.
The model's data must be prepared and verified (./shell/run_data.sh; train.plan.data_problems) unless
MOCK_DATA=1: otherwise the run is refused before its directory is created.
DRY_RUN=1 writes the files and prints the command without training; missing data, or a Primus
checkout missing here (the AMD image has it), is then a warning.

Frameworks: mega runs torchrun on train/train_mega.py; nemo runs torchrun on train/train_nemo.py
with the recipe settings of train/nemo_recipe.py; prim runs Primus's examples/run_pretrain.sh from
PRIMUS_PATH (default /workspace/Primus) with the experiment of train/primus_config.py. Multi-node:
every node runs this with its NODE_RANK; nodes other than 0 keep their log and command in
node<N>/ of the run directory, and node 0 extracts the result from every node's log. A multi-node
run gets the network settings of utils/netenv.py (NET_* knobs, the vendor's defaults), also when
started by hand; each node's launch.json records its host name (and Slurm's name for it) and the
collective libraries' variables the run was started with. Every result records, under "effective",
the platform's environment (utils/platform_env) the run was started with, whatever its framework,
and the network NCCL/RCCL used where the log names it (collective_transport, collective_rdma); a
multi-node run whose collectives fell back to TCP sockets says so in its warnings.

Exit: 0 ok, 1 the run failed, 2 bad input, 128+signal stopped by SIGHUP, SIGINT (Ctrl-C), SIGQUIT or
SIGTERM (129, 130, 131, 143): the run's processes are ended, and launch.json and result.json record it
as interrupted. After a stop the run's console goes on into train.log only (no traceback of the stop on
the terminal).
"""

from __future__ import annotations

import argparse
import ast
import ctypes
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from utils.probe import stack_problem
from train import settle
from train.nemo_recipe import recipe_settings
from train.plan import PREPARE_COMMAND, Run, data_problems, request, run_name
from utils.platform_env import DEFAULT_PRIMUS_PATH
from train.primus_config import ShippedConfigMissing, command as primus_command
from train.primus_config import write_experiment
from utils.config import ROOT, ConfigError, load_config
from utils.fairness import request_identity
from utils.netenv import network_env
from utils.platform_env import platform_env
from utils.strategies import CUSTOM

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2
STOP_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
PR_SET_PDEATHSIG = 1
LEFTOVER_GRACE_S = 30.0  # a finished run's processes get this long to exit before they are killed
GPU_IDLE_TIMEOUT_S = 120.0
STOP_GRACE_S = 20.0  # after a stop signal: SIGTERM to the run, SIGKILL after this long (or at a second signal)
NODE_WAIT_S = 300.0  # node 0 waits this long for the other nodes' logs of a multi-node run
# evaluate.validate's checks that fail a run at once: settings read back from the framework's log
# differ from the request, or it trained on synthetic data although real data was requested.
READBACK_CHECKS = ("effective settings", "real data")
# What a framework's log must report for its layout and batch to count as applied.
REQUIRED_READBACK = ("tp", "pp", "mbs", "gbs", "seq_len", "precision")
# Frameworks whose trainer runs in this Python (torchrun under sys.executable); Primus brings its own launcher.
IN_THIS_PYTHON = ("mega", "nemo")
# Variables of the collective libraries (NCCL, RCCL, gloo) recorded in launch.json as the run is started with them.
NETWORK_PREFIXES = ("NCCL_", "RCCL_", "GLOO_")


class InputError(Exception):
    """Bad input: one line naming the problem and the fix (exit 2)."""


@dataclass
class Launch:
    """The exact command of one run and the files generated for it."""

    argv: list[str]
    env: dict[str, str]  # only what TPrimat sets on top of the inherited environment
    cwd: str
    generated: list[str] = field(default_factory=list)

    def shell(self) -> str:
        """The command as one line a user can paste."""
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"cd {shlex.quote(self.cwd)} && {assignments} {shlex.join(self.argv)}"


def warn(message: str) -> None:
    print(f"[tprimat] warning: {message}", file=sys.stderr, flush=True)


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def torchrun(req: dict) -> list[str]:
    """torchrun for this node: standalone on one node, the configured rendezvous across nodes."""
    base = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={req['gpus_per_node']}"]
    cfg = req["config"]
    if req["nnodes"] == 1:
        return base + ["--standalone", "--nnodes=1"]
    return base + [f"--nnodes={req['nnodes']}", f"--node_rank={cfg['NODE_RANK']}",
                   f"--master_addr={cfg['MASTER_ADDR']}", f"--master_port={cfg['MASTER_PORT']}"]


def vendor_env(req: dict) -> dict[str, str]:
    """utils/platform_env's variables where the user has not set them otherwise (theirs win), the
    multi-node network settings of utils/netenv (NET_* knobs beat what is exported, which beats the
    vendor's defaults), and unbuffered Python so that the console streams into train.log and the
    terminal as it happens."""
    platform = req["platform"]
    network = network_env(platform, req["config"]) if req["nnodes"] > 1 else {}
    return {**{key: os.environ.get(key, value) for key, value in platform_env(platform).items()}, **network,
            "PYTHONUNBUFFERED": "1"}


def node_identity(launch: Launch) -> dict:
    """This node as launch.json records it: host name, Slurm's node name, and the collective libraries'
    variables the run is started with (the inherited ones with the launch's on top)."""
    env = {**os.environ, **launch.env}
    return {"hostname": socket.gethostname(),
            **({"slurm_node": os.environ["SLURMD_NODENAME"]} if os.environ.get("SLURMD_NODENAME") else {}),
            "network": {key: env[key] for key in sorted(env) if key.startswith(NETWORK_PREFIXES)}}


def prepare(req: dict, run_dir: Path, work_dir: Path) -> Launch:
    """The framework's command and generated configuration (written into work_dir) for the run."""
    framework = req["framework"]
    selection = {"PLATFORM": req["platform"], "FRAMEWORK": framework, "MODELS": req["model"],
                 "STRATEGY": "" if req["strategy"] == CUSTOM else req["strategy"]}
    if framework == "mega":
        argv = torchrun(req) + ["train/train_mega.py", "--model", req["model"], "--run-dir", str(run_dir)]
        return Launch(argv, {**vendor_env(req), **selection}, str(ROOT))
    if framework == "nemo":
        tokenizer = Path(req["tokenizer_dir"]) / "tokenizer.json"
        if req["mock_data"] and not tokenizer.exists() and not req["config"]["DRY_RUN"]:
            raise InputError(f"NeMo's mock data takes its vocabulary from the model's tokenizer, and {tokenizer.parent} "
                             f"has none; prepare it first: {PREPARE_COMMAND} (or python3 -m data.fetch tokenizer)")
        settings = recipe_settings(req, str(run_dir))
        path = work_dir / "nemo_settings.json"
        write_json(path, settings)
        argv = torchrun(req) + ["--module", "train.train_nemo", "--settings", str(path)]
        return Launch(argv, {**vendor_env(req), **settings["env"]}, str(ROOT), [path.name])
    primus = Path(os.environ.get("PRIMUS_PATH") or DEFAULT_PRIMUS_PATH)
    exp_path = work_dir / "primus_experiment.yaml"
    cmd = primus_command(req, primus, exp_path, str(work_dir))
    try:
        base = write_experiment(req, primus, exp_path, str(run_dir))
    except ShippedConfigMissing as err:
        if not req["config"]["DRY_RUN"]:
            raise InputError(str(err)) from None
        # A dry run of the docker runtime plans on the host, where the image's Primus is not.
        warn(f"dry run: {exp_path.name} not written: {err}")
        return Launch(cmd.argv, {**vendor_env(req), **cmd.env}, cmd.cwd)
    print(f"[tprimat] Primus experiment {exp_path} derived from {base}", flush=True)
    return Launch(cmd.argv, {**vendor_env(req), **cmd.env}, cmd.cwd, [exp_path.name])


# --- Running, with the console teed to train.log and clean stops -------------------------------------

@dataclass
class Outcome:
    exit_code: int
    stopped_by: int | None  # the stop signal that ended the run, if one did
    started_at: str
    ended_at: str
    wall_s: float
    warnings: list[str]

    @property
    def interrupted(self) -> bool:
        return self.stopped_by is not None


def _copy_output(source, log_file, quiet: threading.Event) -> None:
    """Raw bytes to the log and, until the run is stopped or the terminal is gone, to the terminal as they
    come (progress bars keep their carriage returns)."""
    out = sys.stdout.buffer
    while chunk := source.read1(65536):
        log_file.write(chunk)
        log_file.flush()
        if quiet.is_set():
            continue
        try:
            out.write(chunk)
            out.flush()
        except OSError:  # the terminal hung up
            quiet.set()


def _die_with_parent() -> None:
    """In the run's first process: SIGTERM when the launcher dies, even by SIGKILL (torchrun then stops
    its workers), rather than training on unsupervised into a closed pipe."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def execute(launch: Launch, log_path: Path, platform: str) -> Outcome:
    """Run the command in its own session; a stop signal ends the whole session, a second one kills it."""
    baseline = settle.gpu_memory_used_mib(platform)
    env = {**os.environ, **launch.env}
    started, t0 = now_iso(), time.monotonic()
    with open(log_path, "ab") as log_file:
        try:
            child = subprocess.Popen(launch.argv, cwd=launch.cwd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
        except OSError as err:
            message = f"cannot start {launch.argv[0]} in {launch.cwd}: {err.strerror}"
            log_file.write(f"[tprimat] {message}\n".encode())
            print(f"[tprimat] error: {message}", file=sys.stderr, flush=True)
            return Outcome(127, None, started, now_iso(), time.monotonic() - t0, [message])
        stops: list[tuple[float, int]] = []
        quiet = threading.Event()

        def stop(signum, _frame) -> None:
            # The run's own report of the stop (torchrun's traceback) goes to train.log only. One signal
            # can arrive twice (sent to a process group and passed on by a parent): only one a second or
            # more after the first escalates to SIGKILL.
            quiet.set()
            if signum == signal.SIGHUP:  # the terminal is gone: what is left to say goes nowhere
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.dup2(devnull, sys.stderr.fileno())
            stops.append((time.monotonic(), signum))
            escalate = stops[-1][0] - stops[0][0] >= 1.0
            try:
                os.killpg(child.pid, signal.SIGKILL if escalate else signal.SIGTERM)
            except ProcessLookupError:
                pass

        previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
        copier = threading.Thread(target=_copy_output, args=(child.stdout, log_file, quiet), daemon=True)
        copier.start()
        try:
            while True:
                try:
                    code = child.wait(timeout=STOP_GRACE_S if stops else None)
                    break
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, signal.SIGKILL)
            warnings = []
            survivors = settle.end_session(child.pid, 2.0 if stops else LEFTOVER_GRACE_S)
            if survivors:
                warnings.append("processes of the run still alive after SIGKILL: " + "; ".join(map(str, survivors)))
            copier.join(timeout=10)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    ended, wall = now_iso(), time.monotonic() - t0
    busy = settle.wait_gpu_idle(platform, baseline, GPU_IDLE_TIMEOUT_S)
    if busy:
        warnings.append(busy)
    for note in warnings:
        warn(note)
    return Outcome(128 - code if code < 0 else code, stops[0][1] if stops else None, started, ended, wall, warnings)


# --- The result: written by the trainer (mega) or extracted from the log, then checked ----------------

def log_tail(log_path: Path, lines: int = 20) -> str:
    from evaluate.extract import redact

    try:
        text = log_path.read_bytes()[-20000:].decode("utf-8", "replace")
    except OSError:
        return ""
    return redact("\n".join(text.replace("\r\n", "\n").splitlines()[-lines:]))


def _system(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir.parent / "system.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def start_failure_result(req: dict, run_dir: Path, outcome: Outcome, why: str) -> dict:
    """The result of a run that never reached its first step: no figures, the reason and the log's end."""
    from utils.result import build_result

    tail = log_tail(run_dir / "train.log")
    system = _system(run_dir)
    return build_result(
        run={"id": req["run_id"], "started_at": outcome.started_at, "ended_at": outcome.ended_at,
             "status": "incomplete" if outcome.interrupted else "failed", "exit_code": outcome.exit_code,
             "error_excerpt": f"{why}\n{tail}".strip(), "commit": None, "source": "extract",
             "log_files": [str(run_dir / "train.log")]},
        platform=req["platform"], framework=req["framework"], variant=req["variant"], system=system,
        parallelism={"strategy": req["strategy"], "tp": req["tp"], "pp": req["pp"], "dp": req["dp"], "ga": req["ga"],
                     "nnodes": req["nnodes"], "sequence_parallel": req["sequence_parallel"],
                     "distributed_optimizer": req["fairness"]["use_distributed_optimizer"]},
        training={"steps": req["train_iters"], "mbs": req["mbs"], "gbs": req["gbs"], "seq_len": req["sl"],
                  "precision": req["precision"], "lr": req["lr"], "min_lr": req["min_lr"],
                  "warmup_steps": req["warmup_steps"], "seed": req["seed"], "dataset": req["dataset"],
                  "dataset_fingerprint": None, "tokenizer_fingerprint": None, "mock_data": req["mock_data"],
                  **request_identity(req)},
        steps=[], warmup_skip=req["config"]["WARMUP_SKIP"], num_gpus=req["num_gpus"],
        device_name=(system.get("gpu") or {}).get("name"), warnings=outcome.warnings)


def collect_result(req: dict, run_dir: Path, outcome: Outcome, logs: list[Path]) -> dict:
    """result.json of the run: the trainer's own (mega), else extracted from the nodes' logs."""
    from evaluate import extract
    from utils.result import load_result, write_result

    path = run_dir / "result.json"
    if req["framework"] != "mega" or not path.exists():
        code = extract.main([*map(str, logs), "--framework", req["framework"], "--run-dir", str(run_dir),
                             "--exit-code", str(outcome.exit_code), "--started-at", outcome.started_at,
                             "--ended-at", outcome.ended_at, "-o", str(path)])
        if code != 0:
            why = (f"exit code {outcome.exit_code}; " if outcome.exit_code else "") + \
                  "no training step in the log (see evaluate.extract's message above)"
            write_result(path, start_failure_result(req, run_dir, outcome, why))
    return load_result(path)


def readback_problems(req: dict, result: dict) -> list[str]:
    """Where the framework's own report differs from the request (one line per setting), synthetic data
    where real data was requested, or a log that does not report the layout at all."""
    from evaluate.collect import Loaded
    from evaluate.validate import check_result

    effective = result.get("effective") or {}
    problems = []
    if req["framework"] != "mega" and result["run"]["steps_completed"] > 0:
        missing = [key for key in REQUIRED_READBACK if effective.get(key) is None]
        if missing:
            problems.append(f"the {req['framework']} log does not report {', '.join(missing)}: "
                            "cannot confirm the requested settings were applied")
    problems += [f"{finding.check}: {finding.message}" for finding in check_result(Loaded("", result, {}))
                 if finding.fatal and finding.check in READBACK_CHECKS]
    reported = effective.get("data_path")
    if not req["mock_data"] and reported is not None:
        paths = data_paths(reported)
        if {os.path.normpath(p) for p in paths} != {os.path.normpath(req["data_prefix"])}:
            problems.append(f"data_path: the framework read {', '.join(paths) or repr(reported)}, "
                            f"requested {req['data_prefix']}")
    return problems


def data_paths(reported: object) -> list[str]:
    """The dataset prefixes in a framework's read-back data_path, blend weights left out: NeMo's list,
    Megatron's and Primus's printed Python list ("['1.0', '/data/x']"), or one path (TPrimat's trainer)."""
    if isinstance(reported, str):
        try:
            reported = ast.literal_eval(reported)
        except (ValueError, SyntaxError):
            reported = [reported]
    items = reported if isinstance(reported, (list, tuple)) else [reported]
    return [str(item) for item in items if not _is_number(item)]


def _is_number(item: object) -> bool:
    try:
        float(str(item))
    except ValueError:
        return False
    return True


def other_node_logs(run_dir: Path, nnodes: int, hurry: threading.Event, timeout_s: float = NODE_WAIT_S) -> list[Path]:
    """The other nodes' train.log once each has recorded its end (Megatron and Primus print their
    iteration lines on the last rank, which lives on the last node); waits at most timeout_s, or until
    hurry is set (a stop signal)."""
    deadline = time.monotonic() + timeout_s
    pending = {rank: run_dir / f"node{rank}" for rank in range(1, nnodes)}
    said = False
    while pending and time.monotonic() < deadline and not hurry.is_set():
        for rank, node_dir in list(pending.items()):
            try:
                if "exit_code" in json.loads((node_dir / "launch.json").read_text()):
                    del pending[rank]
            except (OSError, json.JSONDecodeError):
                pass
        if pending and not said:
            print(f"[tprimat] waiting up to {timeout_s:.0f} s for node {', '.join(map(str, pending))} to record the "
                  "end of the run (Ctrl-C: extract from the logs there are now)", flush=True)
            said = True
        if pending:
            hurry.wait(2.0)
    if pending:
        why = "stopped waiting" if hurry.is_set() else f"did not record the end of the run within {timeout_s:.0f} s"
        warn(f"node(s) {', '.join(map(str, pending))}: {why}; extracting from the logs there are")
    return [run_dir / f"node{rank}" / "train.log" for rank in range(1, nnodes)
            if (run_dir / f"node{rank}" / "train.log").exists()]


def run_environment(launch: Launch, platform: str) -> dict[str, str]:
    """The platform's variables (utils/platform_env) as the run is started with them."""
    env = {**os.environ, **launch.env}
    return {key: env[key] for key in platform_env(platform) if key in env}


def record_environment(req: dict, result: dict, environment: dict[str, str], logs: list[Path]) -> list[str]:
    """Complete the result's effective settings with the run's environment (the mega trainer records its
    own) and the collective library's network from the logs; return what a reader must be warned of."""
    from evaluate.logs import effective_settings

    effective = result.setdefault("effective", {})
    effective.setdefault("environment", environment)
    if "collective_transport" not in effective:  # a trainer-written result: the library printed it
        effective.update({key: value for key, value in effective_settings(logs).items()
                          if key.startswith("collective_")})
    if req["nnodes"] > 1 and effective.get("collective_rdma") is False:
        return [f"the collective library connected the {req['nnodes']} nodes over TCP sockets "
                f"(network {effective['collective_transport']}), not RDMA: multi-node figures are a TCP network's; "
                "check /dev/infiniband on the hosts and NET_IB_HCA"]
    return []


def judge(req: dict, run_dir: Path, outcome: Outcome, environment: dict[str, str], hurry: threading.Event) -> str:
    """Final status of the run (ok | failed | incomplete | interrupted), written into result.json."""
    from utils.result import write_result

    logs = [run_dir / "train.log"] + other_node_logs(run_dir, req["nnodes"], hurry)
    result = collect_result(req, run_dir, outcome, logs)
    notes = record_environment(req, result, environment, logs)
    run = result["run"]
    problems = readback_problems(req, result)
    if outcome.exit_code != 0 and not outcome.interrupted and run["status"] == "ok":
        problems.append(f"the training process exited with code {outcome.exit_code}")
    if outcome.interrupted:
        run["status"] = "incomplete"
        stop = f"interrupted by {signal.Signals(outcome.stopped_by).name}"
        run["error_excerpt"] = (f"{stop} after step {run['steps_completed']} of {req['train_iters']}\n"
                                f"{run['error_excerpt'] or ''}").strip()
    elif problems:
        run["status"] = "failed"
        run["error_excerpt"] = "\n".join(problems + ([run["error_excerpt"]] if run["error_excerpt"] else []))
    result["warnings"] = list(dict.fromkeys(result["warnings"] + problems + outcome.warnings + notes))
    write_result(run_dir / "result.json", result)
    for problem in problems:
        print(f"[tprimat] {req['run_id']}: {problem}", file=sys.stderr, flush=True)
    return "interrupted" if outcome.interrupted else run["status"]


# --- One run, from the command line -------------------------------------------------------------------

def probe_system(path: Path) -> None:
    """system.json for a run started alone (shell/train.sh writes it once per run set)."""
    from utils import probe

    if probe.main(["-o", str(path)]) != 0:
        warn("the system probe failed: the result will have no system description")


def node_dir(run_dir: Path, node_rank: int) -> Path:
    """Where a node keeps its log and command: the run directory on node 0, node<N>/ inside it elsewhere."""
    return run_dir if node_rank == 0 else run_dir / f"node{node_rank}"


def resolve(args: argparse.Namespace) -> tuple[dict, Path]:
    """The run's request and directory (created) from the configuration and the flags."""
    env = {**os.environ, "PLATFORM": args.platform, "FRAMEWORK": args.framework, "MODELS": args.model}
    try:
        cfg = load_config(env)
    except ConfigError as err:
        raise InputError("; ".join(err.problems)) from None
    if cfg.frameworks != [args.framework]:
        raise InputError(f"{args.framework} does not run on {args.platform} "
                         f"({'; '.join(cfg.notes)}); use train/train_{args.platform}_<framework>_{args.model}.sh")
    if len(cfg.strategies) != 1:
        raise InputError(f"STRATEGY={cfg['STRATEGY']} names {len(cfg.strategies)} strategies; one run takes one "
                         "(a sweep is ./shell/run_train.sh)")
    strategy = cfg.strategies[0]
    missing = "; ".join(data_problems(cfg))
    if missing and not cfg["DRY_RUN"]:
        raise InputError(f"data not prepared: {missing} (or MOCK_DATA=1 for synthetic tokens)")
    if missing:
        warn(f"dry run: data not prepared: {missing}; a real run stops here until {PREPARE_COMMAND} prepared it")
    if not cfg["DRY_RUN"] and cfg.platform != "cpu" and args.framework in IN_THIS_PYTHON:
        # A torch that sees no GPU would train on the CPU (train/cpu_compat.py) a run labelled amd or nvd.
        problem = stack_problem(cfg.platform, [args.framework], sys.executable)
        if problem:
            raise InputError(f"PLATFORM={cfg.platform}: {problem}")
    if args.run_dir:
        run_dir = Path(args.run_dir).resolve()
    else:
        name = run_name(args.framework, args.model, strategy, args.repeat, named_strategy=strategy != CUSTOM,
                        repeats=1)
        run_set = os.environ.get("RUN_SET_DIR") or str(
            Path(cfg["OUTPUT_DIR"]) / f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{cfg.platform}")
        run_dir = Path(run_set) / name
    marker = run_dir / "config.json" if cfg["NODE_RANK"] == 0 else node_dir(run_dir, cfg["NODE_RANK"]) / "launch.json"
    if marker.exists():
        raise InputError(f"{marker.parent} already holds a run; nothing is overwritten: choose a new --run-dir")
    node_dir(run_dir, cfg["NODE_RANK"]).mkdir(parents=True, exist_ok=True)
    run = Run(run_dir.name, args.framework, args.model, strategy, args.repeat, cfg.layout(args.model, strategy))
    from utils.fingerprint import project_commit

    return {**request(cfg, run), "commit": project_commit()}, run_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m train.launch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", required=True, choices=("amd", "nvd", "cpu"))
    parser.add_argument("--framework", required=True, choices=("mega", "nemo", "prim"))
    parser.add_argument("--model", required=True, choices=("llama", "qwen"))
    parser.add_argument("--run-dir", help="directory of this run (default: a new one under OUTPUT_DIR or RUN_SET_DIR)")
    parser.add_argument("--repeat", type=int, default=1, help="repeat number of this run (1-based)")
    args = parser.parse_args(argv)
    try:
        req, run_dir = resolve(args)
    except InputError as err:
        print(f"[tprimat] error: {err}", file=sys.stderr)
        return EXIT_INPUT
    node_rank = req["config"]["NODE_RANK"]
    work_dir = node_dir(run_dir, node_rank)
    try:
        launch = prepare(req, run_dir, work_dir)
    except InputError as err:
        if not any(work_dir.iterdir()):
            work_dir.rmdir()
        print(f"[tprimat] error: {err}", file=sys.stderr)
        return EXIT_INPUT
    if node_rank == 0:
        write_json(run_dir / "config.json", req)
    dry_run = req["config"]["DRY_RUN"]
    record = {"run_id": req["run_id"], "node_rank": node_rank, **node_identity(launch), "command": launch.argv,
              "env": launch.env, "cwd": launch.cwd, "shell": launch.shell(), "generated": launch.generated,
              "dry_run": dry_run}
    write_json(work_dir / "launch.json", record)
    print(f"[tprimat] {req['run_id']}: {req['framework']} {req['variant']} {req['strategy']} "
          f"TP{req['tp']} PP{req['pp']} DP{req['dp']} GA{req['ga']} node {node_rank}/{req['nnodes']} -> {work_dir}",
          flush=True)
    print(f"[tprimat] command: {launch.shell()}", flush=True)
    if dry_run:
        print(f"[tprimat] dry run: wrote {', '.join(['config.json', 'launch.json'] + launch.generated)}; "
              "nothing trained", flush=True)
        return EXIT_OK
    if node_rank == 0 and not (run_dir.parent / "system.json").exists():
        probe_system(run_dir.parent / "system.json")
    outcome = execute(launch, work_dir / "train.log", req["platform"])
    # The run has ended: a stop signal now (a second Ctrl-C) cuts only the wait for the other nodes short,
    # never the record of the run.
    hurry = threading.Event()
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda _signum, _frame: hurry.set())
    if node_rank == 0:
        status = judge(req, run_dir, outcome, run_environment(launch, req["platform"]), hurry)
    else:  # node 0 judges the run from every node's log
        status = "interrupted" if outcome.interrupted else ("ok" if outcome.exit_code == 0 else "failed")
    record.update(status=status, exit_code=outcome.exit_code, started_at=outcome.started_at,
                  ended_at=outcome.ended_at, wall_s=round(outcome.wall_s, 1), warnings=outcome.warnings)
    write_json(work_dir / "launch.json", record)
    print(f"[tprimat] {req['run_id']}: {status} (exit code {outcome.exit_code}, {outcome.wall_s:.0f} s)", flush=True)
    if outcome.interrupted:
        return 128 + outcome.stopped_by
    return EXIT_OK if status == "ok" else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
