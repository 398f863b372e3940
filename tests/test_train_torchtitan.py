"""train.torchtitan: the request as torchtitan 0.3.0's configuration, its command, and its data.

The mapping (train/torchtitan/settings.py) and the command are checked without torchtitan. Then torchtitan 0.3.0 itself
(requirements/torchtitan.txt, plus what this CPU host lacks) is installed once into a cached overlay over .venv's torch
(tests/fixtures/envs.py), and torchtitan's own ConfigManager loads TPrimat's config function for Llama and Qwen: every
field the settings set exists and keeps its value, and the model it builds (on the meta device) has exactly the spec's
parameters. The same overlay shows why a CPU run needs its stand-ins (train/torchtitan/cpu_stand_ins.py): without an
accelerator torchtitan picks CUDA; tests/test_train_torchtitan_cpu.py trains through them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.train import torchtitan_overlay
from tests.fixtures.train.data_dir import make_data_dir
from tests.fixtures.train.torchtitan_overlay import request
from tests.fixtures.train_matrix.shell import machine, read, run_dirs
from tests.fixtures.train_matrix.shell import request as request_of
from tests.fixtures.train_matrix.requests import node, run_request
from train.torchtitan import environment
from train.torchtitan.launch import command
from train.torchtitan.settings import SETTINGS_ENV, settings
from utils.errors import UsageError
from utils.machine import pyenvs
from utils.frameworks.torchtitan import FRAMEWORK
from utils.upstream import FACTS

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = "/out/set/torchtitan-llama"


def test_the_layout_batch_and_schedule_are_the_requests():
    req = request(STRATEGY="truly_identical")
    lay, t = req.parallelism, req.training
    values = settings(req, RUN_DIR)["set"]
    assert lay.tp > 1 and lay.dp * lay.tp == 8
    assert {key: values[key] for key in (
        "parallelism.tensor_parallel_degree", "parallelism.data_parallel_shard_degree",
        "parallelism.data_parallel_replicate_degree", "parallelism.enable_sequence_parallel",
        "training.local_batch_size", "training.global_batch_size", "training.seq_len", "training.steps",
        "training.max_norm", "lr_scheduler.warmup_steps", "lr_scheduler.decay_type", "debug.seed")} == {
        "parallelism.tensor_parallel_degree": lay.tp, "parallelism.data_parallel_shard_degree": lay.dp,
        "parallelism.data_parallel_replicate_degree": 1, "parallelism.enable_sequence_parallel": True,
        "training.local_batch_size": t.mbs, "training.global_batch_size": t.gbs, "training.seq_len": t.seq_len,
        "training.steps": t.steps, "training.max_norm": t.grad_clip, "lr_scheduler.warmup_steps": t.warmup_steps,
        "lr_scheduler.decay_type": "cosine", "debug.seed": t.seed}
    assert values["lr_scheduler.min_lr_factor"] == pytest.approx(t.min_lr / t.lr)


def test_bf16_mixed_precision_reduces_as_the_fairness_profile_says_and_no_cuda_graphs_on_either_vendor():
    spec_values = settings(request(), RUN_DIR)["set"]
    tuned_values = settings(request(FAIRNESS="tuned"), RUN_DIR)["set"]
    assert (spec_values["training.mixed_precision_param"], spec_values["training.dtype"]) == ("bfloat16", "float32")
    assert (spec_values["training.mixed_precision_reduce"], tuned_values["training.mixed_precision_reduce"]) == \
        ("bfloat16", "float32")  # the spec profile reduces in bf16, the tuned one in fp32
    assert spec_values["training.disable_cuda_graphs"] is True


def test_ddp_replicates_over_dp_instead_of_sharding():
    values = settings(request(DATA_PARALLEL="ddp", STRATEGY="minimal_communication"), RUN_DIR)["set"]
    assert (values["parallelism.data_parallel_shard_degree"], values["parallelism.data_parallel_replicate_degree"],
            values["parallelism.tensor_parallel_degree"]) == (1, 8, 1)


@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_the_model_is_the_specs_with_the_common_padded_vocabulary(model):
    req = request(model, MODEL_LAYERS="4")
    numbers, spec = settings(req, RUN_DIR)["model"], req.model
    assert (numbers["num_layers"], numbers["dim"], numbers["n_heads"], numbers["n_kv_heads"], numbers["ffn_hidden"],
            numbers["rope_theta"], numbers["norm_eps"], numbers["qkv_bias"]) == \
        (4, spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.ffn_hidden_size, spec.rope_theta,
         spec.norm_eps, model == "qwen")
    assert numbers["vocab_size"] == req.fairness.workload["padded_vocab_size"]
    assert bool(numbers["rope_scaling"]) == (model == "llama")  # Llama 3.1's frequency scaling; Qwen has none


def test_megatrons_parameter_groups_leave_norms_and_biases_without_weight_decay():
    req = request()
    groups = settings(req, RUN_DIR)["optimizer"]
    assert [(g["pattern"], g["kwargs"]["weight_decay"]) for g in groups] == \
        [(r"(norm\.weight|\.bias)$", 0.0), (r".*", req.training.weight_decay)]
    assert groups[1]["kwargs"]["eps"] == req.fairness.table["adam_eps"]


@pytest.mark.parametrize("change, refused", [
    ({"parallelism": {"pp": 2}}, "PP=2: TPrimat does not map torchtitan's pipeline parallelism"),
    ({"native": {"data_parallel": "ddp"}, "parallelism": {"tp": 2}}, "DATA_PARALLEL=ddp with TP=2"),
    ({"native": {"compile": True, "compile_mode": "max-autotune"}}, "COMPILE_MODE=max-autotune"),
    ({"native": {"sac_every": 2}}, "SAC_FREQ: torchtitan 0.3.0 checkpoints by operation on every layer"),
])
def test_what_torchtitan_cannot_run_is_refused_in_one_line_naming_the_fix(change, refused):
    req = request()
    req = dataclasses.replace(req, **{section: dataclasses.replace(getattr(req, section), **fields)
                                      for section, fields in change.items()})
    with pytest.raises(UsageError, match="torchtitan cannot run this request") as err:
        settings(req, RUN_DIR)
    assert refused in str(err.value) and "\n" not in str(err.value)


def test_the_command_is_torchrun_on_torchtitans_entry_point_with_tprimats_config_function(tmp_path):
    req = request(DRY_RUN="1")
    launch = command(req, tmp_path / "run", tmp_path)
    assert launch.argv[1:3] == ["-m", "torch.distributed.run"] and "--nproc_per_node=8" in launch.argv
    assert launch.argv[-6:] == ["-m", "torchtitan.train", "--module", "train.torchtitan", "--config", "tprimat"]
    assert launch.env[SETTINGS_ENV] == str(tmp_path / "torchtitan_settings.json") and launch.cwd == str(ROOT)
    written = json.loads((tmp_path / "torchtitan_settings.json").read_text())
    assert written["request"] == str(tmp_path / "run" / "config.json")


def test_a_cpu_run_is_fp32_with_sdpa_through_the_cpu_entry_point_and_its_own_environment(tmp_path):
    """On the CPU (FRAMEWORK named: torchtitan is not in its default run set) torchtitan trains with SDPA
    (FlexAttention has no CPU backward), in fp32 where asked (the CPU's precision without native bf16), through
    train.torchtitan.on_cpu (the stand-ins, then torchtitan.train) with its environment's overlay first on
    PYTHONPATH; a dry run builds nothing."""
    req = run_request("cpu", "torchtitan", "llama", FRAMEWORK="torchtitan", MODELS="llama", PRECISION="fp32",
                      DRY_RUN="1")
    written = settings(req, RUN_DIR)
    assert (written["attention"], written["set"]["training.mixed_precision_param"],
            written["set"]["training.mixed_precision_reduce"]) == ("sdpa", "float32", "float32")
    assert settings(request(), RUN_DIR)["attention"] == "flex"
    launch = command(req, tmp_path / "run", tmp_path)
    assert launch.argv[-6:] == ["-m", "train.torchtitan.on_cpu", "--module", "train.torchtitan", "--config", "tprimat"]
    assert launch.env["PYTHONPATH"].split(os.pathsep)[0] == str(environment.folder(build=False))
    assert "PYTHONPATH" not in command(request(DRY_RUN="1"), tmp_path / "gpu", tmp_path).env


def test_the_cpus_default_run_set_leaves_torchtitan_out_and_runs_it_when_named():
    assert "torchtitan" not in node("cpu").frameworks
    assert node("cpu", FRAMEWORK="torchtitan").frameworks == ["torchtitan"]


def test_a_cpu_run_set_without_pypi_or_a_built_environment_stops_in_one_line(tmp_path, monkeypatch):
    """Offline and never built: the matrix stops before the run set, exit 2, naming the fix."""
    monkeypatch.setenv(pyenvs.ROOT_ENV, str(tmp_path / "envs"))
    monkeypatch.setattr(pyenvs, "_run", lambda step, what: (_ for _ in ()).throw(
        pyenvs.EnvError(f"could not build {what}:\nerror: Failed to fetch: https://pypi.org/simple/")))
    with pytest.raises(UsageError) as err:
        environment.environment("cpu")
    line = str(err.value)
    assert "\n" not in line and "Failed to fetch" in line and "run it once where PyPI answers" in line
    assert environment.environment("nvd") == {}


def test_a_run_without_the_models_tokenizer_is_refused_before_it_starts(tmp_path):
    with pytest.raises(UsageError, match="torchtitan builds the model's tokenizer from"):
        command(request(), tmp_path / "run", tmp_path)


# --- torchtitan 0.3.0 installed -------------------------------------------------------------------------------------

PROBE = r"""
import json, sys
import torch
from torchtitan.config import ConfigManager
from torchtitan.tools import utils
config = ConfigManager().parse_args(["--module", "train.torchtitan", "--config", "tprimat"])
settings = json.load(open(sys.argv[1]))
def read(path):
    target = config
    for part in path.split("."):
        target = getattr(target, part)
    return target
with torch.device("meta"):
    model = config.model_spec.model.build()
# the read-back of a trainer built with this config (train/torchtitan/trainer.py), its parallel dims as torchtitan
# derives them for the request's world size, its GA as Trainer.__init__ does, its device torchtitan's (a GPU's
# without the CPU's stand-ins) and a MoE model's routers given the load-balancing loss as TimedTrainer gives them
from types import SimpleNamespace
from torchtitan.distributed import ParallelDims
from train.torchtitan import moe
from train.torchtitan.trainer import effective
dims = ParallelDims.from_config(config.parallelism, int(sys.argv[2]))
dp = dims.dp_shard * dims.dp_replicate
ga = config.training.global_batch_size // (config.training.local_batch_size * dp)
built = SimpleNamespace(config=config, parallel_dims=dims, model_config=config.model_spec.model,
                        gradient_accumulation_steps=ga, model_parts=[model], device=torch.device(utils.device_type),
                        dataloader=SimpleNamespace(source=SimpleNamespace(mock=False, prefix=settings["request"]),
                                                   validation=None))
moe.add_aux_loss(built)
print(json.dumps({
    "effective": effective(built),
    "type": type(config).__qualname__,
    "kept": {path: read(path) == value for path, value in settings["set"].items()},
    "parameters": sum(p.numel() for p in model.parameters()),
    "model": config.model_spec.name, "parallelize": config.model_spec.parallelize_fn.__name__,
    "scales": sorted({layer.router.aux_loss.scale for layer in moe.moe_layers(model) if hasattr(layer.router,
                                                                                                "aux_loss")}),
    "qkv_bias": any(name.endswith("wqkv.bias") for name, _ in model.named_parameters()),
    "norm_eps": sorted({m.eps for m in model.modules() if isinstance(m, torch.nn.RMSNorm)}),
    "groups": [(g.pattern, g.optimizer_kwargs["weight_decay"]) for g in config.optimizer.param_groups],
    "dataloader": type(config.dataloader).__qualname__,
    "device_type": utils.device_type,
    "cuda_available": torch.cuda.is_available(),
}))
"""


@pytest.fixture(scope="module")
def torchtitan_path():
    return torchtitan_overlay.installed()


def probe(torchtitan_path: Path, tmp_path: Path, req) -> dict:
    path = tmp_path / "torchtitan_settings.json"
    path.write_text(json.dumps(settings(req, str(tmp_path))))
    env = {**os.environ, "PYTHONPATH": str(torchtitan_path), SETTINGS_ENV: str(path), "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, "-c", PROBE, str(path), str(req.parallelism.num_gpus)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def tp2_request(model: str):
    """Two layers at TP 2, DP 4: the request whose built configuration the probes read."""
    return request(model, MODEL_LAYERS="2", TP="2", PP="1", DP="4")


@pytest.fixture(scope="module")
def probed(torchtitan_path, tmp_path_factory):
    """Each model's probe of tp2_request, run once in torchtitan's Python (an import of it takes seconds)."""
    return functools.cache(lambda model: probe(torchtitan_path, tmp_path_factory.mktemp(model), tp2_request(model)))


@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_torchtitans_own_config_manager_loads_tprimats_config_and_keeps_every_value(probed, model):
    req, found = tp2_request(model), probed(model)
    assert found["type"] == "TimedTrainer.Config" and found["dataloader"] == "PreparedDataLoader.Config"
    assert (found["model"], found["parallelize"], found["scales"]) == ("llama3", "parallelize_llama", [])
    assert [path for path, kept in found["kept"].items() if not kept] == []
    assert found["parameters"] == req.model.param_count()  # the spec's architecture, QKV bias and untied head
    assert (found["qkv_bias"], found["norm_eps"]) == (model == "qwen", [req.model.norm_eps])
    assert found["groups"] == [[r"(norm\.weight|\.bias)$", 0.0], [".*", req.training.weight_decay]]



@pytest.mark.parametrize("model", ["llama", "qwen"])
def test_the_read_back_of_the_built_trainer_is_the_request_where_the_judge_compares_it(probed, model):
    req, found = tp2_request(model), probed(model)["effective"]
    lay, t = req.parallelism, req.training
    wanted = {"tp": 2, "pp": 1, "dp": 4, "ga": lay.ga, "mbs": t.mbs, "gbs": t.gbs, "seq_len": t.seq_len,
              "steps": t.steps, "precision": "bf16", "sequence_parallel": True, "lr": t.lr, "min_lr": t.min_lr,
              "warmup_steps": t.warmup_steps, "weight_decay": t.weight_decay, "beta1": t.beta1, "beta2": t.beta2,
              "grad_clip": t.grad_clip, "seed": t.seed, "data_parallel": "fsdp", "compile": False, "sac_every": 0,
              "grad_reduce_in_fp32": req.fairness.table["grad_reduce_in_fp32"], "overlap_grad_reduce": True,
              "overlap_param_gather": True, "average_in_collective": True, "num_layers": 2,
              "hidden_size": req.model.hidden_size, "num_attention_heads": req.model.num_attention_heads,
              "num_kv_heads": req.model.num_kv_heads, "padded_vocab_size": req.fairness.workload["padded_vocab_size"],
              "head_dim": req.model.head_dim, "qk_norm": False, "ep": 1, "moe": None}
    assert {key: found[key] for key in wanted} == wanted


def test_without_the_stand_in_torchtitan_picks_cuda_on_a_cpu(probed):
    """torchtitan/tools/utils.py:55 (get_device_info): `_get_available_device_type() or "cuda"`; the trainer then
    sets that device and starts NCCL on it. The probe imports torchtitan without the CPU's stand-ins
    (train/torchtitan/cpu_stand_ins.py), which a CPU run applies first (tests/test_train_torchtitan_cpu.py)."""
    found = probed("llama")
    if found["cuda_available"]:
        pytest.skip("this host has a GPU")
    assert found["device_type"] == "cuda"


def test_importing_torchtitans_entry_point_imports_what_needs_torch_2_13(torchtitan_path):
    """The probe imports the entry point the run starts (utils/frameworks/torchtitan/: its probe_modules), and that
    import reaches the module whose first lines need torch 2.13 (utils/upstream/table.py's torchtitan facts), so an image
    with an older torch is found out before any run; the facts themselves read as recorded in the installed
    torchtitan."""
    assert FRAMEWORK.probe_modules[0] == "torchtitan.train"
    env = {**os.environ, "PYTHONPATH": str(torchtitan_path), "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, "-c", "import sys, torchtitan.train; "
                          "print('torchtitan.distributed.full_dtensor' in sys.modules)"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["True"], out.stderr[-2000:]
    check = subprocess.run([sys.executable, "-m", "utils.upstream", "check", "--installed"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
    read, of = re.fullmatch(r"(\d+) of (\d+) upstream facts read as recorded", check.stdout.strip()).groups()
    titan = sum(fact.source == "torchtitan-0.3.0" for fact in FACTS)
    assert check.returncode == 0 and read == of and int(of) >= titan > 0, check.stderr


# --- a dry run on faked 8-GPU nodes ---------------------------------------------------------------------------------

def test_a_dry_run_on_an_amd_node_skips_torchtitan_where_no_amd_stacks_torch_can_import_it(tmp_path):
    result = machine(tmp_path, amd=8).run("shell/train.sh", DRY_RUN="1", FRAMEWORK="torchtitan", MODELS="llama",
                                          STACK="primus-v26.5")  # torch 2.12.0
    assert result.returncode == 2
    assert "skipped: torchtitan (torchtitan) is on no amd stack: torchtitan needs torch 2.13" in result.stdout
    assert "not 2.12.0 (stack primus-v26.5)" in result.stdout and run_dirs(tmp_path / "output") == []


@pytest.mark.parametrize("vendor", ["nvidia"])
def test_a_dry_run_on_an_8_gpu_node_writes_torchtitans_command_and_settings(tmp_path, vendor):
    fake = machine(tmp_path, **{vendor: 8})
    result = fake.run("shell/train.sh", DRY_RUN="1", FRAMEWORK="torchtitan", MODELS="llama,qwen")
    assert result.returncode == 0, result.output
    dirs = run_dirs(tmp_path / "output")
    assert [d.name for d in dirs] == ["torchtitan-llama", "torchtitan-qwen"]
    for run_dir in dirs:
        argv = read(run_dir / "launch.json")["command"]
        assert "--nproc_per_node=8" in argv and argv[-6:] == ["-m", "torchtitan.train", "--module",
                                                              "train.torchtitan", "--config", "tprimat"]
        written = read(run_dir / "torchtitan_settings.json")
        assert written["request"] == str(run_dir / "config.json")
        assert written["set"]["training.global_batch_size"] == request_of(run_dir).training.gbs
        assert not (run_dir / "train.log").exists()
    assert "command: " in result.stdout and "nothing was trained" in result.stderr


DATA_PROBE = r"""
import json, sys
import torch
from torchtitan.components.loss import IGNORE_INDEX
from train.common.megatron_data import build_splits, locate, microbatches
from train.torchtitan.data import PreparedDataLoader
from utils.spec.request import Request
from pathlib import Path

torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
req = Request.read(Path(sys.argv[1]))
t, lay = req.training, req.parallelism
dp_rank = lay.dp - 1
loader = PreparedDataLoader.Config(request=sys.argv[1]).build(dp_world_size=lay.dp, dp_rank=dp_rank, tokenizer=None,
                                                              seq_len=t.seq_len, local_batch_size=t.mbs)
source = locate(req.data, req.model)
# what fsdp trains and evaluates on (train/native/trainer.py)
dataset, validation = build_splits(source, t.seq_len, t.steps * t.gbs, t.seed, Path(req.data.data_dir) / "index_cache",
                                   evaluation=req.evaluation, gbs=t.gbs, fingerprint=True)

def same(found, dataset, steps):
    expected = list(microbatches(dataset, steps=steps, mbs=t.mbs, dp=lay.dp, dp_rank=dp_rank, ga=lay.ga,
                                 device=torch.device("cpu")))
    return len(found) == len(expected) and all(
        torch.equal(inputs["input"], batch["tokens"]) and torch.equal(inputs["positions"], batch["position_ids"])
        and torch.equal(labels, torch.where(batch["loss_mask"] == 0, IGNORE_INDEX, batch["labels"]))
        for (inputs, labels), batch in zip(found, expected))

found = list(loader)
report = {"microbatches": len(found), "same": same(found, dataset, t.steps),
          "positions": found[0][0]["positions"][0, :4].tolist(), "mock": loader.source.mock}
if validation is not None:
    held_out = set(loader.validation.dataset.document_index.tolist())
    report["validation"] = {
        "microbatches": len(list(loader.validation_pairs())),
        "same": same(list(loader.validation_pairs()), validation.dataset, validation.iters),
        # the same split; its fingerprint hashed on the first DP rank only (the one that prints it)
        "split": loader.validation.result_split() == {**validation.result_split(), "fingerprint": None},
        "trained_on_held_out": bool(held_out & set(loader.dataset.document_index.tolist()))}
print(json.dumps(report))
"""


@pytest.mark.parametrize("eval_interval", ["0", "1"])
def test_the_dataloader_yields_the_prepared_samples_in_megatrons_order_for_its_dp_rank(torchtitan_path, tmp_path,
                                                                                       eval_interval):
    """What torchtitan trains on is mega's and fsdp's data: each microbatch of this DP rank as
    train/common/megatron_data.py orders it, positions 0..SL-1 (a causal mask over the whole sequence), and the
    tokens the loss mask leaves out labelled IGNORE_INDEX. With EVAL_INTERVAL it trains on the training split only
    and evaluates on fsdp's validation samples, its split and fingerprint the same."""
    data = make_data_dir(tmp_path / "data", model_keys=("llama",), documents=60)
    req = request(DATA_DIR=str(data), DATASET="sample", MODEL_SIZE="tiny", SL="64", TRAIN_ITERS="2",
                  WARMUP_STEPS="1", WARMUP_SKIP="1", EVAL_INTERVAL=eval_interval, VALIDATION_PERCENT="50", EVAL_TOKENS="64")
    path = tmp_path / "config.json"
    req.write(path)
    env = {**os.environ, "PYTHONPATH": str(torchtitan_path), "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, "-c", DATA_PROBE, str(path)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    evaluated = {"validation": {"microbatches": req.evaluation.iters(req.training.gbs, 64) * req.parallelism.ga,
                                "same": True, "split": True, "trained_on_held_out": False}} if eval_interval != "0" else {}
    assert found == {"microbatches": 2 * req.parallelism.ga, "same": True, "positions": [0, 1, 2, 3],
                     "mock": False, **evaluated}
