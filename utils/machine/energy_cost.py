"""What a measured run costs: energy per token, cost per million tokens, AMD against NVIDIA, and a linear projection.

The comparison (evaluate/comparison/energy.py, evaluate/comparison/plot.py) takes every such figure from here, so
that each formula exists once:

- energy per token comes from the result's telemetry section (utils/machine/energy.py: all the run's devices over the
  steady-state steps, from their energy counters or their sampled power). A result without the section, with
  telemetry off, without a power sensor (the CPU in most VMs) or without energy over the window has none, and
  `energy_of` says why: a figure that was not measured is never shown as 0;
- cost per million tokens = price per GPU-hour x GPUs x (1e6 / tokens per second) / 3600, the price being the
  user's (PRICE_PER_GPU_HOUR_AMD / _NVD, any currency; none given, no cost);
- the projection scales the measured steady-state rate linearly to PROJECT_TOKENS on the run's own GPU count: it
  leaves out what a long run adds (checkpoints, evaluation, restarts, data loading at scale) and the energy of
  everything the sampler does not read (host, network, cooling).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from utils.config.machine import KNOBS
from utils.config.parse import ConfigError, convert
from utils.config.reading import CONFIG_FILE, knob_text

SECONDS_PER_HOUR = 3600.0
PRICE_KNOBS = {"amd": "PRICE_PER_GPU_HOUR_AMD", "nvd": "PRICE_PER_GPU_HOUR_NVD"}
PROJECT_KNOB = "PROJECT_TOKENS"
# evaluate.compare's flag for each knob: the flag wins over the environment, which wins over config.env.
FLAGS = {"PRICE_PER_GPU_HOUR_AMD": "--price-amd", "PRICE_PER_GPU_HOUR_NVD": "--price-nvd",
         "PROJECT_TOKENS": "--project-tokens"}


@dataclass(frozen=True)
class CostSettings:
    """The user's prices per GPU-hour by platform (None: not given) and the token count to project to."""

    price_amd: float | None = None
    price_nvd: float | None = None
    project_tokens: float | None = None

    def price(self, platform: str) -> float | None:
        """A platform's price per GPU-hour; the CPU has none."""
        return {"amd": self.price_amd, "nvd": self.price_nvd}.get(platform)

    @property
    def any_price(self) -> bool:
        return self.price_amd is not None or self.price_nvd is not None


def knob_values(flags: Mapping[str, str], given: Mapping[str, str | None], env: Mapping[str, str],
                config_file: Path = CONFIG_FILE) -> dict:
    """Each knob of `flags` (knob -> its command-line flag) from the command line (given: knob -> its text, None: not
    given), else the environment (the matrix exports every knob), else config.env (utils.config.reading.knob_text);
    checked by the knobs' own rules, so a bad value is the configuration's one line (ConfigError)."""
    problems: list[str] = []
    values = {}
    for knob in flags:
        if given.get(knob) is not None:
            name, raw = flags[knob], str(given[knob])
        else:
            name, raw = knob, knob_text(knob, env, config_file)
        values[knob] = convert(name, raw, KNOBS[knob], problems)
    if problems:
        raise ConfigError(problems)
    return values


def cost_settings(flags: Mapping[str, str | None], env: Mapping[str, str] | None = None,
                  config_file: Path = CONFIG_FILE) -> CostSettings:
    """The prices and projection (FLAGS), read by knob_values."""
    values = knob_values(FLAGS, flags, os.environ if env is None else env, config_file)
    return CostSettings(values[PRICE_KNOBS["amd"]], values[PRICE_KNOBS["nvd"]], values[PROJECT_KNOB])


@dataclass(frozen=True)
class Energy:
    """A run's energy figures over its steady-state steps, or why it has none."""

    tokens_per_joule: float | None
    wh_per_million_tokens: float | None
    mean_power_w: float | None  # per device (GPU, or CPU package)
    method: str | None  # counter | power_integral
    why: str | None  # set exactly when tokens_per_joule is None


def energy_of(result: Mapping) -> Energy:
    """The energy figures of one result, from its telemetry section."""
    section = result.get("telemetry")
    if not section:
        return Energy(None, None, None, None, "no telemetry in this result (written before TPrimat sampled power)")
    note = f": {section['note']}" if section.get("note") else ""
    mean = section.get("mean_power_w")
    if not section["enabled"]:
        why = section.get("note") or "telemetry off (TELEMETRY=0)"
    elif not section.get("power_sensor"):
        why = section.get("note") or "no power sensor readable"
    elif section.get("tokens_per_joule") is None:
        why = "no energy over the steady-state steps" + note
    else:
        return Energy(section["tokens_per_joule"], section["wh_per_million_tokens"], mean,
                      section.get("energy_method"), None)
    return Energy(None, None, mean, None, why)


def cost(tokens: float, price_per_gpu_hour: float, num_gpus: int, tokens_per_s: float) -> float:
    """What `tokens` cost at a price per GPU-hour on num_gpus GPUs producing tokens_per_s together:
    price x GPUs x (tokens / tokens_per_s) / 3600."""
    return price_per_gpu_hour * num_gpus * (tokens / tokens_per_s) / SECONDS_PER_HOUR


def cost_per_million_tokens(price_per_gpu_hour: float, num_gpus: int, tokens_per_s: float) -> float:
    return cost(1e6, price_per_gpu_hour, num_gpus, tokens_per_s)


def ratio(amd: float | None, nvd: float | None) -> float | None:
    """AMD / NVIDIA; None without both (or with an NVIDIA figure of 0)."""
    return amd / nvd if amd is not None and nvd else None


@dataclass(frozen=True)
class Projection:
    """Training `tokens` at a measured rate on the run's GPU count, linearly."""

    tokens: float
    seconds: float
    gpu_hours: float
    energy_mwh: float | None  # None: the run's energy was not measured
    cost: float | None  # None: no price for its platform


def project(tokens: float, tokens_per_s: float, num_gpus: int, wh_per_million_tokens: float | None = None,
            price_per_gpu_hour: float | None = None) -> Projection:
    """The time, GPU-hours, energy (MWh) and cost of `tokens` at the measured tokens_per_s of num_gpus GPUs."""
    seconds = tokens / tokens_per_s
    gpu_hours = seconds / SECONDS_PER_HOUR * num_gpus
    energy = None if wh_per_million_tokens is None else tokens / 1e6 * wh_per_million_tokens / 1e6
    money = None if price_per_gpu_hour is None else cost(tokens, price_per_gpu_hour, num_gpus, tokens_per_s)
    return Projection(tokens, seconds, gpu_hours, energy, money)


def duration_text(seconds: float) -> str:
    """A projected duration in the unit a reader plans with: hours below two days, else days."""
    hours = seconds / SECONDS_PER_HOUR
    return f"{hours:,.1f} h" if hours < 48 else f"{hours / 24:,.1f} days"
