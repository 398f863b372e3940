"""train/train_nemo.py's recipes built by NeMo 2.3.0 itself, the version nvcr.io/nvidia/nemo:25.04 carries.

requirements/nemo.txt is installed into its own environment (NeMo pins numpy<2 and an older transformers than
.venv's; tests.fixtures.envs builds it once per machine, with .venv's Python 3.12 as in the image), then tests/fixtures/train/nemo_build_probe.py calls build_recipe
there as a run does and builds the trainer, model, optimizer, logger and data module from the recipe (no
training). Every attribute TPrimat sets must exist on NeMo's recipe and keep its value once built.

This machine has no GPU: the trainer is built with accelerator="cpu", and the model without RoPE fusion,
which megatron-core refuses without Transformer Engine or Apex (the image has both); the probe says so.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fixtures import envs
from tests.fixtures.train.data_dir import DATASET, make_data_dir
from tests.fixtures.train_matrix.requests import run_request
from train.nemo.recipe import recipe_settings

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements" / "nemo.txt"
PROBE = ROOT / "tests" / "fixtures" / "train" / "nemo_build_probe.py"


NEMO_VERSION = envs.pinned(REQUIREMENTS, "nemo-toolkit")


@pytest.fixture(scope="session")
def nemo_python() -> Path:
    """The NeMo environment's interpreter, built from requirements/nemo.txt on first use (minutes, once per machine)."""
    return envs.virtualenv(f"nemo-{NEMO_VERSION}", envs.requirement_lines(REQUIREMENTS))


CASES = {
    "llama-bf16": ("llama", {}),
    "qwen-bf16": ("qwen", {}),
    "llama-fp8-balanced-tuned": ("llama", {"PRECISION": "fp8", "STRATEGY": "balanced", "FAIRNESS": "tuned",
                                           "EVAL_INTERVAL": "50", "TARGET_LOSS": "3.3"}),
    "qwen-fp8-pp2": ("qwen", {"PRECISION": "fp8", "STRATEGY": "balanced"}),
    # NeMo 2.3's other plugins, with TPrimat's switch over them (utils.spec.precision)
    "llama-fp8-tensorwise": ("llama", {"PRECISION": "fp8", "FP8_RECIPE": "tensorwise"}),
    "llama-mxfp8": ("llama", {"PRECISION": "mxfp8"}),
    "llama-tiny-mock-profiled": ("llama", {"MODEL_SIZE": "tiny", "MOCK_DATA": "1", "PROFILING": "1",
                                           "TRAIN_ITERS": "20", "WARMUP_STEPS": "2", "WARMUP_SKIP": "2"}),
}


@pytest.fixture(scope="module")
def built(nemo_python, tmp_path_factory) -> tuple[dict, dict]:
    """(settings per case, the probe's answer) for every case, built in one NeMo process."""
    data_dir = make_data_dir(tmp_path_factory.mktemp("data"), documents=20)
    for config in data_dir.glob("tokenizers/*/tokenizer_config.json"):  # named like a real tokenizer's
        config.write_text(json.dumps({**json.loads(config.read_text()), "tokenizer_class": "PreTrainedTokenizerFast"}))
    run_dir = tmp_path_factory.mktemp("run")
    settings = {name: recipe_settings(run_request("nvd", "nemo", model, DATA_DIR=str(data_dir), DATASET=DATASET, **env),
                                      str(run_dir))
                for name, (model, env) in CASES.items()}
    cases = tmp_path_factory.mktemp("cases") / "cases.json"
    cases.write_text(json.dumps([{"name": name, "settings": s} for name, s in settings.items()]))
    out = subprocess.run([str(nemo_python), str(PROBE), str(cases)], capture_output=True, text=True, timeout=600,
                         cwd=run_dir)
    assert out.returncode == 0, out.stderr[-3000:]
    return settings, json.loads(out.stdout.splitlines()[-1])


def test_the_environment_holds_the_nemo_and_megatron_core_of_nemo_25_04(built):
    versions = built[1]["versions"]
    assert versions["nemo"] == NEMO_VERSION == "2.3.0"
    assert versions["megatron_core"] == envs.pinned(REQUIREMENTS, "megatron-core")
    assert versions["megatron_core"].startswith("0.12.")


@pytest.mark.parametrize("case", CASES)
def test_every_setting_exists_on_nemos_recipe_and_keeps_its_value_once_built(built, case):
    report = built[1]["cases"][case]
    assert {part: error for part, error in report["errors"].items() if part != "data"} == {}
    assert report["config_mismatch"] == {}
    assert report["built_mismatch"] == {}
    assert {"trainer", "optim", "log", "model"} <= set(report["built"])


@pytest.mark.parametrize("case", CASES)
def test_the_ddp_config_precision_plugin_and_attention_backend_are_built_as_set(built, case):
    settings, report = built[0][case], built[1]["cases"][case]["built"]
    assert report["ddp"] == settings["ddp"]
    assert report["plugin"] == settings["precision"]["set"]
    assert report["attention_backend"] == settings["attention_backend"]


@pytest.mark.parametrize("case", CASES)
def test_tprimats_callbacks_reach_the_trainer(built, case):
    callbacks = built[1]["cases"][case]["built"]["callbacks"]
    assert {"TimingCallback", "EffectiveSettings", "StepTimer"} <= set(callbacks)
    assert ("NsysCallback" in callbacks) == ("profiled" in case)


def assert_data_module(built, case: str, module: str) -> None:
    settings, report = built[0][case], built[1]["cases"][case]
    assert report["errors"].get("data") is None
    assert report["built"]["data"] == {"class": module, "seq_length": settings["data"]["seq_length"],
                                       "global_batch_size": settings["data"]["global_batch_size"],
                                       "micro_batch_size": settings["data"]["micro_batch_size"]}


@pytest.mark.parametrize("case", [name for name in CASES if "mock" not in name])
def test_real_data_goes_through_pretraining_data_module_with_the_local_tokenizer(built, case):
    assert_data_module(built, case, "PreTrainingDataModule")


def test_mock_data_builds_offline(built):
    assert_data_module(built, "llama-tiny-mock-profiled", "MockDataModule")



READBACK = """
import json
from types import SimpleNamespace
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallelConfig
from nemo.collections import llm
from nemo.lightning.pytorch.plugins import MegatronDataSampler
from train.nemo import readback as nemo_readback

for name in ("tensor_model_parallel", "pipeline_model_parallel", "context_parallel", "data_parallel"):
    setattr(parallel_state, f"get_{name}_world_size", lambda: 1)
nemo_readback.get_current_global_batch_size = lambda: 8
nemo_readback.get_micro_batch_size = lambda: 1
config = llm.Llama31Config8B(init_method_std=0.02, vocab_size=128256, apply_rope_fusion=False)  # no TE here
# PreTrainingDataModule's own attributes (it cannot be built here without downloading GPT-2's tokenizer)
data = SimpleNamespace(eod_mask_loss=False, data_sampler=MegatronDataSampler(seq_len=128, micro_batch_size=1,
                                                                             global_batch_size=8))
ddp = DistributedDataParallelConfig(check_for_nan_in_grad=False, average_in_collective=False)
trainer = SimpleNamespace(datamodule=data, max_steps=4, strategy=SimpleNamespace(ddp_config=ddp), is_global_zero=True)
module = SimpleNamespace(config=config, optim=SimpleNamespace(config=SimpleNamespace(use_distributed_optimizer=True)))
nemo_readback.EffectiveSettings().on_train_start(trainer, module)
"""


def test_the_effective_settings_nemo_prints_carry_the_workload_identity_and_the_profiles_ddp_settings(nemo_python, tmp_path):
    out = subprocess.run([str(nemo_python), "-c", READBACK], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(line for line in out.stdout.splitlines() if line.startswith("TPRIMAT_EFFECTIVE "))
    effective = json.loads(line.removeprefix("TPRIMAT_EFFECTIVE "))
    assert {key: effective[key] for key in ("init_method_std", "padded_vocab_size", "eod_mask_loss", "dataloader_type",
                                            "check_for_nan_in_grad", "average_in_collective")} == {
        "init_method_std": 0.02, "padded_vocab_size": 128256, "eod_mask_loss": False, "dataloader_type": "single",
        "check_for_nan_in_grad": False, "average_in_collective": False}
