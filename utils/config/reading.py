"""Where each knob's text comes from: config.env, its CPU profile (CPU_<KNOB> lines, on the CPU
platform) and the environment, in rising precedence, each value with its source. The knob table is
the sections' tables in config.env's order. A name that is not a knob but looks like one is a
problem in config.env and a warning in the environment (which holds many other variables)."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from utils import ROOT
from utils.config import launch, layout, machine, native, selection, workload
from utils.config.parse import ConfigError, Knob
from utils.envfile import parse_env_file
from utils.secrets import SECRET_KEYS

CONFIG_FILE = ROOT / "config.env"
CPU_PREFIX = "CPU_"  # CPU_<KNOB> in config.env replaces <KNOB> on the CPU platform

KNOBS: dict[str, Knob] = {**selection.KNOBS, **workload.DATA, **workload.TRAINING, **layout.PARALLELISM,
                          **layout.NODES, **launch.SLURM, **launch.NETWORK, **workload.MEASUREMENT,
                          **machine.KNOBS, **native.KNOBS, **launch.SWITCHES}
# Names the scripts themselves export next to the knobs (shell_exports): never a user's typo.
DERIVED = ("FRAMEWORKS", "STRATEGIES", "GBS", "NUM_GPUS", "STACK_NAME", "STACK_IMAGE")


@dataclass
class Settings:
    """Every knob's text as written, where it came from, and the CPU profile's lines."""

    raw: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    cpu_profile: dict[str, str] = field(default_factory=dict)  # knob -> text (CPU_<KNOB>, or its environment)


def read_file(path: Path, env: dict, problems: list[str]) -> Settings:
    """config.env's knobs and CPU profile; an unknown or missing name joins the problems."""
    file_values, file_problems = parse_env_file(path)
    if not file_values:  # nothing to validate: one line, not one per knob
        why = file_problems[0] if file_problems else f"{path}: {'empty' if path.exists() else 'not found'}"
        raise ConfigError([f"{why}; restore it from the repository (git checkout config.env)"])
    problems.extend(file_problems)
    settings = Settings()
    for key, value in file_values.items():
        base = key.removeprefix(CPU_PREFIX)
        if key.startswith(CPU_PREFIX) and base in KNOBS:
            settings.cpu_profile[base] = env.get(key, value)
        elif key in KNOBS:
            settings.raw[key], settings.sources[key] = value, "config.env"
        else:
            close = near_knob(key, cutoff=0.6)
            hint = f"; did you mean {close}?" if close else "; see the list in config.env"
            if key in SECRET_KEYS:
                hint = "; secrets belong in secrets.env"
            problems.append(f"{path.name}: unknown variable {key}{hint}")
    for key in KNOBS:
        if key not in settings.raw:
            problems.append(f"{path.name}: {key} is missing; every knob must be set there")
            settings.raw[key] = ""
    return settings


def knob_text(name: str, env: Mapping[str, str] | None = None, path: Path = CONFIG_FILE) -> str:
    """One knob's text from the environment, else config.env (empty when neither has it): for the tools that need a
    setting or two (prices, the results store) where the whole configuration need not validate."""
    env = os.environ if env is None else env
    if name in env:
        return env[name]
    return parse_env_file(path)[0].get(name, "") if path.exists() else ""


def overlay(settings: Settings, platform: str, env: dict, detected: bool) -> None:
    """The CPU profile on the CPU, then the environment over everything; PLATFORM as resolved (detected or not)."""
    if platform == "cpu":
        for key, value in settings.cpu_profile.items():
            settings.raw[key], settings.sources[key] = value, "config.env (CPU profile)"
    for key in KNOBS:
        if key in env:
            settings.raw[key], settings.sources[key] = env[key], "environment"
    settings.raw["PLATFORM"] = platform
    if detected:
        settings.sources["PLATFORM"] = "detected"


def near_knob(name: str, cutoff: float) -> str | None:
    """The knob a name was probably meant to be: the same in another case, or close by difflib's ratio."""
    if name.upper() in KNOBS:
        return name.upper()
    close = difflib.get_close_matches(name.upper(), list(KNOBS), n=1, cutoff=cutoff)
    return close[0] if close else None


def environment_warnings(env: dict, cpu_profile: dict) -> list[str]:
    """Environment variables that look like a knob but are none, which would otherwise be ignored unseen.

    The rule is strict so that an ordinary environment (PATH, NCCL_*, SLURM_JOB_*, torchrun's) stays
    quiet: a knob's name in another case, or one slip away (difflib ratio >= 0.9 on the upper-cased name).
    """
    warnings = []
    for name in env:
        if name in KNOBS or name in DERIVED or name.startswith("TPRIMAT_"):
            continue
        base = name.removeprefix(CPU_PREFIX)
        if name.startswith(CPU_PREFIX) and base in KNOBS:
            if base not in cpu_profile:
                warnings.append(f"environment: {name} is ignored: {CONFIG_FILE.name} has no {name} line; set {base} "
                                "(it wins on every platform)")
            continue
        meant = near_knob(name, cutoff=0.9)
        if meant:
            warnings.append(f"environment: {name} is not a knob and is ignored; did you mean {meant}?")
    return warnings
