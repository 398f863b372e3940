"""bench/megatron_lm_args.py: a TPrimat request's workload as Megatron-LM pretrain_gpt.py's command line, each setting
turned into the option Megatron-LM's own parser has for its destination. CI has no Megatron-LM checkout (its
megatron/training is not on the package index), so the conversion is held here against a parser with the option
forms Megatron-LM uses; the GPU check validates the real arguments with Megatron-LM's parse_args and validate_args
(docs/frameworks.md, "First numbers on one GPU")."""

from __future__ import annotations

import argparse

import pytest

from bench.megatron_lm_args import ARCHITECTURE, arguments, settings
from tests.fixtures.train_matrix import megatron_args
from tests.fixtures.train_matrix.requests import run_request
from utils.cli import UsageError


def megatron_like_parser() -> argparse.ArgumentParser:
    """The option forms of Megatron-LM's arguments.py: store_true, store_false under another name, typed values,
    lists, and a network-size option generated from a TransformerConfig field whose destination differs."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--no-rope-fusion", action="store_false", dest="apply_rope_fusion")
    parser.add_argument("--disable-bias-linear", action="store_false", dest="add_bias_linear")
    parser.add_argument("--rotary-base", type=int, default=10000)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--norm-epsilon", type=float, dest="layernorm_epsilon", default=1e-5)
    parser.add_argument("--train-data-path", nargs="*")
    parser.add_argument("--no-persist-layer-norm", action="store_true")
    return parser


def test_each_setting_becomes_the_option_of_its_destination_and_defaults_are_left_out():
    args, unknown = arguments({"bf16": True, "apply_rope_fusion": False, "add_bias_linear": False,
                               "rotary_base": 500000.0, "lr": 3e-4, "norm_epsilon": 1e-6,
                               "train_data_path": ["/data/a"], "disable_wandb": True}, megatron_like_parser())
    assert args == ["--bf16", "--no-rope-fusion", "--disable-bias-linear", "--rotary-base", "500000", "--lr", "0.0003",
                    "--norm-epsilon", "1e-06", "--train-data-path", "/data/a"]
    assert unknown == ["disable_wandb"]
    same, _ = arguments({"rotary_base": 10000, "norm_epsilon": 1e-5, "lr": None}, megatron_like_parser())
    assert same == []


def test_a_switch_the_parser_holds_as_its_negation_is_set_through_it():
    off, unknown = arguments({"persist_layer_norm": False}, megatron_like_parser())
    on, _ = arguments({"persist_layer_norm": True}, megatron_like_parser())
    assert (off, on, unknown) == (["--no-persist-layer-norm"], [], [])


def test_a_value_no_option_can_set_is_refused():
    parser = argparse.ArgumentParser()
    parser.add_argument("--disable-bias-linear", action="store_false", dest="add_bias_linear", default=False)
    with pytest.raises(UsageError, match="no option setting add_bias_linear to True"):
        arguments({"add_bias_linear": True}, parser)


def test_the_workload_is_the_requests_with_the_layers_it_names():
    req = run_request("nvd", "mega", "llama", TRANSFORMER_IMPL="local", MODEL_LAYERS="4")
    found = settings(req)
    assert found["transformer_impl"] == "local" and found["num_layers"] == 4
    assert (found["micro_batch_size"], found["seq_length"]) == (req.training.mbs, req.training.seq_len)
    assert {key: found[key] for key in ARCHITECTURE} == ARCHITECTURE
    assert found["apply_rope_fusion"] is False  # no fused RoPE without Transformer Engine or Apex on this machine
    assert found["persist_layer_norm"] is False  # torch's norm, the local layers' without Apex, refuses it


@pytest.mark.parametrize("fairness", ["spec", "tuned"])
def test_pretrain_gpt_reduces_gradients_and_computes_the_softmax_as_the_profile_says(fairness):
    """Megatron-LM turns fp32 gradient reduction on under bf16 unless --grad-reduce-in-bf16 (megatron-lm-bf16-reduces-
    in-fp32), and keeps the attention softmax in bf16 unless --attention-softmax-in-fp32 (megatron-lm-softmax-in-fp32-
    is-an-option): both are written from the profile, so its run is mega's workload."""
    req = run_request("nvd", "mega", "llama", TRANSFORMER_IMPL="local", MODEL_LAYERS="4", FAIRNESS=fairness)
    table = req.fairness.table
    parser = argparse.ArgumentParser()
    parser.add_argument("--grad-reduce-in-bf16", action="store_true")
    parser.add_argument("--accumulate-allreduce-grads-in-fp32", action="store_true")
    parser.add_argument("--attention-softmax-in-fp32", action="store_true")
    found = settings(req)
    args, _ = arguments({key: found[key] for key in ("grad_reduce_in_bf16", "accumulate_allreduce_grads_in_fp32",
                                                     "attention_softmax_in_fp32")}, parser)
    assert megatron_args.settled({**vars(parser.parse_args(args)), "bf16": True})[
        "accumulate_allreduce_grads_in_fp32"] is table["grad_reduce_in_fp32"]
    assert ("--attention-softmax-in-fp32" in args) is table["attention_softmax_in_fp32"] is True
