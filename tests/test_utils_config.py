"""utils.config: the single loader and validator of config.env and the environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from utils.config import CONFIG_FILE, KNOBS, ROOT, ConfigError, load_config
from utils.envfile import parse_env_file

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


def test_gpu_defaults_are_the_fair_comparison_settings():
    config = load_config(GPU_NODE)
    expected = {"SEED": 42, "MBS": 1, "SL": 2048, "LR": 3e-4, "MIN_LR": 0.0, "WARMUP_STEPS": 50,
                "TRAIN_ITERS": 500, "WEIGHT_DECAY": 0.1, "BETA1": 0.9, "BETA2": 0.95, "TP": 1, "PP": 1,
                "DP": 8, "GA": 8, "PRECISION": "bf16", "MODEL_SIZE": "full", "PLATFORM": "nvd",
                "FAIRNESS": "spec"}
    assert {k: config[k] for k in expected} == expected
    assert config.gbs == 64 and config.num_gpus == 8
    assert config.frameworks == ["mega", "nemo"]
    assert [m.variant for m in config.models] == ["llama3.1-8b", "qwen2.5-7b"]


def test_cpu_scales_itself_down_without_edits():
    config = load_config(CPU_MACHINE)
    assert config.platform == "cpu" and config["MODEL_SIZE"] == "tiny"
    assert (config["DP"], config["GPUS_PER_NODE"], config["SL"], config["DATASET"]) == (2, 2, 128, "sample")
    assert config["TRAIN_ITERS"] < 100
    assert config.frameworks == ["mega"]
    assert config.sources["SL"] == "config.env (CPU profile)"


def test_environment_overrides_file_and_cpu_profile():
    config = load_config({**CPU_MACHINE, "TRAIN_ITERS": "12", "FRAMEWORK": "mega"})
    assert config["TRAIN_ITERS"] == 12 and config.sources["TRAIN_ITERS"] == "environment"


@pytest.mark.parametrize("platform, requested, resolved", [
    ("nvd", "prim", ["nemo"]), ("amd", "nemo", ["prim"]), ("amd", "all", ["mega", "prim"]),
    ("nvd", "mega,prim,nemo", ["mega", "nemo"]), ("cpu", "all", ["mega"]), ("cpu", "nemo", ["mega"]),
])
def test_frameworks_map_onto_the_platform(platform, requested, resolved):
    env = {"TPRIMAT_DETECTED_PLATFORM": platform, "TPRIMAT_DETECTED_GPUS": "0" if platform == "cpu" else "8"}
    config = load_config({**env, "FRAMEWORK": requested})
    assert config.frameworks == resolved
    if requested not in ("all", "mega"):
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
    assert "PRECISION=fp32: not supported on nvd; valid: bf16, fp8" in problems_of({**GPU_NODE, "PRECISION": "fp32"})


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
    assert dumped["GBS"] == 4 and dumped["LAYOUTS"]["custom"]["llama"] == {"tp": 1, "pp": 1, "dp": 2, "ga": 1}


def test_the_warm_up_must_leave_steps_for_the_decay():
    problems = problems_of({**CPU_MACHINE, "TRAIN_ITERS": "4", "WARMUP_STEPS": "4", "WARMUP_SKIP": "1"})
    assert problems == ["WARMUP_STEPS=4: must be < TRAIN_ITERS=4"]
