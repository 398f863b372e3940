"""train/train_mbridge.py's configs built by Megatron-Bridge 0.6.2 itself, without a GPU and without training.

requirements/mbridge.txt is installed without dependencies into a Python 3.12 environment (tests/fixtures/envs.py;
Megatron-Bridge needs 3.12), then tests/fixtures/train/mbridge_build_probe.py calls build_config there for each
model and precision as a run does. Every attribute TPrimat sets must exist on the recipe's ConfigContainer and keep
its value; the mixed-precision preset, attention backend, pipeline dtype and data blend must be built as asked.
Transformer Engine cannot be installed here: the probe answers Megatron-Bridge's one unguarded import of it with an
inert stand-in, and the first test holds that to exactly that import.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures import envs
from tests.fixtures.train.data_dir import DATASET, make_data_dir
from tests.fixtures.train_matrix.requests import run_request
from train.mbridge.launch import write_model_dir
from train.mbridge.recipe import recipe_settings

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements" / "mbridge.txt"
PROBE = ROOT / "tests" / "fixtures" / "train" / "mbridge_build_probe.py"
PYENV_312 = Path("/root/.pyenv/versions/3.12.1/bin/python3.12")


def python_312() -> str | None:
    """A Python 3.12 that runs: pyenv's 3.12.1, else python3.12 on PATH (a pyenv shim may name none)."""
    candidates = [str(PYENV_312), shutil.which("python3.12")]
    if shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "which", "python3.12"], capture_output=True, text=True,
                             env={**os.environ, "PYENV_VERSION": "3.12.1"})
        candidates.insert(0, out.stdout.strip() if out.returncode == 0 else None)
    for python in filter(None, candidates):
        if subprocess.run([python, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"],
                          capture_output=True).returncode == 0:
            return python
    return None


CASES = {
    "llama-bf16": ("llama", {}),
    "qwen-bf16": ("qwen", {}),
    "llama70b-bf16-proxy": ("llama70b", {"MODEL_LAYERS": "4"}),
    "llama32-bf16": ("llama32", {}),
    "llama-fp8-balanced-tuned": ("llama", {"PRECISION": "fp8", "STRATEGY": "balanced", "FAIRNESS": "tuned",
                                           "EVAL_INTERVAL": "50", "VALIDATION_PERCENT": "10"}),
    "qwen-fp8-pp2": ("qwen", {"PRECISION": "fp8", "STRATEGY": "balanced"}),
    # each other recipe's preset, with TPrimat's switch over it (utils.spec.precision)
    "llama-fp8-tensorwise": ("llama", {"PRECISION": "fp8", "FP8_RECIPE": "tensorwise"}),
    "llama-fp8-blockwise": ("llama", {"PRECISION": "fp8", "FP8_RECIPE": "blockwise"}),
    "llama-mxfp8": ("llama", {"PRECISION": "mxfp8"}),
    "llama-nvfp4": ("llama", {"PRECISION": "nvfp4"}),
    "llama-tiny-mock-profiled": ("llama", {"MODEL_SIZE": "tiny", "MOCK_DATA": "1", "PROFILING": "1",
                                           "TRAIN_ITERS": "20", "WARMUP_STEPS": "2", "WARMUP_SKIP": "2"}),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[dict, dict]:
    """(settings per case, the probe's answer) for every case, built in one Megatron-Bridge process."""
    python = python_312()
    if python is None:
        pytest.skip("no Python 3.12 on this machine (Megatron-Bridge 0.6 needs it): install one, e.g. pyenv 3.12.1")
    interpreter = envs.virtualenv("mbridge", envs.requirement_lines(REQUIREMENTS), python=python, no_deps=True)
    data_dir = make_data_dir(tmp_path_factory.mktemp("data"), model_keys=("llama", "qwen"), documents=20)
    run_root = tmp_path_factory.mktemp("runs")
    settings = {}
    for name, (model, env) in CASES.items():
        req = run_request("nvd", "mbridge", model, FRAMEWORK="mbridge", MODELS=model, DATA_DIR=str(data_dir),
                          DATASET=DATASET, **env)
        settings[name] = recipe_settings(req, str(run_root / name))
        write_model_dir(req, settings[name])
    cases = run_root / "cases.json"
    cases.write_text(json.dumps([{"name": name, "settings": s} for name, s in settings.items()]))
    out = subprocess.run([str(interpreter), str(PROBE), str(cases)], capture_output=True, text=True, timeout=900,
                         cwd=run_root, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                            "MEGATRON_CONFIG_LOCK_DIR": str(run_root)})
    assert out.returncode == 0, out.stderr[-3000:]
    return settings, json.loads(out.stdout.splitlines()[-1])


def test_the_environment_holds_megatron_bridge_0_6_and_only_its_unguarded_transformer_engine_import_is_stood_in(built):
    versions, stand_ins = built[1]["versions"], built[1]["stand_ins"]
    assert versions["megatron-bridge"] == envs.pinned(REQUIREMENTS, "megatron-bridge") == "0.6.2"
    assert versions["megatron-core"] == envs.pinned(REQUIREMENTS, "megatron-core")
    assert stand_ins == ["transformer_engine", "transformer_engine.pytorch"]


@pytest.mark.parametrize("case", CASES)
def test_every_setting_exists_on_the_recipes_config_container_and_keeps_its_value(built, case):
    report = built[1]["cases"][case]
    assert report["errors"] == {}
    assert report["missing"] == []
    assert report["set_mismatch"] == {}
    assert report["built"]["config"] == "ConfigContainer"


@pytest.mark.parametrize("case", CASES)
def test_precision_attention_backend_and_pipeline_dtype_are_built_as_set(built, case):
    settings, report = built[0][case], built[1]["cases"][case]["built"]
    assert report["mixed_precision"] == settings["mixed_precision"]["set"]
    assert report["attention_backend"] == settings["attention_backend"]
    assert report["pipeline_dtype"] == ("torch.bfloat16" if settings["pipeline_dtype"] else None)
    precision = CASES[case][1].get("PRECISION", "bf16")  # the read-back names it as PRECISION does
    assert (report["effective"]["precision"], report["mixed_precision"].get("fp8"), report["mixed_precision"].get("fp4")) \
        == (precision, "hybrid" if "fp8" in precision else None, "e2m1" if precision == "nvfp4" else None)


@pytest.mark.parametrize("case", [name for name in CASES if "mock" not in name])
def test_real_data_is_the_prepared_prefix_as_the_datasets_blend(built, case):
    settings, report = built[0][case], built[1]["cases"][case]["built"]
    assert report["blend"] == [settings["set"]["dataset.data_path"], None]
    assert report["effective"]["mock_data"] is False


def test_mock_data_leaves_the_dataset_without_a_blend(built):
    report = built[1]["cases"]["llama-tiny-mock-profiled"]["built"]
    assert report["blend"] is None and report["effective"]["mock_data"] is True


def test_the_effective_settings_are_the_requests_layout_and_workload(built):
    settings, effective = built[0]["qwen-fp8-pp2"], built[1]["cases"]["qwen-fp8-pp2"]["built"]["effective"]
    wanted = settings["set"]
    assert (effective["tp"], effective["pp"], effective["gbs"], effective["mbs"], effective["seq_len"],
            effective["steps"], effective["num_layers"], effective["padded_vocab_size"]) == \
        (wanted["model.tensor_model_parallel_size"], wanted["model.pipeline_model_parallel_size"],
         wanted["train.global_batch_size"], wanted["train.micro_batch_size"], wanted["model.seq_length"],
         wanted["train.train_iters"], wanted["model.num_layers"], wanted["model.vocab_size"])
