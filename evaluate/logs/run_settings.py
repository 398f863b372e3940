"""What a run's settings were, for evaluate.extract: what its log says, under its run request, under the flags.

Every setting is named as in the result (utils/spec/result.py's parallelism and training sections): the parsed
log's effective settings, the run request (utils.spec.request, config.json) and the flags all use those names,
so the settings merge key by key and the result's sections are cut from them in one place (`sections`).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from utils import run_files
from evaluate.logs.settings import complete_batch
from evaluate.logs.parse import ParsedLog
from utils.cli import UsageError
from utils.config import PLATFORMS, PRECISIONS, ConfigError, load_config
from utils.spec.fairness import IDENTITY_KEYS, sequence_parallel
from utils.machine.hardware import find_device
from utils.spec.models import MODELS
from utils.spec.request import Request, RequestError
from utils.spec.result import PARALLELISM_KEYS, PARALLELISM_OPTIONAL, TRAINING_KEYS, TRAINING_OPTIONAL, schema
from utils.spec.strategies import CUSTOM

VARIANTS = tuple(spec.variant for spec in MODELS.values())
ALL_PRECISIONS = tuple(dict.fromkeys(p for platform in PLATFORMS for p in PRECISIONS[platform]))
# Architecture numbers a log may print, named like ModelSpec's fields; together they name a variant.
ARCHITECTURE = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads", "qkv_bias")
VENDOR_PLATFORM = {"nvidia": "nvd", "amd": "amd"}
# The result's section fields, and of them those no log says (a plan's name, the data's identity).
SECTION_FIELDS = (PARALLELISM_KEYS | PARALLELISM_OPTIONAL) | (TRAINING_KEYS | set(TRAINING_OPTIONAL))
NOT_IN_LOGS = {"strategy", "nnodes", "dataset", "dataset_fingerprint", "tokenizer_fingerprint"}
FINGERPRINTS = ("dataset_fingerprint", "tokenizer_fingerprint")  # computed by extract from the data prefix


def _zero_one(text: str) -> bool:
    if text not in ("0", "1"):
        raise argparse.ArgumentTypeError(f"expected 0 or 1, got {text!r}")
    return text == "1"


@dataclass(frozen=True)
class Setting:
    """A setting a flag can give (its flag is --NAME with - for _)."""

    kind: Callable
    metavar: str
    label: str  # its name in the one-line "does not say" message; "" for a setting a result can do without
    help: str = ""
    choices: tuple[str, ...] | None = None


SETTINGS: dict[str, Setting] = {
    "platform": Setting(str, "|".join(PLATFORMS), "platform", choices=PLATFORMS,
                        help="platform (the log's: its GPU, where it shows one; else system.json's vendor)"),
    "variant": Setting(str, "|".join(VARIANTS), "model variant", choices=VARIANTS,
                       help="model variant (the log's: the one whose architecture it prints)"),
    "tp": Setting(int, "N", "TP"),
    "pp": Setting(int, "N", "PP"),
    "dp": Setting(int, "N", "DP"),
    "ga": Setting(int, "N", "gradient accumulation"),
    "mbs": Setting(int, "N", "micro-batch size"),
    "gbs": Setting(int, "N", "global batch size"),
    "seq_len": Setting(int, "N", "sequence length"),
    "steps": Setting(int, "N", "steps", help="steps the run was to train"),
    "precision": Setting(str, "|".join(ALL_PRECISIONS), "precision", choices=ALL_PRECISIONS),
    "lr": Setting(float, "LR", "peak LR"),
    "min_lr": Setting(float, "LR", "minimum LR"),
    "warmup_steps": Setting(int, "N", "LR warm-up steps"),
    "num_gpus": Setting(int, "N", "", help="GPUs of the job (the log's world size; else TP x PP x DP)"),
    "seed": Setting(int, "N", "", help="seed"),
    "mock_data": Setting(_zero_one, "0|1", "", help="1: the run trained on synthetic tokens"),
    "device_name": Setting(str, "NAME", "", help="accelerator name for the MFU peak (the log's device line; "
                                                  "else system.json's)"),
    "strategy": Setting(str, "NAME", "", help="named strategy of utils/spec/strategies.py (default: custom)"),
    "warmup_skip": Setting(int, "N", "", help="first steps left out of the statistics (else the request's; "
                                              "else WARMUP_SKIP of config.env and the environment)"),
    "dataset": Setting(str, "NAME", "", help="dataset name (bc, c4, sample)"),
    "data_prefix": Setting(str, "PREFIX", "", help="prepared data prefix, for the dataset fingerprint"),
    "run_id": Setting(str, "ID", "", help="run id (else the run directory's name; else the log's stem)"),
    "commit": Setting(str, "SHA", "", help="project commit the run used (else the request's; with --run-dir, "
                                            "this checkout's; else none)"),
}


def flag(key: str) -> str:
    return "--" + key.replace("_", "-")


@dataclass
class Shown:
    """What the logs say, in the result's names, and how they say the facts that need explaining."""

    values: dict
    evidence: dict  # key -> the text that showed it (platform, variant)
    variants: tuple[str, ...]  # the variants the printed architecture allows (all of them when it says nothing)


def _vendor(device_name: str | None) -> str | None:
    """nvidia | amd for a device name: its entry in the peak table, else the vendor it starts with."""
    if not device_name:
        return None
    spec = find_device(device_name)
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
        matched = [s for s in MODELS.values() if all(getattr(s, k) == v for k, v in arch.items())]
        padded = effective.get("padded_vocab_size")
        if len(matched) > 1 and padded is not None:  # Llama 3.1 8B and Mistral 7B share every other number
            fitting = [s.vocab_size for s in matched if s.vocab_size <= padded]
            if fitting:  # the largest vocabulary the padded one holds (padding only adds rows)
                matched = [s for s in matched if s.vocab_size == max(fitting)]
                words += f", padded vocabulary {padded}"
        return tuple(s.variant for s in matched), words
    count = effective.get("parameters")
    matched = tuple(s.variant for s in MODELS.values() if s.param_count() == count)
    return (matched, f"{count} parameters") if matched else (VARIANTS, None)


def shown_by(parsed: ParsedLog) -> Shown:
    """The settings the logs say: the result's section fields a log prints, the world size, the platform and
    the model variant."""
    effective = parsed.effective
    values = {key: effective[key] for key in (SECTION_FIELDS - NOT_IN_LOGS) | {"num_gpus"}
              if effective.get(key) is not None}
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


def _contradictions(flags: dict, shown: Shown) -> list[str]:
    """Each given flag that disagrees with the log, with what the log says."""
    found = []
    for key, value in flags.items():
        if value is None:
            continue
        if key == "variant" and "variant" in shown.evidence and value not in shown.variants:
            says = "|".join(shown.variants) or "none of TPrimat's variants"
            found.append(f"{flag(key)} {value} (the log's model: {shown.evidence['variant']}: {says})")
        elif key != "variant" and key in shown.values and shown.values[key] != value:
            where = f", from {shown.evidence[key]!r}" if key in shown.evidence else ""
            found.append(f"{flag(key)} {value} (the log: {shown.values[key]}{where})")
    return found


def requested(run_dir: Path | None) -> tuple[Request | None, dict]:
    """The run directory's request (config.json) and the settings it gives, or (None, {}) without one."""
    if run_dir is None:
        return None, {}
    try:
        request = Request.read(run_dir / run_files.REQUEST)
    except RequestError as err:
        raise UsageError(f"--run-dir {run_dir}: {err}; or leave --run-dir out to read the settings from the "
                         "log") from None
    who = request.identity
    training = {k: v for k, v in request.result_training().items() if k not in FINGERPRINTS}
    return request, {"run_id": who.run_id, "platform": who.platform, "variant": who.variant, "commit": who.commit,
                     "num_gpus": request.parallelism.num_gpus, "warmup_skip": request.environment.warmup_skip,
                     "data_prefix": request.data.prefix, **request.result_parallelism(), **training}


def configured_warmup_skip(platform: str) -> tuple[int, str]:
    """WARMUP_SKIP as a run of this checkout on that platform would take it, and where it came from."""
    env = {**os.environ, "PLATFORM": platform, "TPRIMAT_DETECTED_PLATFORM": platform}  # no detection here
    try:
        config = load_config(env)
    except ConfigError as err:
        raise UsageError(f"WARMUP_SKIP unknown: the configuration does not load ({err.problems[0]}); "
                         "give --warmup-skip N") from None
    return config["WARMUP_SKIP"], config.sources.get("WARMUP_SKIP", "config.env")


def merged(logs: list[Path], run_dir: Path | None, request: dict, flags: dict, shown: Shown, system: dict,
           notes: list[str]) -> dict:
    """The settings: what the logs say, under the run request (if any), under the flags; every required one present.

    A flag that contradicts the log, or a setting that none of them gives, is bad input (one line each kind).
    """
    where = ", ".join(str(p) for p in logs)
    contradictions = _contradictions(flags, shown)
    if contradictions:
        raise UsageError(f"{where} shows what ran, and these flags contradict it: {'; '.join(contradictions)}; "
                         "drop them, or give the log of the run they describe")
    settings = {**shown.values, **request, **{k: v for k, v in flags.items() if v is not None}}
    complete_batch(settings)  # e.g. GA of TPrimat's NeMo line, which names DP, MBS and GBS
    vendor = (system.get("gpu") or {}).get("vendor")
    if settings.get("platform") is None and vendor in VENDOR_PLATFORM:
        settings["platform"] = VENDOR_PLATFORM[vendor]
        notes.append(f"platform {settings['platform']} from system.json's GPU vendor (the log does not show it)")
    missing = [key for key, s in SETTINGS.items() if s.label and settings.get(key) is None]
    if "variant" in missing and not shown.variants:
        raise UsageError(f"{where}: the model ({shown.evidence['variant']}) is none of TPrimat's variants "
                         f"({', '.join(VARIANTS)}; utils/spec/models.py); a result names one of them")
    if missing:
        sources = where + (f" and {run_dir / 'config.json'}" if run_dir else "")
        verb = "does" if len(logs) == 1 and run_dir is None else "do"
        asks = " ".join(f"{flag(key)} " + ("|".join(shown.variants) if key == "variant" else SETTINGS[key].metavar)
                        for key in missing)
        raise UsageError(f"{sources} {verb} not say {', '.join(SETTINGS[key].label for key in missing)}; give {asks}")
    platform, precision = settings["platform"], settings["precision"]
    if precision not in PRECISIONS[platform]:
        *others, last = PRECISIONS[platform]
        raise UsageError(f"precision {precision} on {platform}: TPrimat runs {platform} in {', '.join(others)} or "
                         f"{last} only, so no result compares with it")
    if settings.get("warmup_skip") is None:
        settings["warmup_skip"], source = configured_warmup_skip(settings["platform"])
        notes.append(f"WARMUP_SKIP={settings['warmup_skip']} from {source} (no run directory gave it; "
                     "--warmup-skip sets another)")
    return settings


def _schema_order(section: str, keys) -> list[str]:
    """The keys in the order the result schema lists its section's fields (results read the same every time)."""
    return [key for key in schema()["properties"][section]["properties"] if key in keys]


def sections(settings: dict, fingerprints: dict) -> tuple[dict, dict]:
    """The result's parallelism and training sections of the settings: the one place extract builds them.

    A section field the settings lack is left to utils.spec.result's default (an optional one) or null; the
    workload-identity fields come only from a run request (a log from elsewhere does not know the profile).
    """
    parallelism = {key: settings.get(key) for key in _schema_order("parallelism", PARALLELISM_KEYS | PARALLELISM_OPTIONAL)}
    parallelism["strategy"] = parallelism["strategy"] or CUSTOM
    if parallelism["sequence_parallel"] is None:
        parallelism["sequence_parallel"] = sequence_parallel(settings["tp"])
    mock = bool(settings.get("mock_data"))
    given = {**settings, "mock_data": mock, "dataset": None if mock else settings.get("dataset"),
             **{key: fingerprints.get(key) for key in FINGERPRINTS}}
    training = {key: given.get(key) for key in _schema_order("training", {*TRAINING_KEYS, *TRAINING_OPTIONAL,
                                                                          *IDENTITY_KEYS})
                if key in TRAINING_KEYS or key in given}
    return parallelism, training
