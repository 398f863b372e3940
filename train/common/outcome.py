"""How a TPrimat trainer's run ends (mega, fsdp, autotp): trained, or failed or stopped, and always with a result
(written by the last rank).

A framework hands train_and_report a `start(req, source, run_dir, inject_nan_step)` that initialises
distributed and returns its trainer object: a RunRecord (what the result is made of as the run goes) with build(),
train(), breakdown_method (how the step's forward/backward/optimizer seconds were timed; None where they are not
measured) and reduce_step_record(step, elapsed, ...), which every rank
calls as a step ends: train_and_report wraps it so that each rank writes its own step times
(train.common.step_log.RankSteps, for the straggler check) and each step record carries its end on the telemetry's clock.

A crash, an out-of-memory error or a NaN loss still ends in a result with status failed: a failing rank leaves
its traceback in RUN_DIR/error_rank<N>.txt, and the last rank quotes the other ranks' errors in its own. The
result's identity, layout, workload and measurement window come from the request (Request.result_sections,
the one place the launcher's judge takes them from too); its figures from utils.spec.metrics through utils.spec.result.
"""

from __future__ import annotations

import json
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
from utils.spec.result import build_result, write_result
from utils.runset import system_path

EXCERPT_LINES = 20
EXCERPT_LINE_CHARS = 500  # a DTensor sharding error prints every tensor's spec on one line of many kilobytes
PEER_ERROR_WAIT_S = 3.0  # how long the last rank waits for another rank's error report when it fails

Start = Callable[[Request, DataSource, Path, "int | None"], Any]  # (request, data, run dir, nan step) -> trainer


@dataclass(kw_only=True)
class RunRecord:
    """What a TPrimat trainer keeps for its result as it builds and trains (train_and_report writes it): each trainer's
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


def _system(run_dir: Path) -> tuple[dict, list[str]]:
    """The probe's system.json of the run set (the run directory's parent), if it ran."""
    path = system_path(run_dir)
    if path is None:
        return {}, ["no system.json beside the run: system description empty"]
    return json.loads(path.read_text()), []


def assemble_result(req: Request, trainer: Any, source: DataSource | None, run_dir: Path, *,
                    started_at: str, status: str, exit_code: int, error: str | None) -> dict:
    """The run's result in TPrimat's one shape (utils.spec.result), figures from utils.spec.metrics."""
    system, notes = _system(run_dir)
    if trainer is not None:
        notes = trainer.notes + notes
    if req.data.mock_data:
        notes.append("MOCK DATA: trained on synthetic tokens (MOCK_DATA=1), not on a dataset")
    records = trainer.log.records if trainer is not None and trainer.log is not None else []
    evaluator = trainer.evaluator if trainer is not None else None
    return build_result(
        run={"id": req.identity.run_id, "started_at": started_at, "ended_at": now_iso(), "status": status,
             "exit_code": exit_code, "error_excerpt": error, "commit": project_commit(), "source": "trainer"},
        **req.result_sections(dataset_fingerprint=source.fingerprint if source else None,
                              tokenizer_fingerprint=source.tokenizer_fingerprint if source else None),
        system=system, steps=[asdict(r) for r in records],
        device_name=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        effective=trainer.effective if trainer is not None else {},
        features=trainer.features if trainer is not None else {},
        host_rss_gib_per_worker=trainer.host_rss_gib_per_worker if trainer is not None else (), warnings=notes,
        breakdown_method=trainer.breakdown_method if trainer is not None else None,
        **(evaluator.result_sections() if evaluator is not None else {}))


def train_and_report(req: Request, run_dir: Path, start: Start, tool: str, inject_nan_step: int | None = None) -> int:
    """Train one run with the trainer start() returns and write its result (last rank); returns the process exit
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
    except BaseException:  # noqa: BLE001 - every failure must still end in a result
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
            result = assemble_result(req, trainer, source, run_dir, started_at=started_at, status=status,
                                     exit_code=code, error=error)
            write_result(run_dir / run_files.RESULT, result)
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
