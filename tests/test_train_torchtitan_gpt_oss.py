"""torchtitan on GPT-OSS-20B: TPrimat's spec as torchtitan 0.3.0's own gpt_oss model (train/torchtitan/gpt_oss.py),
every feature of the spec as the spec means it, no load-balancing loss (its expert bias off), what it built read back
for the judge (effective.moe in megatron-core's names, effective.model_features off the built model).

The mapping is checked without torchtitan. Then torchtitan's own ConfigManager builds the tiny and the full model from
TPrimat's config function (on the meta device: the spec's parameters exactly) and the read-back passes the judge; the
full model's config is torchtitan's own `_20b` but for the expert bias; and the tiny model, given Hugging Face's
GptOssForCausalLM's weights, computes what Hugging Face's computes, layer by layer: the attention (the window, which
layers have it, the sinks, YaRN and its attention factor, the biases), the router (its bias, top-k, softmax over the
top-k) and the experts (their biases, the clamped SwiGLU, in bf16 as torchtitan computes them).

torchtitan's GPT-OSS does not train on the CPU: its sinks need the attention's log-sum-exp, which FlexAttention gives
with no backward on the CPU and flash attention (varlen) only on GPUs; and its experts return bf16 into an fp32 run's
activations, which its combine refuses. The probe shows both, so that the refusals (train/torchtitan/settings.py) go
when torch or torchtitan changes; the build and the forward are what CI checks, the training is a GPU's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluate import model_checks
from tests.fixtures.train import torchtitan_overlay
from tests.fixtures.train.torchtitan_overlay import request
from tests.fixtures.train_matrix.requests import run_request
from tests.test_train_torchtitan import RUN_DIR, probe
from tests.test_train_torchtitan_moe import expected_moe
from train.torchtitan import settings as titan_settings
from utils.errors import UsageError
from utils.frameworks.torchtitan import FRAMEWORK, MODEL_NAMES
from utils.spec.models import get_model
from utils.spec.result_types import typed

ROOT = Path(__file__).resolve().parent.parent
# Hugging Face computes in fp32 throughout, torchtitan's experts in bf16 (measured 6.7e-3 of the largest output)
ATTENTION_TOLERANCE, ROUTER_TOLERANCE, EXPERTS_TOLERANCE = 1e-5, 1e-6, 2e-2


def gptoss_request(size: str = "full", **env: str):
    return request("gptoss", MODEL_SIZE=size, TP="1", PP="1", DP="8", **env)


# --- the mapping, without torchtitan --------------------------------------------------------------------------------

def test_torchtitan_builds_gpt_oss_as_its_gpt_oss_model_at_tp_1_only():
    assert MODEL_NAMES["gptoss"] == "gpt_oss" and FRAMEWORK.model_refusal("gptoss", 1) == ""
    assert FRAMEWORK.model_refusal("gptoss", 2).startswith("torchtitan runs gptoss at TP=1 only (TP=2): ")


def test_every_feature_number_and_no_load_balancing_loss_are_the_specs():
    req = gptoss_request(EP="2")
    written, spec = titan_settings.settings(req, RUN_DIR), req.model
    numbers, values = written["model"], written["set"]
    assert numbers["name"] == "gpt_oss" and written["attention"] == "flex"
    assert (numbers["sliding_window"], numbers["full_attention_every"], numbers["swiglu_limit"]) == (128, 2, 7.0)
    assert numbers["rope_scaling"] == spec.rope_scaling and numbers["rope_scaling"]["rope_type"] == "yarn"
    assert (numbers["head_dim"], numbers["n_heads"], numbers["n_kv_heads"]) == (64, 64, 8)
    assert numbers["moe"] == dataclasses.asdict(spec.moe) and numbers["moe"]["load_balancing"] == "none"
    assert values["moe_aux_loss_coeff"] is None and values["parallelism.expert_parallel_degree"] == 2


def test_gpt_oss_on_the_cpu_or_in_fp32_is_refused_in_one_line():
    cpu = run_request("cpu", "torchtitan", "gptoss", FRAMEWORK="torchtitan", MODELS="gptoss")
    with pytest.raises(UsageError) as err:
        titan_settings.settings(cpu, RUN_DIR)
    line = str(err.value)
    assert "\n" not in line and "gptoss on the cpu: torchtitan's GPT-OSS attention scales its output by the " \
        "sinks with the attention's log-sum-exp" in line and "run it on a GPU" in line
    gpu = gptoss_request()
    fp32 = dataclasses.replace(gpu, training=dataclasses.replace(gpu.training, precision="fp32"))
    with pytest.raises(UsageError, match="gptoss with PRECISION=fp32: torchtitan's GPT-OSS experts return bf16"):
        titan_settings.settings(fp32, RUN_DIR)


# --- torchtitan 0.3.0 installed -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def torchtitan_path():
    return torchtitan_overlay.installed()


def run_probe(torchtitan_path: Path, script: str, numbers: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(torchtitan_path), "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, "-c", script, json.dumps(numbers)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("size, ep", [("tiny", 1), ("full", 2)])
def test_torchtitans_own_classes_build_the_specs_gpt_oss_and_read_it_back(torchtitan_path, tmp_path, size, ep):
    """TPrimat's config through torchtitan's ConfigManager: its gpt_oss model with the spec's parameters, every set
    field kept, no router given a loss, and the read-back of a GPU run passing the judge's model checks."""
    req = gptoss_request(size, EP=str(ep))
    found, spec = probe(torchtitan_path, tmp_path, req), req.model
    assert (found["model"], found["parallelize"]) == ("gpt_oss", "parallelize_gptoss")
    assert [path for path, kept in found["kept"].items() if not kept] == []
    assert found["parameters"] == spec.param_count()
    assert found["norm_eps"] == [spec.norm_eps] and found["scales"] == []
    effective = found["effective"]
    assert sorted(effective["model_features"]) == sorted(spec.features) and len(spec.features) == 6
    assert (effective["head_dim"], effective["qk_norm"], effective["ep"]) == (spec.head_dim, False, ep)
    assert effective["moe"] == expected_moe(spec, ep, "local")
    result = typed({"model": {"variant": spec.variant, "parameters": spec.param_count(),
                              "active_parameters": spec.active_param_count(), "moe": dataclasses.asdict(spec.moe)},
                    "effective": effective})
    assert model_checks.problems(result) == []


SAME_AS_20B = r"""
import dataclasses, json, sys
from torchtitan.models.gpt_oss import gptoss_configs
from train.torchtitan import config_registry

def fields(config, path="model"):
    '''Every number and setting of a config tree by its path, the parameter initialisations and sharding left out.'''
    if isinstance(config, (list, tuple)):
        return {key: value for i, item in enumerate(config) for key, value in fields(item, f"{path}[{i}]").items()}
    if not dataclasses.is_dataclass(config):
        return {path: config}
    found = {path: type(config).__qualname__}
    for field in dataclasses.fields(config):
        if field.name not in ("param_init", "sharding_config"):
            found.update(fields(getattr(config, field.name), f"{path}.{field.name}"))
    return found

ours = fields(config_registry.build_model(json.loads(sys.argv[1])))
theirs = fields(gptoss_configs["20b"](moe_comm_backend="standard", attn_backend="flex"))
print(json.dumps({key: [ours.get(key), theirs.get(key)] for key in sorted(ours.keys() | theirs.keys())
                  if ours.get(key) != theirs.get(key)}, default=str))
"""


def test_the_full_model_is_torchtitans_own_20b_but_for_its_expert_bias(torchtitan_path):
    """Every field of the config TPrimat builds from the spec (windows, heads, biases, RoPE and YaRN, experts, router,
    norms) is torchtitan's own GPT-OSS-20B's; only its auxiliary-loss-free expert bias is off (the spec's "none")."""
    numbers = titan_settings.settings(gptoss_request(), RUN_DIR)["model"]
    differences = run_probe(torchtitan_path, SAME_AS_20B, numbers)
    assert set(differences) == {f"model.layers[{i}].moe.load_balance_coeff" for i in range(24)}
    assert {ours for ours, _ in differences.values()} == {None}


REFERENCE = r"""
import json, sys
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torchtitan.models.common import attention as titan_attention
from torchtitan.models.gpt_oss.moe import swiglu
from transformers import GptOssConfig, GptOssForCausalLM
from train.torchtitan import config_registry

# torchtitan compiles flex_attention and create_block_mask with inductor; here torch's own functions run eagerly
titan_attention.FlexAttention._compiled_flex_attn = flex_attention
titan_attention._compiled_create_block_mask = create_block_mask
numbers = json.loads(sys.argv[1])
moe, window, limit = numbers["moe"], numbers["sliding_window"], numbers["swiglu_limit"]
RENAMES = [("model.", ""), ("embed_tokens", "tok_embeddings"), ("input_layernorm", "attention_norm"),
           ("post_attention_layernorm", "ffn_norm"), ("self_attn.q_proj", "attention.qkv_linear.wq"),
           ("self_attn.k_proj", "attention.qkv_linear.wk"), ("self_attn.v_proj", "attention.qkv_linear.wv"),
           ("self_attn.o_proj", "attention.wo"), ("self_attn.sinks", "attention.sinks"),
           ("mlp.router", "moe.router.gate"), ("mlp.experts.", "moe.routed_experts.inner_experts."),
           ("gate_up_proj_bias", "mlp1_bias_EG"), ("down_proj_bias", "mlp2_bias_ED"),
           ("gate_up_proj", "mlp1_weight_EGD"), ("down_proj", "mlp2_weight_EDF")]


def hugging_face(window):
    '''Hugging Face's GPT-OSS with the spec's numbers; which layers have the window is its own default (GPT-OSS's).'''
    return GptOssForCausalLM(GptOssConfig(
        num_hidden_layers=numbers["num_layers"], hidden_size=numbers["dim"], intermediate_size=moe["expert_ffn_size"],
        head_dim=numbers["head_dim"], num_attention_heads=numbers["n_heads"], num_key_value_heads=numbers["n_kv_heads"],
        sliding_window=window, vocab_size=numbers["vocab_size"], max_position_embeddings=numbers["max_seq_len"],
        rms_norm_eps=numbers["norm_eps"], rope_parameters={"rope_theta": numbers["rope_theta"],
                                                           **numbers["rope_scaling"]},
        num_local_experts=moe["num_experts"], num_experts_per_tok=moe["top_k"], swiglu_limit=limit,
        tie_word_embeddings=numbers["tied_embeddings"], attention_bias=True, attn_implementation="eager")).eval()


def captured(model):
    '''Each layer's attention and MLP input and output in one forward of a Hugging Face model.'''
    found = {}
    for i, layer in enumerate(model.model.layers):
        layer.self_attn.register_forward_hook(
            lambda m, a, kw, out, i=i: found.__setitem__(("attention", i), (kw["hidden_states"], out[0])),
            with_kwargs=True)
        layer.mlp.register_forward_hook(lambda m, a, out, i=i: found.__setitem__(("mlp", i), (a[0], out[0])))
    with torch.no_grad():
        model(tokens)
    return found


def relative(got, want):
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


torch.manual_seed(0)
hf = hugging_face(window)
with torch.no_grad():  # every weight, bias and sink large enough to matter
    for name, p in hf.named_parameters():
        p.normal_(std=1.0 if "embed" in name or "sinks" in name else 0.1).add_(float(name.endswith("norm.weight")))
titan = config_registry.build_model(numbers).build().eval()
state = {}
for key, value in hf.state_dict().items():
    for old, new in RENAMES:
        key = key.replace(old, new)
    state[key] = value.transpose(1, 2) if key.endswith(("_EGD", "_EDF")) else value
titan.load_state_dict(state)  # torchtitan's fused QKV merges wq, wk and wv as it loads
B, L = 2, 80  # past the window
tokens = torch.randint(0, numbers["vocab_size"], (B, L), generator=torch.Generator().manual_seed(1))
positions = torch.arange(L).expand(B, L)
ours = captured(hf)
longer = hugging_face(window + 1)
longer.load_state_dict(hf.state_dict())
shifted = captured(longer)
found = {key: [] for key in ("attention", "window_plus_one", "same_experts", "router", "experts", "clamped")}
with torch.no_grad():
    masks = titan.get_attention_masks(positions)
    for i, block in enumerate(titan.layers.values()):
        for name, run in (("attention", ours), ("window_plus_one", shifted)):
            x, want = run[("attention", i)]
            found[name].append(relative(block.attention(x, masks[block.attn_mask_key], positions), want))
        x = ours[("mlp", i)][0].reshape(B * L, -1)
        scores, chosen, _ = block.moe.router(x)
        _, hf_scores, hf_chosen = hf.model.layers[i].mlp.router(x)
        mine, theirs = chosen.sort(-1), hf_chosen.sort(-1)
        found["same_experts"].append(torch.equal(mine.values, theirs.values))
        found["router"].append(relative(scores.gather(-1, mine.indices), hf_scores.gather(-1, theirs.indices)))
        experts, hf_experts = block.moe.routed_experts.inner_experts, hf.model.layers[i].mlp.experts
        wide, count = 4 * x, moe["num_experts"]  # wide enough for the clamp to act
        got = experts(wide.repeat(count, 1), torch.full((count,), wide.shape[0], dtype=torch.int64))
        gate_up = torch.stack([wide @ hf_experts.gate_up_proj[e] + hf_experts.gate_up_proj_bias[e]
                               for e in range(count)])
        want = torch.stack([hf_experts._apply_gate(gate_up[e]) @ hf_experts.down_proj[e] + hf_experts.down_proj_bias[e]
                            for e in range(count)])
        found["experts"].append(relative(got, want.reshape(got.shape)))
        found["clamped"].append((gate_up[..., ::2] > limit).float().mean().item())
    line = torch.linspace(-3 * limit, 3 * limit, 6000).reshape(1, -1)
    found["swiglu"] = torch.allclose(swiglu(line, limit=limit), hf.model.layers[0].mlp.experts._apply_gate(line),
                                     rtol=1e-6, atol=1e-6)
    try:
        titan(tokens, positions=positions, attention_masks=masks)
        found["fp32"] = "ran"
    except RuntimeError as err:
        found["fp32"] = str(err)
x = ours[("attention", 0)][0].clone().requires_grad_()
try:
    titan.layers["0"].attention(x, masks["sliding_window_mask"], positions).sum().backward()
    found["cpu_backward"] = "ran"
except NotImplementedError as err:
    found["cpu_backward"] = str(err)
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def compared(torchtitan_path):
    """The tiny model's layers, torchtitan's against Hugging Face's with the same weights (REFERENCE)."""
    return run_probe(torchtitan_path, REFERENCE, titan_settings.settings(gptoss_request("tiny"), RUN_DIR)["model"])


def test_the_tiny_models_attention_is_hugging_faces_window_sinks_yarn_and_biases(compared):
    """Every layer's attention output is Hugging Face's on the same input: the window on layer 1 (counted from 1)
    and full attention on layer 2, the sinks, YaRN's frequencies and attention factor, the QKV and output biases. With
    a window one token longer, Hugging Face's windowed layer differs and its full layer does not: a window of W is a
    token and the W - 1 before it, in both."""
    assert get_model("gptoss", "tiny").sliding_window < 80  # the probe's sequence runs past the window
    assert max(compared["attention"]) < ATTENTION_TOLERANCE
    windowed, full = compared["window_plus_one"]
    assert windowed > 100 * ATTENTION_TOLERANCE and full < ATTENTION_TOLERANCE


def test_the_tiny_models_router_and_experts_are_hugging_faces(compared):
    """The router (its bias; softmax over all experts, top-k renormalised: Hugging Face's softmax over the top-k)
    picks the same experts with the same weights; each expert (the biases, the interleaved gate and up, the clamp, the
    1.702 and the + 1) computes Hugging Face's output to bf16's precision, with the clamp acting on some gates; the
    clamped SwiGLU itself is Hugging Face's exactly, on both sides of the limit."""
    assert all(compared["same_experts"]) and max(compared["router"]) < ROUTER_TOLERANCE
    assert max(compared["experts"]) < EXPERTS_TOLERANCE and min(compared["clamped"]) > 0.01
    assert compared["swiglu"] is True


def test_torchtitans_gpt_oss_trains_neither_on_the_cpu_nor_in_fp32(compared):
    """What the refusals stand on: FlexAttention (the sinks' log-sum-exp) has no backward on the CPU, and an fp32
    forward stops where the experts' bf16 output is added into fp32 activations."""
    assert compared["cpu_backward"].startswith("FlexAttention does not support backward on CPU")
    assert compared["fp32"] == "scatter(): Expected self.dtype to be equal to src.dtype"
