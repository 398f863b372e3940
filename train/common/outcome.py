"""How a TPrimat trainer's run ends (mega, fsdp, autotp): trained, or failed or stopped, and always with its account
(RUN_DIR/trainer.json, written by the last rank), from which the judge makes the result.

A framework hands train_and_report a `start(req, source, run_dir, inject_nan_step)` that initialises
distributed and returns its trainer object: a RunRecord (what the account is made of as the run goes) with build(),
train(), breakdown_method (how the step's forward/backward/optimizer seconds were timed; None where they are not
measured) and reduce_step_record(step, elapsed, ...), which every rank
calls as a step ends: train_and_report wraps it so that each rank writes its own step times
(train.common.step_log.RankSteps, for the straggler check) and each step record carries its end on the telemetry's clock.

A crash, an out-of-memory error or a NaN loss still ends in an account with status failed: a failing rank leaves
its traceback in RUN_DIR/error_rank<N>.txt, and the last rank quotes the other ranks' errors in its own. The trainer
emits events only (steps.jsonl, evals.jsonl, trainer.json): the judge (evaluate/judge.py, evaluate/trainer_account.py)
is the one writer of result.json, its identity, layout and workload from the request (Request.result_sections), its
figures from utils.spec.metrics through utils.spec.result.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from typing import Any, Callable

from utils import run_files
from train.common.evaluation import EVALS_FILE, Evaluator
from train.common.step_log import RankSteps, StepLog, is_last_rank
from train.common import cpu_compat
from train.common.megatron_data import DataError, DataSource, locate
from train.common.settings_file import SettingsError  # noqa: F401 (raised by the trainers as outcome.SettingsError)
from utils.machine import platform_env
from utils.cli import now_iso
from utils.files import DiskError, atomic_open
from utils.fingerprint import project_commit
from utils.spec.request import Request

EXCERPT_LINES = 20
EXCERPT_LINE_CHARS = 500  # a DTensor sharding error prints every tensor's spec on one line of many kilobytes
PEER_ERROR_WAIT_S = 3.0  # how long the last rank waits for another rank's error report when it fails

Start = Callable[[Request, DataSource, Path, "int | None"], Any]  # (request, data, run dir, nan step) -> trainer


@dataclass(kw_only=True)
class RunRecord:
    """What a TPrimat trainer keeps for its account as it builds and trains (train_and_report writes it): each trainer's
    state derives from it, its own fields first."""

    notes: list[str] = field(default_factory=list)
    effective: dict = field(default_factory=dict)  # the settings read back from the built run
    features: dict = field(default_factory=dict)
    host_rss_gib_per_worker: list[float] = field(default_factory=list)
    log: StepLog | None = None
    evaluator: Evaluator | None = None  # EVAL_INTERVAL > 0: the held-out validation (train/common/evaluation.py)


class NonFiniteLoss(RuntimeError):
    """The loss or the gradient norm of a step was nan or inf: the run stops as failed."""


def check_device(platform: str) -> None:
    """A result names the hardware that really trained: a GPU platform needs a torch that sees its GPUs
    (else the trainer would train on the CPU under an amd/nvd label), and the CPU platform must not train
    on a GPU torch happens to see."""
    if platform != "cpu" and not torch.cuda.is_available():
        raise SettingsError(f"PLATFORM={platform}: torch {torch.__version__} sees no GPU; run in the container "
                            "runtime (./shell/run_train.sh on a node with a Docker engine) or set TPRIMAT_PYTHON to "
                            "a Python with the vendor's GPU stack")
    if platform == "cpu" and torch.cuda.is_available():
        raise SettingsError("PLATFORM=cpu, but torch sees a GPU: hide it (CUDA_VISIBLE_DEVICES= HIP_VISIBLE_DEVICES=) "
                            "or run the GPU platform (unset PLATFORM)")


class Stopped(BaseException):
    """The process received SIGTERM or SIGINT (torchrun stops every worker when one fails)."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by signal {signal.Signals(signum).name}")
        self.signum = signum


def _raise_stopped(signum: int, _frame) -> None:
    raise Stopped(signum)


def _error_file(run_dir: Path, rank: int) -> Path:
    return run_dir / f"error_rank{rank}.txt"


def _excerpt(text: str, lines: int = EXCERPT_LINES) -> str:
    return "\n".join(line if len(line) <= EXCERPT_LINE_CHARS else line[:EXCERPT_LINE_CHARS] + " [...]"
                     for line in text.strip().splitlines()[-lines:])


def _peer_errors(run_dir: Path, rank: int, wait: bool, own: str) -> str:
    """The last lines of errors other ranks left in the run directory, unless they repeat this rank's own."""
    deadline = time.monotonic() + (PEER_ERROR_WAIT_S if wait else 0.0)
    while True:
        found = sorted(p for p in run_dir.glob("error_rank*.txt") if p != _error_file(run_dir, rank))
        if found or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    reports = {p.stem: _excerpt(p.read_text(), 5) for p in found}
    return "\n".join(f"[{name}] {text}" for name, text in reports.items() if text != _excerpt(own, 5))


def nonfinite(records: list) -> list[dict]:
    """The step values that were nan or inf (steps.jsonl writes them as null): the judge lists them in the result."""
    return [{"step": record.step, "field": key} for record in records for key, value in asdict(record).items()
            if isinstance(value, float) and not math.isfinite(value)]


def account(req: Request, trainer: Any, source: DataSource | None, *, started_at: str, status: str, exit_code: int,
            error: str | None) -> dict:
    """The trainer's account of its run (RUN_DIR/trainer.json): how it ended and what it read back; with steps.jsonl
    and evals.jsonl, what the judge (evaluate/trainer_account.py) makes the result of."""
    evaluator = trainer.evaluator if trainer is not None else None
    return {"status": status, "exit_code": exit_code, "error_excerpt": error, "started_at": started_at,
            "ended_at": now_iso(), "commit": project_commit(),
            "device_name": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "dataset_fingerprint": source.fingerprint if source else None,
            "tokenizer_fingerprint": source.tokenizer_fingerprint if source else None,
            "notes": list(trainer.notes) if trainer is not None else [],
            "effective": trainer.effective if trainer is not None else {},
            "features": trainer.features if trainer is not None else {},
            "host_rss_gib_per_worker": list(trainer.host_rss_gib_per_worker) if trainer is not None else [],
            "breakdown_method": trainer.breakdown_method if trainer is not None else None,
            "nonfinite": nonfinite(trainer.log.records) if trainer is not None and trainer.log is not None else [],
            "evaluation": evaluator.account() if evaluator is not None else None}


def write_account(path: Path, record: dict) -> None:
    """trainer.json, whole or not at all (a temporary name, then renamed)."""
    with atomic_open(path, encoding="utf-8") as out:
        json.dump(record, out, indent=1, default=str, allow_nan=False)
        out.write("\n")


def train_and_report(req: Request, run_dir: Path, start: Start, tool: str, inject_nan_step: int | None = None) -> int:
    """Train one run with the trainer start() returns and write its account (last rank); returns the process exit
    status. tool names the trainer in its one-line errors."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    last = is_last_rank()
    started_at = now_iso()
    trainer: Any = None
    source: DataSource | None = None
    rank_steps: RankSteps | None = None
    status, code, error = "ok", 0, None
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _raise_stopped)
    cpu_compat.quiet(req.identity.platform)
    try:
        env = platform_env.apply(req.identity.platform, framework=req.identity.framework, stack=req.stack.name)
        check_device(req.identity.platform)
        source = locate(req.data, req.model)
        trainer = start(req, source, run_dir, inject_nan_step)
        trainer.build()
        trainer.effective["environment"] = env
        if last:
            trainer.log = StepLog(run_dir / run_files.STEPS)
            if trainer.evaluator is not None:
                trainer.evaluator.log = StepLog(run_dir / EVALS_FILE)
            print(f"TPRIMAT_EFFECTIVE {json.dumps(trainer.effective, default=str)}", flush=True)
        rank_steps = RankSteps(run_dir, rank, int(os.environ.get("LOCAL_RANK", "0")))
        trainer.reduce_step_record = rank_steps.timed(trainer.reduce_step_record)
        trainer.train()
    except (DataError, SettingsError, NonFiniteLoss) as err:  # the same on every rank: reported once
        status, code, error = "failed", 1 if isinstance(err, NonFiniteLoss) else 2, str(err)
        if last:
            print(f"{tool}: {err}", file=sys.stderr, flush=True)
    except DiskError as err:  # this rank's steps.jsonl: the machine's fault, one line, no traceback
        status, code, error = "failed", 1, str(err)
        print(f"{tool}: error: {err}", file=sys.stderr, flush=True)
    except Stopped as stop:
        peers = _peer_errors(run_dir, rank, wait=True, own="")
        status, code = ("failed" if peers else "incomplete"), 128 + stop.signum
        error = "\n".join(part for part in (str(stop), peers) if part)
    except BaseException:  # noqa: BLE001 - every failure must still end in an account
        text = traceback.format_exc()
        print(text, file=sys.stderr, flush=True)
        status, code = "failed", 1
        if not last:
            with atomic_open(_error_file(run_dir, rank)) as report:  # the last rank may be reading it
                report.write(text)
        peers = _peer_errors(run_dir, rank, wait=world > 1, own=text) if last else ""
        error = "\n".join(part for part in (_excerpt(text), peers) if part)
    if last:
        try:
            write_account(run_dir / run_files.TRAINER, account(req, trainer, source, started_at=started_at,
                                                               status=status, exit_code=code, error=error))
        except DiskError as err:  # the run fails with it; the judge's result says so where it can be written
            print(f"{tool}: error: {err}", file=sys.stderr, flush=True)
            code = code or 1
        except Exception:  # noqa: BLE001 - report, and make sure the exit status says so
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            code = code or 1
    logs = [] if trainer is None else [trainer.log] + ([trainer.evaluator.log] if trainer.evaluator else [])
    for log in (log for log in logs if log is not None):
        try:
            log.close()
        except DiskError as err:  # said already when a step's write failed
            if code == 0:
                print(f"{tool}: error: {err}", file=sys.stderr, flush=True)
            code = code or 1
    if rank_steps is not None:
        rank_steps.close()
    if code == 0 and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return code
