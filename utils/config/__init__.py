"""The single loader and validator of TPrimat's configuration (config.env + environment).

Standard library only: the shell runs it before any container or virtual environment exists.
Every problem is reported at once, one line each, naming the variable, its value, the rule and
the valid alternatives; then the process exits 2 without a traceback. An environment variable
that is not a knob but is named like one (TRAIN_ITER, train_iters) would be ignored unseen, so it
gets a warning line.

    python3 -m utils.config check   # validate and print the effective configuration
    python3 -m utils.config env     # validate and print `export KEY=value` lines for the shell
    python3 -m utils.config json    # validate and print the resolved configuration as JSON
    python3 -m utils.config get KEY # one resolved value
    python3 -m utils.config stack amd   # STACK's row of one platform as `export` lines, checking STACK alone

The knobs live in sections, each with the rules that concern it, in config.env's order: selection
(where and what to run), workload (data, training, measurement), layout (parallelism, nodes), native
(the torch-native frameworks' knobs and their compatibility rules) and launch (Slurm, network, run
switches). parse turns text into typed values, reading finds each knob's text and its source, resolved
holds the result (Config), show prints it.
"""

from __future__ import annotations

import os
from pathlib import Path

from utils import ROOT
from utils.config import layout, native, selection, workload
from utils.config.launch import launch_mode
from utils.config.parse import ConfigError, convert
from utils.config.reading import (CONFIG_FILE, CPU_PREFIX, KNOBS, Settings, environment_warnings, near_knob, overlay,
                                  read_file)
from utils.config.resolved import Config
from utils.config.selection import FRAMEWORKS, PLATFORMS, detect
from utils.config.show import describe, shell_exports
from utils.config.workload import PRECISIONS
from utils.spec.models import get_model

__all__ = ["CONFIG_FILE", "FRAMEWORKS", "KNOBS", "PLATFORMS", "PRECISIONS", "ROOT",
           "Config", "ConfigError", "describe", "detect", "environment_warnings", "launch_mode",
           "load_config", "near_knob", "shell_exports", "stack_of"]


def load_config(env: dict | None = None, path: Path = CONFIG_FILE) -> Config:
    """Read config.env, apply the CPU profile and the environment, type and validate everything."""
    env = dict(os.environ if env is None else env)
    problems: list[str] = []
    settings = read_file(path, env, problems)
    requested = env.get("PLATFORM", settings.raw["PLATFORM"]).strip()
    detected, detected_gpus = detect(env)
    platform = detected if requested == "auto" else requested
    overlay(settings, platform, env, detected=requested == "auto")
    values = _typed(settings, platform, env, problems)
    table = selection.strategy_table(values["STRATEGIES_FILE"], problems)
    # A PLATFORM that is none (intel) has no stack row to choose from: its own problem line says so.
    stack = selection.resolve_stack(values["STACK"], platform, problems) if platform in PLATFORMS else None
    if problems or values["PLATFORM"] is None:
        raise ConfigError(problems)

    notes: list[str] = []
    unknown: list[str] = []
    config = Config(values=values, sources=settings.sources, launch=launch_mode(values, env),
                    models=[get_model(key, values["MODEL_SIZE"]) for key in values["MODELS"]],
                    frameworks=selection.resolve_frameworks(values["FRAMEWORK"], platform, notes, stack),
                    strategies=selection.resolve_strategies(values["STRATEGY"], table, unknown),
                    detected_platform=detected, detected_gpus=detected_gpus, notes=notes,
                    warnings=environment_warnings(env, settings.cpu_profile), strategy_table=table,
                    raw=settings.raw, stack_name=stack.name)
    problems = selection.problems(config) + workload.problems(config) + layout.node_problems(config)
    if unknown:  # a strategy that is none has no layout to check
        raise ConfigError(problems + unknown)
    problems += layout.layout_problems(config)
    if not problems:  # the compatibility rules read every layout, so they come after the layout rules
        problems += native.problems(config)
    if problems:
        raise ConfigError(problems)
    return config


def stack_of(platform: str, env: dict | None = None, path: Path = CONFIG_FILE) -> selection.stacks.Stack:
    """STACK's row of a platform, from config.env and the environment, checking STACK alone: shell/build.sh builds
    a platform's image on a machine that may not have that platform's GPUs, where the whole configuration would
    not validate. ConfigError names a STACK that is none."""
    env = dict(os.environ if env is None else env)
    problems: list[str] = []
    settings = read_file(path, env, [])
    stack = selection.resolve_stack(env.get("STACK", settings.raw["STACK"]), platform, problems)
    if problems:
        raise ConfigError(problems)
    return stack


def _typed(settings: Settings, platform: str, env: dict, problems: list[str]) -> dict:
    """Every knob's text as its typed value, the auto values resolved; each slip joins the problems."""
    values = {key: convert(key, settings.raw[key], knob, problems) for key, knob in KNOBS.items()}
    if platform != "cpu":  # unused here, but a slip in a CPU_ line should not wait for the first CPU run
        for key, value in settings.cpu_profile.items():
            convert(CPU_PREFIX + key, value, KNOBS[key], problems)
    selection.resolve_model_size(values, platform)
    workload.resolve_precision(values, settings.sources, platform, env)
    if not problems:  # the profile reads the batch knobs typed
        workload.apply_quality_profile(values, settings.sources, platform, problems)
    return values
