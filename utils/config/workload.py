"""What a run computes and what of it is measured (config.env's Data, Training workload and Measurement
sections), with the rules that concern them."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from utils.config.parse import COUNT, POSITIVE, Knob
from utils.spec.evaluation import Evaluation
from utils.spec.fairness import PROFILES, TRANSFORMER_IMPLS
from utils.spec.precision import FP8_RECIPES, LOW
from utils.spec.quality import PROFILES as QUALITY_PROFILES
from utils.machine.hardware import cpu_precision

if TYPE_CHECKING:
    from utils.config.resolved import Config

# What each platform can be asked for (utils.spec.precision): a GPU any of them, the CPU no low precision. Which
# device, stack and framework has each is the plan's to say, with a skip (train.plan.skip_reason).
PRECISIONS = {"nvd": ("bf16", *LOW), "amd": ("bf16", *LOW), "cpu": ("fp32", "bf16")}

DATA = {
    "DATASET": Knob("enum", ("bc", "c4", "sample")),
    "DATA_SAMPLES": POSITIVE,
    "DATA_DIR": Knob("dir"),
    "OUTPUT_DIR": Knob("dir"),
    "HF_HOME": Knob("dir"),
    "ALLOW_FALLBACK_TOKENIZER": Knob("bool"),
    "MOCK_DATA": Knob("bool"),
}

TRAINING = {
    "SEED": Knob("int", high=2**32 - 1, rule="the seeds numpy and torch accept"),
    "MBS": POSITIVE,
    "SL": POSITIVE,
    "LR": Knob("float", high=1, bounds="(]"),
    "MIN_LR": Knob("float", high=1),
    "WARMUP_STEPS": COUNT,
    "TRAIN_ITERS": POSITIVE,
    "WEIGHT_DECAY": Knob("float", high=1),
    "BETA1": Knob("float", high=1, bounds="[)"),
    "BETA2": Knob("float", high=1, bounds="[)"),
    "GRAD_CLIP": Knob("float", high=math.inf),
    "PRECISION": Knob("enum", ("auto", "bf16", *LOW, "fp32")),
    "FP8_RECIPE": Knob("enum", FP8_RECIPES),
    "FAIRNESS": Knob("enum", PROFILES),
    "TRANSFORMER_IMPL": Knob("enum", TRANSFORMER_IMPLS),
}

MEASUREMENT = {
    "RUNS": POSITIVE,
    "WARMUP_SKIP": COUNT,
    "PROFILING": Knob("bool"),
    "PROFILE_START_STEP": POSITIVE,
    "PROFILE_END_STEP": POSITIVE,
    # Held-out validation and time to train (utils/spec/evaluation.py)
    "EVAL_INTERVAL": COUNT,
    "EVAL_TOKENS": POSITIVE,
    "VALIDATION_PERCENT": Knob("int", low=1, high=50, rule="the share of the documents held out, in percent"),
    "TARGET_LOSS": Knob("float", high=math.inf, bounds="(]", optional=True,
                        rule="a validation loss in nats (MLPerf's log-perplexity), e.g. 3.3"),
    "QUALITY_PROFILE": Knob("enum", ("", *QUALITY_PROFILES)),
}


def resolve_precision(values: dict, sources: dict[str, str], platform: str, env: dict) -> None:
    """PRECISION=auto: bf16 on GPUs, the CPU's fastest correct one (utils.machine.hardware) on the CPU; its source says why."""
    if values["PRECISION"] == "auto":
        values["PRECISION"], why = cpu_precision(env) if platform == "cpu" else ("bf16", "bf16 on GPUs")
        sources["PRECISION"] = f"{sources.get('PRECISION', 'config.env')}: auto, {why}"


def apply_quality_profile(values: dict, sources: dict[str, str], platform: str, problems: list[str]) -> None:
    """QUALITY_PROFILE (utils/spec/quality.py): its knobs over config.env's; one the environment sets otherwise, a
    platform or a GBS it cannot run on, a problem line."""
    profile = QUALITY_PROFILES.get(values["QUALITY_PROFILE"] or "")
    if profile is None:
        return
    gbs = values["MBS"] * values["DP"] * values["GA"]
    found = profile.problems(gbs, platform)
    for key, wanted in profile.knobs(gbs).items():
        if sources.get(key) == "environment" and values[key] != wanted:
            found.append(f"{key}={values[key] if not isinstance(values[key], list) else ','.join(values[key])}: "
                         f"QUALITY_PROFILE={profile.name} sets {key}="
                         f"{wanted if not isinstance(wanted, list) else ','.join(wanted)}; unset {key} or "
                         "QUALITY_PROFILE")
    problems.extend(found)
    if not found:
        for key, wanted in profile.knobs(gbs).items():
            values[key], sources[key] = wanted, f"QUALITY_PROFILE={profile.name}"


def evaluation(values: dict) -> Evaluation:
    """The request's held-out validation (EVAL_INTERVAL, EVAL_TOKENS, VALIDATION_PERCENT, TARGET_LOSS)."""
    return Evaluation(interval_steps=values["EVAL_INTERVAL"], tokens=values["EVAL_TOKENS"],
                      validation_percent=values["VALIDATION_PERCENT"], target_loss=values["TARGET_LOSS"])


def problems(config: Config) -> list[str]:
    """The rules between the workload's knobs, the platform and the models."""
    v, found = config.values, []
    if v["PRECISION"] not in PRECISIONS[config.platform]:
        found.append(f"PRECISION={v['PRECISION']}: not supported on {config.platform}; valid: "
                     + ", ".join(PRECISIONS[config.platform]))
    if v["MIN_LR"] > v["LR"]:
        found.append(f"MIN_LR={config.raw['MIN_LR']}: must not exceed LR={config.raw['LR']}")
    if v["WARMUP_STEPS"] >= v["TRAIN_ITERS"]:  # megatron-core's scheduler needs a decay phase
        found.append(f"WARMUP_STEPS={v['WARMUP_STEPS']}: must be < TRAIN_ITERS={v['TRAIN_ITERS']}")
    if v["WARMUP_SKIP"] >= v["TRAIN_ITERS"]:
        found.append(f"WARMUP_SKIP={v['WARMUP_SKIP']}: must be < TRAIN_ITERS={v['TRAIN_ITERS']} "
                     "so that some steps are measured")
    if v["PROFILING"] and not v["PROFILE_START_STEP"] <= v["PROFILE_END_STEP"] <= v["TRAIN_ITERS"]:
        found.append(f"PROFILE_START_STEP={v['PROFILE_START_STEP']} PROFILE_END_STEP="
                     f"{v['PROFILE_END_STEP']}: need start <= end <= TRAIN_ITERS={v['TRAIN_ITERS']}")
    if v["TARGET_LOSS"] is not None and not v["EVAL_INTERVAL"]:
        found.append(f"TARGET_LOSS={config.raw['TARGET_LOSS']}: needs EVAL_INTERVAL > 0 (the target is a validation "
                     "loss); set EVAL_INTERVAL or leave TARGET_LOSS empty")
    for spec in config.models:
        if v["SL"] > spec.max_position_embeddings:
            found.append(f"SL={v['SL']}: {spec.display_name} has a context of "
                         f"{spec.max_position_embeddings} tokens; use SL <= {spec.max_position_embeddings}")
    return found
