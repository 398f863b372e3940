"""utils.config: the single loader and validator of config.env and the environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from utils.config import CONFIG_FILE, KNOBS, ROOT, ConfigError, load_config
from utils.envfile import parse_env_file
from utils.spec import stacks

GPU_NODE = {"TPRIMAT_DETECTED_PLATFORM": "nvd", "TPRIMAT_DETECTED_GPUS": "8"}
AMD_NODE = {"TPRIMAT_DETECTED_PLATFORM": "amd", "TPRIMAT_DETECTED_GPUS": "8"}
CPU_MACHINE = {"TPRIMAT_DETECTED_PLATFORM": "cpu", "TPRIMAT_DETECTED_GPUS": "0"}


def problems_of(env: dict, path: Path = CONFIG_FILE) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(env, path)
    return caught.value.problems


def test_every_knob_is_in_config_env_with_a_comment():
    values, problems = parse_env_file(CONFIG_FILE)
    assert problems == []
    assert set(KNOBS) <= set(values)
    for line in CONFIG_FILE.read_text().splitlines():
        if line and not line.startswith("#"):
            assert " # " in line, f"knob without a comment: {line}"


def test_the_knob_table_keeps_config_env_order():
    """The sections' tables join in config.env's order, which check, env and json print in."""
    values, _ = parse_env_file(CONFIG_FILE)
    assert list(KNOBS) == [key for key in values if key in KNOBS]


def test_gpu_defaults_are_the_fair_comparison_settings():
    config = load_config(GPU_NODE)
    expected = {"SEED": 42, "MBS": 1, "SL": 2048, "LR": 3e-4, "MIN_LR": 0.0, "WARMUP_STEPS": 50,
                "TRAIN_ITERS": 500, "WEIGHT_DECAY": 0.1, "BETA1": 0.9, "BETA2": 0.95, "TP": 1, "PP": 1,
                "DP": 8, "GA": 8, "PRECISION": "bf16", "MODEL_SIZE": "full", "PLATFORM": "nvd",
                "FAIRNESS": "spec"}
    assert {k: config[k] for k in expected} == expected
    assert config.gbs == 64 and config.num_gpus == 8
    assert config.stack == stacks.default("nvd") and "nemo" not in config.frameworks  # NeMo 2 left after 25.x
    assert load_config({**GPU_NODE, "STACK": "nemo-25.04"}).frameworks == ["mega", "nemo", "fsdp", "autotp"]
    assert [m.variant for m in config.models] == ["llama3.1-8b", "qwen2.5-7b"]


def test_cpu_scales_itself_down_without_edits():
    config = load_config(CPU_MACHINE)
    assert config.platform == "cpu" and config["MODEL_SIZE"] == "tiny"
    assert (config["DP"], config["GPUS_PER_NODE"], config["SL"], config["DATASET"]) == (2, 2, 128, "sample")
    assert config["TRAIN_ITERS"] < 100
    assert config.frameworks == ["mega", "fsdp", "autotp"]
    assert config.sources["SL"] == "config.env (CPU profile)"


def test_environment_overrides_file_and_cpu_profile():
    config = load_config({**CPU_MACHINE, "TRAIN_ITERS": "12", "FRAMEWORK": "mega"})
    assert config["TRAIN_ITERS"] == 12 and config.sources["TRAIN_ITERS"] == "environment"


@pytest.mark.parametrize("platform, requested, resolved", [
    ("nvd", "prim", ["mbridge"]), ("amd", "nemo", ["prim"]),
    ("amd", "all", list(stacks.default("amd").frameworks)),  # the default stack's row
    ("nvd", "mega,prim,nemo", ["mega", "mbridge", "nemo"]),  # nemo stays named: the plan skips it, naming its stack
    ("cpu", "all", ["mega", "fsdp", "autotp"]), ("cpu", "nemo", ["mega"]), ("cpu", "autotp,fsdp", ["autotp", "fsdp"]),
    ("nvd", "all", list(stacks.default("nvd").frameworks)), ("nvd", "mbridge", ["mbridge"]),
    ("amd", "mbridge", ["prim"]),  # Megatron-Bridge is NVIDIA's only: AMD's own framework runs instead
])
def test_frameworks_map_onto_the_platform(platform, requested, resolved):
    env = {"TPRIMAT_DETECTED_PLATFORM": platform, "TPRIMAT_DETECTED_GPUS": "0" if platform == "cpu" else "8"}
    config = load_config({**env, "FRAMEWORK": requested})
    assert config.frameworks == resolved
    if requested != "all" and resolved != requested.split(","):
        assert config.notes, "a mapping must be said"


def test_tp_that_does_not_divide_heads_names_model_and_valid_values():
    problems = problems_of({**GPU_NODE, "TP": "8", "DP": "1", "MODELS": "qwen"})
    assert "TP=8: Qwen 2.5 7B has 28 attention heads and 4 KV heads; valid TP for qwen: 1, 2, 4" in problems


def test_pp_must_divide_layers():
    problems = problems_of({**GPU_NODE, "PP": "3", "MODELS": "llama", "DP": "8"})
    assert any(p.startswith("PP=3: Llama 3.1 8B has 32 layers; valid PP for llama: 1, 2, 4, 8, 16, 32")
               for p in problems)


def test_layout_must_cover_every_gpu():
    problems = problems_of({**GPU_NODE, "DP": "4"})
    assert any("TP x PP x DP = 1 x 1 x 4 = 4" in p and "= 8" in p for p in problems)


def test_gpus_per_node_must_match_detected_gpus():
    problems = problems_of({"TPRIMAT_DETECTED_PLATFORM": "nvd", "TPRIMAT_DETECTED_GPUS": "4"})
    assert any(p.startswith("GPUS_PER_NODE=8: this node has 4 GPUs") for p in problems)


def test_every_problem_is_reported_at_once():
    problems = problems_of({**GPU_NODE, "SEED": "x", "MBS": "0", "PRECISION": "fp16", "MIN_LR": "1",
                            "WARMUP_STEPS": "900", "WARMUP_SKIP": "500", "SL": "200000", "MODELS": "llama,gpt"})
    starts = [p.split(":")[0] for p in problems]
    for expected in ("SEED=x", "MBS=0", "PRECISION=fp16", "MODELS=llama,gpt"):
        assert expected in starts
    typed_again = problems_of({**GPU_NODE, "MIN_LR": "1", "WARMUP_STEPS": "900", "WARMUP_SKIP": "500",
                               "SL": "200000"})
    for expected in ("MIN_LR=1", "WARMUP_STEPS=900", "WARMUP_SKIP=500", "SL=200000"):
        assert any(p.startswith(expected) for p in typed_again), expected


def test_fp8_is_refused_on_the_cpu():
    problems = problems_of({**CPU_MACHINE, "PRECISION": "fp8"})
    assert "PRECISION=fp8: not supported on cpu; valid: fp32, bf16" in problems


def test_fp32_is_refused_on_gpus():
    assert "PRECISION=fp32: not supported on nvd; valid: bf16, fp8, mxfp8, mxfp4, nvfp4" in problems_of({**GPU_NODE, "PRECISION": "fp32"})


# /proc/cpuinfo lines of an AVX2-only EPYC (no bf16 instructions) and of a Sapphire Rapids Xeon (AMX).
AVX2_ONLY = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma bmi2\n"
WITH_AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ARM_BF16 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


@pytest.mark.parametrize("cpuinfo, precision", [(AVX2_ONLY, "fp32"), (WITH_AMX, "bf16"), (ARM_BF16, "bf16")],
                         ids=["avx2-only", "amx", "arm-bf16"])
def test_the_cpu_trains_in_its_fastest_correct_precision(tmp_path, cpuinfo, precision):
    (tmp_path / "cpuinfo").write_text(cpuinfo)
    config = load_config({**CPU_MACHINE, "TPRIMAT_CPUINFO": str(tmp_path / "cpuinfo")})
    assert config["PRECISION"] == precision
    assert config.sources["PRECISION"].startswith("config.env (CPU profile): auto, this CPU has")


def test_bf16_can_still_be_asked_for_on_a_cpu_without_bf16_instructions(tmp_path):
    (tmp_path / "cpuinfo").write_text(AVX2_ONLY)
    config = load_config({**CPU_MACHINE, "TPRIMAT_CPUINFO": str(tmp_path / "cpuinfo"), "PRECISION": "bf16"})
    assert config["PRECISION"] == "bf16" and config.sources["PRECISION"] == "environment"


def test_auto_precision_is_bf16_on_gpus():
    assert load_config({**GPU_NODE, "PRECISION": "auto"})["PRECISION"] == "bf16"


def test_unknown_variable_in_config_file_is_reported_with_a_suggestion(tmp_path):
    typo = tmp_path / "config.env"
    typo.write_text(CONFIG_FILE.read_text() + "TRAIN_ITER=10   # typo\n")
    assert "config.env: unknown variable TRAIN_ITER; did you mean TRAIN_ITERS?" in problems_of(GPU_NODE, typo)


def test_the_fairness_profile_is_one_of_the_named_ones():
    assert load_config({**GPU_NODE, "FAIRNESS": "tuned"})["FAIRNESS"] == "tuned"
    assert problems_of({**GPU_NODE, "FAIRNESS": "fast"}) == ["FAIRNESS=fast: not one of spec, tuned"]


def test_cli_exits_2_with_one_line_per_problem_and_no_traceback():
    run = subprocess.run([sys.executable, "-m", "utils.config", "check"], cwd=ROOT, capture_output=True,
                         text=True, env={**CPU_MACHINE, "PATH": "/usr/bin:/bin", "TP": "x", "LR": "-1"})
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("config error:")]
    assert len(lines) == 2


def test_check_prints_effective_configuration_with_secret_masked():
    run = subprocess.run([sys.executable, "-m", "utils.config", "check"], cwd=ROOT, capture_output=True,
                         text=True, env={**CPU_MACHINE, "PATH": "/usr/bin:/bin", "HF_TOKEN": "hf_hiddenvalue"})
    assert run.returncode == 0, run.stderr
    assert "hf_hiddenvalue" not in run.stdout + run.stderr
    assert "(set, hidden)" in run.stdout
    assert "TRAIN_ITERS" in run.stdout


def test_json_dump_is_complete_for_run_records():
    run = subprocess.run([sys.executable, "-m", "utils.config", "json"], cwd=ROOT, capture_output=True,
                         text=True, env={**CPU_MACHINE, "PATH": "/usr/bin:/bin"})
    dumped = json.loads(run.stdout)
    assert dumped["GBS"] == 4 and dumped["LAYOUTS"]["custom"]["llama"] == {"tp": 1, "pp": 1, "dp": 2, "ga": 1, "ep": 1}


def test_the_warm_up_must_leave_steps_for_the_decay():
    problems = problems_of({**CPU_MACHINE, "TRAIN_ITERS": "4", "WARMUP_STEPS": "4", "WARMUP_SKIP": "1"})
    assert problems == ["WARMUP_STEPS=4: must be < TRAIN_ITERS=4"]


# --- Mistakes a careless user types: each is one line naming the variable, value, rule and fix -------------

INT_RULE = "must be an integer from {} to {} (digits 0-9 only)"


@pytest.mark.parametrize("knob, value, line", [
    ("SEED", "-1", "SEED=-1: " + INT_RULE.format(0, 4294967295) + ", the seeds numpy and torch accept"),
    ("SEED", "99999999999999999999",
     "SEED=99999999999999999999: " + INT_RULE.format(0, 4294967295) + ", the seeds numpy and torch accept"),
    ("TRAIN_ITERS", "３００", "TRAIN_ITERS=３００: " + INT_RULE.format(1, 2147483647)),
    ("TRAIN_ITERS", "1_000", "TRAIN_ITERS=1_000: " + INT_RULE.format(1, 2147483647)),
    ("TRAIN_ITERS", "1e3", "TRAIN_ITERS=1e3: " + INT_RULE.format(1, 2147483647)),
    ("TRAIN_ITERS", "+3", "TRAIN_ITERS=+3: " + INT_RULE.format(1, 2147483647)),
    ("MBS", "99999999999999999999", "MBS=99999999999999999999: " + INT_RULE.format(1, 2147483647)),
    ("NODE_RANK", "-1", "NODE_RANK=-1: " + INT_RULE.format(0, 2147483647)),
    ("MASTER_PORT", "70000", "MASTER_PORT=70000: " + INT_RULE.format(1, 65535)),
    ("LR", "３e-4", "LR=３e-4: must be a number in (0, 1], in digits 0-9 (e.g. 3e-4)"),
    ("LR", "3e4", "LR=3e4: must be a number in (0, 1], in digits 0-9 (e.g. 3e-4)"),
    ("LR", "1_0e-4", "LR=1_0e-4: must be a number in (0, 1], in digits 0-9 (e.g. 3e-4)"),
    ("LR", "nan", "LR=nan: must be a number in (0, 1], in digits 0-9 (e.g. 3e-4)"),
    ("LR", "0", "LR=0: must be a number in (0, 1], in digits 0-9 (e.g. 3e-4)"),
    ("GRAD_CLIP", "inf", "GRAD_CLIP=inf: must be a number >= 0, in digits 0-9 (e.g. 3e-4)"),
    ("WEIGHT_DECAY", "1e999", "WEIGHT_DECAY=1e999: must be a number in [0, 1], in digits 0-9 (e.g. 3e-4)"),
    ("WEIGHT_DECAY", "1e3", "WEIGHT_DECAY=1e3: must be a number in [0, 1], in digits 0-9 (e.g. 3e-4)"),
    ("SLURM_ACCOUNT", "my lab", "SLURM_ACCOUNT=my lab: must be printable ASCII without spaces (empty: the default)"),
    ("NET_IB_HCA", "mlx5_0, mlx5_1",
     "NET_IB_HCA=mlx5_0, mlx5_1: must be printable ASCII without spaces (empty: the default)"),
    ("BETA2", "1", "BETA2=1: must be a number in [0, 1), in digits 0-9 (e.g. 3e-4)"),
    ("MODELS", "llama,,qwen", "MODELS=llama,,qwen: an empty item; valid: "
     "a comma list of llama, qwen, llama70b, mistral, llama32, qwen3moe, gptoss, each once"),
    ("MODELS", "llama,llama", "MODELS=llama,llama: llama twice; valid: "
     "a comma list of llama, qwen, llama70b, mistral, llama32, qwen3moe, gptoss, each once"),
    ("MODELS", "LLAMA", "MODELS=LLAMA: unknown LLAMA; valid: "
     "a comma list of llama, qwen, llama70b, mistral, llama32, qwen3moe, gptoss, each once"),
    ("FRAMEWORK", "mega,,nemo",
     "FRAMEWORK=mega,,nemo: an empty item; valid: a comma list of mega, prim, nemo, mbridge, fsdp, autotp, torchtitan, all, "
     "each once"),
    ("STRATEGY", "balanced,balanced", "STRATEGY=balanced,balanced: balanced twice; valid: a comma list of all, "
     "minimal_communication, balanced, truly_identical, memory_optimized, maximum_performance, custom, each once"),
    ("STRATEGY", "all,balanced",
     "STRATEGY=all,balanced: all already names every strategy; write all alone or list names"),
    ("STACK", "nemo-24.12", f"STACK=nemo-24.12: unknown nemo-24.12; valid: a comma list of {', '.join(stacks.NAMES)}, "
     "each once"),
    ("STACK", "nemo-26.08,nemo-25.04", "STACK=nemo-26.08,nemo-25.04: nemo-26.08 and nemo-25.04 are both nvd "
     f"stacks; name one per platform (valid nvd stacks: {', '.join(row.name for row in stacks.of('nvd'))})"),
    ("MASTER_ADDR", "", "MASTER_ADDR=: must be an IP address or host name of node 0 (ASCII letters, digits, . - : _)"),
    ("MASTER_ADDR", "１２７.0.0.1",
     "MASTER_ADDR=１２７.0.0.1: must be an IP address or host name of node 0 (ASCII letters, digits, . - : _)"),
    ("MASTER_ADDR", "node 0",
     "MASTER_ADDR=node 0: must be an IP address or host name of node 0 (ASCII letters, digits, . - : _)"),
    ("NET_IB_GID_INDEX", "³", "NET_IB_GID_INDEX=³: must be empty or an integer (digits 0-9 only)"),
    ("DATA_DIR", "", "DATA_DIR=: must name a directory (relative = the repository root)"),
    ("OUTPUT_DIR", "$TPRIMAT_NOT_SET/runs", "OUTPUT_DIR=$TPRIMAT_NOT_SET/runs: $TPRIMAT_NOT_SET is not set "
     "in the environment; set it or write the path out"),
])
def test_a_careless_value_is_one_line_naming_the_rule(knob, value, line):
    assert problems_of({**GPU_NODE, knob: value}) == [line]


@pytest.mark.parametrize("knob, value, typed", [
    ("TRAIN_ITERS", " 300 ", 300), ("TRAIN_ITERS", "0300", 300), ("SEED", "4294967295", 4294967295),
    ("SEED", "0", 0), ("LR", "1", 1.0), ("LR", ".5e-3", 5e-4), ("DRY_RUN", "YES", True), ("DRY_RUN", "off", False),
    ("MODELS", " qwen , llama ", ["qwen", "llama"]), ("FRAMEWORK", "all,mega", ["all", "mega"]),
])
def test_harmless_spellings_are_accepted(knob, value, typed):
    assert load_config({**GPU_NODE, knob: value})[knob] == typed


@pytest.mark.parametrize("knob", ["OUTPUT_DIR", "DATA_DIR", "HF_HOME"])
def test_a_directory_knob_naming_a_file_is_one_line(tmp_path, knob):
    regular = tmp_path / "results.txt"
    regular.write_text("")
    assert problems_of({**GPU_NODE, knob: str(regular)}) == [
        f"{knob}={regular}: {regular} is a file, not a directory; point {knob} at a directory"]
    assert problems_of({**GPU_NODE, knob: f"{regular}/runs"}) == [
        f"{knob}={regular}/runs: {regular} is a file, not a directory; point {knob} at a directory"]


def config_variant(tmp_path: Path, edit) -> Path:
    """config.env with one edit applied to its bytes."""
    path = tmp_path / "config.env"
    path.write_bytes(edit(CONFIG_FILE.read_bytes()))
    return path


LINES = len(CONFIG_FILE.read_bytes().splitlines())


def line_of(key: str) -> int:
    return next(n for n, line in enumerate(CONFIG_FILE.read_text().splitlines(), 1) if line.startswith(key + "="))


@pytest.mark.parametrize("edit, expected", [
    (lambda b: b + b"# caf\xe9\n",
     [f"config.env:{LINES + 1}: byte 0xe9 at column 6 is not UTF-8; save config.env as UTF-8"]),
    (lambda b: b + b"SEED=7   # again\n",
     [f"config.env:{LINES + 1}: SEED is set twice (lines {line_of('SEED')} and {LINES + 1}); keep one"]),
    (lambda b: b.replace(b"SLURM_ACCOUNT=  ", b'SLURM_ACCOUNT="a'),
     [f'config.env:{line_of("SLURM_ACCOUNT")}: the quote " of SLURM_ACCOUNT is not closed']),
    (lambda b: b.replace(b"SLURM_ACCOUNT=  ", b'SLURM_ACCOUNT="a" b'),
     [f"config.env:{line_of('SLURM_ACCOUNT')}: text after the closing quote of SLURM_ACCOUNT; "
      "put comments after ' #'"]),
    (lambda b: b + b"seed=7\n", ["config.env: unknown variable seed; did you mean SEED?"]),
    (lambda b: b"", ["{path}: empty; restore it from the repository (git checkout config.env)"]),
])
def test_a_damaged_config_file_is_one_line_per_problem(tmp_path, edit, expected):
    path = config_variant(tmp_path, edit)
    assert problems_of(GPU_NODE, path) == [line.format(path=path) for line in expected]


def test_a_config_file_saved_with_a_byte_order_mark_is_read(tmp_path):
    assert load_config(GPU_NODE, config_variant(tmp_path, lambda b: b"\xef\xbb\xbf" + b))["SEED"] == 42


@pytest.mark.parametrize("make, why", [
    (lambda p: p, "cannot read it (Is a directory)"),
    (lambda p: p / "missing.env", "not found"),
])
def test_a_config_file_that_cannot_be_read_is_one_line(tmp_path, make, why):
    path = make(tmp_path)
    assert problems_of(GPU_NODE, path) == [f"{path}: {why}; restore it from the repository (git checkout config.env)"]


@pytest.mark.parametrize("name, warning", [
    ("TRAIN_ITER", "environment: TRAIN_ITER is not a knob and is ignored; did you mean TRAIN_ITERS?"),
    ("train_iters", "environment: train_iters is not a knob and is ignored; did you mean TRAIN_ITERS?"),
    ("Seed", "environment: Seed is not a knob and is ignored; did you mean SEED?"),
    ("DRYRUN", "environment: DRYRUN is not a knob and is ignored; did you mean DRY_RUN?"),
    ("GRAD_CLIPS", "environment: GRAD_CLIPS is not a knob and is ignored; did you mean GRAD_CLIP?"),
    ("CPU_SEED", "environment: CPU_SEED is ignored: config.env has no CPU_SEED line; set SEED (it wins on every "
                 "platform)"),
])
def test_an_environment_variable_that_looks_like_a_knob_is_warned_about(name, warning):
    assert load_config({**GPU_NODE, name: "3"}).warnings == [warning]


ORDINARY = ("PATH HOME USER SHELL TERM LANG LC_ALL PWD OLDPWD HOSTNAME LOGNAME TMPDIR EDITOR DISPLAY SSH_CONNECTION "
            "XDG_RUNTIME_DIR CUDA_VISIBLE_DEVICES HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES OMP_NUM_THREADS PYTHONPATH "
            "VIRTUAL_ENV CONDA_PREFIX NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_IB_GID_INDEX NCCL_DEBUG GLOO_SOCKET_IFNAME "
            "SLURM_JOB_PARTITION SLURM_JOB_ACCOUNT SLURM_JOB_QOS SLURM_NNODES SLURM_JOB_ID SLURM_NODEID SLURM_PROCID "
            "SLURM_TIMELIMIT WORLD_SIZE RANK LOCAL_RANK GROUP_RANK LOCAL_WORLD_SIZE HF_HUB_OFFLINE HF_DATASETS_CACHE "
            "TRANSFORMERS_CACHE RUN_SET_DIR TPRIMAT_DETECTED_GPUS TPRIMAT_PYTHON")


def test_an_ordinary_environment_and_the_projects_own_exports_give_no_warning():
    from utils.config import shell_exports
    exported = {line.split()[1].split("=")[0] for line in shell_exports(load_config(GPU_NODE))}
    names = set(ORDINARY.split()) | exported | set(__import__("os").environ)
    assert load_config({**{name: "1" for name in names if name not in KNOBS}, **GPU_NODE}).warnings == []


def test_the_cli_prints_warnings_unless_quiet():
    env = {**CPU_MACHINE, "PATH": "/usr/bin:/bin", "TRAIN_ITER": "3"}
    loud = subprocess.run([sys.executable, "-m", "utils.config", "get", "SEED"], cwd=ROOT, capture_output=True,
                          text=True, env=env)
    assert loud.returncode == 0 and loud.stderr == ("warning: environment: TRAIN_ITER is not a knob and is "
                                                    "ignored; did you mean TRAIN_ITERS?\n")
    quiet = subprocess.run([sys.executable, "-m", "utils.config", "get", "SEED", "--quiet"], cwd=ROOT,
                           capture_output=True, text=True, env=env)
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_the_cpu_profile_is_checked_on_gpu_nodes_too(tmp_path):
    """A slip in a CPU_ line must not wait for the first CPU run to show."""
    path = config_variant(tmp_path, lambda b: b.replace(b"CPU_TRAIN_ITERS=30 ", b"CPU_TRAIN_ITERS=3O "))
    assert problems_of(GPU_NODE, path) == ["CPU_TRAIN_ITERS=3O: " + INT_RULE.format(1, 2147483647)]



def test_machine_knobs_are_typed_and_an_empty_price_is_none():
    config = load_config({**GPU_NODE, "PRICE_PER_GPU_HOUR_AMD": "2.5", "TARGET_DEVICE": "mi300x",
                          "PROJECT_TOKENS": "1e12", "TELEMETRY_INTERVAL_MS": "250"})
    assert (config["PRICE_PER_GPU_HOUR_AMD"], config["PRICE_PER_GPU_HOUR_NVD"]) == (2.5, None)
    assert (config["TARGET_DEVICE"], config["PROJECT_TOKENS"], config["TELEMETRY_INTERVAL_MS"]) == ("mi300x", 1e12, 250)
    assert (config["TELEMETRY"], config["HEALTH"], config["SKIP_WONT_FIT"]) == (True, "warn", False)


@pytest.mark.parametrize("knob, value, rule", [
    ("TELEMETRY_INTERVAL_MS", "0", "from 100 to 60000"),
    ("TELEMETRY_INTERVAL_MS", "", "from 100 to 60000"),
    ("PRICE_PER_GPU_HOUR_NVD", "two dollars", "empty or a number > 0"),
    ("PROJECT_TOKENS", "0", "empty or a number"),
    ("TARGET_DEVICE", "tpu", "not one of (empty), h100, h200, b200, mi300x, mi325x, mi355x"),
    ("HEALTH", "maybe", "not one of warn, strict, off"),
])
def test_machine_knobs_refuse_bad_values_in_one_line(knob, value, rule):
    [problem] = problems_of({**GPU_NODE, knob: value})
    assert problem.startswith(f"{knob}={value}: ") and rule in problem


def test_validation_knobs_and_the_target_that_needs_an_evaluation():
    config = load_config({**CPU_MACHINE, "EVAL_INTERVAL": "10", "TARGET_LOSS": "7.5"})
    assert (config["EVAL_INTERVAL"], config["EVAL_TOKENS"], config["VALIDATION_PERCENT"], config["TARGET_LOSS"]) == \
        (10, 2048, 5, 7.5)  # CPU_EVAL_TOKENS: 4 global batches of 4 x 128 tokens
    assert load_config(GPU_NODE)["EVAL_INTERVAL"] == 0 and load_config(GPU_NODE)["TARGET_LOSS"] is None
    assert problems_of({**GPU_NODE, "TARGET_LOSS": "3.3"}) == [
        "TARGET_LOSS=3.3: needs EVAL_INTERVAL > 0 (the target is a validation loss); set EVAL_INTERVAL or leave "
        "TARGET_LOSS empty"]
    assert [line.split(":")[0] for line in problems_of({**GPU_NODE, "EVAL_INTERVAL": "5", "VALIDATION_PERCENT": "60",
                                                        "TARGET_LOSS": "0", "EVAL_TOKENS": "0"})] == \
        ["EVAL_TOKENS=0", "VALIDATION_PERCENT=60", "TARGET_LOSS=0"]
