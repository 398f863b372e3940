"""fsdp's tensor-parallel plan (train/native/tensor_parallel.py) without training: which module gets which
ParallelStyle (torchtitan's apply_tp under Hugging Face's names), that the names and call conventions are the
installed transformers', and the combinations the engine refuses. Training at TP=2 against DP=2 is
tests/test_train_fsdp_runs.py's test_tensor_parallel_matches_data_parallel."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel)

from tests.fixtures.train_matrix.requests import run_request
from train.common.outcome import SettingsError
from train.fsdp import engine as fsdp
from train.native import model as native_model
from train.native import tensor_parallel
from utils.spec.models import get_model


def test_the_plan_is_torchtitans_embedding_norms_and_head_included():
    root, layer = tensor_parallel.plans(fp8=False)
    embedding, head = root["model.embed_tokens"], root["lm_head"]
    assert type(embedding) is RowwiseParallel and embedding.output_layouts == (Shard(1),)
    assert type(head) is ColwiseParallel and head.input_layouts == (Shard(1),)
    assert head.output_layouts == (Shard(-1),) and head.use_local_output is False  # the loss takes the shards
    assert type(root["model.norm"]) is SequenceParallel
    assert all(type(layer[name]) is SequenceParallel for name in ("input_layernorm", "post_attention_layernorm"))
    attention, mlp = layer["self_attn"], layer["mlp"]
    assert type(attention) is PrepareModuleInput and attention.input_layouts is None
    assert (attention.input_kwarg_layouts, attention.desired_input_kwarg_layouts) == (
        {"hidden_states": Shard(1)}, {"hidden_states": Replicate()})
    assert (mlp.input_layouts, mlp.desired_input_layouts) == ((Shard(1),), (Replicate(),))
    assert all(type(layer[name]) is ColwiseParallel for name in tensor_parallel.COLUMN)
    assert all(type(layer[name]) is RowwiseParallel and layer[name].output_layouts == (Shard(1),)
               for name in tensor_parallel.ROW)
    said = tensor_parallel.description(fp8=False)
    assert said["lm_head"] == "ColwiseParallel Shard(dim=1) -> Shard(dim=-1)"
    assert said["layers.N.self_attn"] == "PrepareModuleInput hidden_states: Shard(dim=1) -> Replicate()"


@pytest.mark.parametrize("key", ["llama", "qwen"])
def test_every_planned_module_exists_and_is_called_as_the_plan_expects(key):
    """PrepareModuleInput converts only the arguments it is told of: self_attn must get hidden_states by keyword,
    mlp positionally, in the installed transformers."""
    model = native_model.build(get_model(key, "tiny"), "sdpa", seed=1, device=torch.device("cpu"))
    root, layer_plan = tensor_parallel.plans(fp8=False)
    layer = model.model.layers[0]
    for name in root:
        model.get_submodule(name)
    for name in layer_plan:
        layer.get_submodule(name)
    calls = {}

    def seen(name):
        def hook(module, args, kwargs) -> None:  # returns nothing: the call goes on unchanged
            calls.setdefault(name, (len(args), sorted(kwargs)))
        return hook

    layer.self_attn.register_forward_pre_hook(seen("self_attn"), with_kwargs=True)
    layer.mlp.register_forward_pre_hook(seen("mlp"), with_kwargs=True)
    layer.self_attn.register_forward_pre_hook(tensor_parallel.check_mask, with_kwargs=True)  # SDPA: no mask
    tokens = torch.randint(0, 100, (1, 8))
    with torch.no_grad():
        model(input_ids=tokens, position_ids=torch.arange(8)[None], use_cache=False)
    assert calls["self_attn"][0] == 0 and "hidden_states" in calls["self_attn"][1]
    assert calls["mlp"] == (1, [])


def test_an_explicit_mask_is_refused_under_sequence_parallelism():
    with pytest.raises(RuntimeError, match="explicit mask of shape"):
        tensor_parallel.check_mask(None, (), {"attention_mask": torch.zeros(1, 1, 4, 4)})


@pytest.mark.parametrize("knobs, said", [
    ({"ATTN_IMPL": "eager"}, "fsdp cannot run ATTN_IMPL=eager at TP=2: Hugging Face builds eager attention's mask"),
    ({"COMPILE": "1"}, "fsdp cannot run COMPILE=1 at TP=2: torch.compile computes wrong gradients"),
])
def test_what_sequence_parallelism_cannot_run_is_refused(knobs, said):
    req = run_request("cpu", "fsdp", "llama", FRAMEWORK="fsdp", TP="2", DP="1", **knobs)
    with pytest.raises(SettingsError, match=said):
        fsdp.check(req, torch.device("cpu"))
    one = dataclasses.replace(req, parallelism=dataclasses.replace(req.parallelism, tp=1, dp=2))
    fsdp.check(one, torch.device("cpu"))  # TP=1: no sequence parallelism, nothing refused
