"""The single loader and validator of TPrimat's configuration (config.env + environment).

Standard library only: the shell runs it before any container or virtual environment exists.
Every problem is reported at once, one line each, naming the variable, its value, the rule and
the valid alternatives; then the process exits 2 without a traceback.

    python3 -m utils.config check   # validate and print the effective configuration
    python3 -m utils.config env     # validate and print `export KEY=value` lines for the shell
    python3 -m utils.config json    # validate and print the resolved configuration as JSON
    python3 -m utils.config get KEY # one resolved value
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from utils.envfile import parse_env_file
from utils.fairness import PROFILES
from utils.hardware import cpu_precision
from utils.models import MODEL_KEYS, ModelSpec, get_model
from utils.secrets import SECRET_KEYS, load_secrets
from utils.strategies import CUSTOM, Layout, StrategyError, load_table, lookup

ROOT = Path(__file__).resolve().parent.parent
CONFIG_FILE = ROOT / "config.env"
CPU_PREFIX = "CPU_"  # CPU_<KNOB> in config.env replaces <KNOB> on the CPU platform

PLATFORMS = ("amd", "nvd", "cpu")
FRAMEWORKS = ("mega", "prim", "nemo")
# The frameworks each platform can run; the vendor framework of the other platform maps onto its own.
PLATFORM_FRAMEWORKS = {"nvd": ("mega", "nemo"), "amd": ("mega", "prim"), "cpu": ("mega",)}
VENDOR_FRAMEWORK = {"nvd": "nemo", "amd": "prim"}
PRECISIONS = {"nvd": ("bf16", "fp8"), "amd": ("bf16", "fp8"), "cpu": ("fp32", "bf16")}
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


@dataclass(frozen=True)
class Knob:
    """The type rule of one configuration variable."""

    kind: str  # int | posint | float | posfloat | enum | list | bool | path | str
    choices: tuple[str, ...] = ()


KNOBS: dict[str, Knob] = {
    "PLATFORM": Knob("enum", ("auto",) + PLATFORMS),
    "RUNTIME": Knob("enum", ("auto", "docker", "host")),
    "FRAMEWORK": Knob("list", FRAMEWORKS + ("all",)),
    "MODELS": Knob("list", MODEL_KEYS),
    "MODEL_SIZE": Knob("enum", ("auto", "full", "tiny")),
    "STRATEGY": Knob("str"),
    "STRATEGIES_FILE": Knob("path"),
    "DATASET": Knob("enum", ("bc", "c4", "sample")),
    "DATA_SAMPLES": Knob("posint"),
    "DATA_DIR": Knob("path"),
    "OUTPUT_DIR": Knob("path"),
    "HF_HOME": Knob("path"),
    "ALLOW_FALLBACK_TOKENIZER": Knob("bool"),
    "MOCK_DATA": Knob("bool"),
    "SEED": Knob("int"),
    "MBS": Knob("posint"),
    "SL": Knob("posint"),
    "LR": Knob("posfloat"),
    "MIN_LR": Knob("float"),
    "WARMUP_STEPS": Knob("int"),
    "TRAIN_ITERS": Knob("posint"),
    "WEIGHT_DECAY": Knob("float"),
    "BETA1": Knob("float"),
    "BETA2": Knob("float"),
    "GRAD_CLIP": Knob("float"),
    "PRECISION": Knob("enum", ("auto", "bf16", "fp8", "fp32")),
    "FAIRNESS": Knob("enum", PROFILES),
    "TP": Knob("posint"),
    "PP": Knob("posint"),
    "DP": Knob("posint"),
    "GA": Knob("posint"),
    "NNODES": Knob("posint"),
    "GPUS_PER_NODE": Knob("posint"),
    "NODE_RANK": Knob("int"),
    "MASTER_ADDR": Knob("str"),
    "MASTER_PORT": Knob("posint"),
    "LAUNCHER": Knob("enum", ("auto", "local", "slurm")),
    "SLURM_PARTITION": Knob("str"),
    "SLURM_ACCOUNT": Knob("str"),
    "SLURM_QOS": Knob("str"),
    "SLURM_TIME": Knob("str"),
    "SLURM_CONTAINER": Knob("enum", ("none", "pyxis")),
    "SLURM_CONTAINER_IMAGE": Knob("str"),
    "SLURM_PENDING_TIMEOUT": Knob("posint"),
    "NET_SOCKET_IFNAME": Knob("str"),
    "NET_IB_HCA": Knob("str"),
    "NET_IB_GID_INDEX": Knob("str"),
    "NET_DEBUG": Knob("enum", ("", "VERSION", "WARN", "INFO", "TRACE")),
    "RUNS": Knob("posint"),
    "WARMUP_SKIP": Knob("int"),
    "PROFILING": Knob("bool"),
    "PROFILE_START_STEP": Knob("posint"),
    "PROFILE_END_STEP": Knob("posint"),
    "DRY_RUN": Knob("bool"),
    "DETACH": Knob("bool"),
    "FORCE": Knob("bool"),
}


class ConfigError(Exception):
    """Raised with every problem found, one per line."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems

    def report(self, tool: str = "") -> None:
        """Every problem on stderr, one line each, the way every tool shows a bad configuration."""
        for problem in self.problems:
            print(f"{tool + ': ' if tool else ''}config error: {problem}", file=sys.stderr)


@dataclass
class Config:
    """The validated, typed configuration of one invocation."""

    values: dict
    sources: dict[str, str]
    launch: str  # local | slurm (resolved LAUNCHER)
    models: list[ModelSpec]
    frameworks: list[str]
    strategies: list[str]
    detected_gpus: int
    notes: list[str] = field(default_factory=list)
    strategy_table: dict = field(default_factory=dict)

    def __getitem__(self, key: str):
        return self.values[key]

    @property
    def platform(self) -> str:
        return self.values["PLATFORM"]

    @property
    def gbs(self) -> int:
        """The configured global batch; every strategy keeps it."""
        return self.values["MBS"] * self.values["DP"] * self.values["GA"]

    @property
    def num_gpus(self) -> int:
        return self.values["NNODES"] * self.values["GPUS_PER_NODE"]

    def model(self, key: str) -> ModelSpec:
        return get_model(key, self.values["MODEL_SIZE"])

    def layout(self, model_key: str, strategy: str | None = None) -> Layout:
        """TP/PP/DP/GA of a model under a strategy (default: the first strategy of this run)."""
        name = strategy or self.strategies[0]
        if name == CUSTOM:
            v = self.values
            return Layout(v["TP"], v["PP"], v["DP"], v["GA"])
        found = lookup(self.strategy_table, name, self.platform, model_key)
        if found is None:
            raise KeyError(f"strategy {name!r} has no layout for {model_key} on {self.platform}")
        tp, pp, dp = found
        return Layout(tp, pp, dp, self.gbs // (self.values["MBS"] * dp))

    def as_dict(self) -> dict:
        """JSON-ready: every knob's resolved value plus what is derived from them."""
        return {
            **self.values,
            "GBS": self.gbs,
            "NUM_GPUS": self.num_gpus,
            "LAUNCH_MODE": self.launch,
            "FRAMEWORKS": self.frameworks,
            "STRATEGIES": self.strategies,
            "MODEL_VARIANTS": {m.key: m.variant for m in self.models},
            "LAYOUTS": {s: {m.key: vars(self.layout(m.key, s)) for m in self.models} for s in self.strategies},
        }


def detect(env: dict) -> tuple[str, int]:
    """The platform and GPU count as shell/platform.sh sees them (the one detection routine)."""
    if env.get("TPRIMAT_DETECTED_PLATFORM"):
        return env["TPRIMAT_DETECTED_PLATFORM"], int(env.get("TPRIMAT_DETECTED_GPUS") or 0)
    script = ROOT / "shell" / "platform.sh"
    answers = []
    for flags in (["--detect"], ["--detect", "--count"]):
        out = subprocess.run(["bash", str(script), *flags], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            raise ConfigError([f"platform detection failed: {out.stderr.strip() or out.stdout.strip()}"])
        answers.append(out.stdout.strip())
    return answers[0], int(answers[1])


def _convert(name: str, raw: str, knob: Knob, problems: list[str]):
    """One raw string to its typed value, or a problem line."""
    value = raw.strip()
    try:
        if knob.kind in ("int", "posint"):
            number = int(value)
            if knob.kind == "posint" and number < 1:
                raise ValueError
            if knob.kind == "int" and number < 0 and name != "SEED":
                raise ValueError
            return number
        if knob.kind in ("float", "posfloat"):
            number = float(value)
            if not math.isfinite(number) or number < 0 or (knob.kind == "posfloat" and number == 0):
                raise ValueError
            return number
    except ValueError:
        rule = {"posint": "a positive integer", "int": "a non-negative integer",
                "posfloat": "a positive number", "float": "a non-negative number"}[knob.kind]
        problems.append(f"{name}={raw}: must be {rule}")
        return None
    if knob.kind == "enum":
        if value not in knob.choices:
            problems.append(f"{name}={raw}: not one of {', '.join(knob.choices)}")
            return None
        return value
    if knob.kind == "list":
        items = [item.strip() for item in value.split(",") if item.strip()]
        bad = [item for item in items if item not in knob.choices]
        if bad or not items:
            problems.append(f"{name}={raw}: {'unknown ' + ', '.join(bad) if bad else 'empty'}; "
                            f"valid: a comma list of {', '.join(knob.choices)}")
            return None
        return list(dict.fromkeys(items))
    if knob.kind == "bool":
        if value.lower() in TRUE_WORDS:
            return True
        if value.lower() in FALSE_WORDS:
            return False
        problems.append(f"{name}={raw}: must be true or false (1 or 0)")
        return None
    if knob.kind == "path":
        if not value:
            return ""
        path = Path(os.path.expandvars(os.path.expanduser(value)))
        return str(path if path.is_absolute() else ROOT / path)
    return value


def _resolve_frameworks(requested: list[str], platform: str, notes: list[str]) -> list[str]:
    """FRAMEWORK (with all) mapped onto what the platform runs: prim<->nemo, only mega on the CPU."""
    available = PLATFORM_FRAMEWORKS[platform]
    resolved: list[str] = []
    for name in requested:
        if name == "all":
            resolved.extend(available)
            continue
        if name in available:
            resolved.append(name)
        elif platform == "cpu":
            notes.append(f"FRAMEWORK={name}: the CPU runs mega only; {name} needs a GPU")
            resolved.append("mega")
        else:
            own = VENDOR_FRAMEWORK[platform]
            notes.append(f"FRAMEWORK={name}: {name} does not run on {platform}; its counterpart {own} runs instead")
            resolved.append(own)
    return list(dict.fromkeys(resolved))


def _check_layout(label: str, spec: ModelSpec, layout: Layout, gpus: int, mbs: int, gbs: int,
                  problems: list[str]) -> None:
    """The rules every TP/PP/DP/GA layout obeys, for one model."""
    if spec.num_attention_heads % layout.tp or spec.num_kv_heads % layout.tp:
        problems.append(f"{label}TP={layout.tp}: {spec.display_name} has {spec.num_attention_heads} attention "
                        f"heads and {spec.num_kv_heads} KV heads; valid TP for {spec.key}: "
                        + ", ".join(map(str, spec.valid_tp())))
    if spec.num_layers % layout.pp:
        problems.append(f"{label}PP={layout.pp}: {spec.display_name} has {spec.num_layers} layers; "
                        f"valid PP for {spec.key}: " + ", ".join(map(str, spec.valid_pp())))
    if layout.gpus != gpus:
        problems.append(f"{label}TP x PP x DP = {layout.tp} x {layout.pp} x {layout.dp} = {layout.gpus} "
                        f"for {spec.key}, but NNODES x GPUS_PER_NODE = {gpus}; make them equal")
    if gbs % (mbs * layout.dp):
        problems.append(f"{label}DP={layout.dp}: the global batch {gbs} (MBS x DP x GA) is not a multiple of "
                        f"MBS x DP = {mbs * layout.dp}, so GA cannot keep it for {spec.key}")


def load_config(env: dict | None = None, path: Path = CONFIG_FILE) -> Config:
    """Read config.env, apply the CPU profile and the environment, type and validate everything."""
    env = dict(os.environ if env is None else env)
    file_values, problems = parse_env_file(path)
    sources: dict[str, str] = {}
    raw: dict[str, str] = {}
    cpu_profile: dict[str, str] = {}
    for key, value in file_values.items():
        base = key.removeprefix(CPU_PREFIX)
        if key.startswith(CPU_PREFIX) and base in KNOBS:
            cpu_profile[base] = env.get(key, value)
        elif key in KNOBS:
            raw[key], sources[key] = value, "config.env"
        else:
            close = difflib.get_close_matches(key, list(KNOBS), n=1)
            hint = f"; did you mean {close[0]}?" if close else "; see the list in config.env"
            if key in SECRET_KEYS:
                hint = "; secrets belong in secrets.env"
            problems.append(f"{path.name}: unknown variable {key}{hint}")
    for key in KNOBS:
        if key not in raw:
            problems.append(f"{path.name}: {key} is missing; every knob must be set there")
            raw[key] = ""

    notes: list[str] = []
    platform_raw = env.get("PLATFORM", raw["PLATFORM"]).strip()
    detected, detected_gpus = detect(env)
    platform = detected if platform_raw == "auto" else platform_raw
    if platform == "cpu":
        for key, value in cpu_profile.items():
            raw[key], sources[key] = value, "config.env (CPU profile)"
    for key in KNOBS:
        if key in env:
            raw[key], sources[key] = env[key], "environment"
    raw["PLATFORM"] = platform
    if platform_raw == "auto":
        sources["PLATFORM"] = "detected"

    values = {key: _convert(key, raw[key], knob, problems) for key, knob in KNOBS.items()}
    if values["MODEL_SIZE"] == "auto":
        values["MODEL_SIZE"] = "tiny" if platform == "cpu" else "full"
    if values["PRECISION"] == "auto":
        values["PRECISION"], why = cpu_precision(env) if platform == "cpu" else ("bf16", "bf16 on GPUs")
        sources["PRECISION"] = f"{sources.get('PRECISION', 'config.env')}: auto, {why}"
    if problems or values["PLATFORM"] is None:
        raise ConfigError(problems)

    dry_run, slurm = values["DRY_RUN"], launch_mode(values, env) == "slurm"
    if not re.fullmatch(r"([0-9]+-)?[0-9]{1,2}(:[0-9]{2}){0,2}", values["SLURM_TIME"]):
        problems.append(f"SLURM_TIME={values['SLURM_TIME']}: not a Slurm time limit; use [D-]HH:MM:SS, e.g. 04:00:00")
    if values["NET_IB_GID_INDEX"] and not values["NET_IB_GID_INDEX"].isdigit():
        problems.append(f"NET_IB_GID_INDEX={values['NET_IB_GID_INDEX']}: must be empty or a non-negative integer")
    if platform != "cpu" and platform != detected and not (dry_run or slurm):
        vendor = {"amd": "AMD GPU (no /dev/kfd; rocm-smi and amd-smi list none)", "nvd": "NVIDIA GPU (nvidia-smi -L lists none)"}
        problems.append(f"PLATFORM={platform}: this machine has no {vendor[platform]}; detected {detected}. "
                        "Unset PLATFORM to use what is here, or run on a matching node")
    if platform != "cpu" and platform == detected and detected_gpus and not slurm \
            and values["GPUS_PER_NODE"] != detected_gpus:
        problems.append(f"GPUS_PER_NODE={values['GPUS_PER_NODE']}: this node has {detected_gpus} GPUs; "
                        f"set GPUS_PER_NODE={detected_gpus} and TP x PP x DP to match")

    frameworks = _resolve_frameworks(values["FRAMEWORK"], platform, notes)
    models = [get_model(key, values["MODEL_SIZE"]) for key in values["MODELS"]]

    if values["PRECISION"] not in PRECISIONS[platform]:
        problems.append(f"PRECISION={values['PRECISION']}: not supported on {platform}; valid: "
                        + ", ".join(PRECISIONS[platform]))
    if values["MIN_LR"] > values["LR"]:
        problems.append(f"MIN_LR={raw['MIN_LR']}: must not exceed LR={raw['LR']}")
    if values["WARMUP_STEPS"] >= values["TRAIN_ITERS"]:  # megatron-core's scheduler needs a decay phase
        problems.append(f"WARMUP_STEPS={values['WARMUP_STEPS']}: must be < TRAIN_ITERS={values['TRAIN_ITERS']}")
    if values["WARMUP_SKIP"] >= values["TRAIN_ITERS"]:
        problems.append(f"WARMUP_SKIP={values['WARMUP_SKIP']}: must be < TRAIN_ITERS={values['TRAIN_ITERS']} "
                        "so that some steps are measured")
    for beta in ("BETA1", "BETA2"):
        if values[beta] >= 1:
            problems.append(f"{beta}={raw[beta]}: must be in [0, 1)")
    if values["PROFILING"] and not (values["PROFILE_START_STEP"] <= values["PROFILE_END_STEP"]
                                    <= values["TRAIN_ITERS"]):
        problems.append(f"PROFILE_START_STEP={values['PROFILE_START_STEP']} PROFILE_END_STEP="
                        f"{values['PROFILE_END_STEP']}: need start <= end <= TRAIN_ITERS={values['TRAIN_ITERS']}")
    if values["NODE_RANK"] >= values["NNODES"]:
        problems.append(f"NODE_RANK={values['NODE_RANK']}: must be < NNODES={values['NNODES']}")
    if values["MASTER_PORT"] > 65535:
        problems.append(f"MASTER_PORT={values['MASTER_PORT']}: must be a port number (1-65535)")
    for spec in models:
        if values["SL"] > spec.max_position_embeddings:
            problems.append(f"SL={values['SL']}: {spec.display_name} has a context of "
                            f"{spec.max_position_embeddings} tokens; use SL <= {spec.max_position_embeddings}")

    try:
        table = load_table(Path(values["STRATEGIES_FILE"]) if values["STRATEGIES_FILE"] else None)
    except StrategyError as err:
        raise ConfigError(problems + [str(err)]) from None
    unknown: list[str] = []
    strategies = _resolve_strategies(values["STRATEGY"], table, unknown)
    if unknown:
        raise ConfigError(problems + unknown)
    config = Config(values, sources, launch_mode(values, env), models, frameworks, strategies, detected_gpus,
                    notes, table)
    gpus, mbs, gbs = config.num_gpus, values["MBS"], config.gbs
    for name in strategies:
        label = "" if name == CUSTOM else f"STRATEGY={name}: "
        for spec in models:
            if name != CUSTOM and lookup(table, name, platform, spec.key) is None:
                problems.append(f"STRATEGY={name}: no layout for {spec.key} on {platform}; "
                                "add one to STRATEGIES_FILE or choose another strategy")
                continue
            _check_layout(label, spec, config.layout(spec.key, name), gpus, mbs, gbs, problems)
    if problems:
        raise ConfigError(problems)
    return config


def launch_mode(values: dict, env: dict) -> str:
    """slurm: submit from a login node (LAUNCHER=slurm, or auto with NNODES>1 and sbatch on PATH)."""
    if values["LAUNCHER"] == "auto":
        wanted = values["NNODES"] > 1 and shutil.which("sbatch", path=env.get("PATH")) is not None
        return "slurm" if wanted else "local"
    return values["LAUNCHER"]


def _resolve_strategies(value: str, table: dict, problems: list[str]) -> list[str]:
    """STRATEGY: empty -> custom (TP/PP/DP/GA), a name, a comma list, or all."""
    names = [item.strip() for item in value.split(",") if item.strip()]
    if not names:
        return [CUSTOM]
    if names == ["all"]:
        return list(table)
    unknown = [name for name in names if name not in table and name != CUSTOM]
    if unknown:
        problems.append(f"STRATEGY={value}: unknown {', '.join(unknown)}; valid: all, "
                        + ", ".join(list(table) + [CUSTOM]))
    return list(dict.fromkeys(names))


def _shell_value(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def shell_exports(config: Config) -> list[str]:
    """`export KEY=value` lines: every knob resolved, plus the derived values the scripts need."""
    exported = {key: _shell_value(value) for key, value in config.values.items()}
    exported.update({
        "FRAMEWORKS": ",".join(config.frameworks),
        "STRATEGIES": ",".join(config.strategies),
        "GBS": str(config.gbs),
        "NUM_GPUS": str(config.num_gpus),
        "TPRIMAT_DETECTED_GPUS": str(config.detected_gpus),
    })
    return [f"export {key}={shlex.quote(value)}" for key, value in exported.items()]


def describe(config: Config, secrets: dict[str, str]) -> list[str]:
    """The effective configuration as a table, with where each value came from; secrets masked."""
    lines = [f"{key:<26} {_shell_value(value):<34} {config.sources.get(key, 'config.env')}"
             for key, value in config.values.items()]
    lines.append(f"{'HF_TOKEN':<26} {'(set, hidden)' if secrets.get('HF_TOKEN') else '(not set)':<34} "
                 "secrets.env or environment")
    lines.append("")
    lines.append(f"platform {config.platform} ({config.detected_gpus} GPUs detected); "
                 f"frameworks {', '.join(config.frameworks)}; GBS {config.gbs}; GPUs {config.num_gpus}")
    for name in config.strategies:
        for spec in config.models:
            lay = config.layout(spec.key, name)
            lines.append(f"strategy {name}: {spec.variant}: TP{lay.tp} PP{lay.pp} DP{lay.dp} GA{lay.ga}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m utils.config", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("check", "env", "json", "get"))
    parser.add_argument("key", nargs="?", help="with get: the variable to print")
    parser.add_argument("--quiet", action="store_true", help="do not print notes")
    args = parser.parse_args(argv)
    try:
        config = load_config()
    except ConfigError as err:
        err.report()
        print(f"config: {len(err.problems)} problem(s) in {CONFIG_FILE.name} or the environment; "
              "nothing was started", file=sys.stderr)
        return 2
    if not args.quiet:
        for note in config.notes:
            print(f"note: {note}", file=sys.stderr)
    if args.command == "check":
        print("\n".join(describe(config, load_secrets())))
    elif args.command == "env":
        print("\n".join(shell_exports(config)))
    elif args.command == "json":
        print(json.dumps(config.as_dict(), indent=2))
    else:
        resolved = config.as_dict()
        if args.key not in resolved:
            print(f"config: unknown variable {args.key!r}; valid: {', '.join(resolved)}", file=sys.stderr)
            return 2
        print(_shell_value(resolved[args.key]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
