"""The benchmark matrix: every run of the plan into one new run set, then the summary, validation and comparison.

    python3 -m train.matrix      (shell/train.sh hands over to it in the chosen runtime)

Prints the run list (on the CPU, with one line for the GPU kernel libraries it lacks: utils/missing_stacks.py),
checks the data (on the CPU with the bundled sample corpus it prepares it) and, beside it, builds what a framework's
runs need built on this platform (on the CPU: torchtitan's and mbridge's own environments, autotp's collective op;
one it cannot build stops the run set, exit 2), probes
the system into system.json, checks the node's health (evaluate.health, as HEALTH says: warn records, strict
refuses an unhealthy node, off skips) and its acceptance (evaluate.acceptance, as ACCEPTANCE says: strict stops on
a failing node), then for each run writes the request it planned (train.plan.request) where
the launcher reads it (the run's config.json; node<N>/request.json on node N) and starts the launcher on it,
`python3 -m train.launch.run --request FILE`, in a process group of its own (a run its framework cannot do is
listed as skipped, with the reason, and not started): the configuration is loaded once for the whole run set,
here. Then it prints the summary table and runs evaluate.validate and evaluate.compare (as commands: train/ does
not import evaluate/). DRY_RUN=1: every run's command and generated
configuration, nothing trained. Multi-node: every node walks the same matrix; node 0 probes, prepares
the sample data when it is missing (the others wait for it) and writes the summary and report.
A stop signal (HUP, INT, QUIT, TERM) is passed to the run in progress, which records the stop; nothing
starts after it. Every setting comes from config.env and the environment (utils.config).
Exit: 0 every run ok, 1 a run failed, 2 bad configuration or missing data, 128+signal stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple, NoReturn

from train import plan
from train.launch import run as launcher
from train.launch import summary
from utils import ROOT, frameworks, missing_stacks
from utils.cli import STOP_SIGNALS, Parser, UsageError, say, warn
from utils.config import ConfigError, Config
from utils.config.workload import evaluation
from utils.datafiles import PREPARE, data_prefix, validation_split_size
from utils.files import DiskError
from utils.fingerprint import project_commit
from utils.machine.acceptance import arguments as acceptance_arguments
from utils.runset import SYSTEM_FILE, make_run_set, node_system_path

DATA_WAIT_S = 1800  # how long a node other than 0 waits for node 0's sample data (TPRIMAT_DATA_WAIT_S)
DATA_POLL_S = 5
LAUNCHER = "train/launch.sh"  # one run by hand: PLATFORM FRAMEWORK MODEL (the train_*.sh wrappers are its shortcuts)


def log(message: str) -> None:
    say(f"[tprimat] {message}")


def die(code: int, message: str) -> NoReturn:
    say(f"[tprimat] error: {message}")
    raise SystemExit(code)


class Stop:
    """The first stop signal, the run it arrived during, and the run in progress to pass every stop on to.

    The signal that reached the matrix's process group reached its tools (the probe, validate) already; a run
    leads a group of its own, so it gets each stop from here (a second one too: its launcher then kills at once)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self.during = ""
        self.running = ""  # the name of the run in progress
        self.group: int | None = None  # its process group
        self.run_set: Path | None = Path(os.environ["RUN_SET_DIR"]) if os.environ.get("RUN_SET_DIR") else None

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._received)

    def _received(self, signum: int, frame) -> None:
        if self.signal is None:
            self.signal, self.during = signum, self.running
        self._forward(signum)

    def _forward(self, signum: int) -> None:
        if self.group is not None:
            try:
                os.killpg(self.group, signum)
            except ProcessLookupError:
                pass

    def end_if_stopped(self) -> None:
        """After a stop nothing more starts: one line, and the exit status 128+signal."""
        if self.signal is None:
            return
        where = (f"; what finished is in {self.run_set} (python3 -m evaluate.validate {self.run_set})"
                 if self.run_set else "")
        warn(f"interrupted by {signal.Signals(self.signal).name}{f' during {self.during}' if self.during else ''}: "
             f"nothing more starts{where}")
        raise SystemExit(128 + self.signal)

    def run_in_group(self, name: str, argv: list[str], env: dict[str, str]) -> int:
        """Run one run in a process group of its own and wait until it has ended, whatever signals come."""
        self.running = name
        child = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, process_group=0)
        self.group = child.pid
        if self.signal is not None:  # arrived while the run was being started
            self._forward(self.signal)
        code = child.wait()
        self.group, self.running = None, ""
        return code


def python() -> str:
    """The project's Python as shell/train.sh chose it (the container's, TPRIMAT_PYTHON or .venv's)."""
    return os.environ.get("TPRIMAT_PYTHON") or sys.executable


def tool(*argv: str) -> int:
    """Run a project tool in the matrix's own process group (a stop reaches it directly); its exit status."""
    return subprocess.run([python(), "-m", *argv], cwd=ROOT).returncode


def check_data(cfg: Config, stop: Stop, beside: Beside) -> None:
    """Data for every model, verified; on the CPU with the bundled sample corpus, prepare it here, with the frameworks'
    environments built beside it (in a multi-node run only node 0 does; the other nodes wait for it)."""
    if plan.report_data_problems(cfg):
        refuse_short_validation(cfg)
        return
    stop.end_if_stopped()
    sample = cfg.platform == "cpu" and cfg["DATASET"] == "sample" and not cfg["DRY_RUN"]
    if sample and cfg["NODE_RANK"] != 0:
        wait_for_sample_data(cfg, stop)
    elif sample:
        log("preparing the bundled sample corpus (DATASET=sample on the CPU)")
        beside.start()
        if subprocess.run(["bash", str(ROOT / "shell" / "data.sh")], cwd=ROOT).returncode != 0:
            stop.end_if_stopped()
            die(1, "preparing the sample data failed (see above)")
        if not plan.report_data_problems(cfg):
            die(1, "the sample data is still missing after shell/data.sh")
        refuse_short_validation(cfg)
    elif cfg["DRY_RUN"]:
        warn(f"dry run: a real run would stop here until the data is prepared with {PREPARE}")
    elif not cfg["MOCK_DATA"]:
        die(2, f"prepare the data first: {PREPARE}")


def evaluation_problems(cfg: Config) -> list[str]:
    """One line per model whose prepared validation split holds no more tokens than EVAL_TOKENS, which one
    evaluation reads at least (each run rounds it up to whole global batches, a rounding the trainer still checks:
    train/common/megatron_data.py): refused before the run set exists instead of in every run. Call with the data
    proven."""
    wanted = evaluation(cfg.values)
    if not wanted.enabled or cfg["MOCK_DATA"]:
        return []
    problems = []
    for spec in cfg.models:
        documents, tokens = validation_split_size(data_prefix(cfg["DATA_DIR"], cfg["DATASET"], spec.key),
                                                  wanted.megatron_split())
        if tokens <= wanted.tokens:
            problems.append(f"EVAL_TOKENS={wanted.tokens}: one evaluation reads more than the {tokens:,} tokens "
                            f"({documents:,} documents) of {spec.key}'s validation split (VALIDATION_PERCENT="
                            f"{wanted.validation_percent} of DATASET={cfg['DATASET']}); lower EVAL_TOKENS or raise "
                            "VALIDATION_PERCENT")
    return problems


def refuse_short_validation(cfg: Config) -> None:
    """Exit 2 where the proven data's validation split is smaller than EVAL_TOKENS (one line per model)."""
    problems = evaluation_problems(cfg)
    for problem in problems[:-1]:
        say(f"[tprimat] error: {problem}")
    if problems:
        die(2, problems[-1])


def wait_for_sample_data(cfg: Config, stop: Stop) -> None:
    """Nodes other than 0: wait, for at most TPRIMAT_DATA_WAIT_S seconds, until node 0 has prepared the sample
    corpus and data.verify has written its manifests into the shared DATA_DIR."""
    node, data_dir = cfg["NODE_RANK"], cfg["DATA_DIR"]
    limit = os.environ.get("TPRIMAT_DATA_WAIT_S", str(DATA_WAIT_S))
    if not limit.isascii() or not limit.isdigit():
        die(2, f"TPRIMAT_DATA_WAIT_S={limit}: must be a number of seconds")
    deadline = time.monotonic() + int(limit)
    log(f"node {node}: waiting up to {limit} s for node 0 to prepare the sample corpus in {data_dir}")
    while plan.data_problems(cfg):
        if time.monotonic() >= deadline:
            die(1, f"node {node}: node 0's verified sample data did not appear in {data_dir} within {limit} s; "
                   f"DATA_DIR must be on a filesystem every node shares (or prepare the data on every node first: "
                   f"{PREPARE})")
        time.sleep(DATA_POLL_S)
        stop.end_if_stopped()
    log(f"node {node}: the sample corpus is ready")


def build_environments(cfg: Config, runs: list[plan.Run]) -> None:
    """The environment of each framework that needs one built on this platform (its entry's `environment`: torchtitan's
    and mbridge's own, autotp's collective op, on the CPU), built before the run set so that one it cannot build stops
    in one line (utils.errors.UsageError), before anything starts. A dry run builds nothing."""
    if cfg["DRY_RUN"]:
        return
    for name in dict.fromkeys(run.framework for run in runs if not run.skipped):
        entry = frameworks.TABLE[name]
        if entry.environment:
            frameworks.resolve(entry.environment)(cfg.platform)


class Beside(threading.Thread):
    """build_environments in a thread beside the data preparation: both are mostly one core's work (a compiler or an
    installer; the tokenizers and the sample index), so on a fresh machine they share its cores instead of taking
    turns. Its subprocesses are in the matrix's process group: a stop reaches them as it reaches the data stage."""

    def __init__(self, cfg: Config, runs: list[plan.Run]) -> None:
        super().__init__(name="environments", daemon=True)
        self.cfg, self.runs, self.failure = cfg, runs, None

    def run(self) -> None:
        try:
            build_environments(self.cfg, self.runs)
        except Exception as err:  # noqa: BLE001 - raised again in the matrix's own thread (finish)
            self.failure = err

    def finish(self, stop: Stop) -> None:
        """Wait for the builds (started now if the data needed no preparation), ending the matrix on a stop (checked
        twice a second) or on a build that failed."""
        if self.ident is None:
            self.start()
        while self.is_alive():
            self.join(timeout=0.5)
            stop.end_if_stopped()
        if isinstance(self.failure, UsageError):
            die(2, str(self.failure))
        if self.failure is not None:
            raise self.failure


def container_command(platform: str, script: str, args: list[str]) -> str:
    """DRY_RUN in a container: the `docker run` line that starts the same run from the host (shell/lib.sh's)."""
    words = ["bash", "-c", 'source "$1"; shift; tp_docker_command_line "$@"', "tprimat",
             str(ROOT / "shell" / "lib.sh"), platform, "tprimat-train", "bash", script, *args]
    return subprocess.run(words, cwd=ROOT, stdout=subprocess.PIPE, text=True).stdout


class NodeCheck(NamedTuple):
    """One of the node's checks before the first run, and what its lines say."""
    what: str  # its name in the lines
    knob: str  # strict | warn | off
    argv: list[str]  # the tool and its arguments
    on_dry_run: bool  # a dry run checks it too
    strict_refusal: str  # why a node that fails it under strict is refused, and the way out
    broken: str  # what the results lack when the tool itself failed


def check_node(cfg: Config, run_set: Path, stop: Stop, check: NodeCheck) -> None:
    """A node check as its knob says: warn prints and records it (utils.runset.node_system_path: node 0's in the run
    set's system.json, the others' beside it, and every result carries them all), strict stops the matrix on a node
    that fails it (exit 1 of the tool), off skips it."""
    if cfg[check.knob] == "off" or (cfg["DRY_RUN"] and not check.on_dry_run):
        log(f"{check.what}: not checked ({f'{check.knob}=off' if cfg[check.knob] == 'off' else 'dry run'})")
        return
    code = tool(*check.argv, "--strict", "--record", str(node_system_path(run_set, cfg["NODE_RANK"])))
    stop.end_if_stopped()
    if code == 1 and cfg[check.knob] == "strict":
        die(2, f"{check.knob}=strict: {check.strict_refusal}, or {check.knob}=warn to record it and go on")
    if code not in (0, 1):
        warn(f"the {check.what} check failed (exit code {code}): {check.broken}")


def node_checks(cfg: Config) -> list[NodeCheck]:
    """The node's health (evaluate.health: ECC, power caps, links, stale memory), then its acceptance
    (evaluate.acceptance: GEMM, memory and collective bandwidth against the device's specification)."""
    return [NodeCheck("node health", "HEALTH", ["evaluate.health", "--platform", cfg.platform], True,
                      "this node has the problems listed above; fix them",
                      "results will not say whether the node was healthy"),
            NodeCheck("acceptance", "ACCEPTANCE", ["evaluate.acceptance", *acceptance_arguments(cfg)], False,
                      "this node failed acceptance (the lines above name the GPU or collective); replace it",
                      "results will carry no measured ceiling")]


def hand_over(cfg: Config, run: plan.Run, run_set: Path, commit: str | None) -> list[str] | None:
    """The run's request (train.plan.request) written where its launcher reads it, and the launcher's command on
    it; None, with the line said, when the run directory already holds a run or the disk refuses the request."""
    req = plan.request(cfg, run, commit=commit)
    run_dir, node = run_set / run.name, req.environment.node_rank
    try:
        launcher.claim(run_dir, node, instead="choose a new RUN_SET_DIR")
        path = launcher.request_path(run_dir, node)
        req.write(path)
    except (UsageError, DiskError) as err:
        say(f"[tprimat] error: {err}")
        return None
    return [python(), "-m", "train.launch.run", "--request", str(path)]


def run_matrix(cfg: Config, runs: list[plan.Run], run_set: Path, stop: Stop) -> tuple[list[str], bool]:
    """Each run into its own directory of the run set, until a stop; the names started and whether one failed."""
    names, failed = [], False
    commit = project_commit()  # the checkout's, once for the run set
    for index, run in enumerate(runs, 1):
        if stop.signal is not None:
            break
        if run.skipped:
            log(f"run {index}/{len(runs)}: {run.name} skipped: {run.skipped}")
            continue
        names.append(run.name)
        log(f"run {index}/{len(runs)}: {run.name}")
        if cfg["DRY_RUN"] and os.environ.get("TPRIMAT_RUNTIME") == "docker":
            by_hand = [cfg.platform, run.framework, run.model, "--run-dir", str(run_set / run.name),
                       "--repeat", str(run.repeat)]
            log(f"from the host: {container_command(cfg.platform, LAUNCHER, by_hand)}")
        command = hand_over(cfg, run, run_set, commit)
        if command is None or stop.run_in_group(run.name, command, dict(os.environ)) != 0:
            failed = True
    return names, failed


def summarise(run_set: Path, names: list[str], runs: list[plan.Run]) -> int:
    """train.launch.summary's table of the runs started, with the skipped ones counted; its exit status."""
    skipped = [f"--skipped={run.name}: {run.skipped}" for run in runs if run.skipped]
    return summary.main([str(run_set), *names, *skipped])


def report(cfg: Config, run_set: Path, runs: list[plan.Run], names: list[str], failed: bool, stop: Stop) -> bool:
    """Node 0: the summary table, then evaluate.validate and evaluate.compare; whether anything failed."""
    if summarise(run_set, names, runs) != 0:
        failed = True
    stop.end_if_stopped()
    if cfg["DRY_RUN"]:
        log(f"dry run: commands and generated configurations are in {run_set}; nothing was trained")
        return failed
    if tool("evaluate.validate", str(run_set)) != 0:
        stop.end_if_stopped()
        warn("validation found problems (listed above)")
    stop.end_if_stopped()
    if tool("evaluate.compare", str(run_set), "-o", str(run_set)) != 0:
        stop.end_if_stopped()
        warn("the comparison failed")
        failed = True
    stop.end_if_stopped()
    log(f"results: {run_set}")
    return failed


def main(argv: list[str] | None = None) -> int:
    Parser(prog="python3 -m train.matrix", description=__doc__.split("\n\n")[0]).parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # the runs write to the same stdout, in order
    stop = Stop()
    stop.install()
    try:
        cfg = plan.load_config()
    except ConfigError as err:
        err.report("train.matrix")
        return 2
    runs = plan.importable(cfg, plan.build_plan(cfg))
    print("\n".join(plan.table(cfg, runs)))
    if not any(not run.skipped for run in runs):
        die(2, "the run list has nothing to run (each skip's reason is on its line); check FRAMEWORK, MODELS, STRATEGY and PRECISION")
    if cfg.platform == "cpu" and not cfg["DRY_RUN"] and (missing := missing_stacks.notice()):
        log(missing)  # instead of megatron-core's warnings from every process (utils/missing_stacks.py)
    environments = Beside(cfg, runs)
    check_data(cfg, stop, environments)
    stop.end_if_stopped()
    environments.finish(stop)
    try:
        stop.run_set = run_set = make_run_set(cfg["OUTPUT_DIR"], cfg.platform, os.environ.get("RUN_SET_DIR"))
    except UsageError as err:
        die(2, str(err))
    os.environ["RUN_SET_DIR"] = str(run_set)
    log(f"run set: {run_set}")
    node = cfg["NODE_RANK"]
    if node == 0 and tool("evaluate.probe", "-o", str(run_set / SYSTEM_FILE)) != 0:
        stop.end_if_stopped()
        warn("the system probe failed: results will have no system description")
    for check in node_checks(cfg):
        check_node(cfg, run_set, stop, check)
    names, failed = run_matrix(cfg, runs, run_set, stop)
    if stop.signal is not None and node == 0 and names:
        try:
            summarise(run_set, names, runs)
        except OSError:  # after a hangup the terminal may be gone: the exit status still says what happened
            pass
    stop.end_if_stopped()
    if node != 0:
        log(f"node {node}: done; node 0 writes the summary")
        return int(failed)
    return int(report(cfg, run_set, runs, names, failed, stop))


if __name__ == "__main__":
    sys.exit(main())
