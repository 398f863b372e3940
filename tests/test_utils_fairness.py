"""utils.spec.fairness: the specification's table is the default profile, `tuned` differs only where it says why."""

from __future__ import annotations

import pytest

from utils.spec.fairness import (DEFAULT_PROFILE, PROFILES, SPEC, TUNED, ProfileError, fp8_recipe, identity, profile,
                            workload)


def test_the_default_profile_is_the_specification_s_table():
    # reference/fairness.md, "Distributed data parallelism" and "Fused operations"
    spec = profile(DEFAULT_PROFILE)
    assert DEFAULT_PROFILE == "spec"
    assert (spec["use_distributed_optimizer"], spec["grad_reduce_in_fp32"], spec["overlap_grad_reduce"],
            spec["overlap_param_gather"]) == (True, False, False, False)
    assert all(spec[key] for key in ("bias_swiglu_fusion", "bias_dropout_fusion", "apply_rope_fusion",
                                     "cross_entropy_loss_fusion", "use_flash_attn"))
    assert spec["context_parallel_size"] == 1
    assert spec["average_in_collective"] is False  # Megatron-LM's and Primus's; NeMo's recipes ship True


def test_tuned_differs_from_spec_only_in_its_documented_values():
    spec, tuned = profile("spec"), profile("tuned")
    differing = {key for key in spec if spec[key] != tuned[key]}
    assert differing == set(TUNED) == {"overlap_grad_reduce", "overlap_param_gather", "grad_reduce_in_fp32"}
    assert all(len(why) > 40 for _value, why in TUNED.values())


def test_every_profile_agrees_on_the_nan_check_and_the_fp8_recipe():
    for name in PROFILES:
        table = profile(name)
        assert table["check_for_nan_in_grad"] is False
        assert fp8_recipe(table) == {"fp8_format": "hybrid", "fp8_recipe": "delayed", "fp8_margin": 0,
                                     "fp8_amax_history_len": 1024, "fp8_amax_compute_algo": "max",
                                     "fp8_reduce_amax": True}


def test_an_unknown_profile_is_refused_by_name():
    with pytest.raises(ProfileError, match="unknown fairness profile 'fast'; one of spec, tuned"):
        profile("fast")


@pytest.mark.parametrize("framework, convention", [("mega", "megatron"), ("prim", "megatron"),
                                                   ("nemo", "nemo-cosine-annealing")])
def test_the_workload_is_megatron_lm_s_except_where_nemo_cannot_follow(framework, convention):
    assert workload(framework, 152064, 2) == {"init_method_std": 0.02, "eod_mask_loss": False,
                                              "dataloader_type": "single", "padded_vocab_size": 152064,
                                              "lr_warmup_convention": convention}


def test_the_padded_vocabulary_must_split_over_tp():
    with pytest.raises(ValueError, match="128256 does not split over TP=512"):
        workload("mega", 128256, 512)


def test_identity_records_the_fp8_recipe_only_for_fp8_runs():
    applied = workload("mega", 128256, 1)
    bf16, fp8 = identity("spec", SPEC, applied, "bf16"), identity("spec", SPEC, applied, "fp8")
    assert bf16["fp8_recipe"] is None and fp8["fp8_recipe"]["fp8_amax_history_len"] == 1024
    assert bf16["fairness_profile"] == "spec" and bf16["check_for_nan_in_grad"] is False
