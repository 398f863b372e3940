"""The one result shape: build it from a run's plain data, validate it, write it atomically.

The TPrimat trainer and evaluate.extract both end here, so a Megatron, Primus or NeMo run all
become the same JSON (utils/spec/result.schema.json), with every figure computed by utils.spec.metrics.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import warnings as warnings_module
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import jsonschema

from utils.spec import metrics
from utils import frameworks
from utils.files import atomic_open, parse_json, read_bounded
from utils.machine.hardware import peak_tflops
from utils.machine.health_readers import READERS as HEALTH_READERS
from utils.machine.vendor_tools import PLATFORMS
from utils.spec.fairness import IDENTITY_KEYS, PROFILES
from utils.spec.models import MODEL_KEYS, by_variant
from utils.spec.precision import PRECISIONS

SCHEMA_PATH = Path(__file__).with_name("result.schema.json")
SCHEMA_VERSION = "1.10"

RUN_KEYS = {"id", "started_at", "ended_at", "status", "exit_code", "error_excerpt", "commit"}
RUN_OPTIONAL = {"source", "log_files"}
PARALLELISM_KEYS = {"strategy", "tp", "pp", "dp", "ga", "sequence_parallel", "distributed_optimizer"}
PARALLELISM_OPTIONAL = {"nnodes", "ep"}
TRAINING_KEYS = {"steps", "mbs", "gbs", "seq_len", "precision", "lr", "min_lr", "warmup_steps", "seed",
                 "dataset", "dataset_fingerprint", "tokenizer_fingerprint", "mock_data"}
TRAINING_OPTIONAL = {"lr_decay_style": "cosine", "weight_decay": None, "beta1": None, "beta2": None,
                     "grad_clip": None}
STEP_VALUE_KEYS = ("step_time_s", "loss", "lr", "grad_norm", "mem_allocated_gib", "mem_reserved_gib")
# Per-step values only some sources report: device memory as the driver sees it (Primus), and the peak
# resident host memory of the largest worker (TPrimat's trainer; the CPU's equivalent of device memory).
STEP_OPTIONAL_KEYS = ("mem_device_used_gib", "mem_host_rss_gib") + metrics.BREAKDOWN_KEYS


class ResultError(ValueError):
    """Input that cannot become a valid result; the message names the field."""


def table_enums() -> dict[tuple[str, ...], tuple]:
    """The schema's enums that are tables' names (a field's path of properties -> the table), put in when the schema
    loads: a new framework, model, precision or health reader is its table's entry, not an edit of the schema too."""
    return {
        ("framework",): frameworks.NAMES,
        ("model", "key"): MODEL_KEYS,
        ("platform",): PLATFORMS,
        ("training", "precision"): PRECISIONS,
        ("training", "fairness_profile"): PROFILES,
        ("training", "lr_warmup_convention"): tuple(dict.fromkeys(entry.warmup_convention
                                                                  for entry in frameworks.TABLE.values())),
        ("system", "health", "method"): (*(name for readers in HEALTH_READERS.values() for name, _ in readers),
                                          "none"),
    }


@lru_cache(maxsize=1)
def schema() -> dict:
    """The result JSON Schema (loaded once), its enums of table names put in (table_enums)."""
    loaded = json.loads(SCHEMA_PATH.read_text())
    for path, names in table_enums().items():
        schema_field(loaded, path)["enum"] = list(names)
    return loaded


def schema_field(loaded: dict, path: Sequence[str]) -> dict:
    """The schema of the field at a path of properties (("training", "precision")), through a $ref to $defs."""
    node = loaded
    for key in path:
        node = node["properties"][key]
        if "$ref" in node:
            node = loaded["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def schema_errors(result: Any) -> list[str]:
    """Every schema violation of a result, one line each ("path: message"); empty when valid."""
    validator = jsonschema.Draft202012Validator(schema())
    lines = []
    for error in sorted(validator.iter_errors(result), key=lambda e: list(map(str, e.absolute_path))):
        where = "/".join(str(p) for p in error.absolute_path) or "(top)"
        lines.append(f"{where}: {error.message}")
    return lines


def _checked(name: str, given: Mapping, required: set[str], optional: Mapping | set = frozenset()) -> dict:
    """A copy of one input section with exactly the known keys (typos fail loudly, not silently)."""
    unknown = set(given) - required - set(optional)
    missing = required - set(given)
    if unknown or missing:
        raise ResultError(f"{name}: " + "; ".join(
            part for part in (f"missing {sorted(missing)}" if missing else "",
                              f"unknown {sorted(unknown)}" if unknown else "") if part))
    out = dict(given)
    if isinstance(optional, Mapping):
        for key, default in optional.items():
            out.setdefault(key, default)
    return out



def _iso_or_none(name: str, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise ResultError(f"run.{name}={value!r}: expected an ISO 8601 time such as 2025-05-01T12:00:00+00:00") from None
    return value


def _finite_or_none(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _normalise_steps(steps: Iterable[Mapping], health: dict) -> list[dict]:
    """Sorted per-step records; nan/inf become null and are listed in health (never dropped silently)."""
    records = sorted((dict(s) for s in steps), key=lambda s: s["step"])
    seen: set[int] = set()
    for record in records:
        step = record.get("step")
        if not isinstance(step, int) or step < 1:
            raise ResultError(f"step record {record!r}: 'step' must be an integer >= 1")
        if step in seen:
            raise ResultError(f"step {step} recorded twice; deduplicate before building the result")
        seen.add(step)
        for key in STEP_VALUE_KEYS + STEP_OPTIONAL_KEYS:
            raw = record.get(key)
            record[key] = _finite_or_none(raw)
            if raw is not None and record[key] is None:
                health["nonfinite"].append({"step": step, "field": key})
        for key in metrics.EXPERT_LOAD_KEYS:  # a MoE step's per-layer router counts (whole numbers), or None
            counts = record.get(key)
            if counts is not None and not (isinstance(counts, list) and all(
                    isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts)):
                raise ResultError(f"step {step}: {key} must be a list of whole numbers >= 0, got {counts!r}")
            record[key] = counts or None
        health["nan_iterations"] += int(record.get("nan") or 0)
        health["skipped_iterations"] += int(record.get("skipped") or 0)
    return records


def _json_safe(value: Any) -> Any:
    """A copy with nan/inf floats replaced by null (results are strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _peak(records: Sequence[dict], key: str) -> float | None:
    values = [r[key] for r in records if r.get(key) is not None]
    return max(values) if values else None


def build_result(*, run: Mapping, platform: str, framework: str, variant: str, system: Mapping,
                 parallelism: Mapping, training: Mapping, steps: Iterable[Mapping], warmup_skip: int,
                 num_gpus: int, device_name: str | None, raw_framework: Mapping | None = None,
                 effective: Mapping | None = None, features: Mapping | None = None,
                 host_rss_gib_per_worker: Sequence[float] = (), breakdown_method: str | None = None,
                 stack: Mapping | None = None, warnings: Sequence[str] = (), evaluation: Mapping | None = None,
                 time_to_train: Mapping | None = None) -> dict:
    """Assemble one result from plain data and compute every figure with utils.spec.metrics.

    Parameters (all keyword-only; raises ResultError naming the field on unknown or missing keys):
      run: {"id": str, "started_at": ISO str|None, "ended_at": ISO str|None,
            "status": "ok"|"failed"|"incomplete", "exit_code": int|None, "error_excerpt": str|None,
            "commit": str|None} plus optionally "source" ("trainer"|"extract") and "log_files" [str].
      platform: "amd" | "nvd" | "cpu".   framework: a name of the registry (utils.frameworks.NAMES).
      variant: exact model variant (utils.spec.models.by_variant), e.g. "llama3.1-8b-tiny"; fills the
            parameter count and architecture numbers.
      system: the probe's system.json as a dict ({} when there is none, e.g. a failed start).
      parallelism: {"strategy": str ("custom" or a utils.spec.strategies name), "tp", "pp", "dp", "ga": int,
            "sequence_parallel": bool|None, "distributed_optimizer": bool|None} plus optionally
            "nnodes": int (default: system's "nodes", the run set's node count; left out when unknown) and
            "ep": int (the expert-parallel size; left out when None, a log that does not say it).
      training: {"steps": requested TRAIN_ITERS, "mbs", "gbs", "seq_len": int, "precision": "bf16"|"fp8"|"fp32",
            "lr", "min_lr": float, "warmup_steps": int, "seed": int|None, "dataset": str|None,
            "dataset_fingerprint": str|None, "tokenizer_fingerprint": str|None,
            "mock_data": bool (as requested)} plus optionally "lr_decay_style" (default "cosine"),
            "weight_decay", "beta1", "beta2", "grad_clip", and the workload-identity fields of
            utils.spec.fairness.identity (fairness_profile, init_method_std, padded_vocab_size, eod_mask_loss,
            dataloader_type, lr_warmup_convention, check_for_nan_in_grad, fp8_recipe).
      steps: per-step records {"step": int (1-based), "step_time_s": float|None, "loss", "lr",
            "grad_norm": float|None, "skipped": int, "nan": int, "tokens": int,
            "mem_allocated_gib", "mem_reserved_gib": float|None (peak since start, per GPU)};
            extra keys are ignored except those of STEP_OPTIONAL_KEYS: "mem_device_used_gib" (driver-reported
            device memory), "mem_host_rss_gib" (peak resident host memory of the largest worker, GiB) and the
            step's breakdown "forward_s", "backward_s", "optimizer_s" (utils.spec.metrics.BREAKDOWN_KEYS). nan/inf values
            may be passed as floats: they become null and are listed in health.nonfinite and warnings.
      warmup_skip: WARMUP_SKIP; steps numbered <= it are left out of the statistics.
      num_gpus: GPUs of the job (TP x PP x DP); tokens/s/GPU divides by it.
      device_name: the accelerator's reported name (e.g. "NVIDIA H100 80GB HBM3") for the MFU peak;
            None or an unknown name leaves mfu null with a warning.
      raw_framework: the framework's own figures (its TFLOP/s, running averages), kept apart (nan/inf -> null).
      effective: settings read back from the framework, keyed like parallelism/training fields.
      features: fused kernels / attention implementation -> True|False|str.
      host_rss_gib_per_worker: each worker's peak resident host memory (GiB), in rank order.
      breakdown_method: how the steps' forward/backward/optimizer times were measured (required with them);
            performance.breakdown then holds their means over the window.
      stack: {"name": a utils.spec.stacks row, "image": str|None, "image_digest": str|None} plus
            "image_digest_note" (why there is no digest) where image_digest is None (Request.result_stack); None: a
            result without a request (evaluate.extract), which records no stack.
      warnings: notes from the caller, kept in the result's warnings.
      evaluation: the held-out validation (the schema's evaluation object: interval_steps, iters, tokens, split,
            time_s, points); None: the run evaluated nothing (EVAL_INTERVAL=0).
      time_to_train: utils.spec.metrics.time_to_target's object for TARGET_LOSS; None: no target.

    Statistics cover the steady-state window (steps after warmup_skip with a step time); tokens/s
    is tokens per step (GBS x SL) divided by the window's median step time.
    """
    notes = list(warnings)
    run_section = _checked("run", run, RUN_KEYS, RUN_OPTIONAL)
    for key in ("started_at", "ended_at"):
        _iso_or_none(key, run_section[key])
    par = _checked("parallelism", parallelism, PARALLELISM_KEYS, PARALLELISM_OPTIONAL)
    nnodes = par.pop("nnodes", None) or system.get("nodes")
    if par.get("ep") is None:
        par.pop("ep", None)
    # The workload-identity fields are optional without a default: absent where the request predates them.
    train = _checked("training", {k: v for k, v in training.items() if k not in IDENTITY_KEYS}, TRAINING_KEYS,
                     TRAINING_OPTIONAL)
    train.update({key: training[key] for key in IDENTITY_KEYS if key in training})
    try:
        spec = by_variant(variant)
    except ValueError as err:
        raise ResultError(str(err)) from None
    if par["tp"] * par["pp"] * par["dp"] != num_gpus:
        notes.append(f"TP x PP x DP = {par['tp'] * par['pp'] * par['dp']} differs from num_gpus = {num_gpus}")

    health = {"nan_iterations": 0, "skipped_iterations": 0, "nonfinite": []}
    records = _normalise_steps(steps, health)
    for item in health["nonfinite"]:
        notes.append(f"step {item['step']}: {item['field']} was nan/inf (kept as null)")
    if health["nan_iterations"]:
        notes.append(f"{health['nan_iterations']} NaN iteration(s) reported by the framework")

    tokens_per_step = train["gbs"] * train["seq_len"]
    odd_tokens = sorted({r["tokens"] for r in records if r.get("tokens") not in (None, tokens_per_step)})
    if odd_tokens:
        notes.append(f"steps report {odd_tokens} tokens, not GBS x SL = {tokens_per_step}")

    performance = _performance(spec, records, train, warmup_skip, num_gpus, device_name, platform, notes)
    if any(r[key] is not None for r in records for key in metrics.BREAKDOWN_KEYS):
        if not breakdown_method:
            raise ResultError("steps carry forward/backward/optimizer times: give breakdown_method (how they were "
                              "measured)")
        window = performance["window"]
        found = metrics.window_breakdown(records, window["first_step"], window["last_step"]) if window else None
        if found is not None:
            performance["breakdown"] = {"method": breakdown_method, **found}
    breakdown_series = {key: [r[key] for r in records] for key in metrics.BREAKDOWN_KEYS
                        if any(r[key] is not None for r in records)}
    memory = {"peak_allocated_gib": _peak(records, "mem_allocated_gib"),
              "peak_reserved_gib": _peak(records, "mem_reserved_gib")}
    if any(r["mem_device_used_gib"] is not None for r in records):
        memory["peak_device_used_gib"] = _peak(records, "mem_device_used_gib")
    host_peaks = [_peak(records, "mem_host_rss_gib"), *host_rss_gib_per_worker]
    if any(value is not None for value in host_peaks):
        memory["peak_host_rss_gib"] = max(value for value in host_peaks if value is not None)
    if host_rss_gib_per_worker:
        memory["host_rss_gib_per_worker"] = [float(value) for value in host_rss_gib_per_worker]
    host_series = {"mem_host_rss_gib": [r["mem_host_rss_gib"] for r in records]} \
        if any(r["mem_host_rss_gib"] is not None for r in records) else {}
    load_series = {key: [r[key] for r in records] for key in metrics.EXPERT_LOAD_KEYS
                   if spec.moe and any(r[key] is not None for r in records)}
    if load_series:
        window = metrics.steady_window([r["step"] for r in records], [r["step_time_s"] for r in records], warmup_skip)
        performance["expert_load"] = metrics.expert_load(records, window, spec.moe.num_experts, spec.moe.top_k,
                                                         tokens_per_step)

    run_section["steps_completed"] = records[-1]["step"] if records else 0
    return {
        "schema_version": SCHEMA_VERSION,
        "run": run_section,
        "platform": platform,
        "framework": framework,
        "model": {"key": spec.key, "variant": spec.variant, "display_name": spec.display_name,
                  "parameters": spec.param_count(), "num_layers": spec.num_layers,
                  "hidden_size": spec.hidden_size, "ffn_hidden_size": spec.ffn_hidden_size,
                  "num_attention_heads": spec.num_attention_heads, "num_kv_heads": spec.num_kv_heads,
                  "head_dim": spec.head_dim, "vocab_size": spec.vocab_size, "qkv_bias": spec.qkv_bias,
                  **({"sliding_window": spec.sliding_window} if spec.sliding_window else {}),
                  **({"proxy_of": spec.proxy_of} if spec.proxy_of else {}),
                  "active_parameters": spec.active_param_count(), **({"qk_norm": True} if spec.qk_norm else {}),
                  **({"moe": dataclasses.asdict(spec.moe)} if spec.moe else {})},
        "system": _json_safe(system),
        "parallelism": {**par, "num_gpus": num_gpus, **({"nnodes": nnodes} if nnodes else {})},
        "training": train,
        "performance": performance,
        "memory": memory,
        "series": {"step": [r["step"] for r in records],
                   **{key: [r[key] for r in records] for key in STEP_VALUE_KEYS}, **host_series,
                   **breakdown_series, **load_series},
        "health": health,
        "raw_framework": _json_safe(raw_framework or {}),
        "effective": _json_safe(effective or {}),
        "features": _json_safe(features or {}),
        "warnings": notes,
        **({"stack": dict(stack)} if stack is not None else {}),
        **({"evaluation": _json_safe(evaluation)} if evaluation is not None else {}),
        **({"time_to_train": _json_safe(time_to_train)} if time_to_train is not None else {}),
    }


def _performance(spec, records: list[dict], train: dict, warmup_skip: int, num_gpus: int,
                 device_name: str | None, platform: str, notes: list[str]) -> dict:
    """The steady-state figures; nulls (with a note) when no step follows the warm-up."""
    tokens_per_step = train["gbs"] * train["seq_len"]
    out: dict[str, Any] = {"warmup_skip": warmup_skip, "window": None, "step_time_s": None,
                           "tokens_per_step": tokens_per_step, "tokens_per_s": None, "tokens_per_s_per_gpu": None,
                           "flops_per_token": spec.flops_per_token(train["seq_len"]), "tflop_per_s_per_gpu": None,
                           "peak_tflop_per_s_per_gpu": None, "mfu": None,
                           "flops_convention": metrics.FLOPS_CONVENTION}
    if platform == "cpu":
        notes.append("CPU run: no device peak, MFU left empty")
    else:
        with warnings_module.catch_warnings(record=True) as caught:
            warnings_module.simplefilter("always")
            out["peak_tflop_per_s_per_gpu"] = peak_tflops(device_name, train["precision"])
        notes.extend(str(w.message) for w in caught)

    window = metrics.steady_window([r["step"] for r in records], [r["step_time_s"] for r in records], warmup_skip)
    if window is None:
        notes.append(f"no step with a step time after WARMUP_SKIP={warmup_skip}: no steady-state figures")
        return out
    kept = set(window.steps)
    summary = metrics.summarize(r["step_time_s"] for r in records if r["step"] in kept)
    tokens_per_s = metrics.tokens_per_second(tokens_per_step, summary.median)
    per_gpu = metrics.per_gpu(tokens_per_s, num_gpus)
    tflops = metrics.tflops_per_gpu(spec, train["seq_len"], per_gpu)
    out.update(window={"first_step": window.first_step, "last_step": window.last_step, "count": len(window.steps)},
               step_time_s=summary.as_dict(), tokens_per_s=tokens_per_s, tokens_per_s_per_gpu=per_gpu,
               tflop_per_s_per_gpu=tflops, mfu=metrics.mfu(tflops, out["peak_tflop_per_s_per_gpu"]))
    return out


def write_result(path: str | os.PathLike, result: Mapping) -> Path:
    """Validate against the schema, then write atomically (temporary file in the same folder, rename)."""
    problems = schema_errors(result)
    if problems:
        raise ResultError("result does not match utils/spec/result.schema.json:\n" + "\n".join(problems))
    target = Path(path)
    with atomic_open(target, encoding="utf-8") as out:
        json.dump(result, out, indent=1, allow_nan=False)
        out.write("\n")
    return target


def load_result(path: str | os.PathLike) -> dict:
    """Read one result JSON (not validated: evaluate.validate reports problems instead of raising); ValueError
    naming the problem for a file no TPrimat writes (not JSON, nested too deep, NaN, far too large)."""
    return parse_json(read_bounded(Path(path)))
