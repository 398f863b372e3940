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


INT_MAX = 2**31 - 1  # no count here comes near it; past 2**63 numpy and torch raise instead of training


@dataclass(frozen=True)
class Knob:
    """The rule of one configuration variable: its kind and the values it allows."""

    kind: str  # int | float | enum | list | bool | dir | file | str
    choices: tuple[str, ...] = ()  # enum, list
    low: float = 0  # int, float: the smallest value
    high: float = INT_MAX  # int, float: the largest value
    bounds: str = "[]"  # float: "(]" excludes low (LR > 0), "[)" excludes high (BETA < 1)
    pattern: str = ""  # str: a regular expression the whole value must match
    rule: str = ""  # int: why the range; str: what the pattern means


POSITIVE = Knob("int", low=1)
COUNT = Knob("int")
NAME = Knob("str", pattern="[!-~]*", rule="printable ASCII without spaces (empty: the default)")  # passed on as is

KNOBS: dict[str, Knob] = {
    "PLATFORM": Knob("enum", ("auto",) + PLATFORMS),
    "RUNTIME": Knob("enum", ("auto", "docker", "host")),
    "FRAMEWORK": Knob("list", FRAMEWORKS + ("all",)),
    "MODELS": Knob("list", MODEL_KEYS),
    "MODEL_SIZE": Knob("enum", ("auto", "full", "tiny")),
    "STRATEGY": Knob("str"),  # checked against the strategy table, which STRATEGIES_FILE extends
    "STRATEGIES_FILE": Knob("file"),
    "DATASET": Knob("enum", ("bc", "c4", "sample")),
    "DATA_SAMPLES": POSITIVE,
    "DATA_DIR": Knob("dir"),
    "OUTPUT_DIR": Knob("dir"),
    "HF_HOME": Knob("dir"),
    "ALLOW_FALLBACK_TOKENIZER": Knob("bool"),
    "MOCK_DATA": Knob("bool"),
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
    "PRECISION": Knob("enum", ("auto", "bf16", "fp8", "fp32")),
    "FAIRNESS": Knob("enum", PROFILES),
    "TP": POSITIVE,
    "PP": POSITIVE,
    "DP": POSITIVE,
    "GA": POSITIVE,
    "NNODES": POSITIVE,
    "GPUS_PER_NODE": POSITIVE,
    "NODE_RANK": COUNT,
    "MASTER_ADDR": Knob("str", pattern=r"[A-Za-z0-9.:_-]+",
                        rule="an IP address or host name of node 0 (ASCII letters, digits, . - : _)"),
    "MASTER_PORT": Knob("int", low=1, high=65535),
    "LAUNCHER": Knob("enum", ("auto", "local", "slurm")),
    "SLURM_PARTITION": NAME,
    "SLURM_ACCOUNT": NAME,
    "SLURM_QOS": NAME,
    "SLURM_TIME": Knob("str", pattern=r"([0-9]+-)?[0-9]{1,2}(:[0-9]{2}){0,2}",
                       rule="a Slurm time limit [D-]HH:MM:SS, e.g. 04:00:00"),
    "SLURM_CONTAINER": Knob("enum", ("none", "pyxis")),
    "SLURM_CONTAINER_IMAGE": Knob("str"),
    "SLURM_PENDING_TIMEOUT": POSITIVE,
    "NET_SOCKET_IFNAME": NAME,
    "NET_IB_HCA": NAME,
    "NET_IB_GID_INDEX": Knob("str", pattern="[0-9]*", rule="empty or an integer (digits 0-9 only)"),
    "NET_DEBUG": Knob("enum", ("", "VERSION", "WARN", "INFO", "TRACE")),
    "RUNS": POSITIVE,
    "WARMUP_SKIP": COUNT,
    "PROFILING": Knob("bool"),
    "PROFILE_START_STEP": POSITIVE,
    "PROFILE_END_STEP": POSITIVE,
    "DRY_RUN": Knob("bool"),
    "DETACH": Knob("bool"),
    "FORCE": Knob("bool"),
}
# Names the scripts themselves export next to the knobs (shell_exports): never a user's typo.
DERIVED = ("FRAMEWORKS", "STRATEGIES", "GBS", "NUM_GPUS")


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
    warnings: list[str] = field(default_factory=list)
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


INTEGER = re.compile(r"[0-9]+")  # int() would also take "３", "1_000" and "+3"
NUMBER = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?")  # float() also takes "nan", "1_0"


def _range_rule(knob: Knob) -> str:
    """What an int or float knob accepts, as the problem line says it."""
    if knob.kind == "int":
        return f"must be an integer from {knob.low} to {knob.high} (digits 0-9 only)" + \
            (f", {knob.rule}" if knob.rule else "")
    if knob.high == math.inf:
        span = f"{'>' if knob.bounds[0] == '(' else '>='} {knob.low:g}"
    else:
        span = f"in {knob.bounds[0]}{knob.low:g}, {knob.high:g}{knob.bounds[1]}"
    return f"must be a number {span}, in digits 0-9 (e.g. 3e-4)"


def _number(value: str, knob: Knob):
    """An int or float knob's value, or None when it is not written plainly or is out of its range."""
    if not (INTEGER if knob.kind == "int" else NUMBER).fullmatch(value):
        return None
    number = int(value) if knob.kind == "int" else float(value)
    if not math.isfinite(number):  # "1e999" is written plainly yet overflows to inf
        return None
    above = number > knob.low if knob.bounds[0] == "(" else number >= knob.low
    below = number < knob.high if knob.bounds[1] == ")" else number <= knob.high
    return number if above and below else None


def _list_items(name: str, raw: str, choices: tuple[str, ...] | list[str], problems: list[str]) -> list[str]:
    """A comma list of known names, each once: an empty item or a repeat is a slip, not a wish."""
    items = [item.strip() for item in raw.split(",")]
    unknown = [item for item in items if item and item not in choices]
    twice = [item for item in dict.fromkeys(items) if item and items.count(item) > 1]
    if items == [""]:
        why = "empty"
    elif unknown:
        why = "unknown " + ", ".join(unknown)
    elif twice:
        why = " and ".join(twice) + " twice"
    elif "" in items:
        why = "an empty item"
    else:
        return items
    problems.append(f"{name}={raw}: {why}; valid: a comma list of {', '.join(choices)}, each once")
    return []


def _path(name: str, raw: str, value: str, problems: list[str]) -> str:
    """A path knob made absolute (relative = the repository root); an unset $VARIABLE in it is a problem."""
    expanded = os.path.expandvars(os.path.expanduser(value))
    unset = re.search(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expanded)
    if unset:
        problems.append(f"{name}={raw}: ${unset.group(1)} is not set in the environment; set it or write the "
                        "path out")
    path = Path(expanded)
    return str(path if path.is_absolute() else ROOT / path)


def _directory(name: str, raw: str, value: str, problems: list[str]) -> str:
    """A directory knob: required, and neither it nor a parent may be an existing file (it is created later)."""
    if not value:
        problems.append(f"{name}={raw}: must name a directory (relative = the repository root)")
        return ""
    path = Path(_path(name, raw, value, problems))
    blocker = next((p for p in (path, *path.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        problems.append(f"{name}={raw}: {blocker} is a file, not a directory; point {name} at a directory")
    return str(path)


def _convert(name: str, raw: str, knob: Knob, problems: list[str]):
    """One raw string to its typed value, or a problem line (surrounding blanks never matter)."""
    value = raw.strip()
    if knob.kind in ("int", "float"):
        number = _number(value, knob)
        if number is None:
            problems.append(f"{name}={raw}: {_range_rule(knob)}")
        return number
    if knob.kind == "enum":
        if value not in knob.choices:
            problems.append(f"{name}={raw}: not one of {', '.join(knob.choices)}")
            return None
        return value
    if knob.kind == "list":
        return _list_items(name, raw, knob.choices, problems) or None
    if knob.kind == "bool":
        if value.lower() in TRUE_WORDS:
            return True
        if value.lower() in FALSE_WORDS:
            return False
        problems.append(f"{name}={raw}: must be true or false (1 or 0)")
        return None
    if knob.kind == "dir":
        return _directory(name, raw, value, problems)
    if knob.kind == "file":
        return _path(name, raw, value, problems) if value else ""
    if knob.pattern and not re.fullmatch(knob.pattern, value):
        problems.append(f"{name}={raw}: must be {knob.rule}")
    return value


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
    if not file_values:  # nothing to validate: one line, not one per knob
        why = problems[0] if problems else f"{path}: {'empty' if path.exists() else 'not found'}"
        raise ConfigError([f"{why}; restore it from the repository (git checkout config.env)"])
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
            close = near_knob(key, cutoff=0.6)
            hint = f"; did you mean {close}?" if close else "; see the list in config.env"
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
    if platform != "cpu":  # unused here, but a slip in a CPU_ line should not wait for the first CPU run
        for key, value in cpu_profile.items():
            _convert(CPU_PREFIX + key, value, KNOBS[key], problems)
    if values["MODEL_SIZE"] == "auto":
        values["MODEL_SIZE"] = "tiny" if platform == "cpu" else "full"
    if values["PRECISION"] == "auto":
        values["PRECISION"], why = cpu_precision(env) if platform == "cpu" else ("bf16", "bf16 on GPUs")
        sources["PRECISION"] = f"{sources.get('PRECISION', 'config.env')}: auto, {why}"
    table = _strategy_table(values["STRATEGIES_FILE"], problems)
    if problems or values["PLATFORM"] is None:
        raise ConfigError(problems)

    dry_run, slurm = values["DRY_RUN"], launch_mode(values, env) == "slurm"
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
    if values["PROFILING"] and not (values["PROFILE_START_STEP"] <= values["PROFILE_END_STEP"]
                                    <= values["TRAIN_ITERS"]):
        problems.append(f"PROFILE_START_STEP={values['PROFILE_START_STEP']} PROFILE_END_STEP="
                        f"{values['PROFILE_END_STEP']}: need start <= end <= TRAIN_ITERS={values['TRAIN_ITERS']}")
    if values["NODE_RANK"] >= values["NNODES"]:
        problems.append(f"NODE_RANK={values['NODE_RANK']}: must be < NNODES={values['NNODES']}")
    for spec in models:
        if values["SL"] > spec.max_position_embeddings:
            problems.append(f"SL={values['SL']}: {spec.display_name} has a context of "
                            f"{spec.max_position_embeddings} tokens; use SL <= {spec.max_position_embeddings}")

    unknown: list[str] = []
    strategies = _resolve_strategies(values["STRATEGY"], table, unknown)
    if unknown:
        raise ConfigError(problems + unknown)
    config = Config(values, sources, launch_mode(values, env), models, frameworks, strategies, detected_gpus,
                    notes, environment_warnings(env, cpu_profile), table)
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


def _strategy_table(extra_file: str, problems: list[str]) -> dict:
    """The strategy table with STRATEGIES_FILE's additions; the file's mistakes join the other problems."""
    try:
        return load_table(Path(extra_file) if extra_file else None, PLATFORMS, MODEL_KEYS)
    except StrategyError as err:
        problems.extend(err.problems)
        return {}


def launch_mode(values: dict, env: dict) -> str:
    """slurm: submit from a login node (LAUNCHER=slurm, or auto with NNODES>1 and sbatch on PATH)."""
    if values["LAUNCHER"] == "auto":
        wanted = values["NNODES"] > 1 and shutil.which("sbatch", path=env.get("PATH")) is not None
        return "slurm" if wanted else "local"
    return values["LAUNCHER"]


def _resolve_strategies(value: str, table: dict, problems: list[str]) -> list[str]:
    """STRATEGY: empty -> custom (TP/PP/DP/GA), a name, a comma list, or all."""
    if not value.strip():
        return [CUSTOM]
    names = _list_items("STRATEGY", value, ["all", *table, CUSTOM], problems)
    if "all" in names and names != ["all"]:
        problems.append(f"STRATEGY={value}: all already names every strategy; write all alone or list names")
    return list(table) if names == ["all"] else names


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
    parser.add_argument("--quiet", action="store_true", help="do not print notes or warnings")
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
        for warning in config.warnings:
            print(f"warning: {warning}", file=sys.stderr)
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
