"""Turn a training log, in any log format a framework registers (Megatron-LM's, Primus's, NeMo's, torchtitan's:
utils/frameworks/), into TPrimat's one result JSON.

    python3 -m evaluate.extract LOG... -o RESULT.json                   # a log from anywhere
    python3 -m evaluate.extract LOG... --run-dir DIR -o RESULT.json     # a TPrimat run directory's log

A log is enough when it says what ran, and most do:
  - Megatron-LM and Primus print their argument dump ("---- arguments ----"): TP, PP, DP, world
    size, MBS, GBS, sequence length, train_iters, bf16/fp8, lr, min_lr, lr_warmup_iters, seed, and
    num_layers, hidden_size, ffn_hidden_size, heads, query groups and QKV bias, which name the model
    variant (utils/spec/models.py); every iteration line carries the global batch size and the steps.
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

With --run-dir, the run directory's config.json (the launcher's request, utils.spec.request) is the
request, and what the log says is recorded beside it under "effective" for evaluate.validate to
compare. Every setting, flag and field is named as in the result (seq_len, steps, ...:
evaluate/logs/run_settings.py), so nothing is renamed on the way. Flags override both, but a flag that
contradicts what the log says ran is refused (exit 2): the log is the record of the run. WARMUP_SKIP comes from
the run's request, else --warmup-skip, else config.env and the environment as a run would take it.

Figures are computed by utils.spec.metrics from the per-step values; the framework's own TFLOP/s and
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

from evaluate.logs import worker_failure
from evaluate.logs.evaluations import evaluation_of
from evaluate.logs.formats import by_name
from evaluate.logs.parse import ParsedLog, missing_steps, parse_logs, step_ranges
from evaluate.logs.run_settings import SETTINGS, flag, merged, requested, sections, shown_by
from utils import fingerprint, frameworks
from utils.spec import fairness, metrics
from evaluate.collect import Loaded
from evaluate.gate import judged
from utils.cli import Parser, UsageError, WorkError, output_file, quoted
from utils.spec.evaluation import Evaluation
from utils.spec.result import ResultError, build_result, write_result
from utils.spec.result_types import typed
from utils.runset import other_nodes, system_path

SECRET_PATTERNS = (re.compile(r"hf_[A-Za-z0-9]{16,}"), re.compile(r"(HF_TOKEN\s*[=:]\s*)\S+"))
FEATURE_HINTS = ("fusion", "flash_attn", "attention_backend", "turbo", "layer_spec")
BINARY_PROBE = 4096  # bytes looked at to tell a binary file from a log


def redact(text: str) -> str:
    """Remove anything that looks like a Hugging Face token from text kept in a result."""
    text = SECRET_PATTERNS[0].sub("hf_***", text)
    return SECRET_PATTERNS[1].sub(r"\1***", text)


def binary(path: Path) -> bool:
    """Whether a file holds binary data, not a log: a NUL byte near its start (no console output has one)."""
    with open(path, "rb") as handle:
        return b"\0" in handle.read(BINARY_PROBE)


def error_excerpt(parsed: ParsedLog, logs: list[Path], gap: list[str]) -> str:
    """A failed run's excerpt: the worker torchrun lost, named (rank, host, signal or exit code, its last lines),
    where a log reports one; else the log's last lines. Then the steps that have no record."""
    head = next((found for log in reversed(logs) if (found := worker_failure.summary(
        worker_failure.log_tail_lines(log)))), None)
    return redact("\n".join(([head] if head else parsed.tail) + gap))


def find_system(run_dir: Path | None, system_file: Path | None, notes: list[str]) -> dict:
    """The probe's system.json: --system's, else the run directory's, else its run set's, with the checks the other
    nodes of a multi-node run set recorded beside it (other_nodes, utils.runset); {} (noted) when none."""
    candidates = [system_file] if system_file else [system_path(run_dir)] if run_dir else []
    for path in candidates:
        if path is not None and path.is_file():
            try:
                system = json.loads(path.read_text())
            except json.JSONDecodeError as err:
                raise UsageError(f"{path}: not valid JSON ({err.msg}); rerun python3 -m evaluate.probe") from None
            others = other_nodes(path.parent) if isinstance(system, dict) else []
            return {**system, "other_nodes": others} if others else system
    if system_file:
        raise UsageError(f"--system {system_file}: no such file; run python3 -m evaluate.probe -o {system_file}")
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


def _fingerprints(settings: dict, notes: list[str]) -> dict:
    """The dataset and tokenizer fingerprints of the data prefix's manifest (none for mock data or no prefix)."""
    if settings.get("mock_data") or not settings.get("data_prefix"):
        return {}
    try:
        data = fingerprint.dataset_fingerprint(Path(settings["data_prefix"]), compute=False)
    except FileNotFoundError as err:
        notes.append(f"dataset fingerprint unknown: {err}")
        return {}
    if data.get("problem"):
        notes.append(f"the dataset fingerprint is of the files as they are now, which are not the verified data: "
                     f"{data['problem']}")
    return {"dataset_fingerprint": data["fingerprint"], "tokenizer_fingerprint": data["tokenizer_fingerprint"]}


def features(effective: dict) -> dict:
    """The kernels the log says the run chose (fusions, attention backend, Primus-Turbo), for the result's features."""
    return {k: v for k, v in effective.items()
            if any(h in k for h in FEATURE_HINTS) and (v is None or isinstance(v, (bool, str)))}


def _with_fixed(framework: str, effective: dict) -> dict:
    """The log's effective settings, with what its framework always does (its entry's `fixed`) where it says nothing:
    validate then compares those with the fairness profile too, and names the reason of any difference."""
    entry = frameworks.TABLE.get(framework)
    if entry is None or not entry.fixed:
        return effective
    always = fairness.fixed(*entry.fixed)
    reasons = {key: why for key, why in always.pop("profile_fixed").items() if effective.get(key) is None}
    return {**{key: value for key, value in always.items() if key in reasons}, **effective,
            "profile_fixed": {**reasons, **(effective.get("profile_fixed") or {})}}


def extract(parsed: ParsedLog, logs: list[Path], settings: dict, *, framework: str | None, system: dict,
            exit_code: int | None, started_at: str | None, ended_at: str | None, from_run_dir: bool,
            notes: list[str], asked: Evaluation | None = None) -> dict:
    """Build the result of the parsed logs under the settings (evaluate.logs.run_settings.merged); asked: the
    request's validation (None: a log without its run directory)."""
    framework = framework or parsed.framework
    if framework is None:
        raise UsageError("the log shows no iteration line to tell its format from: give --framework")
    notes.extend(parsed.warnings)
    if parsed.mock_evidence and not settings.get("mock_data"):
        notes.append(f"MOCK DATA: the log shows synthetic data although real data was requested: {parsed.mock_evidence}")

    for record in parsed.records:
        record["tokens"] = settings["gbs"] * settings["seq_len"]
    missing = missing_steps(parsed)
    gap = [f"missing steps {step_ranges(missing)} (no iteration line for them)"] if missing else []
    notes.extend(gap)
    evaluation, time_to_train = evaluation_of(parsed.validations, parsed.records, asked, framework=framework,
                                              gbs=settings["gbs"], seq_len=settings["seq_len"],
                                              steps=settings["steps"], notes=notes,
                                              split=parsed.effective.get("validation"))
    stopped = time_to_train is not None and time_to_train["stopped_at_target"]  # a run that ended at its target
    status = _status(parsed, time_to_train["step"] if stopped else settings["steps"], exit_code, missing)
    parallelism, training = sections(settings, _fingerprints(settings, notes))
    commit = settings.get("commit")
    if commit is None and from_run_dir:  # a log from elsewhere did not run this checkout
        commit = fingerprint.project_commit()
        notes.append("project commit read from the checkout at extraction time")
    effective = _with_fixed(framework, parsed.effective)
    run = {"id": settings.get("run_id") or logs[0].stem, "started_at": started_at, "ended_at": ended_at,
           "status": status, "exit_code": exit_code,
           "error_excerpt": error_excerpt(parsed, logs, gap) if status != "ok" else None,
           "commit": commit, "source": "extract", "log_files": [str(p) for p in logs]}
    return build_result(
        run=run, platform=settings["platform"], framework=framework, variant=settings["variant"], system=system,
        parallelism=parallelism, training=training, steps=parsed.records, warmup_skip=settings["warmup_skip"],
        num_gpus=settings.get("num_gpus") or settings["tp"] * settings["pp"] * settings["dp"],
        device_name=settings.get("device_name") or (system.get("gpu") or {}).get("name"),
        raw_framework=_raw_framework(parsed, settings["warmup_skip"]),
        effective=effective, features=features(effective), warnings=notes, evaluation=evaluation,
        time_to_train=time_to_train)


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python3 -m evaluate.extract", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="training log(s), read in order as one stream")
    parser.add_argument("-o", "--output", required=True, type=output_file, help="result JSON to write")
    parser.add_argument("--framework", choices=(*by_name(), "auto"), default="auto",
                        help="whose log it is (its log format); auto: the --run-dir request's framework, else detected "
                             "from the step lines (default)")
    parser.add_argument("--run-dir", type=Path, help="TPrimat run directory holding config.json (the request)")
    parser.add_argument("--system", type=Path, help="system.json (default: the run directory's, or its parent's)")
    parser.add_argument("--exit-code", type=int, help="exit status of the training process (non-zero: failed)")
    parser.add_argument("--started-at", help="ISO 8601 start time of the run")
    parser.add_argument("--ended-at", help="ISO 8601 end time of the run")
    group = parser.add_argument_group("settings", "each overrides --run-dir's config.json and fills what the "
                                                  "log does not say; one that contradicts the log is refused")
    for key, s in SETTINGS.items():
        group.add_argument(flag(key), dest=key, type=s.kind, metavar=s.metavar, choices=s.choices,
                           help=s.help or s.label)
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line of one extraction (the judge's, evaluate/judge.py, as a user's)."""
    return _parser().parse_args(argv)


def result_of(args: argparse.Namespace) -> dict:
    """The result of the logs the command line names; UsageError or ResultError for input no result comes from,
    WorkError for logs that never reached a step."""
    notes: list[str] = []
    for log in args.logs:
        if not log.is_file():
            raise UsageError(f"{log}: no such log file")
        if binary(log):
            raise UsageError(f"{log}: not a text log (a NUL byte in its first {BINARY_PROBE // 1024} KiB); give "
                             "the run's console log (train.log, or what the framework printed)")
    request, requested_settings = requested(args.run_dir)
    # The log is the flag's framework's, else the requested framework's (its registry entry's log_format); the
    # result names the framework that ran, whose log format may be another's too.
    given = None if args.framework == "auto" else args.framework
    asked = request.identity.framework if request and request.identity.framework in by_name() else None
    framework = request.identity.framework if request else given
    parsed = parse_logs(args.logs, framework=given or asked)
    if not parsed.records and not args.exit_code:
        last = parsed.tail[-1] if parsed.tail else "(empty)"
        raise WorkError(f"no training iteration line in {', '.join(map(str, args.logs))} ({parsed.lines_read} "
                        f"lines; last: {quoted(redact(last))}): the run did not reach its first logged step")
    system = find_system(args.run_dir, args.system, notes)
    settings = merged(args.logs, args.run_dir, requested_settings, {key: getattr(args, key) for key in SETTINGS},
                      shown_by(parsed), system, notes)
    return extract(parsed, args.logs, settings, framework=framework, system=system, exit_code=args.exit_code,
                   started_at=args.started_at, ended_at=args.ended_at, from_run_dir=args.run_dir is not None,
                   notes=notes, asked=request.evaluation if request else None)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        result = result_of(args)
        write_result(args.output, result)
    except (UsageError, ResultError) as err:
        print(f"evaluate.extract: {err}", file=sys.stderr)
        return 2
    except WorkError as err:
        print(f"evaluate.extract: {err}", file=sys.stderr)
        return 1
    read = typed(result)
    if not read.series.step:
        print(f"evaluate.extract: no training iteration line in the log; {args.output} records the failed run "
              f"(exit code {args.exit_code})", file=sys.stderr)
        return 1
    item = Loaded(str(args.output), result, read.system.as_dict())
    judged(item)  # the figure is printed only where validate passes the result (evaluate.gate)
    figure = read.performance.tokens_per_s_per_gpu
    shown = (metrics.figure_text(figure) if figure is not None else "n/a") if item.ok else \
        f"none (fails validate: {quoted(item.failures[0]) if item.failures else item.verdict})"
    print(f"{args.output}: {read.framework} {read.model.variant} status={item.verdict} "
          f"steps={read.run.steps_completed}/{read.training.steps} tokens/s/GPU={shown}")
    for note in read.warnings:
        print(f"  warning: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
