"""Exports of the stored results for the tools people already use.

- csv: AMD madengine's perf.csv shape (its column names, in its order: `model`, `n_gpus`, ..., `performance`,
  `metric`, `status`, ...), one row per stored result with the headline figure (tokens/s/GPU) as `performance`,
  then TPrimat's identity columns (evaluate/history/records.py) and the other figures. madengine's columns that
  TPrimat has no value for are left empty. A failed result is a FAILURE row without a performance.
  Every text cell is made safe for the spreadsheet that opens it and the terminal that shows it (cell()): control
  characters are stripped, and one that begins with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading
  single quote (OWASP's CSV-injection guidance), so no stored text runs as a formula; numbers stay numbers.
- jsonl: one stored result per line: where and when it came from, its verdict and reasons, its identity and
  figures, and the whole result and system description.
"""

from __future__ import annotations

import csv
import io
import json
import unicodedata

from evaluate.history.records import FIGURES, IDENTITY, ORIGIN
from utils.spec.result_types import typed

# madengine's perf.csv header (madengine's container runner writes these, in this order).
MADENGINE_COLUMNS = ("model", "n_gpus", "nnodes", "gpus_per_node", "training_precision", "pipeline", "args", "tags",
                     "docker_file", "base_docker", "docker_sha", "docker_image", "git_commit", "machine_name",
                     "deployment_type", "launcher", "gpu_architecture", "performance", "metric", "relative_change",
                     "status", "build_duration", "test_duration", "dataname", "data_provider_type", "data_size",
                     "data_download_duration", "build_number", "additional_docker_run_options")
METRIC = "tokens/s/gpu"  # the headline figure, as madengine names a metric (a unit)
TPRIMAT_COLUMNS = tuple(f"tprimat_{name}" for name in ("id", "run_id", "run_date", "run_set", "tag", "verdict",
                                                       "failure", *IDENTITY, *FIGURES))
CSV_COLUMNS = MADENGINE_COLUMNS + TPRIMAT_COLUMNS


def madengine_row(stored: dict) -> dict:
    """One stored result as a perf.csv row."""
    result = typed(json.loads(stored["result"]))  # the store keeps the whole result: read back, it reads as any result
    system = json.loads(stored["system"])  # the run's system description as collect found it, not a result section
    failures = json.loads(stored["failures"])
    ok = stored["verdict"] == "ok"
    gpus = result.parallelism.num_gpus
    nodes = stored["nodes"]
    row = {"model": f"{stored['framework']}_{stored['variant']}", "n_gpus": gpus, "nnodes": nodes,
           "gpus_per_node": gpus // nodes if nodes else None, "training_precision": stored["precision"],
           "pipeline": "tprimat", "tags": ",".join(filter(None, (stored["platform"], stored["tag"]))),
           "base_docker": stored["image"], "docker_sha": stored["image_digest"],
           "git_commit": result.run.commit if result.run else None,
           "machine_name": (system.get("host") or {}).get("hostname"), "launcher": "tprimat",
           "gpu_architecture": stored["device"], "performance": stored["tokens_per_s_per_gpu"] if ok else None,
           "metric": METRIC, "status": "SUCCESS" if ok else "FAILURE", "dataname": stored["dataset"]}
    origin = {"id": stored["content_key"][:12], "failure": failures[0] if failures else None,
              **{name: stored[name] for name in ("run_id", "run_date", "run_set", "tag", "verdict")}}
    row.update({f"tprimat_{name}": value for name, value in origin.items()})
    row.update({f"tprimat_{name}": stored[name] for name in (*IDENTITY, *FIGURES)})
    return row


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as a formula at a cell's start


def cell(value):
    """One CSV cell: a number as it is, None empty, text without control characters and, when it begins like a
    formula (FORMULA_STARTS, before or after stripping), behind a single quote."""
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    text = str(value)
    kept = "".join(c for c in text if unicodedata.category(c) != "Cc")
    return "'" + kept if text.startswith(FORMULA_STARTS) or kept.startswith(FORMULA_STARTS) else kept


def to_csv(stored: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, restval="", lineterminator="\n")
    writer.writeheader()
    for row in stored:
        writer.writerow({key: cell(value) for key, value in madengine_row(row).items()})
    return out.getvalue()


def to_jsonl(stored: list[dict]) -> str:
    lines = []
    for row in stored:
        record = {name: row[name] for name in ORIGIN if name != "failures"}
        record.update(failures=json.loads(row["failures"]), identity={name: row[name] for name in IDENTITY},
                      figures={name: row[name] for name in FIGURES}, result=json.loads(row["result"]),
                      system=json.loads(row["system"]))
        lines.append(json.dumps(record, sort_keys=True))
    return "".join(line + "\n" for line in lines)


FORMATS = {"csv": to_csv, "jsonl": to_jsonl}
