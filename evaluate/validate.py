"""Check results one by one, and check that a set of results is a fair comparison.

    python3 -m evaluate.validate RESULT_OR_DIR_OR_ZIP...

Each result: schema-valid, status ok, every requested step ran, losses finite, loss lower at the
end than at the start, no NaN or skipped iterations, real data unless mock data was requested,
effective settings equal to the requested ones. The set: results of the same model must share
variant, sequence length, precision, steps, dataset and tokenizer fingerprints, and results on the
same number of nodes the global batch (it grows with data parallelism across nodes: weak scaling).
Prints one line per problem naming the result and the check; exit 1 when any check fails.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from evaluate.collect import CollectError, Loaded, load
from utils.result import schema_errors

SHORT_RUN = 20  # below this many steps a loss that did not fall is only flagged
# Fields that compared runs must share: (label, section, key, per node count). The global batch is
# compared only among runs on the same number of nodes: more nodes add data-parallel ranks, and each
# brings its own micro-batches (weak scaling), so per-GPU throughput still compares.
FAIRNESS_FIELDS = (("model variant", "model", "variant", False), ("sequence length", "training", "seq_len", False),
                   ("global batch size", "training", "gbs", True), ("precision", "training", "precision", False),
                   ("steps", "training", "steps", False),
                   ("dataset fingerprint", "training", "dataset_fingerprint", False),
                   ("tokenizer fingerprint", "training", "tokenizer_fingerprint", False))
# Effective settings compared with the request: effective key -> (section, key).
REQUESTED = {key: ("parallelism", key) for key in ("tp", "pp", "dp", "ga", "sequence_parallel", "distributed_optimizer")}
REQUESTED.update({key: ("training", key) for key in ("mbs", "gbs", "seq_len", "steps", "precision", "seed", "lr",
                                                     "min_lr", "warmup_steps")})  # mock_data: the real-data check


@dataclass(frozen=True)
class Finding:
    """One check's outcome on one result (or on the set)."""

    subject: str  # the result's name (platform/run id) or "set"
    check: str
    message: str
    fatal: bool = True

    def line(self) -> str:
        kind = "FAIL" if self.fatal else "warn"
        return f"{kind} {self.subject}: {self.check}: {self.message}"


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return a == b


def check_result(item: Loaded) -> list[Finding]:
    """Every per-result check; an empty list means the result is sound."""
    r, name = item.result, item.name
    errors = schema_errors(r)
    if errors:
        return [Finding(name, "schema", f"{len(errors)} problem(s), first: {errors[0]}")]
    found: list[Finding] = []
    run, training, health, series = r["run"], r["training"], r["health"], r["series"]
    if run["status"] != "ok":
        excerpt = (run["error_excerpt"] or "").strip().splitlines()[-1:] or ["no error excerpt"]
        found.append(Finding(name, "status", f"{run['status']} (exit code {run['exit_code']}): {excerpt[0][:200]}"))
    if run["steps_completed"] != training["steps"]:
        found.append(Finding(name, "steps", f"{run['steps_completed']} steps ran, {training['steps']} requested"))
    losses = series["loss"]
    bad = [item_["step"] for item_ in health["nonfinite"] if item_["field"] == "loss"]
    if bad:
        found.append(Finding(name, "finite loss", f"loss was nan/inf at step(s) {', '.join(map(str, bad[:10]))}"))
    finite = [v for v in losses if v is not None]
    if not finite:
        found.append(Finding(name, "finite loss", "no loss recorded"))
    elif len(finite) > 1:
        span = max(1, len(finite) // 10)
        start, end = sum(finite[:span]) / span, sum(finite[-span:]) / span
        if not end < start:
            short = training["steps"] < SHORT_RUN
            found.append(Finding(name, "loss decreases", f"mean loss of the last {span} step(s) {end:.4g} is not below "
                                 f"the first {span} {start:.4g}" + (" (a very short run)" if short else ""),
                                 fatal=not short))
    if health["nan_iterations"] or health["skipped_iterations"]:
        found.append(Finding(name, "nan/skipped iterations", f"{health['nan_iterations']} NaN and "
                             f"{health['skipped_iterations']} skipped iteration(s)"))
    effective = r["effective"]
    if effective.get("mock_data") and not training["mock_data"]:
        found.append(Finding(name, "real data", "the framework trained on MOCK DATA although real data was requested"))
    elif training["mock_data"]:
        found.append(Finding(name, "real data", "MOCK DATA was requested: throughput only, losses mean nothing",
                             fatal=False))
    if effective.get("cp") not in (None, 1):
        found.append(Finding(name, "effective settings", f"context parallel size is {effective['cp']}, TPrimat "
                             "layouts use 1"))
    for key, (section, field) in REQUESTED.items():
        if key in effective and effective[key] is not None and not _same(effective[key], r[section][field]):
            found.append(Finding(name, "effective settings", f"{key} is {effective[key]!r} in the framework, "
                                 f"{r[section][field]!r} requested"))
    return found


def _names(names: list[str], limit: int = 6) -> str:
    unique = list(dict.fromkeys(names))
    more = f" and {len(unique) - limit} more" if len(unique) > limit else ""
    return ", ".join(unique[:limit]) + more


def fairness(items: Sequence[Loaded]) -> list[Finding]:
    """Differences between results of the same model that make their comparison unfair, each listed."""
    by_model: dict[str, list[Loaded]] = defaultdict(list)
    for item in items:
        model = item.result.get("model", {}).get("key", "?")
        by_model[model].append(item)
    found = []
    for model, group in by_model.items():
        for label, section, key, per_nodes in FAIRNESS_FIELDS:
            parts: dict[int | None, list[Loaded]] = defaultdict(list)
            for item in group:
                parts[item.nodes if per_nodes else None].append(item)
            for nodes, part in parts.items():
                where = f"{model}{f' on {nodes} node(s)' if per_nodes and len(parts) > 1 else ''}"
                found += _differences(where, label, section, key, part)
    return found


def _differences(where: str, label: str, section: str, key: str, items: Sequence[Loaded]) -> list[Finding]:
    values: dict[str, list[str]] = defaultdict(list)
    for item in items:
        values[repr(item.result.get(section, {}).get(key))].append(item.name)
    found = []
    unknown = values.pop("None", None)
    if unknown:
        found.append(Finding("set", "fairness", f"{where}: {label} unknown in {_names(unknown)}: "
                             "cannot show the runs did the same work"))
    if len(values) > 1:
        spread = "; ".join(f"{value} in {_names(names)}" for value, names in values.items())
        found.append(Finding("set", "fairness", f"{where}: {label} differs: {spread}"))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m evaluate.validate", description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="RESULT_OR_DIR", help="result JSON files, run directories or zips")
    args = parser.parse_args(argv)
    try:
        items = load(args.inputs)
    except CollectError as err:
        print(f"evaluate.validate: {err}", file=sys.stderr)
        return 2
    if not items:
        print(f"evaluate.validate: no result.json under {', '.join(args.inputs)}; run a benchmark or extract first",
              file=sys.stderr)
        return 2
    findings = [f for item in items for f in check_result(item)] + fairness(items)
    for finding in findings:
        print(finding.line())
    failed = sum(f.fatal for f in findings)
    print(f"{len(items)} result(s): {failed} failed check(s), {len(findings) - failed} warning(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
