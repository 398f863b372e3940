"""mbridge on the mixture-of-experts Qwen3 30B-A3B, checked without Megatron-Bridge installed: Megatron-Bridge's own
recipe (qwen3_30b_a3b_pretrain_config) with the experts and routing every framework runs (utils.spec.fairness
.moe_settings) and what only that recipe switches on switched off, the model's Hugging Face config as its Qwen3 MoE
bridge reads it, and the plan on an 8-GPU NVIDIA node. tests/test_train_mbridge_build.py builds and finalizes these
settings with Megatron-Bridge itself; tests/test_train_mbridge_cpu.py trains the tiny model with it."""

from __future__ import annotations

import pytest

from tests.fixtures.train_matrix.requests import run_request
from tests.fixtures.train_matrix.shell import machine, read, request, run_dirs
from train.mbridge.launch import write_model_dir
from train.mbridge.recipe import MOE_AS_THE_OTHERS, TE_MOE_KERNELS, recipe_settings
from utils.spec.fairness import moe_settings
from utils.spec.models import get_model

RUN_DIR = "/out/set/mbridge-qwen3moe"


def settings_for(model: str = "qwen3moe", platform: str = "nvd", **env: str) -> dict:
    return recipe_settings(run_request(platform, "mbridge", model, FRAMEWORK="mbridge", MODELS=model, **env), RUN_DIR)


def moe_paths(settings: dict) -> dict:
    """The settings of the experts and routing, and those of MOE_AS_THE_OTHERS."""
    return {path: value for path, value in settings["set"].items()
            if path.startswith(("model.moe_", "model.num_moe_experts", "model.expert_tensor"))
            or path in MOE_AS_THE_OTHERS}


@pytest.mark.parametrize("size, ep", [("full", "8"), ("tiny", "1")])
def test_every_moe_setting_is_set_on_the_model_in_megatron_cores_names_with_the_layouts_ep(size, ep):
    s = settings_for(MODEL_SIZE=size, EP=ep)
    spec = get_model("qwen3moe", size)
    wanted = {f"model.{name}": value for name, value in moe_settings(spec.moe).items()}
    assert {path: s["set"][path] for path in wanted} == wanted
    assert (s["set"]["model.expert_model_parallel_size"], s["set"]["model.expert_tensor_parallel_size"]) == \
        (int(ep), s["set"]["model.tensor_model_parallel_size"])  # the experts split over TP, as megatron-core's default
    assert s["moe"] == [*moe_settings(spec.moe), "expert_model_parallel_size"]  # what the read-back reports


def test_what_only_the_moe_recipe_switches_on_is_off():
    s = settings_for()["set"]
    assert {path: s[path] for path in MOE_AS_THE_OTHERS} == {
        "model.moe_flex_dispatcher_backend": None, "model.cuda_graph_impl": "none", "model.cuda_graph_scope": None,
        "model.use_te_rng_tracker": False, "rng.te_rng_tracker": False, "model.moe_router_fusion": False,
        "model.recompute_granularity": None, "model.recompute_method": None, "model.recompute_num_layers": None,
        "optimizer.use_precision_aware_optimizer": False}
    assert s["model.moe_token_dispatcher_type"] == "alltoall"


@pytest.mark.parametrize("model", ["llama", "qwen", "llama70b", "llama32"])
def test_a_dense_recipe_gets_no_moe_setting_and_keeps_its_own(model):
    s = settings_for(model)
    assert moe_paths(s) == {} and s["moe"] is None
    assert not {"model.kv_channels", "model.qk_layernorm"} & set(s["set"])  # megatron-core derives them as before


@pytest.mark.parametrize("size, head_dim", [("full", 128), ("tiny", 64)])
def test_the_head_width_and_qk_norm_are_the_specs(size, head_dim):
    s = settings_for(MODEL_SIZE=size)["set"]
    assert (s["model.kv_channels"], s["model.qk_layernorm"]) == (head_dim, True)
    assert s["model.kv_channels"] != s["model.hidden_size"] // s["model.num_attention_heads"]


@pytest.mark.parametrize("platform, env", [("cpu", {}), ("nvd", {"TRANSFORMER_IMPL": "local"})])
def test_megatron_cores_local_layers_run_without_transformer_engines_moe_kernels(platform, env):
    s = settings_for(platform=platform, **env)
    assert s["transformer_impl"] == "local"
    assert {name: s["set"][f"model.{name}"] for name in TE_MOE_KERNELS} == dict.fromkeys(TE_MOE_KERNELS, False)
    assert all(settings_for()["set"][f"model.{name}"] for name in TE_MOE_KERNELS)  # Transformer Engine's layers


@pytest.mark.parametrize("size", ["full", "tiny"])
def test_the_model_folder_is_a_qwen3_moe_config_its_bridge_reads_as_the_spec(tmp_path, size):
    """The Qwen3 MoE bridge is picked by the config's architecture and reads head_dim, num_experts,
    num_experts_per_tok, moe_intermediate_size, router_aux_loss_coef and norm_topk_prob (Megatron-Bridge 0.6.2
    models/conversion/model_bridge.py CONFIG_MAPPING, models/qwen/qwen3_moe_bridge.py)."""
    from transformers import AutoConfig

    req = run_request("nvd", "mbridge", "qwen3moe", FRAMEWORK="mbridge", MODELS="qwen3moe", MODEL_SIZE=size)
    folder = write_model_dir(req, recipe_settings(req, str(tmp_path)))
    config, spec = AutoConfig.from_pretrained(folder), req.model
    assert (config.model_type, config.architectures) == ("qwen3_moe", ["Qwen3MoeForCausalLM"])
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
            config.head_dim, config.attention_bias, config.tie_word_embeddings) == \
        (spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, False, False)
    assert (config.num_experts, config.num_experts_per_tok, config.moe_intermediate_size, config.norm_topk_prob,
            config.router_aux_loss_coef, config.decoder_sparse_step, config.mlp_only_layers) == \
        (spec.moe.num_experts, spec.moe.top_k, spec.moe.expert_ffn_size, spec.moe.norm_topk_prob,
         spec.moe.aux_loss_coeff, 1, [])


def test_a_dry_run_on_an_8_gpu_nvidia_node_plans_the_moe_recipe_with_its_predicted_memory(tmp_path):
    fake = machine(tmp_path, engine=True, nvidia=8)
    result = fake.run("shell/run_train.sh", DRY_RUN="1", FRAMEWORK="mbridge", MODELS="qwen3moe", EP="8",
                      TARGET_DEVICE="h100")
    assert result.returncode == 0, result.output
    lines = result.output.splitlines()
    row = next(i for i, line in enumerate(lines) if line.split()[1:2] == ["mbridge-qwen3moe"])
    assert " TP1 PP1 DP8 EP8 GA8 " in lines[row] and "skipped" not in lines[row]
    assert lines[row + 1].strip().startswith("predicted peak ") and "of 79.6 GiB: fits" in lines[row + 1]
    (run_dir,) = run_dirs(tmp_path / "output")
    settings = read(run_dir / "mbridge_settings.json")
    assert (request(run_dir).parallelism.ep, settings["recipe"]) == (8, "qwen.qwen3_30b_a3b_pretrain_config")
    assert settings["set"]["model.expert_model_parallel_size"] == 8
    assert (run_dir / "mbridge" / "hf" / "Qwen" / "Qwen3-30B-A3B" / "config.json").is_file()
