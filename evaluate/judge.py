"""Judge one run once it has ended, and write its result.json: the one writer of a run's result.

    python3 -m evaluate.judge RUN_DIR

The launcher (train/launch/process.py) runs this on node 0 after the run, with the run directory it wrote:
config.json (the request, utils.spec.request) and launch.json (the command and its outcome: exit_code,
started_at, ended_at, warnings, stopped_by, environment). A TPrimat trainer started by hand (train/common/cli.py)
leaves config.json and its account, trainer.json, which stand in for launch.json. A multi-node run's other nodes
keep theirs in node<N>/; their logs are waited for (at most NODE_WAIT_S; a stop signal cuts the wait short) and read
with node 0's. The result is made from the trainer's records (mega, fsdp, autotp: utils.frameworks' own_trainer;
evaluate/trainer_account.py), else extracted from the logs (evaluate.extract), else, for a run that never logged a
step or a torch-native trainer that recorded nothing, a result with no figures naming why. Then the settings the
framework reports are compared with the request (a torch-native framework's own settings too, those it reads back:
evaluate/native_settings.py): a mismatch, a layout it does not report, synthetic or other data than requested fail
the run; a stopped run is incomplete. Every result, whatever its framework, gets a telemetry section from the nodes'
telemetry.jsonl (utils/machine/energy.py; TELEMETRY=0: a section saying so) and, where it can be told, a stragglers
section (utils/machine/stragglers.py), with a warning for a steady-state throttle or a straggler. result.json is
written once, atomically.

Exit 0: result.json written (its run.status is the verdict); 2: RUN_DIR holds no readable request, or neither a
launch record nor a trainer's account.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from utils import run_files
from evaluate import extract, machine_checks, native_settings, telemetry_checks, trainer_account
from evaluate.logs import worker_failure
from evaluate.collect import Loaded, first_problem
from evaluate.logs.files import step_end_times
from evaluate.logs.parse import collective_network
from evaluate.validate import check_result
from utils.machine import energy, stragglers, telemetry
from utils import predict
from utils.cli import STOP_SIGNALS, Parser, SignalFlag, UsageError, WorkError, quoted, run, warn
from utils.files import parse_json, read_bounded
from utils.frameworks import TABLE
from utils.spec.request import Request, RequestError
from utils.spec.result import ResultError, build_result, write_result
from utils.spec.result_types import typed

NODE_WAIT_S = 300.0  # node 0 waits this long for the other nodes' logs of a multi-node run
# evaluate.validate's checks that fail a run at once: settings read back from the framework's log
# differ from the request, or it trained on synthetic data although real data was requested.
# So do those that find a figure the run did not earn (evaluate/integrity.py, validate's figures and step times):
# result.json then says failed, as validate and the report do (one verdict).
READBACK_CHECKS = ("effective settings", "real data", "series", "window", "memory", "figures", "step times")
# What a framework's log must report for its layout and batch to count as applied.
REQUIRED_READBACK = ("tp", "pp", "mbs", "gbs", "seq_len", "precision")


@dataclass(frozen=True)
class Ended:
    """How the run ended, as node 0's launch.json records it."""

    exit_code: int
    started_at: str
    ended_at: str
    warnings: list[str]
    stopped_by: int | None  # the stop signal that ended the run, if one did
    environment: dict[str, str]  # the platform's variables the run was started with (utils/machine/platform_env)
    log_error: str | None = None  # why train.log is incomplete (a write the disk refused), failing the run

    @property
    def interrupted(self) -> bool:
        return self.stopped_by is not None

    @classmethod
    def of_trainer(cls, run_dir: Path) -> "Ended":
        """How a run started by hand ended, from its trainer's account (there is no launcher's record)."""
        try:
            account = trainer_account.read_account(run_dir)
        except (OSError, ValueError) as err:
            raise UsageError(f"{run_dir}: no launch record ({run_files.LAUNCH}) and no trainer's account "
                             f"({run_files.TRAINER}: {err}); judge a run directory whose run has ended") from None
        code = int(account["exit_code"])
        stopped = code - 128 if account["status"] == "incomplete" and code > 128 else None
        return cls(code, account["started_at"], account["ended_at"], [], stopped,
                   dict((account["effective"] or {}).get("environment") or {}))

    @classmethod
    def read(cls, path: Path) -> "Ended":
        try:
            record = parse_json(read_bounded(path))
            return cls(int(record["exit_code"]), record["started_at"], record["ended_at"],
                       list(record.get("warnings") or []), record.get("stopped_by"),
                       dict(record.get("environment") or {}), record.get("log_error"))
        except OSError as err:
            raise UsageError(f"{path}: cannot read the launch record ({err.strerror}); judge a run directory "
                             "whose run has ended") from None
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise UsageError(f"{path}: no outcome of a run in it ({type(err).__name__}: {err}); judge a run "
                             "directory whose run has ended") from None


def log_tail(log_path: Path, lines: int = 20) -> str:
    """The log's last lines, tokens redacted (for a result's error excerpt)."""
    try:
        text = log_path.read_bytes()[-20000:].decode("utf-8", "replace")
    except OSError:
        return ""
    return extract.redact("\n".join(text.replace("\r\n", "\n").splitlines()[-lines:]))


def worker_excerpt(record: dict, logs: list[Path]) -> None:
    """A run that did not end ok and whose log reports a worker torchrun lost: failed, with that worker named first
    in its excerpt (rank, host, signal or exit code, its last lines) instead of torchrun's closing line."""
    head = next((found for log in logs if (found := worker_failure.summary(worker_failure.log_tail_lines(log)))),
                None)
    if head is None:
        return
    record["status"] = "failed"
    excerpt = record["error_excerpt"] or ""
    if not excerpt.startswith(head):
        record["error_excerpt"] = extract.redact(f"{head}\n{excerpt}".strip())


def start_failure_result(request: Request, run_dir: Path, ended: Ended, why: str) -> dict:
    """The result of a run that never reached its first step: no figures, the reason and the log's end."""
    tail = log_tail(run_dir / run_files.LOG)
    try:
        system = extract.find_system(run_dir, None, [])
    except UsageError:  # a damaged system.json: the run's record matters more than its description
        system = {}
    return build_result(
        run={"id": request.identity.run_id, "started_at": ended.started_at, "ended_at": ended.ended_at,
             "status": "incomplete" if ended.interrupted else "failed", "exit_code": ended.exit_code,
             "error_excerpt": f"{why}\n{tail}".strip(), "commit": None, "source": "extract",
             "log_files": [str(run_dir / run_files.LOG)]},
        **request.result_sections(), system=system, steps=[],
        device_name=(system.get("gpu") or {}).get("name"), warnings=ended.warnings)


def collect_result(request: Request, run_dir: Path, ended: Ended, logs: list[Path]) -> dict:
    """The run's result, not yet judged: made from its trainer's records (TPrimat's own trainers: trainer.json,
    steps.jsonl, evals.jsonl; evaluate/trainer_account.py), else extracted from the nodes' logs in the framework's log
    format (its entry's log_format), else a result with no figures naming why."""
    framework, entry = request.identity.framework, TABLE[request.identity.framework]
    exited = f"exit code {ended.exit_code}; " if ended.exit_code else ""
    if entry.own_trainer and (run_dir / run_files.TRAINER).exists():
        notes: list[str] = []
        try:
            result = trainer_account.result(request, run_dir, extract.find_system(run_dir, None, notes), notes)
        except (UsageError, ValueError, KeyError, TypeError) as err:
            return start_failure_result(request, run_dir, ended, f"{exited}its trainer's records make no result "
                                                                 f"({type(err).__name__}: {quoted(str(err))})")
    elif entry.log_format is None:
        return start_failure_result(request, run_dir, ended, f"{exited}the {framework} trainer recorded no account of "
                                    f"its run ({run_files.TRAINER}) and its log is no format evaluate.extract reads")
    else:
        args = extract.parse_args([*map(str, logs), "--framework", framework, "--run-dir", str(run_dir),
                                   "--exit-code", str(ended.exit_code), "--started-at", ended.started_at,
                                   "--ended-at", ended.ended_at, "-o", str(run_dir / run_files.RESULT)])
        try:
            result = extract.result_of(args)
        except (UsageError, WorkError, ResultError) as err:
            print(f"evaluate.extract: {err}", file=sys.stderr, flush=True)
            result = None
        if result is None or not result["series"]["step"]:
            return start_failure_result(request, run_dir, ended, f"{exited}no training step in the log (see "
                                                                 "evaluate.extract's message above)")
    problem = first_problem(result)
    return start_failure_result(request, run_dir, ended, f"its result is no result ({problem})") if problem else result


def readback_problems(request: Request, result: dict) -> list[str]:
    """Where the framework's own report differs from the request (one line per setting; a torch-native one's own
    settings too), synthetic data where real data was requested, or a log that does not report the layout at all."""
    read = typed(result)
    settings = read.effective.extra  # what the framework reported, by the request's names
    framework = request.identity.framework
    problems = []
    if not TABLE[framework].own_trainer and read.run.steps_completed > 0:  # a trainer reports its own
        missing = [key for key in REQUIRED_READBACK if settings.get(key) is None]
        if missing:
            problems.append(f"the {framework} log does not report {', '.join(missing)}: "
                            "cannot confirm the requested settings were applied")
    problems += [f"{finding.check}: {finding.message}" for finding in check_result(Loaded("", result, {}))
                 if finding.fatal and finding.check in READBACK_CHECKS]
    problems += [f"effective settings: {problem}"
                 for problem in native_settings.readback_problems(request.native, result)]
    reported = settings.get("data_path")
    if not request.data.mock_data and reported is not None:
        paths = data_paths(reported)
        if {os.path.normpath(p) for p in paths} != {os.path.normpath(request.data.prefix)}:
            problems.append(f"data_path: the framework read {', '.join(paths) or repr(reported)}, "
                            f"requested {request.data.prefix}")
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


def other_node_logs(run_dir: Path, nnodes: int, hurry: SignalFlag, timeout_s: float = NODE_WAIT_S) -> list[Path]:
    """The other nodes' train.log once each has recorded its end (Megatron and Primus print their
    iteration lines on the last rank, which lives on the last node); waits at most timeout_s, or until
    hurry is set (a stop signal)."""
    deadline = time.monotonic() + timeout_s
    pending = {rank: run_dir / f"node{rank}" for rank in range(1, nnodes)}
    said = False
    while pending and time.monotonic() < deadline and not hurry.is_set():
        for rank, node_dir in list(pending.items()):
            try:
                if "exit_code" in json.loads((node_dir / run_files.LAUNCH).read_text()):
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
    return [run_dir / f"node{rank}" / run_files.LOG for rank in range(1, nnodes)
            if (run_dir / f"node{rank}" / run_files.LOG).exists()]


def record_environment(nnodes: int, result: dict, environment: dict[str, str], logs: list[Path]) -> list[str]:
    """Complete the result's effective settings with the run's environment (the mega trainer records its
    own) and the collective library's network from the logs; return what a reader must be warned of."""
    effective = result.setdefault("effective", {})
    effective.setdefault("environment", environment)
    if "collective_transport" not in effective:  # a trainer-written result: the library printed it
        effective.update(collective_network(logs))
    if nnodes > 1 and effective.get("collective_rdma") is False:
        return [f"the collective library connected the {nnodes} nodes over TCP sockets "
                f"(network {effective['collective_transport']}), not RDMA: multi-node figures are a TCP network's; "
                "check /dev/infiniband on the hosts and NET_IB_HCA"]
    return []


def step_clock(run_dir: Path, result: dict, ended: Ended) -> tuple[list[energy.Step], str]:
    """Each step's end on telemetry.jsonl's clock (evaluate.telemetry_checks.step_clock, which validate recomputes the
    section on too), from the run directory's files."""
    return telemetry_checks.step_clock(result, lambda: (run_dir / run_files.STEPS).read_text(encoding="utf-8"),
                                       lambda: step_end_times(run_dir / run_files.LOG), ended.ended_at)


# What a side file of a shape no check foresaw raises while its section is made: the section is left out, naming it.
SIDE_FILE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, RecursionError, OSError)


def left_out(interval_ms: int | None, reason: str) -> dict:
    """A telemetry section without figures, saying why: the run's verdict does not depend on its side files."""
    return {"enabled": True, "method": None, "interval_ms": interval_ms, "complete": False,
            "note": f"telemetry left out: {reason}"}


def telemetry_section(request: Request, run_dir: Path, result: dict, ended: Ended,
                      window_steps: tuple[int, int] | None) -> dict:
    """The telemetry section from every node's telemetry.jsonl; left out (left_out) where a file has a malformed
    line or its figures are no device's (power outside the idle floor and board power, energy that did not move)."""
    env, lay = request.environment, request.parallelism
    paths = [run_dir / telemetry.FILE] + [run_dir / f"node{n}" / telemetry.FILE for n in range(1, lay.nnodes)]
    records = [telemetry.read(path) for path in paths if path.exists()]
    bad = [line for record in records for line in record.bad_lines]
    if bad:
        count = sum(record.bad_count for record in records)
        return left_out(env.telemetry_interval_ms, f"{bad[0]}" + (f" (and {count - 1} more)" if count > 1 else ""))
    steps, clock = step_clock(run_dir, result, ended)
    training = typed(result).training  # what ran: an extracted result's batch is its log's
    per_node = None if request.identity.platform == "cpu" else max(1, lay.num_gpus // lay.nnodes)
    section = energy.summarise(records, steps, window_steps, training.gbs * training.seq_len,
                               env.telemetry_interval_ms, clock, per_node)
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        section["complete"] = False
        section["note"] = "; ".join(filter(None, [section["note"], "no telemetry record: " + ", ".join(missing)]))
    system = typed(result).system.as_dict()
    impossible = [p.message for p in machine_checks.power({**result, "telemetry": section}, system)
                  + machine_checks.energy_moves({**result, "telemetry": section}, system) if p.fatal]
    return left_out(env.telemetry_interval_ms, impossible[0]) if impossible else section


def machine_sections(request: Request, run_dir: Path, result: dict, ended: Ended) -> list[str]:
    """The result's telemetry section (utils/machine/energy.py, from every node's telemetry.jsonl) and stragglers section
    (utils/machine/stragglers.py: each rank's own step times, else each GPU's telemetry); the warnings they raise. A
    malformed side file leaves its section out with the reason, named in a warning: never a crash of the judge."""
    env = request.environment
    window_steps = stragglers.steady_window(result)
    notes = []
    if not env.telemetry:
        result["telemetry"] = energy.off_section()
    else:
        try:
            result["telemetry"] = telemetry_section(request, run_dir, result, ended, window_steps)
        except SIDE_FILE_ERRORS as err:
            result["telemetry"] = left_out(env.telemetry_interval_ms, f"{type(err).__name__}: {quoted(str(err))}")
        if result["telemetry"]["note"] and result["telemetry"]["note"].startswith("telemetry left out: "):
            notes.append(result["telemetry"]["note"])
    notes += energy.throttle_warnings(result["telemetry"])
    try:
        found = stragglers.section(stragglers.read_rank_steps(stragglers.rank_files(run_dir)), window_steps,
                                   result["telemetry"].get("per_gpu", []) if env.telemetry else [])
    except SIDE_FILE_ERRORS as err:
        found = None
        notes.append(f"stragglers left out: {quoted(str(err))}")
    if found is not None:
        result["stragglers"] = found
        notes += [line for line in [stragglers.warning(found)] if line]
    return notes


def judge(request: Request, run_dir: Path, ended: Ended, hurry: SignalFlag) -> str:
    """Final status of the run (ok | failed | incomplete | interrupted), written into result.json."""
    nnodes = request.parallelism.nnodes
    own = run_dir / run_files.LOG  # none for a trainer started by hand: its console was the caller's
    logs = [own] * own.exists() + other_node_logs(run_dir, nnodes, hurry)
    result = collect_result(request, run_dir, ended, logs)
    notes = record_environment(nnodes, result, ended.environment, logs)
    notes += machine_sections(request, run_dir, result, ended)
    result["prediction"] = predict.result_section(request, result)
    record = result["run"]
    problems = readback_problems(request, result)
    if ended.exit_code != 0 and not ended.interrupted and record["status"] == "ok":
        problems.append(f"the training process exited with code {ended.exit_code}")
    if ended.log_error:
        problems.insert(0, f"train.log is incomplete: {ended.log_error}")
    if ended.interrupted:
        record["status"] = "incomplete"
        stop = f"interrupted by {signal.Signals(ended.stopped_by).name}"
        record["error_excerpt"] = (f"{stop} after step {record['steps_completed']} of {request.training.steps}\n"
                                   f"{record['error_excerpt'] or ''}").strip()
    elif problems:
        record["status"] = "failed"
        record["error_excerpt"] = "\n".join(problems + ([record["error_excerpt"]] if record["error_excerpt"] else []))
    if not ended.interrupted and record["status"] != "ok":
        worker_excerpt(record, logs)
    result["warnings"] = list(dict.fromkeys(result["warnings"] + problems + ended.warnings + notes))
    write_result(run_dir / run_files.RESULT, result)
    for problem in problems:
        print(f"[tprimat] {request.identity.run_id}: {problem}", file=sys.stderr, flush=True)
    for note in notes:
        if note.startswith(("telemetry left out: ", "stragglers left out: ")):
            warn(f"{request.identity.run_id}: {note}")
    return "interrupted" if ended.interrupted else record["status"]


def main(argv: list[str] | None = None) -> int:
    # The run has ended: a stop signal now (a second Ctrl-C) cuts only the wait for the other nodes short,
    # never the record of the run.
    hurry = SignalFlag()
    for sig in STOP_SIGNALS:
        signal.signal(sig, hurry.set)
    parser = Parser(prog="python3 -m evaluate.judge", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run's directory (node 0's)")
    args = parser.parse_args(argv)
    try:
        request = Request.read(args.run_dir / run_files.REQUEST)
    except RequestError as err:
        raise UsageError(str(err)) from None
    launch = args.run_dir / run_files.LAUNCH
    ended = Ended.read(launch) if launch.exists() or not (args.run_dir / run_files.TRAINER).exists() \
        else Ended.of_trainer(args.run_dir)
    judge(request, args.run_dir, ended, hurry)
    return 0


if __name__ == "__main__":
    run(main, "evaluate.judge")
