"""Turn a Megatron-LM, Primus or NeMo training log into TPrimat's one result JSON.

    python3 -m evaluate.extract LOG... [--framework mega|prim|nemo|auto] [--run-dir DIR] [flags] -o RESULT.json

What the log does not print (the requested layout and workload) comes from the run directory's
config.json (the launcher's request, train/plan.py) and can be given or overridden with flags.
Figures are computed by utils.metrics from the per-step values; the framework's own TFLOP/s and
running averages are kept apart under raw_framework. Exit 0: result written; 2: bad input;
1: the log holds no iteration line (nothing to extract).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from evaluate import fingerprint
from evaluate.logs import FRAMEWORKS, ParsedLog, parse_logs
from utils import metrics
from utils.result import ResultError, build_result, write_result

SECRET_PATTERNS = (re.compile(r"hf_[A-Za-z0-9]{16,}"), re.compile(r"(HF_TOKEN\s*[=:]\s*)\S+"))
FEATURE_HINTS = ("fusion", "flash_attn", "attention_backend")


class InputError(Exception):
    """Bad input: one line naming the problem and the fix (exit 2)."""


def redact(text: str) -> str:
    """Remove anything that looks like a Hugging Face token from text kept in a result."""
    text = SECRET_PATTERNS[0].sub("hf_***", text)
    return SECRET_PATTERNS[1].sub(r"\1***", text)


# Flags that override config.json; each maps to the request key of the same meaning (train/plan.py).
OVERRIDES = {
    "run_id": str, "platform": str, "variant": str, "strategy": str, "tp": int, "pp": int, "dp": int, "ga": int,
    "mbs": int, "gbs": int, "sl": int, "train_iters": int, "precision": str, "num_gpus": int, "warmup_skip": int,
    "warmup_steps": int, "lr": float, "min_lr": float, "seed": int, "dataset": str, "data_prefix": str,
    "mock_data": int, "commit": str,
}
REQUIRED = ("platform", "variant", "tp", "pp", "dp", "ga", "mbs", "gbs", "sl", "train_iters", "precision",
            "warmup_skip", "lr", "min_lr", "warmup_steps")


def load_request(run_dir: Path | None, flags: dict) -> dict:
    """config.json of the run directory (if any) overridden by flags; every required key present."""
    request: dict = {}
    if run_dir is not None:
        path = run_dir / "config.json"
        try:
            request = json.loads(path.read_text())
        except OSError:
            raise InputError(f"--run-dir {run_dir}: no readable config.json there; give the run directory "
                             "the launcher wrote, or the settings as flags") from None
        except json.JSONDecodeError as err:
            raise InputError(f"{path}: not valid JSON ({err.msg}, line {err.lineno})") from None
        request.setdefault("warmup_skip", request.get("config", {}).get("WARMUP_SKIP"))
        request.setdefault("run_id", run_dir.name)
    request.update({k: v for k, v in flags.items() if v is not None})
    missing = [k for k in REQUIRED if request.get(k) is None]
    if missing:
        raise InputError("missing settings " + ", ".join(missing) + ": give --run-dir (with config.json) or --"
                         + " --".join(k.replace("_", "-") for k in missing))
    return request


def _system(run_dir: Path | None, system_file: Path | None, notes: list[str]) -> dict:
    candidates = [system_file] if system_file else ([run_dir / "system.json", run_dir.parent / "system.json"]
                                                    if run_dir else [])
    for path in candidates:
        if path.is_file():
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError as err:
                raise InputError(f"{path}: not valid JSON ({err.msg}); rerun python3 -m evaluate.probe") from None
    if system_file:
        raise InputError(f"--system {system_file}: no such file; run python3 -m evaluate.probe -o {system_file}")
    notes.append("no system.json found: system description empty")
    return {}


def _status(parsed: ParsedLog, steps_requested: int, exit_code: int | None) -> str:
    done = parsed.records[-1]["step"] if parsed.records else 0
    if exit_code not in (None, 0) or (parsed.error_seen and done < steps_requested):
        return "failed"
    if parsed.truncated or done < steps_requested:
        return "incomplete"
    return "ok"


def _raw_framework(parsed: ParsedLog, warmup_skip: int) -> dict:
    """The framework's own figures, summarised over the same window TPrimat uses, plus its last averages."""
    raw: dict = {"note": "reported by the framework with its own conventions; not used for comparisons"}
    records = parsed.records
    window = metrics.steady_window([r["step"] for r in records], [r["step_time_s"] for r in records], warmup_skip)
    kept = set(window.steps) if window else set()
    for key in ("fw_tflop_per_s_per_gpu", "fw_tokens_per_s_per_gpu"):
        values = [r[key] for r in records if r["step"] in kept and r.get(key) is not None]
        finite = [v for v in values if math.isfinite(v)]
        if finite:
            raw[key.removeprefix("fw_") + "_median"] = metrics.summarize(finite).median
    for key in ("fw_tflop_per_s_per_gpu_avg", "fw_tokens_per_s_per_gpu_avg", "fw_step_time_avg_s"):
        last = next((r[key] for r in reversed(records) if r.get(key) is not None), None)
        if last is not None:
            raw[key.removeprefix("fw_") + "_last"] = last
    return raw


def extract(logs: list[Path], request: dict, *, framework: str | None, system: dict, exit_code: int | None,
            started_at: str | None, ended_at: str | None, device_name: str | None, notes: list[str]) -> dict:
    """Parse the logs and build the result; raises LookupError when there is no iteration line."""
    parsed = parse_logs(logs, framework=framework)
    if not parsed.records and not exit_code:
        last = parsed.tail[-1] if parsed.tail else "(empty)"
        raise LookupError(f"no training iteration line in {', '.join(map(str, logs))} ({parsed.lines_read} lines; "
                          f"last: {redact(last)[:200]}): the run did not reach its first logged step")
    framework = framework or parsed.framework
    if framework is None:
        raise InputError("the log shows no iteration line to tell its format from: give --framework")
    notes.extend(parsed.warnings)
    if parsed.mock_evidence and not request.get("mock_data"):
        notes.append(f"MOCK DATA: the log shows synthetic data although real data was requested: {parsed.mock_evidence}")

    seq_len = request["sl"]
    for record in parsed.records:
        record["tokens"] = request["gbs"] * seq_len
    status = _status(parsed, request["train_iters"], exit_code)
    mock = bool(request.get("mock_data"))
    data = {"fingerprint": None, "tokenizer_fingerprint": None}
    if not mock and request.get("data_prefix"):
        try:
            data = fingerprint.dataset_fingerprint(Path(request["data_prefix"]), compute=False)
        except FileNotFoundError as err:
            notes.append(f"dataset fingerprint unknown: {err}")
    commit = request.get("commit")
    if commit is None:
        commit = fingerprint.project_commit()
        notes.append("project commit read from the checkout at extraction time")
    effective = parsed.effective
    features = {k: v for k, v in effective.items()
                if any(h in k for h in FEATURE_HINTS) and (v is None or isinstance(v, (bool, str)))}
    run = {"id": request.get("run_id") or logs[0].stem, "started_at": started_at, "ended_at": ended_at,
           "status": status, "exit_code": exit_code,
           "error_excerpt": redact("\n".join(parsed.tail)) if status != "ok" else None,
           "commit": commit, "source": "extract", "log_files": [str(p) for p in logs]}
    fairness = request.get("fairness", {})
    return build_result(
        run=run, platform=request["platform"], framework=framework, variant=request["variant"], system=system,
        parallelism={"strategy": request.get("strategy") or "custom", "tp": request["tp"], "pp": request["pp"],
                     "dp": request["dp"], "ga": request["ga"], "nnodes": request.get("nnodes"),
                     "sequence_parallel": request.get("sequence_parallel", request["tp"] > 1),
                     "distributed_optimizer": fairness.get("use_distributed_optimizer")},
        training={"steps": request["train_iters"], "mbs": request["mbs"], "gbs": request["gbs"], "seq_len": seq_len,
                  "precision": request["precision"], "lr": request["lr"], "min_lr": request["min_lr"],
                  "warmup_steps": request["warmup_steps"], "seed": request.get("seed"),
                  "dataset": None if mock else request.get("dataset"), "dataset_fingerprint": data["fingerprint"],
                  "tokenizer_fingerprint": data["tokenizer_fingerprint"], "mock_data": mock,
                  "weight_decay": request.get("weight_decay"), "beta1": request.get("beta1"),
                  "beta2": request.get("beta2"), "grad_clip": request.get("grad_clip")},
        steps=parsed.records, warmup_skip=request["warmup_skip"],
        num_gpus=request.get("num_gpus") or request["tp"] * request["pp"] * request["dp"],
        device_name=device_name or (system.get("gpu") or {}).get("name"),
        raw_framework=_raw_framework(parsed, request["warmup_skip"]),
        effective=effective, features=features, warnings=notes)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m evaluate.extract", description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="training log(s), read in order as one stream")
    parser.add_argument("-o", "--output", required=True, type=Path, help="result JSON to write")
    parser.add_argument("--framework", choices=FRAMEWORKS + ("auto",), default="auto",
                        help="log format; auto detects it from the iteration lines (default)")
    parser.add_argument("--run-dir", type=Path, help="run directory holding config.json (the request)")
    parser.add_argument("--system", type=Path, help="system.json (default: the run directory's, or its parent's)")
    parser.add_argument("--exit-code", type=int, help="exit status of the training process (non-zero: failed)")
    parser.add_argument("--started-at", help="ISO 8601 start time of the run")
    parser.add_argument("--ended-at", help="ISO 8601 end time of the run")
    parser.add_argument("--device-name", help="accelerator name for the MFU peak (default: system.json's)")
    for key, kind in OVERRIDES.items():
        parser.add_argument("--" + key.replace("_", "-"), dest=key, type=kind, help=f"override config.json's {key}")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    notes: list[str] = []
    try:
        for log in args.logs:
            if not log.is_file():
                raise InputError(f"{log}: no such log file")
        request = load_request(args.run_dir, {k: getattr(args, k) for k in OVERRIDES})
        framework = None if args.framework == "auto" else args.framework
        framework = framework or request.get("framework")
        system = _system(args.run_dir, args.system, notes)
        result = extract(args.logs, request, framework=framework, system=system, exit_code=args.exit_code,
                         started_at=args.started_at, ended_at=args.ended_at, device_name=args.device_name,
                         notes=notes)
    except InputError as err:
        print(f"evaluate.extract: {err}", file=sys.stderr)
        return 2
    except ResultError as err:
        print(f"evaluate.extract: {err}", file=sys.stderr)
        return 2
    except LookupError as err:
        print(f"evaluate.extract: {err}", file=sys.stderr)
        return 1
    write_result(args.output, result)
    if not result["series"]["step"]:
        print(f"evaluate.extract: no training iteration line in the log; {args.output} records the failed run "
              f"(exit code {args.exit_code})", file=sys.stderr)
        return 1
    perf = result["performance"]
    figure = perf["tokens_per_s_per_gpu"]
    print(f"{args.output}: {result['framework']} {result['model']['variant']} status={result['run']['status']} "
          f"steps={result['run']['steps_completed']}/{result['training']['steps']} tokens/s/GPU="
          + (f"{figure:.1f}" if figure is not None else "n/a"))
    for note in result["warnings"]:
        print(f"  warning: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
