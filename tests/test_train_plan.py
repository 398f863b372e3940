"""train.plan: the run list (strategy x framework x model x repeat) and each run's request."""

from __future__ import annotations

import dataclasses

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.data.verified import write_manifest
from tests.fixtures.train_matrix.requests import node
from utils.spec.fairness import profile
from train.plan import build_plan, data_problems, estimate_s, importable, request, table
from utils.config import ROOT, load_config
from utils.spec import stacks
from utils.spec.models import get_model
from utils.spec.evaluation import Evaluation
from utils.spec.request import NO_EVALUATION, Network, Request


def names(platform: str, **env: str) -> list[str]:
    return [run.name for run in build_plan(node(platform, **env))]


NATIVE_RUNS = ["fsdp-llama", "fsdp-qwen", "autotp-llama", "autotp-qwen"]
PREVIOUS = "primus-v25.11,nemo-25.04"  # the older stacks, whose frameworks are all registered


@pytest.mark.parametrize("platform, framework, expected", [
    ("nvd", "all", ["mega-llama", "mega-qwen", "nemo-llama", "nemo-qwen", *NATIVE_RUNS]),
    ("amd", "all", ["mega-llama", "mega-qwen", "prim-llama", "prim-qwen", *NATIVE_RUNS]),
    ("nvd", "autotp,fsdp", ["autotp-llama", "autotp-qwen", "fsdp-llama", "fsdp-qwen"]),
    ("nvd", "mega", ["mega-llama", "mega-qwen"]),
    ("nvd", "nemo", ["nemo-llama", "nemo-qwen"]),
    ("nvd", "prim", ["nemo-llama", "nemo-qwen"]),  # Primus is AMD's: NeMo is its NVIDIA counterpart
    ("amd", "nemo", ["prim-llama", "prim-qwen"]),
    ("amd", "prim,mega", ["prim-llama", "prim-qwen", "mega-llama", "mega-qwen"]),
])
def test_run_list_per_gpu_platform_and_framework(platform, framework, expected):
    assert names(platform, FRAMEWORK=framework, STACK=PREVIOUS) == expected


@pytest.mark.parametrize("platform", ["amd", "nvd"])
def test_all_runs_the_default_stack_s_registered_frameworks_in_its_order(platform):
    """FRAMEWORK=all is the stack's row, in its order."""
    row = stacks.default(platform)
    ran = list(dict.fromkeys(run.framework for run in build_plan(node(platform, FRAMEWORK="all"))))
    assert ran == list(row.frameworks)
    assert {"mega", "fsdp", "autotp"} <= set(ran)


def test_the_newest_nvidia_stack_skips_nemo_and_names_the_stack_that_has_it():
    runs = build_plan(node("nvd", FRAMEWORK="mega,nemo", MODELS="llama"))
    newest = stacks.default("nvd").name
    assert [(r.name, r.skipped) for r in runs] == [
        ("mega-llama", ""),
        ("nemo-llama", f"nemo (NeMo) is not on stack {newest}; it runs on nemo-25.04: STACK=nemo-25.04")]


def test_local_layers_skip_the_frameworks_that_build_only_transformer_engines_and_are_recorded():
    cfg = node("nvd", FRAMEWORK="mega,nemo", MODELS="llama", STACK="nemo-25.04", TRANSFORMER_IMPL="local")
    runs = {r.framework: r for r in build_plan(cfg)}
    assert runs["mega"].skipped == ""
    assert runs["nemo"].skipped == "nemo builds no local layers (TRANSFORMER_IMPL=local applies to mega, mbridge)"
    assert request(cfg, runs["mega"]).environment.transformer_impl == "local"


def test_a_stack_list_picks_each_platform_s_own_row_and_the_request_names_it():
    for platform, expected in (("amd", "primus-v25.11"), ("nvd", "nemo-25.04")):
        cfg = node(platform, FRAMEWORK="mega", MODELS="llama", STACK=PREVIOUS)
        assert cfg.stack.name == expected
        assert request(cfg, build_plan(cfg)[0]).environment.stack == expected
        assert f"stack {expected} ({stacks.get(expected).image})" in table(cfg, build_plan(cfg))[0]
    assert node("nvd", STACK="primus-v25.11").stack == stacks.default("nvd")  # no nvd row named: the newest


@pytest.mark.parametrize("framework, expected", [
    ("all", ["mega-llama", "mega-qwen", *NATIVE_RUNS[:4]]), ("mega", ["mega-llama", "mega-qwen"]),
    ("prim", ["mega-llama", "mega-qwen"]), ("nemo", ["mega-llama", "mega-qwen"]),
])
def test_the_cpu_runs_megatron_for_a_vendors_framework_and_the_torch_native_ones(framework, expected):
    cfg = node("cpu", 0, FRAMEWORK=framework)
    assert [run.name for run in build_plan(cfg)] == expected
    assert all(run.layout.gpus == 2 and not run.skipped for run in build_plan(cfg))


@pytest.mark.parametrize("stack, counterpart", [("nemo-26.08", "mbridge"), ("nemo-25.04", "nemo")])
def test_mapping_notes_are_printed_with_the_list_naming_the_stack_s_own_counterpart(stack, counterpart):
    cfg = node("nvd", FRAMEWORK="prim", STACK=stack)
    lines = table(cfg, build_plan(cfg))
    assert any("prim does not run on nvd" in line and f"{counterpart} runs instead" in line for line in lines)
    assert {run.framework for run in build_plan(cfg)} == {counterpart}


def test_repeats_are_outermost_and_named():
    assert names("nvd", FRAMEWORK="mega", MODELS="llama", RUNS="3") == ["mega-llama-r1", "mega-llama-r2", "mega-llama-r3"]
    assert [r.repeat for r in build_plan(node("nvd", FRAMEWORK="mega", RUNS="2"))] == [1, 1, 2, 2]


@pytest.mark.parametrize("platform, llama_qwen", [
    ("nvd", [(4, 1, 2, 32), (4, 2, 1, 64)]),
    ("amd", [(1, 1, 8, 8), (1, 1, 8, 8)]),  # the MI300X holds a whole replica per GPU
])
def test_a_sweep_names_each_strategy_and_keeps_the_global_batch(platform, llama_qwen):
    runs = build_plan(node(platform, STRATEGY="all", STACK=PREVIOUS))
    assert len(runs) == 5 * 4 * 2
    best = [r for r in runs if r.strategy == "maximum_performance" and r.framework == "mega"]
    assert [r.name for r in best] == ["mega-llama-maximum_performance", "mega-qwen-maximum_performance"]
    assert [(r.layout.tp, r.layout.pp, r.layout.dp, r.layout.ga) for r in best] == llama_qwen
    assert {r.layout.dp * r.layout.ga for r in runs} == {64}  # MBS 1: GBS = DP x GA everywhere


def test_the_cpu_sweep_runs_strategies_that_fit_two_processes():
    runs = build_plan(node("cpu", 0, STRATEGY="balanced,memory_optimized", MODELS="llama", FRAMEWORK="mega,fsdp"))
    assert [(r.name, r.layout.tp, r.layout.pp, r.layout.dp, bool(r.skipped)) for r in runs] == [
        ("mega-llama-balanced", 2, 1, 1, False), ("fsdp-llama-balanced", 2, 1, 1, False),
        ("mega-llama-memory_optimized", 1, 2, 1, False), ("fsdp-llama-memory_optimized", 1, 2, 1, True)]


@pytest.mark.parametrize("framework", ["fsdp", "autotp"])
def test_a_torch_native_framework_skips_a_pipeline_layout_and_the_run_list_says_why(framework):
    cfg = node("nvd", STRATEGY="memory_optimized,maximum_performance", FRAMEWORK=f"mega,{framework}")
    runs = build_plan(cfg)
    skipped = {r.name: r.skipped for r in runs if r.skipped}
    assert set(skipped) == {f"{framework}-llama-memory_optimized", f"{framework}-qwen-memory_optimized",
                            f"{framework}-qwen-maximum_performance"}  # PP2 each; mega runs every one of them
    assert set(skipped.values()) == {f"{framework} has no pipeline parallelism (PP=2); the other frameworks run "
                                     "this layout"}
    lines = table(cfg, runs)
    listed = [line for line in lines if line.split()[1:2] and line.split()[1] in skipped]
    assert len(listed) == 3 and all(f"skipped: {framework} has no pipeline parallelism" in line for line in listed)
    assert "3 run(s) skipped (the reason is on each line), 5 to run" in lines


@pytest.mark.parametrize("knobs, reason", [
    ({"PRECISION": "fp8", "FP8_RECIPE": "tensorwise"},
     "autotp has no fp8 (tensorwise) switch (it trains bf16, fp32); mega, prim, nemo, mbridge, fsdp have one"),
    ({"COMPILE": "1"}, "autotp has no torch.compile (COMPILE=1 applies to fsdp, torchtitan)"),
    ({"SAC_FREQ": "1/2"}, "autotp has no activation checkpointing (SAC_FREQ=1/2 applies to fsdp)"),
])
def test_autotp_skips_what_deepspeed_autotp_cannot_do_and_fsdp_runs_it(knobs, reason):
    runs = build_plan(node("nvd", FRAMEWORK="fsdp,autotp", MODELS="llama", **knobs))
    assert [(r.name, r.skipped) for r in runs] == [("fsdp-llama", ""), ("autotp-llama", reason)]


@pytest.mark.parametrize("knobs, reason", [
    ({"ATTN_IMPL": "eager"}, "fsdp cannot run ATTN_IMPL=eager at TP=2: Hugging Face builds eager attention's "
                             "mask from the sequence-sharded embedding output, which would be wrong; ATTN_IMPL=sdpa "
                             "runs it"),
    ({"COMPILE": "1"}, "fsdp cannot run COMPILE=1 at TP=2: torch.compile computes wrong gradients for a decoder "
                       "layer under sequence parallelism (torch 2.15, measured on the CPU); COMPILE=0 runs it"),
])
def test_fsdp_skips_what_sequence_parallelism_cannot_run_only_where_tp_shards_the_sequence(knobs, reason):
    runs = build_plan(node("nvd", FRAMEWORK="fsdp", MODELS="llama", STRATEGY="balanced,minimal_communication", **knobs))
    assert [(r.name, r.skipped) for r in runs] == [("fsdp-llama-balanced", reason),  # TP2
                                                   ("fsdp-llama-minimal_communication", "")]  # TP1


def test_validation_runs_in_every_framework_of_the_set_torchtitan_too():
    runs = build_plan(node("nvd", FRAMEWORK="mega,fsdp,torchtitan", MODELS="llama", EVAL_INTERVAL="10"))
    assert [(r.name, r.skipped) for r in runs] == [("mega-llama", ""), ("fsdp-llama", ""), ("torchtitan-llama", "")]


def test_a_model_a_framework_has_no_name_for_is_skipped_with_its_reason_or_where_the_names_are():
    cfg = node("amd", FRAMEWORK="prim,fsdp", MODELS="mistral,llama70b", MODEL_LAYERS="8")
    runs = build_plan(cfg)
    why = "prim has no name for mistral (Primus ships no Mistral 7B experiment, only Mixtral's)"
    assert [(r.name, r.skipped) for r in runs] == [
        ("prim-mistral", why), ("prim-llama70b", ""), ("fsdp-mistral", ""), ("fsdp-llama70b", "")]
    assert any(line.split()[1:2] == ["prim-mistral"] and "mistral-7b-v0.1-L8 " in line
               and line.endswith(f"skipped: {why}") for line in table(cfg, runs))
    from utils.frameworks import TABLE
    unexplained = dataclasses.replace(TABLE["prim"], no_model={})
    assert unexplained.model_refusal("mistral") == \
        "prim has no name for mistral (utils/frameworks/prim/: its model_names has none)"
    with pytest.raises(ValueError, match="no_model names llama, which model_names has"):
        dataclasses.replace(TABLE["prim"], no_model={"llama": "why"})


def test_every_framework_with_names_has_one_for_each_benchmarked_model():
    from utils.frameworks import TABLE
    assert {name: sorted(set(entry.model_names) & {"llama", "qwen"}) for name, entry in TABLE.items()
            if entry.model_names is not None} == {"nemo": ["llama", "qwen"], "prim": ["llama", "qwen"],
                                                  "mbridge": ["llama", "qwen"], "torchtitan": ["llama", "qwen"]}
    plan = build_plan(node("nvd", MODELS="llama,qwen,llama70b,mistral", MODEL_LAYERS="8"))
    assert [(run.name, run.skipped) for run in plan if run.skipped] == [
        ("mbridge-mistral", "mbridge has no name for mistral (utils/frameworks/mbridge/: its model_names has none)"),
        ("torchtitan-mistral", "torchtitan has no name for mistral (utils/frameworks/torchtitan/: its model_names has "
                               "none)")]  # no Megatron-Bridge recipe for Mistral; no sliding window in torchtitan


def test_request_holds_identity_model_layout_workload_data_and_the_settings_typed():
    cfg = node("amd", STRATEGY="balanced", MODELS="qwen", FRAMEWORK="prim", NET_SOCKET_IFNAME="ens1f0",
               NET_LINK_GBPS="200", TARGET_DEVICE="mi300x")
    req = request(cfg, build_plan(cfg)[0])
    who, lay = req.identity, req.parallelism
    assert {"run_id": who.run_id, "platform": who.platform, "framework": who.framework, "model": who.model,
            "variant": who.variant, "strategy": lay.strategy, "repeat": who.repeat} == \
        {"run_id": "prim-qwen-balanced", "platform": "amd", "framework": "prim", "model": "qwen",
         "variant": "qwen2.5-7b", "strategy": "balanced", "repeat": 1}
    assert (lay.tp, lay.pp, lay.dp, lay.ga, req.training.gbs, lay.num_gpus) == (2, 2, 2, 32, 64, 8)
    assert lay.sequence_parallel is True
    assert req.fairness.profile == "spec" and req.fairness.table == profile("spec")
    assert req.fairness.workload == {"init_method_std": 0.02, "eod_mask_loss": False, "dataloader_type": "single",
                                     "padded_vocab_size": 152064, "lr_warmup_convention": "megatron"}
    assert req.data.prefix == "/data/bc_qwen_text_document" and req.data.tokenizer_dir == "/data/tokenizers/qwen"
    assert req.model == get_model("qwen") and req.model.variant == who.variant
    assert req.network == Network(socket_ifname="ens1f0", link_gbps=200.0) and req.environment.target_device == "mi300x"
    written = json.loads(json.dumps(req.to_json()))
    assert "knobs" not in written and written["model"]["num_layers"] == 28  # the spec's fields, no untyped copy
    assert Request.from_json(written) == req


def prepare(data_dir: Path, model: str, *, verified: bool = True) -> None:
    """A small pair with its tokenizer and a manifest as data.verify writes it."""
    prefix = data_dir / f"sample_{model}_text_document"
    tokenizer = data_dir / "tokenizers" / model
    tokenizer.mkdir(parents=True, exist_ok=True)
    (tokenizer / "tokenizer.json").write_text("{}")
    prefix.with_name(prefix.name + ".bin").write_bytes(np.arange(8, dtype=np.int32).tobytes())
    prefix.with_name(prefix.name + ".idx").write_bytes(b"MMIDIDX\x00\x00\x01" + bytes(7) + b"\x04" + bytes(16))
    write_manifest(prefix, tokenizer, model, verified=verified)


def test_data_check_names_what_is_missing_unverified_or_changed(tmp_path):
    prepare(tmp_path, "llama")
    prepare(tmp_path, "qwen", verified=False)
    problems = data_problems(node("cpu", 0, DATA_DIR=str(tmp_path)))
    assert len(problems) == 1 and problems[0].startswith("qwen:") and "verified" in problems[0]
    prepare(tmp_path, "qwen")
    assert data_problems(node("cpu", 0, DATA_DIR=str(tmp_path))) == []
    (tmp_path / "sample_qwen_text_document.bin").write_bytes(np.arange(1, 9, dtype=np.int32).tobytes())
    (changed,) = data_problems(node("cpu", 0, DATA_DIR=str(tmp_path)))
    assert changed.startswith(f"qwen: {tmp_path}/sample_qwen_text_document.bin: sha256 ") and "run_data.sh" in changed
    (tmp_path / "sample_llama_text_document.idx").unlink()
    assert data_problems(node("cpu", 0, DATA_DIR=str(tmp_path)))[0] == \
        f"llama: sample_llama_text_document.idx missing in {tmp_path}; prepare it: ./shell/run_data.sh"
    assert data_problems(node("cpu", 0, DATA_DIR=str(tmp_path), MOCK_DATA="1")) == []


def test_estimate_comes_from_earlier_identical_runs_only(tmp_path):
    cfg = node("nvd", FRAMEWORK="mega", MODELS="llama", OUTPUT_DIR=str(tmp_path))
    req = request(cfg, build_plan(cfg)[0])
    assert estimate_s(tmp_path, req) is None
    for index, (wall, tp) in enumerate([(100.0, 1), (140.0, 1), (900.0, 1), (5.0, 2)]):
        run_dir = tmp_path / f"set{index}" / "mega-llama"
        run_dir.mkdir(parents=True)
        replace(req, parallelism=replace(req.parallelism, tp=tp)).write(run_dir / "config.json")
        (run_dir / "launch.json").write_text(json.dumps({"status": "ok", "wall_s": wall}))
    assert estimate_s(tmp_path, req) == 140.0  # median of the three identical runs; TP2 is other work
    assert any("estimated total: 2m20s" in line for line in table(cfg, build_plan(cfg)))


def test_a_named_strategy_is_part_of_each_runs_name(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "TPRIMAT_DETECTED_PLATFORM": "nvd", "TPRIMAT_DETECTED_GPUS": "8",
           "FRAMEWORK": "nemo", "STRATEGY": "balanced", "HOME": str(tmp_path), "OUTPUT_DIR": str(tmp_path)}
    runs = build_plan(load_config(env))
    assert [(r.name, r.framework, r.model, r.strategy, r.repeat) for r in runs] == \
        [("nemo-llama-balanced", "nemo", "llama", "balanced", 1), ("nemo-qwen-balanced", "nemo", "qwen", "balanced", 1)]


def test_a_bad_configuration_exits_2_naming_it(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "TPRIMAT_DETECTED_PLATFORM": "nvd", "TPRIMAT_DETECTED_GPUS": "8",
           "TP": "3", "STRATEGY": "", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "train.plan"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "TP=3" in out.stderr and "Traceback" not in out.stderr


def test_request_config_is_the_loaded_configuration():
    cfg = load_config({"TPRIMAT_DETECTED_PLATFORM": "cpu", "TPRIMAT_DETECTED_GPUS": "0", "HOME": "/h",
                       "MODEL_LAYERS": "1"})
    req = request(cfg, build_plan(cfg)[0], commit="abc123")
    assert req.training.steps == cfg["TRAIN_ITERS"] and req.identity.variant == "llama3.1-8b-tiny-L1"
    assert req.model == cfg.model("llama") and req.model.num_layers == 1 and req.identity.commit == "abc123"
    assert Request.from_json(json.loads(json.dumps(req.to_json()))).model == req.model  # a proxy's spec travels



AVX2_ONLY = Path(__file__).parent / "fixtures" / "train" / "cpuinfo_avx2_only"  # a CPU without bf16 instructions


@pytest.mark.parametrize("precision, shown", [
    ("auto", "fp32 (this CPU has no bf16 instructions (AVX-512 BF16, AMX, Arm BF16): bf16 would be emulated"),
    ("bf16", "bf16, emulated: this CPU has no bf16 instructions (tens of times slower than fp32)"),
])
def test_the_cpu_run_list_shows_the_precision_and_why(monkeypatch, precision, shown):
    monkeypatch.setenv("TPRIMAT_CPUINFO", str(AVX2_ONLY))
    cfg = node("cpu", gpus=0, PRECISION=precision, TPRIMAT_CPUINFO=str(AVX2_ONLY))
    header = table(cfg, build_plan(cfg))[0]
    assert shown in header and header.endswith("2 worker process(es)")


def test_the_request_carries_the_chosen_fairness_profile_and_each_framework_s_warm_up():
    cfg = node("nvd", MODELS="llama", FRAMEWORK="all", FAIRNESS="tuned", STACK="nemo-25.04")
    reqs = {run.framework: request(cfg, run) for run in build_plan(cfg)}
    assert {fw: (r.fairness.profile, r.fairness.table["overlap_grad_reduce"]) for fw, r in reqs.items()} == \
        {fw: ("tuned", True) for fw in ("mega", "nemo", "fsdp", "autotp")}
    assert {fw: r.fairness.workload["lr_warmup_convention"] for fw, r in reqs.items()} == \
        {"mega": "megatron", "nemo": "nemo-cosine-annealing", "fsdp": "megatron", "autotp": "megatron"}
    assert {r.fairness.workload["padded_vocab_size"] for r in reqs.values()} == {128256}


def test_the_request_carries_the_torch_native_knobs():
    cfg = node("cpu", 0, FRAMEWORK="fsdp", MODELS="qwen", COMPILE="1", COMPILE_MODE="max-autotune",
               SAC_FREQ="1/4", ATTN_IMPL="eager", ZERO_STAGE="2")
    native = request(cfg, build_plan(cfg)[0]).native
    assert (native.data_parallel, native.compile, native.compile_mode, native.sac_every, native.attn_impl,
            native.zero_stage) == ("fsdp", True, "max-autotune", 4, "eager", 2)


def test_llama32_plans_at_full_size_on_gpu_nodes_with_its_memory_predicted():
    """A new model is one entry: Llama 3.2 3B plans on both vendors' nodes in every framework with a name for it."""
    from train.plan import predictions
    for platform, device in (("nvd", "h100"), ("amd", "mi300x")):
        cfg = node(platform, FRAMEWORK="all", MODELS="llama32", TARGET_DEVICE=device)
        runs = build_plan(cfg)
        found = predictions(cfg, runs)
        assert {run.name: run.skipped for run in runs if run.skipped} == (
            {"prim-llama32": "prim has no name for llama32 (utils/frameworks/prim/: its model_names has none)"}
            if platform == "amd" else {})
        assert all(request(cfg, run).model.variant == "llama3.2-3b" for run in runs)
        assert all(15 < found[run.name].memory.peak / 2 ** 30 < 40 and found[run.name].fits for run in runs
                   if not run.skipped), {name: p.memory_line() for name, p in found.items()}


def test_the_request_carries_the_held_out_validation_and_the_summary_line_its_cadence():
    off = node("nvd", FRAMEWORK="mega", MODELS="llama")
    req = request(off, build_plan(off)[0])
    assert not req.evaluation.enabled and req.evaluation.megatron_split() == "100,0,0"
    assert "validation" not in table(off, build_plan(off))[0]
    cfg = node("nvd", FRAMEWORK="mega", MODELS="llama", EVAL_INTERVAL="100", EVAL_TOKENS="200000",
               VALIDATION_PERCENT="4", TARGET_LOSS="3.3")
    req = request(cfg, build_plan(cfg)[0])
    assert req.evaluation == Evaluation(interval_steps=100, tokens=200000, validation_percent=4, target_loss=3.3)
    assert req.result_training()["validation_split"] == "96,4,0"
    written = json.loads(json.dumps(req.to_json()))
    assert Request.from_json(written) == req
    del written["evaluation"]  # a config.json written before validation existed asked for none
    assert Request.from_json(written).evaluation == NO_EVALUATION
    assert ("validation every 100 steps over 2 global batch(es) (262,144 tokens), 4% of the documents held out, "
            "stop at validation loss <= 3.3") in table(cfg, build_plan(cfg))[0]


def test_torchtitan_on_the_amd_stack_whose_torch_is_too_old_is_skipped_with_the_floor():
    runs = build_plan(node("amd", FRAMEWORK="mega,torchtitan", MODELS="llama", STACK="primus-v26.5"))
    assert [(run.name, run.skipped) for run in runs] == [
        ("mega-llama", ""),
        ("torchtitan-llama", "torchtitan (torchtitan) is on no amd stack: torchtitan needs torch 2.13 or later "
                             "(torchtitan 0.3.0 imports torch.distributed.fsdp.DataParallelMeshDims and calls "
                             "create_block_mask(separate_full_blocks=...), both new in torch 2.13), not 2.12.0 "
                             "(stack primus-v26.5)")]


@pytest.fixture
def image_python(monkeypatch, tmp_path) -> Path:
    """The image's Python as the docker runtime's matrix sees it, whose torchtitan fails at import; its calls logged."""
    facts = {"torch": "2.11.0+cu130", "hip": None, "cuda": "13.0", "gpus": 8,
             "modules": {"torchtitan.train": "ImportError: cannot import name 'DataParallelMeshDims'",
                         "megatron.core": "", "transformer_engine": ""}}
    log = tmp_path / "calls"
    for key, value in {"TPRIMAT_RUNTIME": "docker", "FAKE_STACK_FACTS": json.dumps(facts), "FAKE_LOG": str(log),
                       "FAKE_REAL_PYTHON": sys.executable,
                       "TPRIMAT_PYTHON": str(ROOT / "tests" / "fakebin" / "fake-gpu-python")}.items():
        monkeypatch.setenv(key, value)
    return log


def test_in_the_image_a_framework_that_does_not_import_is_skipped_with_the_import_error(image_python):
    cfg = node("nvd", FRAMEWORK="mega,torchtitan", MODELS="llama")
    runs = importable(cfg, build_plan(cfg))
    assert [(run.name, run.skipped.split(": ")[:2]) for run in runs] == [
        ("mega-llama", [""]),
        ("torchtitan-llama", [f"torchtitan does not import in {ROOT}/tests/fakebin/fake-gpu-python (torch "
                              "2.11.0+cu130)", "torchtitan.train"])]
    assert "needs torch 2.13 or later" in runs[1].skipped
    assert "--frameworks mega\\,torchtitan" in image_python.read_text()  # printf %q escapes the comma


@pytest.mark.parametrize("change", [{"DRY_RUN": "1"}, {"TPRIMAT_RUNTIME": "host"}])
def test_a_dry_run_and_the_host_runtime_do_not_ask_the_image(image_python, monkeypatch, change):
    for key, value in change.items():
        monkeypatch.setenv(key, value)
    cfg = node("nvd", FRAMEWORK="mega,torchtitan", MODELS="llama", **({"DRY_RUN": "1"} if "DRY_RUN" in change else {}))
    assert importable(cfg, build_plan(cfg)) == build_plan(cfg) and not image_python.exists()
