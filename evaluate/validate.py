"""Check results one by one, and check that a set of results is a fair comparison.

    python3 -m evaluate.validate RESULT_OR_DIR_OR_ZIP...

Each result: schema-valid, status ok, every requested step ran and has its record, losses finite,
loss lower at the end than at the start, no NaN or skipped iterations, real data unless mock data
was requested, effective settings equal to the requested ones (every parallelism and training
setting the framework reports, named alike, and the fairness profile's DDP and FP8 settings), and
figures it earned: every step time finite, above 0 and no faster than the device's peak allows for
the step's FLOPs (utils.spec.models' formula, utils.machine.hardware's peaks), the headline figures those
utils.spec.metrics gives from the step times, an MFU of at most 1, no memory below 0, the step breakdown and the
memory peaks those its series give (evaluate/series_checks.py); and the machine behind them: no
power above what the device can draw (utils.machine.hardware's board power, a CPU package's limit), no energy below 0 (an
energy counter that went backwards), with warnings for throttling during the steady state (reason, GPU, steps), a
flagged straggler and the node's health problems (system.health). The set: results of
the same model must share variant, sequence length, precision, steps, dataset and tokenizer
fingerprints, the fairness profile and the workload conventions (init std, padded vocabulary, EOD
loss masking, sampler, NaN check, FP8 recipe; a different LR warm-up convention, NeMo's, is
warned of; a precision comparison, evaluate.compare --precision-comparison, notes a difference of precision or FP8
recipe instead), evaluated results the same evaluation split and tokens (evaluation_checks.SHARED_EVALUATION),
and results on the same number of nodes the global batch (it grows with data
parallelism across nodes: weak scaling). Every framework is held to these alike, the torch-native ones (fsdp,
autotp) included; their own settings (evaluate/native_settings.py: DP implementation, compile, SAC, attention,
ZeRO stage) change the memory/time trade-off or the rounding, not the work, so where they differ between runs
of the same model a warning names them. Runs of one vendor that differ only in their stack (utils/spec/stacks.py:
the image and the versions in it) are a stack comparison, said as such, not an unfairness.
Prints one line per problem naming the result and the check; exit 1 when any check fails.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Sequence

from evaluate import (acceptance_checks, effective_settings, evaluation_checks, integrity, machine_checks, model_checks,
                      native_settings, prediction_checks, series_checks, straggler_checks, telemetry_checks)
from evaluate.collect import CollectError, Loaded, collect, first_problem
from evaluate.logs import worker_failure
from evaluate.logs.parse import step_ranges
from utils.spec import metrics
from utils.cli import Parser, quoted, run
from utils.machine.hardware import DEVICES
from utils.spec.precision import PEAK_CLASS
from utils.spec.models import by_variant
from utils.spec.result_types import Section

SHORT_RUN = 20  # below this many steps a loss that did not fall is only flagged
MAX_LISTED = 100_000  # missing steps beyond this many are counted, not listed


class Shared(NamedTuple):
    """A field that compared runs must share."""

    label: str
    section: str
    key: str
    per_nodes: bool = False  # compared only among runs on the same number of nodes
    fatal: bool = True
    null_is_value: bool = False  # None is a value (no FP8 recipe), not "unknown"
    why: str = ""  # said with a difference that is known and cannot be removed
    unknown_fatal: bool | None = True  # False: results from before the field (schema < 1.2) warn; None: not noted


# The global batch is compared only among runs on the same number of nodes: more nodes add
# data-parallel ranks, and each brings its own micro-batches (weak scaling), so per-GPU throughput
# still compares. The workload-identity fields (utils.spec.fairness.identity) follow the fingerprints.
FAIRNESS_FIELDS = (
    Shared("model variant", "model", "variant"), Shared("sequence length", "training", "seq_len"),
    Shared("global batch size", "training", "gbs", per_nodes=True), Shared("precision", "training", "precision"),
    Shared("steps", "training", "steps"),
    Shared("dataset fingerprint", "training", "dataset_fingerprint"),
    Shared("tokenizer fingerprint", "training", "tokenizer_fingerprint"),
    Shared("fairness profile", "training", "fairness_profile", unknown_fatal=False),
    Shared("init std", "training", "init_method_std", unknown_fatal=False),
    Shared("padded vocabulary", "training", "padded_vocab_size", unknown_fatal=False),
    Shared("EOD loss masking", "training", "eod_mask_loss", unknown_fatal=False),
    Shared("sampler", "training", "dataloader_type", unknown_fatal=False),
    Shared("NaN check", "training", "check_for_nan_in_grad", unknown_fatal=False),
    Shared("FP8 recipe", "training", "fp8_recipe", null_is_value=True, unknown_fatal=False),
    Shared("validation split", "training", "validation_split", unknown_fatal=False,
           why="the documents held out for validation are not trained on: another split trains on other documents"),
    Shared("layer implementation", "features", "layer_spec", unknown_fatal=None,
           why="megatron-core's local layers (TRANSFORMER_IMPL=local) run other kernels than Transformer Engine's"),
    Shared("LR warm-up convention", "training", "lr_warmup_convention", fatal=False, unknown_fatal=False,
           why="NeMo 2.3's scheduler has no Megatron-style warm-up: the first steps' LR and loss differ"),
)
# The highest dense peak of utils/machine/hardware.py's table: no result's peak is above it, and it bounds the step
# time where the device is unknown (nothing TPrimat knows computes faster).
def highest_peak(precision: str) -> float:
    """The fastest device's peak at a precision (the CPU's fp32 and an unknown one: at BF16, which no GPU's fp32
    exceeds): what no step can beat, whatever device ran it."""
    wanted = precision if precision in PEAK_CLASS and PEAK_CLASS[precision] else "bf16"
    return max(peak for _, spec in DEVICES if (peak := spec.peak_tflops(wanted)))
HEADLINE = ("median_step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "tflop_per_s_per_gpu", "mfu")


@dataclass(frozen=True)
class Finding:
    """One check's outcome on one result (or on the set)."""

    subject: str  # the result's name (platform/run id) or "set"
    check: str
    message: str
    fatal: bool = True

    def line(self) -> str:
        kind = "FAIL" if self.fatal else "warn"
        return f"{kind} {quoted(self.subject, 300)}: {self.check}: {quoted(self.message, 4000)}"  # text from files


def check_result(item: Loaded) -> list[Finding]:
    """Every per-result check; an empty list means the result is sound."""
    name = item.name
    problem = first_problem(item.result)  # the schema's check reads the JSON as written; typed reads follow it
    if problem:
        return [Finding(name, "schema", problem)]
    r = item.typed
    found: list[Finding] = []
    run, training, health, series = r.run, r.training, r.health, r.series
    if run.status != "ok":
        cause = worker_failure.cause(run.error_excerpt or "")
        found.append(Finding(name, "status", f"{run.status} (exit code {run.exit_code}): {cause[:200]}"))
    found += _steps(name, run, training, series, r.effective, evaluation_checks.stopped_at(r))
    found += [Finding(name, *problem) for problem in integrity.problems(r, item.system)]
    found += [Finding(name, *problem) for problem in series_checks.problems(r) + model_checks.problems(r)]
    found += [Finding(name, *problem) for problem in evaluation_checks.problems(r, item.evals, item.beside)]
    losses = series.loss
    bad = [item_.step for item_ in health.nonfinite if item_.field == "loss"]
    if bad:
        found.append(Finding(name, "finite loss", f"loss was nan/inf at step(s) {', '.join(map(str, bad[:10]))}"))
    finite = [v for v in losses if v is not None]
    if not finite:
        found.append(Finding(name, "finite loss", "no loss recorded"))
    elif len(finite) > 1:
        span = max(1, len(finite) // 10)
        start, end = sum(finite[:span]) / span, sum(finite[-span:]) / span
        if not end < start:
            short = training.steps < SHORT_RUN
            found.append(Finding(name, "loss decreases", f"mean loss of the last {span} step(s) {end:.4g} is not below "
                                 f"the first {span} {start:.4g}" + (" (a very short run)" if short else ""),
                                 fatal=not short))
    if health.nan_iterations or health.skipped_iterations:
        found.append(Finding(name, "nan/skipped iterations", f"{health.nan_iterations} NaN and "
                             f"{health.skipped_iterations} skipped iteration(s)"))
    reported = r.effective.extra  # the framework's read-back settings
    if reported.get("mock_data") and not training.mock_data:
        found.append(Finding(name, "real data", "the framework trained on MOCK DATA although real data was requested"))
    elif training.mock_data:
        found.append(Finding(name, "real data", "MOCK DATA was requested: throughput only, losses mean nothing",
                             fatal=False))
    if reported.get("cp") not in (None, 1):
        found.append(Finding(name, "effective settings", f"context parallel size is {reported['cp']}, TPrimat "
                             "layouts use 1"))
    found += [Finding(name, "effective settings", message, fatal) for message, fatal in effective_settings.problems(r)]
    return (found + _figures(name, r) + [Finding(name, *problem) for problem in integrity.below_zero(r)]
            + [Finding(name, *problem) for problem in machine_checks.problems(r, item.system)]
            + [Finding(name, *problem) for problem in acceptance_checks.problems(item.system)]
            + [Finding(name, *problem) for problem in telemetry_checks.problems(r, item.beside)]
            + [Finding(name, *problem) for problem in straggler_checks.problems(r, item.beside)]
            + [Finding(name, *problem, fatal=False)  # the plain result: utils.predict's writer reads it
               for problem in prediction_checks.problems(item.result, item.beside)])


def _steps(name: str, run: Section, training: Section, series: Section, effective: Section,
           stopped_at: int | None = None) -> list[Finding]:
    """Every requested step ran and has its record: Megatron's log_interval-th steps where the log said one. A run
    that stopped at TARGET_LOSS (stopped_at: where evaluation_checks.stopped_at finds the stop in its evidence, not
    where the result merely claims one) requested the steps up to the evaluation that reached it."""
    completed, requested, recorded = run.steps_completed, training.steps, series.step
    if stopped_at is not None:
        requested = min(requested, stopped_at)
    interval = effective.extra.get("log_interval")
    interval = interval if isinstance(interval, int) and not isinstance(interval, bool) and interval >= 1 else 1
    last = max(recorded, default=0)
    present = {step for step in recorded if step <= requested and step % interval == 0}
    absent = requested // interval - len(present)  # counted first: a claim of 1e9 steps must not be listed
    missing = sorted(set(range(interval, requested + 1, interval)) - present) if 0 < absent <= MAX_LISTED else []
    beyond = [step for step in recorded if step > requested]
    said = []
    if completed != requested:
        said.append(f"{completed} steps ran, {requested} requested")
    if completed > last:
        said.append(f"steps_completed {completed} but the last recorded step is {last}")
    if missing:
        said.append(f"missing steps {step_ranges(missing)}")
    elif absent > MAX_LISTED:
        said.append(f"{absent:,} of the {requested:,} requested steps have no record")
    if beyond:
        said.append(f"step(s) {step_ranges(beyond)} beyond the {requested} requested")
    return [Finding(name, "steps", "; ".join(said))] if said else []


def _figures(name: str, r: Section) -> list[Finding]:
    """The figures again, from the step times by utils.spec.metrics, the FLOPs formula and the peak table.

    A step time that is not a finite number above 0, or that is shorter than the step's FLOPs take at the
    peak (the device's, else the fastest of the table), is named: no device runs faster than its peak,
    so such a step (an MFU above 1) is a misread or made-up figure.
    """
    training, performance, series = r.training, r.performance, r.series
    try:
        spec = by_variant(r.model.variant)
    except ValueError as err:
        return [Finding(name, "figures", f"{err}: its FLOPs are unknown")]
    found = []
    peak, highest = performance.peak_tflop_per_s_per_gpu, highest_peak(str(training.precision))
    plausible = peak is not None and 0 < peak <= highest
    if peak is not None and not plausible:
        found.append(Finding(name, "figures", f"peak {peak:g} TFLOP/s is no device's: utils/machine/hardware.py's "
                             f"highest is {highest:g}"))
    bound, whose = (peak, "the device's peak") if plausible else (highest, "the fastest peak in utils/machine/hardware.py")
    num_gpus, seq_len = r.parallelism.num_gpus, training.seq_len
    tokens_per_step = training.gbs * seq_len
    flops_per_gpu = spec.flops_per_token(seq_len) * tokens_per_step / num_gpus
    fastest = flops_per_gpu / (bound * 1e12)
    steps, times = series.step, series.step_time_s
    broken = sorted({item.step for item in r.health.nonfinite if item.field == "step_time_s"}
                    | {step for step, t in zip(steps, times) if t is not None and t <= 0})
    if broken:
        found.append(Finding(name, "step times", f"step(s) {step_ranges(broken)}: step time nan/inf, 0 or below"))
    too_fast = [step for step, t in zip(steps, times) if t is not None and 0 < t < fastest]
    if too_fast:
        found.append(Finding(name, "step times", f"step(s) {step_ranges(too_fast)}: faster than {fastest:.3g} s, "
                             f"the least {flops_per_gpu:.3g} FLOPs per GPU take at {whose} {bound:g} TFLOP/s"))
    if performance.mfu is not None and performance.mfu > 1:
        found.append(Finding(name, "figures", f"MFU {performance.mfu:g} is above 1: no device computes faster "
                             "than its peak"))
    expected: dict = {"tokens_per_step": tokens_per_step, "flops_per_token": spec.flops_per_token(seq_len)}
    window = metrics.steady_window(steps, times, performance.warmup_skip)
    if window is None:
        expected.update(dict.fromkeys(HEADLINE))
        if steps:  # steps recorded, and no figure (a run without steps fails "steps")
            found.append(Finding(name, "figures", f"no throughput figure: no step after WARMUP_SKIP="
                                 f"{performance.warmup_skip} has a step time"))
    elif not any(t is not None and t <= 0 for t in times):  # else named above: no tokens/s of those
        kept = set(window.steps)
        median = metrics.summarize(t for step, t in zip(steps, times) if step in kept).median
        tokens_per_s = metrics.tokens_per_second(tokens_per_step, median)
        per_gpu = metrics.per_gpu(tokens_per_s, num_gpus)
        tflops = metrics.tflops_per_gpu(spec, seq_len, per_gpu)
        expected.update(median_step_time_s=median, tokens_per_s=tokens_per_s, tokens_per_s_per_gpu=per_gpu,
                        tflop_per_s_per_gpu=tflops, mfu=metrics.mfu(tflops, peak))
    median = performance.step_time_s.median if performance.step_time_s else None
    recorded = {key: median if key == "median_step_time_s" else getattr(performance, key) for key in expected}
    for key, value in expected.items():
        if not effective_settings.same(recorded[key], value):
            found.append(Finding(name, "figures", f"{key} is {_shown(recorded[key])} in the result, {_shown(value)} "
                                 "from its step times"))
    return found


def _shown(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g}"


def _names(names: list[str], limit: int = 6) -> str:
    unique = list(dict.fromkeys(names))
    more = f" and {len(unique) - limit} more" if len(unique) > limit else ""
    return ", ".join(unique[:limit]) + more


# What a precision comparison (evaluate.compare --precision-comparison) lets differ: said, not unfair.
PRECISION_FIELDS = ("precision", "fp8_recipe")


def fairness(items: Sequence[Loaded], precision_comparison: bool = False) -> list[Finding]:
    """Differences between results of the same model that make their comparison unfair, each listed; with
    precision_comparison, a difference of precision or its recipe is a note (the comparison asked for)."""
    by_model: dict[str, list[Loaded]] = defaultdict(list)
    for item in items:
        by_model[item.typed.model.key].append(item)
    found = []
    for model, group in by_model.items():
        for field in FAIRNESS_FIELDS:
            if precision_comparison and field.key in PRECISION_FIELDS:
                field = field._replace(fatal=False, why="a precision comparison, as asked (--precision-comparison)")
            parts: dict[int | None, list[Loaded]] = defaultdict(list)
            for item in group:
                parts[item.nodes if field.per_nodes else None].append(item)
            for nodes, part in parts.items():
                where = f"{model}{f' on {nodes} node(s)' if field.per_nodes and len(parts) > 1 else ''}"
                found += _differences(where, field, part)
        found += _native_differences(model, group) + _evaluation_differences(model, group)
        found += [Finding("set", "fairness", text, fatal=False) for text in model_checks.moe_differences(model, group)]
    return found + stack_comparisons(items)


def stack_comparisons(items: Sequence[Loaded]) -> list[Finding]:
    """A note per configuration run on several stacks of its vendor with everything else alike (platform, framework,
    layout, nodes, the fairness fields, the torch-native settings): what such a set measures is the stack upgrade."""
    groups: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    labels: dict[str, str] = {}
    for item in items:
        r = item.typed
        if item.stack == "-":
            continue
        p = r.parallelism
        same = [r.platform, r.framework, [p.tp, p.pp, p.dp, p.ga], item.nodes,
                [_shared(r, f)[1] for f in FAIRNESS_FIELDS], native_settings.described(r)]
        key = json.dumps(same, sort_keys=True, default=str)
        groups[key][item.stack].append(item.name)
        labels[key] = f"{r.model.variant} with {r.framework} on {r.platform}, TP{p.tp} PP{p.pp} DP{p.dp} GA{p.ga}"
    return [Finding("set", "stack comparison", f"{labels[key]}: the runs differ only in their stack ("
                    + "; ".join(f"{stack} in {_names(names)}" for stack, names in sorted(by_stack.items()))
                    + "): a stack comparison of one vendor, not an unfairness", fatal=False)
            for key, by_stack in groups.items() if len(by_stack) > 1]


def _native_differences(model: str, items: Sequence[Loaded]) -> list[Finding]:
    """A warning per torch-native setting that differs between the runs of one model that record it."""
    found = []
    for key, setting in native_settings.SETTINGS.items():
        values: dict[str, list[str]] = defaultdict(list)
        for item in items:
            value = native_settings.recorded(item.typed).get(key)
            if value is not None:
                values[native_settings.shown(key, value)].append(item.name)
        if len(values) > 1:
            spread = "; ".join(f"{value} in {_names(names)}" for value, names in values.items())
            found.append(Finding("set", "fairness", f"{model}: torch-native {setting.label} differs: {spread} "
                                 f"({setting.why})", fatal=False))
    return found


def _evaluation_differences(model: str, items: Sequence[Loaded]) -> list[Finding]:
    """A fairness problem per evaluation key (evaluation_checks.SHARED_EVALUATION) on which the evaluated runs of one
    model differ: their validation losses were not measured over the same documents or the same number of tokens."""
    found = []
    for label, key in evaluation_checks.SHARED_EVALUATION:
        values: dict[str, list[str]] = defaultdict(list)
        for item in items:
            if item.typed.evaluation:
                values[key(item.typed)].append(item.name)
        if len(values) > 1:
            spread = "; ".join(f"{value} in {_names(names)}" for value, names in values.items())
            found.append(Finding("set", "fairness", f"{model}: {label} differs: {spread}"))
    return found


def _shared(r: Section, field: Shared) -> tuple[bool, Any]:
    """Whether a result records a shared field, a null included (a null FP8 recipe is a value: none used), and its
    value as JSON (features is a table of names, the other sections typed)."""
    section = getattr(r, field.section)
    if isinstance(section, Mapping):
        return field.key in section, section.get(field.key)
    value = effective_settings.plain(getattr(section, field.key)) if section is not None else None
    return value is not None or effective_settings.given(section, field.key), value


def _differences(where: str, field: Shared, items: Sequence[Loaded]) -> list[Finding]:
    values: dict[str, list[str]] = defaultdict(list)
    unknown = []
    for item in items:
        recorded, value = _shared(item.typed, field)
        if not recorded or (value is None and not field.null_is_value):
            unknown.append(item.name)
        else:
            values[json.dumps(value, sort_keys=True)].append(item.name)
    found = []
    if unknown and field.unknown_fatal is not None:  # None: a field only some frameworks have (layer_spec)
        found.append(Finding("set", "fairness", f"{where}: {field.label} unknown in {_names(unknown)}: "
                             "cannot show the runs did the same work", fatal=field.unknown_fatal))
    if len(values) > 1:
        spread = "; ".join(f"{value} in {_names(names)}" for value, names in values.items())
        found.append(Finding("set", "fairness", f"{where}: {field.label} differs: {spread}"
                             + (f" ({field.why})" if field.why else ""), fatal=field.fatal))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m evaluate.validate", description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="RESULT_OR_DIR", help="result JSON files, run directories or zips")
    args = parser.parse_args(argv)
    try:
        found = collect(args.inputs)
    except CollectError as err:
        print(f"evaluate.validate: {err}", file=sys.stderr)
        return 2
    items = found.results
    if not items and not found.rejected:
        print(f"evaluate.validate: no result.json under {', '.join(args.inputs)}; run a benchmark or extract first",
              file=sys.stderr)
        return 2
    findings = [Finding(bad.where, "schema", bad.problem) for bad in found.rejected]
    findings += [Finding(copy.where, "duplicate", line.split(": ", 1)[1], fatal=False)
                 for (copy, _), line in zip(found.duplicates, found.duplicate_lines())]
    findings += [f for item in items for f in check_result(item)] + fairness(items)
    for finding in findings:
        print(finding.line())
    failed = sum(f.fatal for f in findings)
    print(f"{len(items) + len(found.rejected)} result(s): {failed} failed check(s), {len(findings) - failed} "
          "warning(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    run(main, "evaluate.validate")
