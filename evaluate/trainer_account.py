"""The result of a run of TPrimat's own trainers (mega, fsdp, autotp), made by the judge from what the trainer
recorded as it ran: steps.jsonl (one line per step), evals.jsonl (one line per held-out evaluation) and trainer.json
(how the run ended and what it read back: train/common/outcome.py's account).

The trainer writes no result itself: the judge is the one writer of result.json, so a trainer's run and a run
extracted from a framework's log become a result the same way, with the same checks, in one place.
"""

from __future__ import annotations

import math
from pathlib import Path

from utils import run_files
from utils.files import parse_json, read_bounded
from utils.spec.evaluation import section
from utils.spec.metrics import time_to_target
from utils.spec.request import Request
from utils.spec.result import build_result, schema, schema_field

ACCOUNT_KEYS = frozenset({"status", "exit_code", "error_excerpt", "started_at", "ended_at", "commit", "device_name",
                          "dataset_fingerprint", "tokenizer_fingerprint", "notes", "effective", "features",
                          "host_rss_gib_per_worker", "breakdown_method", "nonfinite", "evaluation"})
HOW = "the trainer evaluated every EVAL_INTERVAL steps and stopped at the first evaluation at or below the target"


def read_account(run_dir: Path) -> dict:
    """trainer.json; ValueError naming what is wrong with one no trainer of this checkout wrote."""
    account = parse_json(read_bounded(run_dir / run_files.TRAINER))
    if not isinstance(account, dict) or set(account) != ACCOUNT_KEYS:
        keys = sorted(account) if isinstance(account, dict) else type(account).__name__
        raise ValueError(f"{run_files.TRAINER} holds {keys}, not a trainer's account ({sorted(ACCOUNT_KEYS)})")
    return account


def json_lines(path: Path) -> list[dict]:
    """The records of a JSON-lines file the trainer appended to; none where it wrote none."""
    if not path.exists():
        return []
    return [parse_json(line) for line in read_bounded(path).decode("utf-8").splitlines() if line.strip()]


def steps_of(run_dir: Path, nonfinite: list[dict]) -> list[dict]:
    """steps.jsonl's records, with the values the trainer saw as nan/inf (written as null) nan again, so that the
    result lists them in health.nonfinite as it lists an extracted log's."""
    records = json_lines(run_dir / run_files.STEPS)  # a step written twice stays twice: build_result refuses it
    for item in nonfinite:
        for record in records:
            if record["step"] == item["step"]:
                record[item["field"]] = math.nan
    return records


def evaluation_of(request: Request, run_dir: Path, account: dict) -> dict:
    """build_result's evaluation and time_to_train from evals.jsonl (none: the run evaluated nothing)."""
    if account["evaluation"] is None:
        return {}
    columns = schema_field(schema(), ("evaluation", "points"))["properties"]
    points = json_lines(run_dir / run_files.EVALS)
    evaluation = section(request.evaluation, **account["evaluation"],
                         points={column: [point[column] for point in points] for column in columns})
    target = request.evaluation.target_loss
    to_target = None if target is None else time_to_target(evaluation["points"], target, stopped_at_target=True,
                                                           how=HOW)
    return {"evaluation": evaluation, "time_to_train": to_target}


def result(request: Request, run_dir: Path, system: dict, notes: list[str]) -> dict:
    """The run's result from the trainer's records; ValueError (or ResultError) for records no result comes from."""
    account = read_account(run_dir)
    if request.data.mock_data:
        notes = [*notes, "MOCK DATA: trained on synthetic tokens (MOCK_DATA=1), not on a dataset"]
    return build_result(
        run={"id": request.identity.run_id, "started_at": account["started_at"], "ended_at": account["ended_at"],
             "status": account["status"], "exit_code": account["exit_code"],
             "error_excerpt": account["error_excerpt"], "commit": account["commit"], "source": "trainer"},
        **request.result_sections(dataset_fingerprint=account["dataset_fingerprint"],
                                  tokenizer_fingerprint=account["tokenizer_fingerprint"]),
        system=system, steps=steps_of(run_dir, account["nonfinite"]), device_name=account["device_name"],
        effective=account["effective"], features=account["features"],
        host_rss_gib_per_worker=account["host_rss_gib_per_worker"], breakdown_method=account["breakdown_method"],
        warnings=[*account["notes"], *notes], **evaluation_of(request, run_dir, account))
