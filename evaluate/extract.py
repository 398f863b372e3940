"""Turn a Megatron-LM, Primus or NeMo training log into TPrimat's one result JSON.

    python3 -m evaluate.extract LOG... -o RESULT.json                   # a log from anywhere
    python3 -m evaluate.extract LOG... --run-dir DIR -o RESULT.json     # a TPrimat run directory's log

A log is enough when it says what ran, and most do:
  - Megatron-LM and Primus print their argument dump ("---- arguments ----"): TP, PP, DP, world
    size, MBS, GBS, sequence length, train_iters, bf16/fp8, lr, min_lr, lr_warmup_iters, seed, and
    num_layers, hidden_size, ffn_hidden_size, heads, query groups and QKV bias, which name the model
    variant (utils/models.py); every iteration line carries the global batch size and the steps.
  - NeMo prints its parallel groups (TP, PP, DP), the micro-batch count (GA), the parameter count
    (the variant, where TP = PP = 1), megatron-core's OptimizerConfig (lr, betas, clipping) and
    GPTDatasetConfig (sequence length, seed), and the global batch size and steps on every step;
    not the precision, min_lr or LR warm-up.
  - The platform, where the log shows it: a device line (nvidia-smi -L, rocm-smi, amd-smi), the
    collective library's version line (NCCL built for CUDA, RCCL), or Primus's HIP memory fields;
    else system.json's GPU vendor (--system). A Megatron log alone does not say it.
What the log leaves out is asked for in one line naming the flags that supply it (exit 2). A
device the log names also gives MFU its peak. To compare the result fairly with others, give
--data-prefix of the same data prepared here: its manifest holds the dataset and tokenizer
fingerprints that evaluate.validate's fairness check needs.

With --run-dir, the run directory's config.json (the launcher's request, train/plan.py) is the
request, and what the log says is recorded beside it under "effective" for evaluate.validate to
compare. Flags override both, but a flag that contradicts what the log says ran is refused
(exit 2): the log is the record of the run. WARMUP_SKIP comes from the run's request, else
--warmup-skip, else config.env and the environment as a run would take it.

Figures are computed by utils.metrics from the per-step values; the framework's own TFLOP/s and
running averages are kept apart under raw_framework. Exit 0: result written; 2: bad input;
1: the log holds no iteration line (nothing to extract).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from utils import fingerprint
from evaluate.logs import FRAMEWORKS, ParsedLog, complete_batch, missing_steps, parse_logs, step_ranges
from utils import metrics
from utils.config import PLATFORMS, PRECISIONS, ConfigError, load_config
from utils.fairness import request_identity
from utils.hardware import lookup_device
from utils.models import MODELS
from utils.result import ResultError, build_result, write_result

SECRET_PATTERNS = (re.compile(r"hf_[A-Za-z0-9]{16,}"), re.compile(r"(HF_TOKEN\s*[=:]\s*)\S+"))
FEATURE_HINTS = ("fusion", "flash_attn", "attention_backend")
VARIANTS = tuple(spec.variant for spec in MODELS.values())
ALL_PRECISIONS = tuple(dict.fromkeys(p for platform in PLATFORMS for p in PRECISIONS[platform]))
# Architecture numbers a log may print, named like ModelSpec's fields; together they name a variant.
ARCHITECTURE = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads", "qkv_bias")
VENDOR_PLATFORM = {"nvidia": "nvd", "amd": "amd"}
# Settings a log may print that no flag gives (request key = the log's key).
LOG_ONLY = ("sequence_parallel", "lr_decay_style", "weight_decay", "beta1", "beta2", "grad_clip")


class InputError(Exception):
    """Bad input: one line naming the problem and the fix (exit 2)."""


def redact(text: str) -> str:
    """Remove anything that looks like a Hugging Face token from text kept in a result."""
    text = SECRET_PATTERNS[0].sub("hf_***", text)
    return SECRET_PATTERNS[1].sub(r"\1***", text)


def _zero_one(text: str) -> bool:
    if text not in ("0", "1"):
        raise argparse.ArgumentTypeError(f"expected 0 or 1, got {text!r}")
    return text == "1"


@dataclass(frozen=True)
class Setting:
    """A request setting (train/plan.py's key) that a flag can give."""

    kind: Callable
    metavar: str
    label: str  # its name in the one-line "does not say" message; "" for a setting a result can do without
    log_key: str | None = None  # the parsed log's key for the same fact; None where logs never print it
    help: str = ""
    choices: tuple[str, ...] | None = None


SETTINGS: dict[str, Setting] = {
    "platform": Setting(str, "|".join(PLATFORMS), "platform", choices=PLATFORMS,
                        help="platform (the log's: its GPU, where it shows one; else system.json's vendor)"),
    "variant": Setting(str, "|".join(VARIANTS), "model variant", choices=VARIANTS,
                       help="model variant (the log's: the one whose architecture it prints)"),
    "tp": Setting(int, "N", "TP", "tp"),
    "pp": Setting(int, "N", "PP", "pp"),
    "dp": Setting(int, "N", "DP", "dp"),
    "ga": Setting(int, "N", "gradient accumulation", "ga"),
    "mbs": Setting(int, "N", "micro-batch size", "mbs"),
    "gbs": Setting(int, "N", "global batch size", "gbs"),
    "sl": Setting(int, "N", "sequence length", "seq_len"),
    "train_iters": Setting(int, "N", "steps", "steps", help="steps the run was to train"),
    "precision": Setting(str, "|".join(ALL_PRECISIONS), "precision", "precision", choices=ALL_PRECISIONS),
    "lr": Setting(float, "LR", "peak LR", "lr"),
    "min_lr": Setting(float, "LR", "minimum LR", "min_lr"),
    "warmup_steps": Setting(int, "N", "LR warm-up steps", "warmup_steps"),
    "num_gpus": Setting(int, "N", "", "num_gpus", help="GPUs of the job (the log's world size; else TP x PP x DP)"),
    "seed": Setting(int, "N", "", "seed", help="seed"),
    "mock_data": Setting(_zero_one, "0|1", "", "mock_data", help="1: the run trained on synthetic tokens"),
    "device_name": Setting(str, "NAME", "", help="accelerator name for the MFU peak (the log's device line; "
                                                  "else system.json's)"),
    "strategy": Setting(str, "NAME", "", help="named strategy of utils/strategies.py (default: custom)"),
    "warmup_skip": Setting(int, "N", "", help="first steps left out of the statistics (else the request's; "
                                              "else WARMUP_SKIP of config.env and the environment)"),
    "dataset": Setting(str, "NAME", "", help="dataset name (bc, c4, sample)"),
    "data_prefix": Setting(str, "PREFIX", "", help="prepared data prefix, for the dataset fingerprint"),
    "run_id": Setting(str, "ID", "", help="run id (else the run directory's name; else the log's stem)"),
    "commit": Setting(str, "SHA", "", help="project commit the run used (else the request's; with --run-dir, "
                                            "this checkout's; else none)"),
}


@dataclass
class Shown:
    """What the logs say, keyed like the request, and how they say the facts that need explaining."""

    values: dict
    evidence: dict  # key -> the text that showed it (platform, variant)
    variants: tuple[str, ...]  # the variants the printed architecture allows (all of them when it says nothing)


def _vendor(device_name: str | None) -> str | None:
    """nvidia | amd for a device name: its entry in the peak table, else the vendor it starts with."""
    if not device_name:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an unknown device is no problem here
        spec = lookup_device(device_name)
    first = device_name.split()[0].lower()
    return spec.vendor if spec else (first if first in VENDOR_PLATFORM else None)


def _variants(effective: dict) -> tuple[tuple[str, ...], str | None]:
    """The variants agreeing with every architecture number the log prints, and those numbers in words.

    The parameter count counts only where no architecture number is printed (NeMo) and it matches a
    variant: it also depends on how a framework pads the vocabulary.
    """
    arch = {key: effective[key] for key in ARCHITECTURE if effective.get(key) is not None}
    if arch:
        words = ", ".join(f"{key} {value}" for key, value in arch.items())
        return tuple(s.variant for s in MODELS.values() if all(getattr(s, k) == v for k, v in arch.items())), words
    count = effective.get("parameters")
    matched = tuple(s.variant for s in MODELS.values() if s.param_count() == count)
    return (matched, f"{count} parameters") if matched else (VARIANTS, None)


def shown_by(parsed: ParsedLog) -> Shown:
    """The request settings the logs say."""
    effective = parsed.effective
    values = {key: effective[s.log_key] for key, s in SETTINGS.items()
              if s.log_key and effective.get(s.log_key) is not None}
    values.update({key: effective[key] for key in LOG_ONLY if effective.get(key) is not None})
    if effective.get("distributed_optimizer") is not None:
        values["fairness"] = {"use_distributed_optimizer": effective["distributed_optimizer"]}
    evidence = {}
    vendor, evidence_line = _vendor(parsed.device_name), parsed.device_name
    if vendor is None:
        vendor, evidence_line = parsed.gpu_vendor, parsed.vendor_evidence
    if vendor is not None:
        values["platform"], evidence["platform"] = VENDOR_PLATFORM[vendor], evidence_line
    if parsed.device_name:
        values["device_name"] = parsed.device_name
    variants, words = _variants(effective)
    if words:
        evidence["variant"] = words
        if len(variants) == 1:
            values["variant"] = variants[0]
    return Shown(values, evidence, variants)


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _contradictions(flags: dict, shown: Shown) -> list[str]:
    """Each given flag that disagrees with the log, with what the log says."""
    found = []
    for key, value in flags.items():
        if value is None:
            continue
        if key == "variant" and "variant" in shown.evidence and value not in shown.variants:
            says = "|".join(shown.variants) or "none of TPrimat's variants"
            found.append(f"{_flag(key)} {value} (the log's model: {shown.evidence['variant']}: {says})")
        elif key != "variant" and key in shown.values and shown.values[key] != value:
            where = f", from {shown.evidence[key]!r}" if key in shown.evidence else ""
            found.append(f"{_flag(key)} {value} (the log: {shown.values[key]}{where})")
    return found


def _run_request(run_dir: Path | None) -> dict:
    """The run directory's config.json (the launcher's request), or {} without a run directory."""
    if run_dir is None:
        return {}
    path = run_dir / "config.json"
    try:
        request = json.loads(path.read_text())
    except OSError:
        raise InputError(f"--run-dir {run_dir}: no readable config.json there; give the run directory "
                         "the launcher wrote, or leave --run-dir out to read the settings from the log") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err.msg}, line {err.lineno})") from None
    request.setdefault("warmup_skip", request.get("config", {}).get("WARMUP_SKIP"))
    request.setdefault("run_id", run_dir.name)
    return request


def configured_warmup_skip(platform: str) -> tuple[int, str]:
    """WARMUP_SKIP as a run of this checkout on that platform would take it, and where it came from."""
    env = {**os.environ, "PLATFORM": platform, "TPRIMAT_DETECTED_PLATFORM": platform}  # no detection here
    try:
        config = load_config(env)
    except ConfigError as err:
        raise InputError(f"WARMUP_SKIP unknown: the configuration does not load ({err.problems[0]}); "
                         "give --warmup-skip N") from None
    return config["WARMUP_SKIP"], config.sources.get("WARMUP_SKIP", "config.env")


def load_request(logs: list[Path], run_dir: Path | None, config: dict, flags: dict, shown: Shown, system: dict,
                 notes: list[str]) -> dict:
    """The request: what the logs say, under config.json (if any), under the flags; every required key present.

    A flag that contradicts the log, or a setting that none of them gives, is bad input (one line each kind).
    """
    where = ", ".join(str(p) for p in logs)
    contradictions = _contradictions(flags, shown)
    if contradictions:
        raise InputError(f"{where} shows what ran, and these flags contradict it: {'; '.join(contradictions)}; "
                         "drop them, or give the log of the run they describe")
    request = {**shown.values, **config, **{k: v for k, v in flags.items() if v is not None}}
    complete_batch(request)  # e.g. GA of TPrimat's NeMo line, which names DP, MBS and GBS
    vendor = (system.get("gpu") or {}).get("vendor")
    if request.get("platform") is None and vendor in VENDOR_PLATFORM:
        request["platform"] = VENDOR_PLATFORM[vendor]
        notes.append(f"platform {request['platform']} from system.json's GPU vendor (the log does not show it)")
    missing = [key for key, s in SETTINGS.items() if s.label and request.get(key) is None]
    if "variant" in missing and not shown.variants:
        raise InputError(f"{where}: the model ({shown.evidence['variant']}) is none of TPrimat's variants "
                         f"({', '.join(VARIANTS)}; utils/models.py); a result names one of them")
    if missing:
        sources = where + (f" and {run_dir / 'config.json'}" if run_dir else "")
        verb = "does" if len(logs) == 1 and run_dir is None else "do"
        asks = " ".join(f"{_flag(key)} " + ("|".join(shown.variants) if key == "variant" else SETTINGS[key].metavar)
                        for key in missing)
        raise InputError(f"{sources} {verb} not say {', '.join(SETTINGS[key].label for key in missing)}; give {asks}")
    platform, precision = request["platform"], request["precision"]
    if precision not in PRECISIONS[platform]:
        raise InputError(f"precision {precision} on {platform}: TPrimat runs {platform} in "
                         f"{' or '.join(PRECISIONS[platform])} only, so no result compares with it")
    if request.get("warmup_skip") is None:
        request["warmup_skip"], source = configured_warmup_skip(request["platform"])
        notes.append(f"WARMUP_SKIP={request['warmup_skip']} from {source} (no run directory gave it; "
                     "--warmup-skip sets another)")
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


def _status(parsed: ParsedLog, steps_requested: int, exit_code: int | None, missing: list[int]) -> str:
    """failed: an error; incomplete: the run stopped early, or steps before its last have no record."""
    done = parsed.records[-1]["step"] if parsed.records else 0
    if exit_code not in (None, 0) or (parsed.error_seen and done < steps_requested):
        return "failed"
    if parsed.truncated or done < steps_requested or missing:
        return "incomplete"
    return "ok"


def _raw_framework(parsed: ParsedLog, warmup_skip: int) -> dict:
    """The framework's own figures, summarised over the same window TPrimat uses, plus its last averages."""
    raw: dict = {"note": "reported by the framework with its own conventions; not used for comparisons"}
    records = parsed.records
    window = metrics.steady_window([r["step"] for r in records], [r["step_time_s"] for r in records], warmup_skip)
    kept = set(window.steps) if window else set()
    for key in ("fw_tflop_per_s_per_gpu", "fw_tokens_per_s_per_gpu", "fw_step_time_s"):
        values = [r[key] for r in records if r["step"] in kept and r.get(key) is not None]
        finite = [v for v in values if math.isfinite(v)]
        if finite:
            raw[key.removeprefix("fw_") + "_median"] = metrics.summarize(finite).median
    for key in ("fw_tflop_per_s_per_gpu_avg", "fw_tokens_per_s_per_gpu_avg", "fw_step_time_avg_s",
                "fw_mem_allocated_now_gib", "fw_mem_reserved_gib", "fw_mem_allocated_gib"):
        last = next((r[key] for r in reversed(records) if r.get(key) is not None), None)
        if last is not None:
            raw[key.removeprefix("fw_") + "_last"] = last
    return raw


def extract(parsed: ParsedLog, logs: list[Path], request: dict, *, framework: str | None, system: dict,
            exit_code: int | None, started_at: str | None, ended_at: str | None, from_run_dir: bool,
            notes: list[str]) -> dict:
    """Build the result of the parsed logs under the request."""
    framework = framework or parsed.framework
    if framework is None:
        raise InputError("the log shows no iteration line to tell its format from: give --framework")
    notes.extend(parsed.warnings)
    if parsed.mock_evidence and not request.get("mock_data"):
        notes.append(f"MOCK DATA: the log shows synthetic data although real data was requested: {parsed.mock_evidence}")

    seq_len = request["sl"]
    for record in parsed.records:
        record["tokens"] = request["gbs"] * seq_len
    missing = missing_steps(parsed)
    gap = [f"missing steps {step_ranges(missing)} (no iteration line for them)"] if missing else []
    notes.extend(gap)
    status = _status(parsed, request["train_iters"], exit_code, missing)
    mock = bool(request.get("mock_data"))
    data = {"fingerprint": None, "tokenizer_fingerprint": None}
    if not mock and request.get("data_prefix"):
        try:
            data = fingerprint.dataset_fingerprint(Path(request["data_prefix"]), compute=False)
        except FileNotFoundError as err:
            notes.append(f"dataset fingerprint unknown: {err}")
        if data.get("problem"):
            notes.append(f"the dataset fingerprint is of the files as they are now, which are not the verified data: "
                         f"{data['problem']}")
    commit = request.get("commit")
    if commit is None and from_run_dir:  # a log from elsewhere did not run this checkout
        commit = fingerprint.project_commit()
        notes.append("project commit read from the checkout at extraction time")
    effective = parsed.effective
    features = {k: v for k, v in effective.items()
                if any(h in k for h in FEATURE_HINTS) and (v is None or isinstance(v, (bool, str)))}
    run = {"id": request.get("run_id") or logs[0].stem, "started_at": started_at, "ended_at": ended_at,
           "status": status, "exit_code": exit_code,
           "error_excerpt": redact("\n".join(parsed.tail + gap)) if status != "ok" else None,
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
                  "beta2": request.get("beta2"), "grad_clip": request.get("grad_clip"),
                  **({"lr_decay_style": request["lr_decay_style"]} if request.get("lr_decay_style") else {}),
                  **request_identity(request)},
        steps=parsed.records, warmup_skip=request["warmup_skip"],
        num_gpus=request.get("num_gpus") or request["tp"] * request["pp"] * request["dp"],
        device_name=request.get("device_name") or (system.get("gpu") or {}).get("name"),
        raw_framework=_raw_framework(parsed, request["warmup_skip"]),
        effective=effective, features=features, warnings=notes)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m evaluate.extract", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="training log(s), read in order as one stream")
    parser.add_argument("-o", "--output", required=True, type=Path, help="result JSON to write")
    parser.add_argument("--framework", choices=FRAMEWORKS + ("auto",), default="auto",
                        help="log format; auto detects it from the iteration lines (default)")
    parser.add_argument("--run-dir", type=Path, help="TPrimat run directory holding config.json (the request)")
    parser.add_argument("--system", type=Path, help="system.json (default: the run directory's, or its parent's)")
    parser.add_argument("--exit-code", type=int, help="exit status of the training process (non-zero: failed)")
    parser.add_argument("--started-at", help="ISO 8601 start time of the run")
    parser.add_argument("--ended-at", help="ISO 8601 end time of the run")
    settings = parser.add_argument_group("settings", "each overrides --run-dir's config.json and fills what the "
                                                     "log does not say; one that contradicts the log is refused")
    for key, s in SETTINGS.items():
        settings.add_argument(_flag(key), dest=key, type=s.kind, metavar=s.metavar, choices=s.choices,
                              help=s.help or s.label)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    notes: list[str] = []
    try:
        for log in args.logs:
            if not log.is_file():
                raise InputError(f"{log}: no such log file")
        config = _run_request(args.run_dir)
        framework = (None if args.framework == "auto" else args.framework) or config.get("framework")
        parsed = parse_logs(args.logs, framework=framework)
        if not parsed.records and not args.exit_code:
            last = parsed.tail[-1] if parsed.tail else "(empty)"
            raise LookupError(f"no training iteration line in {', '.join(map(str, args.logs))} ({parsed.lines_read} "
                              f"lines; last: {redact(last)[:200]}): the run did not reach its first logged step")
        system = _system(args.run_dir, args.system, notes)
        request = load_request(args.logs, args.run_dir, config, {key: getattr(args, key) for key in SETTINGS},
                               shown_by(parsed), system, notes)
        result = extract(parsed, args.logs, request, framework=framework, system=system, exit_code=args.exit_code,
                         started_at=args.started_at, ended_at=args.ended_at, from_run_dir=args.run_dir is not None,
                         notes=notes)
        write_result(args.output, result)
    except (InputError, ResultError) as err:
        print(f"evaluate.extract: {err}", file=sys.stderr)
        return 2
    except LookupError as err:
        print(f"evaluate.extract: {err}", file=sys.stderr)
        return 1
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
