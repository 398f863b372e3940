"""train/train_mbridge.py's configs built and finalized by Megatron-Bridge 0.6.2 itself, without a GPU and without
training.

requirements/mbridge.txt is installed without dependencies into a Python 3.12 environment (tests/fixtures/envs.py;
Megatron-Bridge needs 3.12), then tests/fixtures/train/mbridge_build_probe.py calls build_config there for every
model, precision and strategy TPrimat offers mbridge, as a run does, and finalizes each container as pretrain() does
before training (its runtime_config_update: the mixed-precision and communication-overlap setups, validate()), all
in one process. Every attribute TPrimat sets must exist on the recipe's ConfigContainer and keep its value through
finalization; the mixed-precision preset, attention backend, pipeline dtype and data blend must be built as asked;
the read-back the run writes must say what the finalized container holds. Transformer Engine cannot be installed
here: the probe answers Megatron-Bridge's one unguarded import of it with an inert stand-in, and the first test holds
that to exactly that import. The last test re-reads utils/upstream/table.py's Megatron-Bridge and megatron-core facts from
the installed packages.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.fixtures import envs
from tests.fixtures.train.data_dir import DATASET, make_data_dir
from tests.fixtures.train_matrix.requests import run_request
from train.mbridge import environment
from train.mbridge.launch import write_model_dir
from train.mbridge.recipe import TE_MOE_KERNELS, recipe_settings
from utils.datafiles import COMPILE_HELPERS_CALLERS
from utils.config import workload
from utils.frameworks import TABLE
from utils.machine import pyenvs
from utils.spec import stacks
from utils.spec.fairness import moe_settings, profile
from utils.spec.models import get_model
from utils.spec.strategies import BUILTIN, lookup

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = environment.REQUIREMENTS
PROBE = ROOT / "tests" / "fixtures" / "train" / "mbridge_build_probe.py"
MBRIDGE = TABLE["mbridge"]
GPU_PRECISIONS = workload.PRECISIONS["nvd"]  # fp32 is the CPU's (tests/test_train_mbridge_cpu.py trains there)
# Every precision mbridge offers on NVIDIA, FP8 under each of its recipes, as PRECISION and FP8_RECIPE name them
PRECISIONS = {**{p: {"PRECISION": p} for p in MBRIDGE.precisions if p != "fp8" and p in GPU_PRECISIONS},
              **{f"fp8-{r}": {"PRECISION": "fp8", "FP8_RECIPE": r} for r in MBRIDGE.fp8_recipes}}
# every model x precision x strategy with a layout for that model on NVIDIA, and the knobs that change what is
# built: the tuned profile with validation, a layer-cut proxy, a tiny model on mock data with profiling
CASES = {
    **{f"{model}-{precision}-{strategy}": (model, {**env, "STRATEGY": strategy})
       for model in MBRIDGE.model_names for precision, env in PRECISIONS.items() for strategy in sorted(BUILTIN)
       if (layout := lookup(BUILTIN, strategy, "nvd", model)) and not MBRIDGE.model_refusal(model, layout[0])},
    "llama-fp8-delayed-balanced-tuned": ("llama", {"PRECISION": "fp8", "STRATEGY": "balanced", "FAIRNESS": "tuned",
                                                   "EVAL_INTERVAL": "50", "VALIDATION_PERCENT": "10"}),
    "llama70b-bf16-proxy": ("llama70b", {"MODEL_LAYERS": "4"}),
    "llama-bf16-local-layers": ("llama", {"TRANSFORMER_IMPL": "local", "MODEL_LAYERS": "4"}),
    "llama-tiny-mock-profiled": ("llama", {"MODEL_SIZE": "tiny", "MOCK_DATA": "1", "PROFILING": "1",
                                           "TRAIN_ITERS": "20", "WARMUP_STEPS": "2", "WARMUP_SKIP": "2"}),
    # the MoE recipe: its experts over 8 ranks, the tiny model, and megatron-core's local layers
    "qwen3moe-bf16-ep8": ("qwen3moe", {"EP": "8"}),
    "qwen3moe-tiny-mock": ("qwen3moe", {"MODEL_SIZE": "tiny", "MOCK_DATA": "1"}),
    "qwen3moe-bf16-local-layers-ep2": ("qwen3moe", {"TRANSFORMER_IMPL": "local", "MODEL_LAYERS": "4", "EP": "2"}),
    # GPT-OSS's recipe: its experts over 8 ranks, and the tiny model
    "gptoss-bf16-ep8": ("gptoss", {"EP": "8"}),
    "gptoss-tiny-mock": ("gptoss", {"MODEL_SIZE": "tiny", "MOCK_DATA": "1"}),
}
MOE_CASES = [name for name, (model, _) in CASES.items() if get_model(model).moe is not None]
# The finalized MoE settings megatron-core's own defaults do not hold, beside moe_settings': the flex dispatcher's
# backend (cleared, as Megatron-Bridge's own fallback to alltoall clears it) and its SM counts, which the recipe sets
# and the alltoall dispatcher never reads
FLEX_ONLY = ("moe_flex_dispatcher_backend", "moe_flex_dispatcher_num_sms", "moe_hybridep_num_sms")


def underived(values: dict, case: str) -> dict:
    """The paths finalization does not derive from others: validate()'s GPTDatasetConfig.finalize makes data_path the
    blend (TPrimat sets None beside it), and on mock data megatron-core's dataset config takes an even split of its
    own (blended_megatron_dataset_config.py: mock data has no documents to hold out)."""
    derived = ("dataset.blend", "dataset.split") if "MOCK_DATA" in CASES[case][1] else ("dataset.blend",)
    return {path: value for path, value in values.items() if path not in derived}


def lacking(case: str) -> set[str]:
    """For the local layers, the settings of the fused kernels this stack lacks: train_mbridge.build_config turns
    each off (and says so), as every Megatron path does (local_kernels); none for Transformer Engine's layers."""
    if CASES[case][1].get("TRANSFORMER_IMPL") != "local":
        return set()
    from train.common import local_kernels

    return {f"model.{name}" for name, have in local_kernels.available().items() if not have}


def kept(mismatch: dict, case: str) -> dict:
    """What a case changed of TPrimat's settings, less the kernels it lacks, which read False."""
    return {path: held for path, held in mismatch.items() if not (path in lacking(case) and held == "False")}


@pytest.fixture(scope="module")
def interpreter() -> Path:
    """The Python of the Megatron-Bridge environment (requirements/mbridge.txt), built once per machine."""
    python = pyenvs.find_python(environment.PYTHON)
    if python is None:
        pytest.skip("no Python 3.12 on this machine (Megatron-Bridge 0.6 needs it): install one, e.g. pyenv 3.12.1")
    # the environment FRAMEWORK=mbridge trains in on the CPU (train/mbridge/environment.py)
    return envs.virtualenv(environment.NAME, environment.requirements(), python=python, no_deps=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory, interpreter) -> tuple[dict, dict]:
    """(settings per case, the probe's answer) for every case, built in one Megatron-Bridge process."""
    data_dir = make_data_dir(tmp_path_factory.mktemp("data"), model_keys=("llama", "qwen", "gptoss"), documents=20)
    run_root = tmp_path_factory.mktemp("runs")
    settings, world_sizes = {}, {}
    for name, (model, env) in CASES.items():
        req = run_request("nvd", "mbridge", model, FRAMEWORK="mbridge", MODELS=model, DATA_DIR=str(data_dir),
                          DATASET=DATASET, **env)
        settings[name] = recipe_settings(req, str(run_root / name))
        world_sizes[name] = req.parallelism.nnodes * req.parallelism.gpus_per_node
        write_model_dir(req, settings[name])
    cases = run_root / "cases.json"
    cases.write_text(json.dumps([{"name": name, "settings": s, "world_size": world_sizes[name]}
                                 for name, s in settings.items()]))
    out = subprocess.run([str(interpreter), str(PROBE), str(cases)], capture_output=True, text=True, timeout=900,
                         cwd=run_root, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                            "MEGATRON_CONFIG_LOCK_DIR": str(run_root)})
    assert out.returncode == 0, out.stderr[-3000:]
    return settings, json.loads(out.stdout.splitlines()[-1])


def test_the_environment_holds_megatron_bridge_0_6_and_only_named_transformer_engine_answers_are_stood_in(built):
    versions, stand_ins = built[1]["versions"], built[1]["stand_ins"]
    assert versions["megatron-bridge"] == envs.pinned(REQUIREMENTS, "megatron-bridge") == "0.6.2"
    assert versions["megatron-core"] == envs.pinned(REQUIREMENTS, "megatron-core")
    assert stand_ins == ["transformer_engine", "transformer_engine.pytorch"]
    assert built[1]["te_answers"] == ["megatron.core.utils._te_version",
                                      "megatron.core.models.common.embeddings.rope_utils.fused_apply_rotary_pos_emb",
                                      "megatron.bridge.training.comm_overlap.HAVE_TE",
                                      *(f"megatron.core.transformer.moe.moe_utils.{name}" for name in (
                                          "fused_permute", "fused_permute_with_probs", "fused_sort_chunks_by_index",
                                          "fused_sort_chunks_by_index_with_probs", "fused_unpermute"))]


def test_megatron_bridges_start_up_makes_the_dataset_helpers_the_wheel_ships_built_so_the_run_answers_it(built):
    """Megatron-Bridge 0.6.2 training/initialize.py:28,147 calls megatron-core's compile_helpers, which runs make in a
    folder the megatron-core wheel ships without a Makefile; train_mbridge answers it in both modules."""
    assert built[1]["compile_helpers"] == {"bridge_calls_cores": True, "makefile": False,
                                           "answered": list(COMPILE_HELPERS_CALLERS)}


@pytest.mark.parametrize("case", CASES)
def test_every_setting_exists_on_the_recipes_config_container_and_keeps_its_value(built, case):
    report = built[1]["cases"][case]
    assert "build" not in report["errors"]
    assert report["missing"] == []
    assert kept(report["set_mismatch"], case) == {}
    assert report["built"]["config"] == "ConfigContainer"


@pytest.mark.parametrize("case", CASES)
def test_every_case_finalizes_as_pretrain_finalizes_it_and_keeps_every_setting(built, case):
    """runtime_config_update (the mixed-precision and communication-overlap setups, validate()) raises nothing and
    overrides nothing TPrimat set."""
    report = built[1]["cases"][case]
    assert report["errors"] == {}
    assert kept(underived(report["finalized"]["set_mismatch"], case), case) == {}


@pytest.mark.parametrize("case", CASES)
def test_precision_attention_backend_and_pipeline_dtype_are_built_as_set(built, case):
    settings, report = built[0][case], built[1]["cases"][case]
    assert report["built"]["mixed_precision"] == settings["mixed_precision"]["set"]
    assert report["built"]["attention_backend"] == settings["attention_backend"]
    assert report["built"]["pipeline_dtype"] == ("torch.bfloat16" if settings["pipeline_dtype"] else None)
    precision, mixed = CASES[case][1].get("PRECISION", "bf16"), report["built"]["mixed_precision"]
    assert (report["finalized"]["effective"]["precision"], mixed.get("fp8"), mixed.get("fp4")) \
        == (precision, "hybrid" if "fp8" in precision else None, "e2m1" if precision == "nvfp4" else None)


@pytest.mark.parametrize("case", CASES)
def test_the_finalized_ddp_overlap_is_the_profiles_with_no_communication_overlap_setup_or_manual_gc(built, case):
    """The 70B recipe's CommOverlapConfig would turn on both DDP overlaps and a 128 MiB bucket at DP > 1, over the
    profile; no recipe's manual GC runs (mega, Primus and the torch-native engines run none)."""
    effective = built[1]["cases"][case]["finalized"]["effective"]
    table = profile(CASES[case][1].get("FAIRNESS", "spec"))
    assert (effective["overlap_grad_reduce"], effective["overlap_param_gather"], effective["bucket_size"]) == \
        (table["overlap_grad_reduce"], table["overlap_param_gather"], None)  # None: megatron-core's own bucket, as mega
    assert (effective["tp_comm_overlap"], effective["manual_gc"]) == (False, False)


@pytest.mark.parametrize("case", [name for name in CASES if "mxfp8" in name])
def test_mxfp8_reuses_the_grad_buffer_only_when_the_profile_gathers_parameters_in_fp8(built, case):
    effective = built[1]["cases"][case]["finalized"]["effective"]
    assert effective["fp8_param_gather"] is profile("spec")["fp8_param_gather"] is False
    assert effective["reuse_grad_buf_for_mxfp8_param_ag"] is False


@pytest.mark.parametrize("case", CASES)
def test_the_read_back_the_run_writes_is_the_finalized_containers(built, case):
    settings, report = built[0][case], built[1]["cases"][case]["finalized"]
    written = json.loads(Path(settings["readback"]).read_text())
    assert written == {key: value for key, value in report.items() if key not in ("set_mismatch", "blend")}
    ran = {**settings["set"], **{path: False for path in lacking(case) if path in settings["set"]}}
    assert underived(written["set"], case) == underived(json.loads(json.dumps(ran)), case)


def test_the_recipes_process_environment_is_the_stacks_for_every_framework_and_none_is_left_in_the_container(built):
    """Megatron-Bridge's recipes set COMMON_RECIPE_ENV_VARS as cfg.env_vars, applied inside the process: on the
    stack row instead, TPrimat's launcher gives them to every framework of the stack (and results record them)."""
    from utils.machine.platform_env import platform_env

    shipped = built[1]["recipe_env_vars"]
    assert set(shipped) == set(MBRIDGE.model_names.values()) and all(shipped.values())
    recipes = {name: str(value) for env_vars in shipped.values() for name, value in env_vars.items()}
    row = stacks.get("nemo-26.08")
    assert recipes.items() <= row.env.items()
    assert all(recipes.items() <= platform_env("nvd", framework, row.name).items() for framework in row.frameworks)
    assert {case: report["finalized"]["effective"]["recipe_env_vars"] for case, report in built[1]["cases"].items()
            if report["finalized"]["effective"]["recipe_env_vars"] != {}} == {}


@pytest.mark.parametrize("case", [name for name in CASES if "mock" not in name])
def test_real_data_is_the_prepared_prefix_as_the_datasets_blend(built, case):
    settings, report = built[0][case], built[1]["cases"][case]["finalized"]
    assert report["blend"] == [settings["set"]["dataset.data_path"], None]
    assert report["effective"]["mock_data"] is False


def test_mock_data_leaves_the_dataset_without_a_blend(built):
    report = built[1]["cases"]["llama-tiny-mock-profiled"]["finalized"]
    assert report["blend"] is None and report["effective"]["mock_data"] is True


def test_the_effective_settings_are_the_requests_layout_and_workload(built):
    case = "qwen-fp8-delayed-balanced"
    settings, effective = built[0][case], built[1]["cases"][case]["finalized"]["effective"]
    wanted = settings["set"]
    assert (effective["tp"], effective["pp"], effective["ep"], effective["dp"], effective["gbs"], effective["mbs"],
            effective["seq_len"], effective["steps"], effective["num_layers"], effective["padded_vocab_size"]) == \
        (wanted["model.tensor_model_parallel_size"], wanted["model.pipeline_model_parallel_size"],
         wanted["model.expert_model_parallel_size"], 2,
         wanted["train.global_batch_size"], wanted["train.micro_batch_size"], wanted["model.seq_length"],
         wanted["train.train_iters"], wanted["model.num_layers"], wanted["model.vocab_size"])


@pytest.mark.parametrize("case", MOE_CASES)
def test_the_finalized_experts_and_routing_are_moe_settings_and_the_layout_the_requests(built, case):
    """The read-back (the result's effective.moe, megatron-core's names) of the container pretrain() finalized; on
    the local layers without Transformer Engine's grouped GEMM and fused permutation, as mega's local layers."""
    model, env = CASES[case]
    settings, finalized = built[0][case], built[1]["cases"][case]["finalized"]
    local = dict.fromkeys(TE_MOE_KERNELS, False) if settings["transformer_impl"] == "local" else {}
    effective = finalized["effective"]
    assert effective["moe"] == {**moe_settings(get_model(model, env.get("MODEL_SIZE", "full")).moe), **local,
                                "expert_model_parallel_size": int(env.get("EP", "1"))}
    assert effective["ep"] == int(env.get("EP", "1"))
    assert finalized["set"]["model.expert_tensor_parallel_size"] == effective["tp"]


@pytest.mark.parametrize("case", MOE_CASES)
def test_the_moe_recipe_runs_its_experts_as_megatron_cores_defaults_do_beside_moe_settings(built, case):
    """Nothing of the recipe's own is left on the finalized model's MoE settings, CUDA graphs, RNG tracker or
    recomputation (the DeepEP/HybridEP dispatcher, CUDA graphs of the router, the fused router, full recompute):
    each differs from megatron-core's finalized default only where moe_settings sets it, as mega's config does."""
    model, env = CASES[case]
    report, settings = built[1]["cases"][case], built[0][case]
    beside = report["beside_megatron_core"]
    wanted = {name: settings["set"][f"model.{name}"] for name in moe_settings(get_model(model).moe)}
    assert {name: value for name, value in beside.items() if name not in FLEX_ONLY} == \
        {name: value for name, value in wanted.items() if name in beside}
    assert beside["moe_flex_dispatcher_backend"] is None and beside["moe_token_dispatcher_type"] == "alltoall"
    assert report["finalized"]["set"]["optimizer.use_precision_aware_optimizer"] is False


def test_every_megatron_bridge_and_megatron_core_fact_reads_as_recorded_in_the_installed_packages(interpreter):
    """utils/upstream/table.py's facts of the pinned packages, re-read from the files this environment installed."""
    out = subprocess.run([str(interpreter), "-m", "utils.upstream", "check", "--installed"], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "upstream facts read as recorded" in out.stdout and not out.stdout.startswith("0 of")


def test_the_stack_probe_imports_megatron_bridge_as_its_trainer_does_where_transformer_engine_is_absent(interpreter):
    """A plain `import megatron.bridge` fails at lora_layers' unguarded Transformer Engine import; the launcher's stack
    check (utils.machine.probe) imports it within the entry's probe_context, as train_mbridge does, so a local-spec
    run is not refused before it starts (as it was on a lent H200, 2026-11-28)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    plain = subprocess.run([str(interpreter), "-c", "import megatron.bridge"], capture_output=True, text=True,
                           timeout=300, env=env)
    probed = subprocess.run([str(interpreter), "-m", "evaluate.probe", "--stack-facts", "--frameworks", "mbridge"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert plain.returncode != 0 and "No module named 'transformer_engine'" in plain.stderr
    assert probed.returncode == 0, probed.stderr[-2000:]
    assert json.loads(probed.stdout.splitlines()[-1])["modules"] == {
        "megatron.bridge": "", "megatron.core": "", "transformer_engine": "not installed"}


@pytest.mark.parametrize("case", CASES)
def test_the_tokenizer_setup_builds_next_leaves_the_requested_vocabulary_as_it_is(built, case):
    """setup()'s step after initialize_megatron (training/setup.py:293-299): the prepared tokenizer builds, and the
    model keeps the preset vocabulary TPrimat sets (padded already) instead of padding the tokenizer's again."""
    found = built[1]["cases"][case]["tokenizer"]
    assert "error" not in found, found
    assert found["model_vocab_size"] == built[0][case]["set"]["model.vocab_size"] >= found["vocab_size"]
    assert found["pad_vocab"] is False


def test_the_local_layers_norms_build_from_the_finalized_container_without_apex(built):
    """TRANSFORMER_IMPL=local on a stack without Apex: torch's norm stands in and refuses persist_layer_norm, which
    Megatron-Bridge's Llama bridge turns on; the run turns it off (train/common/local_kernels.py)."""
    settings, answer = built
    local = [name for name, s in settings.items() if s["transformer_impl"] == "local"]
    assert local and all(answer["cases"][name]["local_norms"] == {"input_layernorm": "RMSNorm",
                                                                  "pre_mlp_layernorm": "RMSNorm"} for name in local)


@pytest.mark.parametrize("case", [name for name, (model, _) in CASES.items() if model == "gptoss"])
def test_the_gpt_oss_recipe_finalizes_the_specs_features_and_runs_as_the_others(built, case):
    """Megatron-Bridge's GPT-OSS bridge builds the spec's attention sinks, alternating window, biases, clamped SwiGLU
    and YaRN (models/gpt_oss/gpt_oss_bridge.py:60-100), read back as effective.model_features for the judge; the
    recipe's per-token loss is off, as every other framework runs (recipes/gpt_oss/h100/gpt_oss.py:76-81)."""
    model, env = CASES[case]
    spec = get_model(model, env.get("MODEL_SIZE", "full"))
    finalized, found = built[1]["cases"][case]["finalized"], built[1]["cases"][case]["variant"]
    assert finalized["effective"]["model_features"] == list(spec.features) == [
        "sliding_window", "alternating_window", "attention_sinks", "linear_bias", "clamped_swiglu", "yarn"]
    yarn = spec.rope_scaling
    assert found == {
        "window_size": list(spec.megatron_window), "window_attn_skip_freq": spec.full_attention_every,
        "softmax_type": "learnable", "add_bias_linear": True, "add_qkv_bias": False,
        "activation_func": "quick_gelu", "activation_func_clamp_value": spec.swiglu_limit, "glu_linear_offset": 1.0,
        "gated_linear_unit": True, "position_embedding_type": "yarn",
        "yarn_rotary_scaling_factor": yarn["factor"],
        "yarn_original_max_position_embeddings": yarn["original_max_position_embeddings"],
        "yarn_beta_fast": yarn["beta_fast"], "yarn_beta_slow": yarn["beta_slow"],
        "yarn_correction_range_round_to_int": yarn["truncate"], "yarn_mscale": None, "yarn_mscale_all_dim": None,
        "calculate_per_token_loss": False, "moe_ffn_hidden_size": spec.moe.expert_ffn_size}
