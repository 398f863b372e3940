"""EP in the run list and the run's request and result (issue 47): the layout column shows EP where it splits the
experts, a framework whose entry has no expert parallelism is skipped with the reason, and ep travels from the
request (config.json) to the result's parallelism, where the judge compares it with the framework's read-back."""

from __future__ import annotations

import dataclasses

import pytest

from evaluate import effective_settings
from tests.fixtures.train_matrix.requests import node
from train.plan import build_plan, request, same_work, table
from utils.frameworks import TABLE, Framework
from utils.machine.hardware import lookup_device
from utils.predict import layout as predicted_layout
from utils.predict.memory import memory
from utils.predict.parameters import megatron_expert_numels, megatron_numels
from utils.predict.step_time import bound, links
from utils.spec.models import get_model
from utils.spec.request import Request
from utils.spec.result import build_result, schema_errors
from utils.spec.result_types import typed

RUN = {"id": "mega-qwen3moe", "started_at": None, "ended_at": None, "status": "ok", "exit_code": 0,
       "error_excerpt": None, "commit": None}
FSDP_REASON = ("fsdp has no expert parallelism (EP=2): Hugging Face's MoE modules under FSDP2 hold every expert on each "
               "rank (train/native/moe.py has no expert-parallel split); EP=1 runs it; the frameworks with it: mega, "
               "prim, mbridge, torchtitan")


def moe_node(**env: str):
    return node("nvd", MODELS="qwen3moe", FRAMEWORK="mega,fsdp", **env)


@pytest.mark.parametrize("ep, shown", [("1", "TP1 PP1 DP8 GA8"), ("2", "TP1 PP1 DP8 EP2 GA8")])
def test_the_layout_column_shows_ep_only_where_it_splits_the_experts(ep, shown):
    cfg = moe_node(EP=ep)
    lines = table(cfg, build_plan(cfg))
    row = next(line for line in lines if line.split()[1:2] == ["mega-qwen3moe"])
    assert f" {shown} " in row and ("EP" in row) == (ep != "1")


def test_a_framework_without_expert_parallelism_is_skipped_with_why_and_mega_runs_the_layout():
    cfg = moe_node(EP="2")
    runs = build_plan(cfg)
    assert [(run.name, run.skipped) for run in runs] == [("mega-qwen3moe", ""), ("fsdp-qwen3moe", FSDP_REASON)]
    assert any(line.endswith(f"skipped: {FSDP_REASON}") for line in table(cfg, runs))
    assert [(run.name, run.skipped) for run in build_plan(moe_node())] == [("mega-qwen3moe", ""),
                                                                           ("fsdp-qwen3moe", "")]


def test_expert_parallelism_is_a_field_of_each_entry_and_a_reason_only_where_it_is_off():
    assert [name for name, entry in TABLE.items() if entry.expert_parallel] == ["mega", "prim", "mbridge", "torchtitan"]
    assert [name for name, entry in TABLE.items() if entry.no_expert_parallel] == ["fsdp"]
    with pytest.raises(ValueError, match="no_expert_parallel says why it has no expert parallelism, but "
                                         "expert_parallel is on"):
        dataclasses.replace(TABLE["mega"], no_expert_parallel="none")


def test_ep_travels_from_the_request_through_config_json_to_the_results_parallelism(tmp_path):
    cfg = moe_node(EP="4")
    req = request(cfg, build_plan(cfg)[0])
    assert (req.parallelism.ep, req.parallelism.dp, req.parallelism.num_gpus) == (4, 8, 8)
    req.write(tmp_path / "config.json")
    assert Request.read(tmp_path / "config.json") == req
    result = build_result(**req.result_sections(), run=RUN, system={}, steps=[], device_name=None)
    assert schema_errors(result) == []
    assert (result["schema_version"], result["parallelism"]["ep"], typed(result).parallelism.ep) == ("1.10", 4, 4)


def test_a_request_written_before_ep_asks_for_none_and_the_same_work_tells_ep_apart(tmp_path):
    cfg = moe_node(EP="2")
    req = request(cfg, build_plan(cfg)[0])
    older = req.to_json()
    del older["parallelism"]["ep"]
    assert Request.from_json(older).parallelism.ep == 1
    assert same_work(req) != same_work(Request.from_json(older))  # an EP=1 run is no estimate of an EP=2 one


def test_the_judge_fails_an_ep_the_framework_did_not_apply():
    def problems(requested: int, read_back: int) -> list:
        return effective_settings.problems({"parallelism": {"ep": requested}, "training": {},
                                            "effective": {"ep": read_back}})
    assert problems(2, 2) == []
    assert problems(2, 1) == [("ep is 1 in the framework, 2 requested", True)]


def test_an_entry_that_says_nothing_of_expert_parallelism_has_none():
    toy = Framework(name="toy", display_name="Toy", platforms=("cpu",), warmup_convention="megatron",
                    probe_modules=(), trainer="toy.py")
    assert (toy.expert_parallel, toy.ep_refusal(1)) == (False, "")
    assert toy.ep_refusal(2) == ("toy has no expert parallelism (EP=2); the frameworks with it: mega, prim, mbridge, "
                                 "torchtitan")


def test_expert_parallelism_splits_the_predicted_experts_and_their_optimizer_over_the_expert_replicas():
    """Qwen3 30B-A3B at full size on 8 H100s: every expert on every rank does not fit; EP=8 holds 16 of each layer's
    128 experts, in megatron-core's own expert buffer whose optimizer shard is over DP / EP = 1 replica."""
    spec = get_model("qwen3moe")
    dense = sum(megatron_numels(spec, 1, spec.num_layers, True, True, routed_experts=False))
    experts = sum(megatron_expert_numels(spec, 1, spec.num_layers, 1))
    assert dense + experts == spec.param_count()
    assert sum(megatron_expert_numels(spec, 1, spec.num_layers, 8)) == experts // 8 == 48 * 16 * 3 * 2048 * 768
    fits = {}
    for ep in (1, 8):
        cfg = node("nvd", MODELS="qwen3moe", FRAMEWORK="mega", EP=str(ep), TARGET_DEVICE="h100")
        found = memory(spec, predicted_layout(request(cfg, build_plan(cfg)[0]), on_gpu=True))
        fits[ep] = found.parts()["weights"], found.peak
    assert fits[1][0] == 2 * (dense + experts) and fits[8][0] == 2 * (dense + experts // 8)  # bf16, no padding left
    assert fits[8][1] < 79.6 * 2 ** 30 < fits[1][1]


def test_the_step_time_bound_adds_the_all_to_all_and_reduces_the_experts_over_their_own_replicas():
    """At EP=8 on one 8-GPU node each rank sends 7/8 of its tokens' top-8 copies to the other ranks and back, forward
    and backward, over NVLink; its 16 experts a layer are reduced over DP / EP = 1 rank (no traffic), the rest over
    DP 8."""
    spec, device = get_model("qwen3moe"), lookup_device("NVIDIA H100 80GB HBM3")
    found = {}
    for ep in (1, 8):
        cfg = node("nvd", MODELS="qwen3moe", FRAMEWORK="mega", EP=str(ep), TARGET_DEVICE="h100")
        lay = predicted_layout(request(cfg, build_plan(cfg)[0]), on_gpu=True)
        found[ep] = lay, bound(spec, lay, device, links(device, 8, 1, None))
    lay, at_8 = found[8]
    sent = 4 * lay.mbs * lay.seq_len * 8 * spec.hidden_size * 2 * spec.num_layers * lay.ga * 7 / 8
    assert found[1][1].ep_s == 0 and at_8.ep_s == pytest.approx(sent / (device.intra_gb_s * 1e9))
    dense = sum(megatron_numels(spec, 1, spec.num_layers, True, True, routed_experts=False))
    assert at_8.dp_s == pytest.approx(7 / 8 * dense * (2 + 2) / (device.intra_gb_s * 1e9))  # bf16 gradients, weights
    assert at_8.step_s == pytest.approx(at_8.compute_s + at_8.ep_s + at_8.dp_exposed_s)
