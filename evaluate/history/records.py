"""A result as the store keeps it: its identity, its figures, the result itself, and the keys that tell runs apart.

- content key: sha256 of evaluate.collect.Loaded.identity (what makes two results the same run), so that a result
  added twice, from its folder and from an output.zip, is stored once;
- identity: the columns a person filters and exports by (platform, device, stack and image digest, framework,
  model, layout, precision, fairness profile, dataset and tokenizer fingerprints), each made by the function the
  comparison uses for it (evaluate/comparison/repeats.py, evaluate/native_settings.py);
- configuration: what must be alike for two runs to measure the same thing across stacks and dates: the identity
  without the stack, its image and digest, plus every workload field of evaluate.validate's fairness check;
- figures: the headline figures of a run that passes validate (evaluate.gate); a failed one has none, and is kept
  with its reasons.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Mapping

from evaluate import native_settings
from evaluate.collect import Loaded, first_problem
from evaluate.comparison.repeats import device_label, memory
from evaluate.gate import judged
from evaluate.validate import FAIRNESS_FIELDS
from utils.files import parse_json
from utils.spec.metrics import steady_window
from utils.spec.models import by_variant
from utils.spec.result_types import Section, typed

TEXT_IDENTITY = ("platform", "device", "stack", "image", "image_digest", "framework", "model", "variant", "strategy",
                 "settings", "precision", "fairness_profile", "dataset", "dataset_fingerprint", "tokenizer_fingerprint")
INTEGER_IDENTITY = ("tp", "pp", "dp", "ga", "mbs", "nodes", "ep")  # ep: a mixture of experts' expert parallelism
IDENTITY = TEXT_IDENTITY + INTEGER_IDENTITY
STACK_FIELDS = ("stack", "image", "image_digest")  # what a stack upgrade changes: not part of a configuration
FIGURES = ("step_time_median_s", "tokens_per_s", "tokens_per_s_per_gpu", "tflop_per_s_per_gpu", "mfu",
           "peak_memory_gib")
# Where and when a stored result came from; with IDENTITY and FIGURES, every column of the results table.
ORIGIN = ("content_key", "added_at", "run_date", "run_id", "run_set", "tag", "source", "verdict", "failures")
DOCUMENTS = ("result", "system")  # the result and its system description, as JSON


def content_key(item: Loaded) -> str:
    return hashlib.sha256(item.identity().encode()).hexdigest()


def identity(item: Loaded) -> dict:
    r = item.typed
    p, t, stack = r.parallelism, r.training, r.stack
    return {"platform": r.platform, "device": device_label(item), "stack": item.stack,
            "image": stack.image if stack else None, "image_digest": stack.image_digest if stack else None,
            "framework": r.framework, "model": by_variant(r.model.variant).key, "variant": r.model.variant,
            "strategy": p.strategy, "settings": native_settings.described(item.typed), "precision": t.precision,
            "fairness_profile": t.fairness_profile, "dataset": t.dataset, "dataset_fingerprint": t.dataset_fingerprint,
            "tokenizer_fingerprint": t.tokenizer_fingerprint, "tp": p.tp, "pp": p.pp, "dp": p.dp, "ga": p.ga,
            "mbs": t.mbs, "nodes": item.nodes, "ep": expert_parallel(r)}


def expert_parallel(r: Section) -> int:
    """The run's expert-parallel size: 1 where the result says none (a dense model, or a result before schema 1.9)."""
    return r.parallelism.ep or 1


def figures(item: Loaded) -> dict:
    """The headline figures of a result that passes validate; none (all None) of one that does not."""
    if not item.ok:
        return dict.fromkeys(FIGURES)
    perf = item.typed.performance
    return {"step_time_median_s": perf.step_time_s.median if perf.step_time_s else None,
            "tokens_per_s": perf.tokens_per_s, "tokens_per_s_per_gpu": perf.tokens_per_s_per_gpu,
            "tflop_per_s_per_gpu": perf.tflop_per_s_per_gpu, "mfu": perf.mfu, "peak_memory_gib": memory(item.typed)}


def run_date(result: dict | Section) -> str | None:
    """When the run started (else ended), as its result writes it; None when neither is an ISO 8601 time."""
    run = typed(result).run
    for text in (run.started_at, run.ended_at) if run else ():
        try:
            datetime.fromisoformat(text)
            return text
        except (TypeError, ValueError):
            continue
    return None


def run_set(where: str) -> str:
    """The run set a result came from: the folder that holds its run folder (OUTPUT_DIR/<timestamp>-<platform>),
    read from where it was found ("INPUT:RELATIVE/PATH", or the path of a result given alone)."""
    source, colon, inner = where.rpartition(":")
    if not colon:  # a result file given alone: its own path says it
        source, inner = "", os.path.abspath(where)
    parts = PurePosixPath(inner).parts
    if len(parts) >= 3:
        return parts[-3]
    if len(parts) == 2:  # the input is the run set (a folder, or an output.zip of it)
        return Path(source).name.removesuffix(".zip")
    return Path(os.path.abspath(source)).parent.name  # the input is a run folder


def run_id(item: Loaded) -> str:
    """The run's ID as a column: "None" for a result without one, so the column is text whatever the result holds."""
    run = item.typed.run
    return str(run.id if run else None)


def row(item: Loaded, added_at: str, tag: str | None) -> dict:
    """Every column of the results table for one result judged by evaluate.gate."""
    return {"content_key": content_key(item), "added_at": added_at, "run_date": run_date(item.typed),
            "run_id": run_id(item), "run_set": run_set(item.where), "tag": tag, "source": item.where,
            "verdict": item.verdict, "failures": json.dumps(item.failures), **identity(item), **figures(item),
            "result": json.dumps(item.result, sort_keys=True), "system": json.dumps(item.system, sort_keys=True)}


def loaded(stored: dict) -> Loaded:
    """A stored result as evaluate.collect reads one, with the verdict validate gave it when it was added."""
    return Loaded(f"history:{stored['content_key'][:12]}", json.loads(stored["result"]), json.loads(stored["system"]),
                  json.loads(stored["failures"]))


def damage(stored: dict) -> str | None:
    """Why a stored row is none TPrimat wrote (its result or system not JSON of a result, its dates not dates), or
    None when it is whole."""
    for name in DOCUMENTS + ("failures",):
        if name in stored:
            try:
                value = parse_json(str(stored[name]))
            except ValueError as err:
                return f"its {name} is {err}"
            kind = list if name == "failures" else dict
            if not isinstance(value, kind):
                return f"its {name} is not a JSON {'list' if kind is list else 'object'}"
    if "result" in stored and (problem := first_problem(json.loads(stored["result"]))):
        return f"its result is {problem}"
    for name in ("content_key", "run_set", "source", "tag"):
        if name in stored and not isinstance(stored[name], str) and not (name == "tag" and stored[name] is None):
            return f"its {name} is not text"
    for name in ("added_at", "run_date"):
        try:
            if stored.get(name) is not None or name == "added_at":
                datetime.fromisoformat(stored[name])
        except (TypeError, ValueError):
            return f"its {name} is not a date and time"
    return None


DERIVED = ("content_key", "run_id", "run_date") + IDENTITY + FIGURES  # what a stored row's result gives again


def checked(stored: dict) -> dict:
    """A whole stored row (damage() is None) judged again from its result, as every reader of a file is: the store
    is a file anyone can edit, so a verdict, figure or identity column is never taken on its word. Its verdict,
    failures and figures are validate's of the stored result; a column that differs from what that result gives
    is a failure named, not a figure shown."""
    item = Loaded(f"history:{stored['content_key'][:12]}", json.loads(stored["result"]), json.loads(stored["system"]))
    judged(item)
    again = {"content_key": content_key(item), "run_id": run_id(item), "run_date": run_date(item.typed),
             **identity(item)}
    edited = [name for name in DERIVED if name in again and name in stored and stored[name] != again[name]]
    edited += [name for name in FIGURES if item.ok and stored.get(name) != figures(item)[name]]
    if edited:
        item.failures.append(f"store: its stored {', '.join(edited)} differ(s) from what its result gives (the "
                             "store was edited)")
    again.pop("content_key")  # the row keeps the ID list and show name it by
    return {**stored, **again, **figures(item), "verdict": item.verdict, "failures": json.dumps(item.failures)}


def configuration(stored: dict) -> str:
    """The key of the configuration a stored result measured (its identity without the stack, and the fairness
    check's workload fields)."""
    result = typed(json.loads(stored["result"]))
    same = {key: stored[key] for key in IDENTITY if key not in STACK_FIELDS}
    same["workload"] = [_workload_value(result, f.section, f.key) for f in FAIRNESS_FIELDS]
    return json.dumps(same, sort_keys=True, default=str)


def _workload_value(result: Section, section: str, key: str):
    """One fairness field of a typed result, named by validate's FAIRNESS_FIELDS (a section's field, or a name in a
    free-form section such as features); None where the result has neither."""
    found = getattr(result, section)
    if found is None or isinstance(found, Mapping):
        return (found or {}).get(key)
    return getattr(found, key)


def label(stored: dict) -> str:
    """A configuration in words: CPU mega llama3.1-8b-tiny [custom] TP1 PP1 DP2 GA1 MBS2 fp32 (EP where above 1)."""
    settings = "" if stored["settings"] == "-" else f" ({stored['settings']})"
    nodes = f", {stored['nodes']} nodes" if (stored["nodes"] or 1) > 1 else ""
    experts = f" EP{stored['ep']}" if (stored.get("ep") or 1) > 1 else ""
    return (f"{stored['device']} {stored['framework']}{settings} {stored['variant']} [{stored['strategy']}] "
            f"TP{stored['tp']} PP{stored['pp']} DP{stored['dp']}{experts} GA{stored['ga']} MBS{stored['mbs']} "
            f"{stored['precision']}{nodes}")


def steady_step_times(result: dict | Section) -> list[float]:
    """The step times of the steady-state window (utils.spec.metrics.steady_window), the sample every test uses."""
    r = typed(result)
    series = r.series
    window = steady_window(series.step, series.step_time_s, r.performance.warmup_skip)
    if window is None:
        return []
    kept = set(window.steps)
    return [t for step, t in zip(series.step, series.step_time_s) if step in kept]
