"""The run list: strategy x framework x model x repeat from the configuration, and each run's request.

    python3 -m train.plan            # the run list as a table, with framework-mapping notes and skipped runs
    python3 -m train.plan --check-data   # exit 1 naming each model whose prepared data is missing
    TARGET_DEVICE=mi300x python3 -m train.plan   # memory and step-time bound per run for another device

Under each run: its predicted peak memory per GPU on the target device (TARGET_DEVICE, else the detected GPUs, else
the CPU's host memory per worker) and whether it fits, and a lower bound on its step time (utils/predict/__init__.py). A
run predicted not to fit is flagged; SKIP_WONT_FIT=1 skips it, with the reason.

A run's request (`request()`, a utils.spec.request.Request written as config.json into its directory) is what
every launcher, trainer and the judge of the run read: the model, layout and workload of that one run, and every
setting they need, typed. The matrix builds each run's request here and hands it to the launcher
(train/matrix.py); a run started by hand (train/launch.sh) builds its own the same way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from utils import run_files
from utils.datafiles import PREPARE as PREPARE_COMMAND  # the command that prepares data, named once
from utils.datafiles import DataProblem, data_prefix, prove, tokenizer_dir
from utils.cli import Parser
from utils.config import ConfigError, Config, load_config
from utils.config.workload import evaluation
from utils.spec.fairness import profile, sequence_parallel, workload
from utils.files import read_json
from utils.machine.hardware import DeviceSpec, cpu_precision
from utils.machine.hardware import lacks as device_lacks
from utils.machine.probe import import_refusals
from utils.spec import precision as precisions
from utils.config.native import FEATURE_KNOBS, sac_every
from utils.config.selection import runs_on
from utils.spec import stacks
from utils.spec.stacks import Stack
from utils.frameworks import TABLE
from utils.predict import NO_DEVICE, Prediction, Target, plan_target, predict
from utils.spec.request import (Data, Environment, Fairness, Identity, Native, Network, Parallelism, Request,
                                RequestError, Training)
from utils.spec.strategies import CUSTOM, Layout


@dataclass(frozen=True)
class Run:
    """One training run of the matrix."""

    name: str  # its directory name inside the run set, e.g. "nemo-llama" or "prim-qwen-balanced-r2"
    framework: str
    model: str
    strategy: str
    repeat: int  # 1-based
    layout: Layout
    skipped: str = ""  # why this framework cannot run this run (listed, never started); empty: it runs


def skip_reason(framework: str, model: str, layout: Layout, knobs: Mapping[str, object], *, stack: Stack,
                device: DeviceSpec | None = None) -> str:
    """Why a framework cannot run a model in a layout on a stack, with knobs the configuration accepts, or "" when it
    can: such a run is skipped (another framework can still run it), not an error. Everything asked comes from the
    framework's registry entry (utils/frameworks/): the layouts, precisions and knobs it has, and its name for the
    model; from the stack's row (utils/spec/stacks.py): whether it runs there, else which stack has it, and whether
    its megatron-core or Primus has the precision's recipe; and from the device's entry (utils/machine/hardware.py):
    whether its matrix units run the precision."""
    entry = TABLE[framework]
    if not runs_on(framework, stack):
        other = stacks.having(framework, stack.platform)
        why = entry.torch_refusal(stack.torch)
        if other is None:
            return (f"{framework} ({entry.display_name}) is on no {stack.platform} stack"
                    + (f": {why} (stack {stack.name})" if why else ""))
        return (f"{framework} ({entry.display_name}) is not on stack {stack.name}"
                + (f" ({why})" if why else "") + f"; it runs on {other.name}: STACK={other.name}")
    if why := entry.model_refusal(model, layout.tp):  # before the layout's: no layout would run it
        return why
    if layout.pp > 1 and "pp" not in entry.parallelisms:
        return f"{framework} has no pipeline parallelism (PP={layout.pp}); the other frameworks run this layout"
    if layout.tp > 1 and "tp" not in entry.parallelisms:
        return f"{framework} has no tensor parallelism (TP={layout.tp}); the other frameworks run this layout"
    if why := precision_reason(framework, knobs, stack, device):
        return why
    if why := (entry.ep_refusal(layout.ep) or entry.tp_refusal(knobs, layout.tp)
               or entry.layers_refusal(knobs.get("TRANSFORMER_IMPL"), stack.platform)):
        return why
    for knob, feature in FEATURE_KNOBS.items():
        if knobs[knob] and entry.torch_native and knob not in entry.knobs:  # the others have none of these
            honoured = ", ".join(name for name, other in TABLE.items() if knob in other.knobs)
            value = "1" if knobs[knob] is True else knobs[knob]  # as config.env spells it
            return f"{framework} has no {feature} ({knob}={value} applies to {honoured})"
    return ""


def precision_reason(framework: str, knobs: Mapping[str, object], stack: Stack, device: DeviceSpec | None) -> str:
    """Why a framework cannot train in PRECISION (with FP8_RECIPE) here, or "": the device, the framework's entry,
    then its stack's megatron-core or Primus (utils.spec.precision)."""
    entry, precision, fp8_recipe = TABLE[framework], str(knobs["PRECISION"]), str(knobs["FP8_RECIPE"])
    wanted = precisions.name(precision, fp8_recipe)
    if why := device_lacks(device, precision):
        return f"PRECISION={precision}: {why}"
    if precision not in entry.precisions:
        having = ", ".join(name for name, other in TABLE.items() if precision in other.precisions)
        return (f"{framework} has no {wanted} switch (it trains {', '.join(entry.precisions)}); "
                f"{having or 'no framework'} {'has' if ',' not in having else 'have'} one")
    if precision == "fp8" and fp8_recipe not in entry.fp8_recipes:
        return (f"{framework} has no FP8 {fp8_recipe} recipe (FP8_RECIPE={'|'.join(entry.fp8_recipes)} runs it "
                "there)")
    lacking = (precisions.primus_lacks(stack.primus, stack.megatron_core, precision, fp8_recipe)
               if entry.precision_api == "primus" else
               precisions.megatron_core_lacks(stack.megatron_core, precision, fp8_recipe)
               if entry.precision_api == "megatron-core" else "")
    return f"{framework} on stack {stack.name}: {lacking}" if lacking else ""


def run_name(framework: str, model: str, strategy: str, repeat: int, *, named_strategy: bool,
             repeats: int) -> str:
    """framework-model, plus the strategy when one is named and the repeat when there are several."""
    parts = [framework, model]
    if named_strategy:
        parts.append(strategy)
    if repeats > 1:
        parts.append(f"r{repeat}")
    return "-".join(parts)


def build_plan(cfg: Config) -> list[Run]:
    """Every run in execution order: repeats outermost, so a slow drift of the machine spreads evenly. A run its
    framework cannot do (skip_reason), or with SKIP_WONT_FIT=1 one predicted not to fit the device's memory, is in
    the list with the reason, and the matrix does not start it."""
    runs = _runs(cfg, plan_device(cfg))
    if not cfg["SKIP_WONT_FIT"]:
        return runs
    found = predictions(cfg, runs)
    return [replace(run, skipped=f"predicted not to fit (SKIP_WONT_FIT=1): {found[run.name].memory_line()}")
            if run.name in found and found[run.name].fits is False else run for run in runs]


def importable(cfg: Config, runs: list[Run]) -> list[Run]:
    """In a GPU image (the docker runtime), the runs with each framework whose modules do not import in the image's
    Python skipped with the import's error (utils.machine.probe.import_refusals). The host runtime refuses such a
    Python before the matrix starts (shell/lib.sh's stack check); a dry run and the CPU are not asked."""
    wanted = sorted({run.framework for run in runs if not run.skipped and TABLE[run.framework].in_this_python})
    if cfg.platform == "cpu" or cfg["DRY_RUN"] or os.environ.get("TPRIMAT_RUNTIME") != "docker" or not wanted:
        return runs
    refusals = import_refusals(wanted, os.environ.get("TPRIMAT_PYTHON") or sys.executable)
    return [replace(run, skipped=refusals[run.framework]) if not run.skipped and run.framework in refusals else run
            for run in runs]


def plan_device(cfg: Config) -> DeviceSpec | None:
    """The target device's table entry when the precision is one some devices lack (else not asked: detecting the
    GPUs runs the vendor's tool)."""
    if cfg["PRECISION"] not in precisions.LOW or cfg.platform == "cpu":
        return None
    return _target(cfg.platform, cfg["TARGET_DEVICE"], cfg["GPUS_PER_NODE"]).spec


def _runs(cfg: Config, device: DeviceSpec | None = None) -> list[Run]:
    repeats = cfg["RUNS"]
    named = cfg.strategies != [CUSTOM]
    return [Run(run_name(framework, spec.key, strategy, repeat, named_strategy=named, repeats=repeats),
                framework, spec.key, strategy, repeat, layout,
                skip_reason(framework, spec.key, layout, cfg.values, stack=cfg.stack, device=device))
            for repeat in range(1, repeats + 1)
            for strategy in cfg.strategies
            for framework in cfg.frameworks
            for spec in cfg.models
            for layout in [cfg.layout(spec.key, strategy)]]


def request(cfg: Config, run: Run, commit: str | None = None) -> Request:
    """The run's request (config.json): identity (with the project's commit, utils.fingerprint.project_commit, when
    given), the model's spec, layout, workload, data, fairness profile, the torch-native and network settings, and
    this node's environment (with the stack it runs on and its image's digest, utils.spec.stacks.image_digest),
    each knob a typed field."""
    v = cfg.values
    spec = cfg.model(run.model)
    lay = run.layout
    table = profile(v["FAIRNESS"], v["FP8_RECIPE"])
    digest, digest_note = stacks.image_digest(os.environ)
    return Request(
        identity=Identity(run_id=run.name, platform=cfg.platform, framework=run.framework, model=run.model,
                          variant=spec.variant, repeat=run.repeat, commit=commit),
        model=spec,
        parallelism=Parallelism(strategy=run.strategy, tp=lay.tp, pp=lay.pp, dp=lay.dp, ga=lay.ga, ep=lay.ep,
                                sequence_parallel=sequence_parallel(lay.tp),
                                distributed_optimizer=table["use_distributed_optimizer"],
                                nnodes=v["NNODES"], gpus_per_node=v["GPUS_PER_NODE"], num_gpus=cfg.num_gpus),
        training=Training(steps=v["TRAIN_ITERS"], mbs=v["MBS"], gbs=cfg.gbs, seq_len=v["SL"],
                          precision=v["PRECISION"], lr=v["LR"], min_lr=v["MIN_LR"], warmup_steps=v["WARMUP_STEPS"],
                          weight_decay=v["WEIGHT_DECAY"], beta1=v["BETA1"], beta2=v["BETA2"],
                          grad_clip=v["GRAD_CLIP"], seed=v["SEED"]),
        data=Data(dataset=v["DATASET"], data_dir=v["DATA_DIR"],
                  prefix=str(data_prefix(v["DATA_DIR"], v["DATASET"], run.model)),
                  tokenizer_dir=str(tokenizer_dir(v["DATA_DIR"], run.model)), mock_data=v["MOCK_DATA"]),
        fairness=Fairness(profile=v["FAIRNESS"], table=table,
                          workload=workload(run.framework, spec.vocab_size, lay.tp)),
        native=Native(data_parallel=v["DATA_PARALLEL"], compile=v["COMPILE"], compile_mode=v["COMPILE_MODE"],
                      sac_every=sac_every(v["SAC_FREQ"]), attn_impl=v["ATTN_IMPL"], zero_stage=v["ZERO_STAGE"]),
        network=Network.from_knobs(v),
        environment=Environment(node_rank=v["NODE_RANK"], master_addr=v["MASTER_ADDR"],
                                master_port=v["MASTER_PORT"], hf_home=v["HF_HOME"], dry_run=v["DRY_RUN"],
                                warmup_skip=v["WARMUP_SKIP"], profiling=v["PROFILING"],
                                profile_start_step=v["PROFILE_START_STEP"], profile_end_step=v["PROFILE_END_STEP"],
                                telemetry=v["TELEMETRY"], telemetry_interval_ms=v["TELEMETRY_INTERVAL_MS"],
                                target_device=v["TARGET_DEVICE"], stack=cfg.stack.name, image_digest=digest,
                                image_digest_note=digest_note, transformer_impl=v["TRANSFORMER_IMPL"]),
        evaluation=evaluation(v),
    )


@lru_cache(maxsize=8)
def _target(platform: str, target_device: str, workers_per_node: int) -> Target:
    """The device plans are made for, asked once per process (the detection runs nvidia-smi or rocm-smi)."""
    return plan_target(platform, target_device, workers_per_node)


def predictions(cfg: Config, runs: list[Run]) -> dict[str, Prediction]:
    """Each run's prediction on the target device (utils.predict), by run name; runs skipped for another reason
    have none."""
    target = _target(cfg.platform, cfg["TARGET_DEVICE"], cfg["GPUS_PER_NODE"])
    return {run.name: predict(req, target, req.network.link_gbps)
            for run in runs if not run.skipped for req in [request(cfg, run)]}


def prediction_lines(cfg: Config, runs: list[Run]) -> tuple[list[str], dict[str, str]]:
    """The run list's header line about the target device, and per run its memory and time line."""
    found = predictions(cfg, runs)
    target = _target(cfg.platform, cfg["TARGET_DEVICE"], cfg["GPUS_PER_NODE"])
    head = [f"predicted for: {target.label}" if target.name else NO_DEVICE]
    lines = {name: ("WILL NOT FIT: " if p.fits is False else "") + f"{p.memory_line()}; {p.time_line()}"
             for name, p in found.items()}
    wont = [name for name, p in found.items() if p.fits is False]
    if wont:
        head.append(f"{len(wont)} run(s) predicted not to fit ({', '.join(wont)}): they run anyway unless "
                    "SKIP_WONT_FIT=1")
    return head, lines


def data_problems(cfg: Config) -> list[str]:
    """One line per model whose data is not proven to be what data.verify verified (none when MOCK_DATA is on).

    Each prefix is proven here once per run (utils.datafiles.prove: manifest, sizes, sha256, tokenizer, token range
    against the model's vocabulary), before any framework is started, so the check covers mega, nemo and prim."""
    if cfg["MOCK_DATA"]:
        return []
    problems = []
    for spec in cfg.models:
        prefix = data_prefix(cfg["DATA_DIR"], cfg["DATASET"], spec.key)
        missing = [p.name for p in (prefix.with_name(prefix.name + s) for s in (".bin", ".idx", ".manifest.json"))
                   if not p.exists()]
        if missing:
            problems.append(f"{spec.key}: {', '.join(missing)} missing in {prefix.parent}; prepare it: {PREPARE_COMMAND}")
            continue
        try:
            prove(prefix, tokenizer_dir(cfg["DATA_DIR"], spec.key), spec.key, spec.vocab_size)
        except DataProblem as err:
            problems.append(f"{spec.key}: {err}")
    return problems


# --- Time estimate from earlier runs of the same work -------------------------------------------------

def same_work(req: Request) -> tuple:
    """What makes two runs the same work for the estimate: identity, layout, batch, steps and precision."""
    who, lay, train = req.identity, req.parallelism, req.training
    return (who.platform, who.framework, who.variant, lay.tp, lay.pp, lay.dp, lay.ga, lay.ep, lay.num_gpus,
            train.mbs, train.seq_len, train.steps, train.precision)


def _earlier_durations(output_dir: Path, req: Request) -> list[float]:
    """Wall times (s) of earlier successful runs whose config.json asked for the same work (requests this
    checkout cannot read, e.g. of an older TPrimat, are left out)."""
    work = same_work(req)
    durations = []
    for config_file in output_dir.glob("*/*/config.json"):
        try:
            earlier = Request.read(config_file)
            outcome = read_json(config_file.parent / run_files.LAUNCH)
            wall = float(outcome["wall_s"]) if outcome.get("status") == "ok" else None
        except (RequestError, OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # a record of another shape (or not JSON, or not text): nothing to go by
        if wall is not None and same_work(earlier) == work:
            durations.append(wall)
    return durations


def estimate_s(output_dir: Path, req: Request) -> float | None:
    """Median wall time of earlier identical runs, or None when there is none to go by."""
    durations = _earlier_durations(output_dir, req)
    return statistics.median(durations) if durations else None


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def precision_label(cfg: Config) -> str:
    """The precision, and on the CPU why it is the right one there (or what asking for another costs)."""
    precision = cfg["PRECISION"]
    if cfg.platform != "cpu":
        return precision
    fastest, why = cpu_precision()
    if precision == fastest:
        return f"{precision} ({why})"
    if precision == "bf16":
        return "bf16, emulated: this CPU has no bf16 instructions (tens of times slower than fp32)"
    return f"{precision} (asked for; {why})"


def evaluation_label(cfg: Config) -> str:
    """The summary line's held-out validation: cadence, size, split and target; nothing when it is off."""
    asked = evaluation(cfg.values)
    if not asked.enabled:
        return ""
    iters = asked.iters(cfg.gbs, cfg["SL"])
    target = f", stop at validation loss <= {asked.target_loss:g}" if asked.target_loss is not None else ""
    return (f"; validation every {asked.interval_steps} steps over {iters} global batch(es) "
            f"({iters * cfg.gbs * cfg['SL']:,} tokens), {asked.validation_percent}% of the documents held out{target}")


def table(cfg: Config, runs: list[Run]) -> list[str]:
    """The run list as the user reads it before anything starts."""
    stack = cfg.stack
    lines = [f"platform {cfg.platform}: stack {stack.name} ({stack.image or 'the host .venv'}); "
             f"frameworks {', '.join(cfg.frameworks)}; models "
             + ", ".join(s.variant for s in cfg.models) + f"; strategies {', '.join(cfg.strategies)}; "
             f"{cfg['RUNS']} repeat(s); GBS {cfg.gbs}, SL {cfg['SL']}, {cfg['TRAIN_ITERS']} steps, "
             f"{precision_label(cfg)}, {cfg.num_gpus} {'worker process(es)' if cfg.platform == 'cpu' else 'GPU(s)'}"
             f"{evaluation_label(cfg)}"]
    lines += [f"note: {note}" for note in cfg.notes]
    head, predicted = prediction_lines(cfg, runs)
    lines += head
    width = max([len(run.name) for run in runs] + [3])
    model_width = max([len(spec.variant) + 1 for spec in cfg.models] + [18])
    lines.append(f"{'#':>3}  {'run':<{width}}  {'framework':<9} {'model':<{model_width}} {'strategy':<22} "
                 f"{'layout':<20} estimate")
    known: list[float] = []
    for index, run in enumerate(runs, 1):
        lay = run.layout
        guess = None if run.skipped else estimate_s(Path(cfg["OUTPUT_DIR"]), request(cfg, run))
        if guess is not None:
            known.append(guess)
        last = f"skipped: {run.skipped}" if run.skipped else _duration(guess) if guess is not None else "-"
        variant = cfg.model(run.model).variant
        lines.append(f"{index:>3}  {run.name:<{width}}  {run.framework:<9} {variant:<{model_width}} "
                     f"{run.strategy:<22} {lay.label:<20} {last}")
        if run.name in predicted:
            lines.append(f"{'':>5}{predicted[run.name]}")
    skipped = sum(bool(run.skipped) for run in runs)
    runs = [run for run in runs if not run.skipped]
    if skipped:
        lines.append(f"{skipped} run(s) skipped (the reason is on each line), {len(runs)} to run")
    if known and len(known) == len(runs):
        lines.append(f"estimated total: {_duration(sum(known))} (median of earlier identical runs)")
    elif known:
        lines.append(f"estimated: {_duration(sum(known))} for {len(known)} of {len(runs)} runs "
                     "(the others have no earlier identical run to go by)")
    else:
        lines.append("estimate: none yet (no earlier identical run in OUTPUT_DIR to go by)")
    return lines


def report_data_problems(cfg: Config) -> bool:
    """True when every model's data is proven; otherwise each problem and the fix, on stderr."""
    problems = data_problems(cfg)
    for problem in problems:
        print(f"data not ready: {problem}", file=sys.stderr)
    if problems:
        print(f"prepare it first: {PREPARE_COMMAND}  (DATASET={cfg['DATASET']}, DATA_DIR={cfg['DATA_DIR']})",
              file=sys.stderr)
    return not problems


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m train.plan", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check-data", action="store_true", help="check every model's prepared data")
    args = parser.parse_args(argv)
    try:
        cfg = load_config()
    except ConfigError as err:
        err.report("train.plan")
        return 2
    if args.check_data:
        return 0 if report_data_problems(cfg) else 1
    print("\n".join(table(cfg, build_plan(cfg))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
