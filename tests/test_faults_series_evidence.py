"""Issue 45: the step breakdown and the memory peaks are their series', and evaluations compare only over the same
documents and tokens. evaluate.validate recomputes performance.breakdown and memory.peak_* from the result's
per-step series with the writer's own functions (evaluate/series_checks.py), and its fairness check flags evaluated
runs of one model whose evaluation split or size differ (evaluate.evaluation_checks.SHARED_EVALUATION, the keys the
time-to-train ranking uses too). Results are tests/fixtures/breakdown_results.py's (built by
utils.spec.result.build_result) and tests/test_evaluate_compare_quality.py's, edited the way a hand or a bug
would."""

from __future__ import annotations

import copy

import pytest

from evaluate import compare, evaluation_checks, figure_evidence
from evaluate.collect import Loaded
from evaluate.comparison import quality, time_to_train
from evaluate.validate import check_result, fairness
from tests.fixtures import breakdown_results
from tests.test_evaluate_compare_quality import BF16, SPLIT, write

PARTS = ("forward_s", "backward_s", "optimizer_s")


def mega() -> dict:
    """Megatron's six steps (two of warm-up) with forward 0.6, backward 1.2, optimizer 0.1 of a 2 s step, and 40 GiB
    allocated, 50 GiB reserved at every step."""
    return copy.deepcopy(breakdown_results.mega().result)


def messages(data: dict, check: str) -> list[str]:
    return [f.message for f in check_result(Loaded("test", data, breakdown_results.SYSTEM)) if f.check == check
            and f.fatal]


def test_a_result_as_its_writer_made_it_has_its_series_breakdown_and_peaks():
    data = mega()
    assert data["performance"]["breakdown"]["count"] == 4
    assert messages(data, "breakdown") == [] and messages(data, "memory peak") == []


# -- performance.breakdown: recomputed from series.forward_s/backward_s/optimizer_s/step_time_s over the window -----

@pytest.mark.parametrize("key", ("forward_s", "backward_s", "optimizer_s", "other_s", "step_time_s", "count"))
def test_a_breakdown_field_lowered_in_result_json_is_named_with_its_recomputed_value(key):
    data = mega()
    again = data["performance"]["breakdown"][key]
    lowered = again // 2 if key == "count" else again / 2
    data["performance"]["breakdown"][key] = lowered
    assert messages(data, "breakdown") == [f"performance.breakdown.{key} is {lowered:.6g} in the result, "
                                           f"{again:.6g} from its per-step series"]


def test_a_forward_time_raised_in_result_json_fails():
    data = mega()
    data["performance"]["breakdown"]["forward_s"] = 1.6
    assert messages(data, "breakdown") == ["performance.breakdown.forward_s is 1.6 in the result, 0.6 from its "
                                           "per-step series"]


def test_a_steady_steps_part_edited_in_the_series_no_longer_gives_the_breakdown():
    data = mega()
    data["series"]["optimizer_s"][4] = 0.3  # step 5: the mean over steps 3-6 becomes 0.15, the rest 0.05
    assert messages(data, "breakdown") == [
        "performance.breakdown.optimizer_s is 0.1 in the result, 0.15 from its per-step series",
        "performance.breakdown.other_s is 0.1 in the result, 0.05 from its per-step series"]


def test_a_warm_up_steps_parts_are_not_in_the_breakdown():
    data = mega()
    data["series"]["forward_s"][0] = 1.9  # step 1 is warm-up (WARMUP_SKIP=2)
    assert messages(data, "breakdown") == []


def test_a_breakdown_without_the_per_step_series_that_give_it_fails():
    data = mega()
    for key in PARTS:
        del data["series"][key]
    assert messages(data, "breakdown") == ["performance.breakdown is in the result, but no steady-state step of its "
                                           "series carries forward_s, backward_s and optimizer_s to give it"]


def test_a_breakdown_dropped_from_result_json_while_its_series_give_one_fails():
    data = mega()
    del data["performance"]["breakdown"]
    assert messages(data, "breakdown") == ["performance.breakdown is missing, its series give one over 4 step(s) "
                                           "(forward_s 0.6)"]


# -- memory peaks: the series' maximum exactly (each step's value is already the framework's peak since the start) --

@pytest.mark.parametrize("key, column", (("peak_allocated_gib", "mem_allocated_gib"),
                                         ("peak_reserved_gib", "mem_reserved_gib")))
def test_a_device_peak_below_its_series_maximum_fails(key, column):
    data = mega()
    data["memory"][key] = 12.0
    assert messages(data, "memory peak") == [f"memory.{key} is 12 in the result, {max(data['series'][column]):g} "
                                             f"the most of series.{column}"]


def test_a_device_peak_above_every_step_it_was_read_from_fails():
    data = mega()
    data["memory"]["peak_reserved_gib"] = 70.0
    assert messages(data, "memory peak") == ["memory.peak_reserved_gib is 70 in the result, 50 the most of "
                                             "series.mem_reserved_gib"]


def test_a_device_peak_without_any_reading_behind_it_fails():
    data = mega()
    data["series"]["mem_allocated_gib"] = [None] * 6
    assert messages(data, "memory peak") == ["memory.peak_allocated_gib is 40 in the result, none the most of "
                                             "series.mem_allocated_gib"]


def host(data: dict, peak: float) -> dict:
    """The largest worker's resident memory sampled at each step up to 1.5 GiB, its two workers' peaks 1.2 and 1.8."""
    data["series"]["mem_host_rss_gib"] = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5]
    data["memory"].update(peak_host_rss_gib=peak, host_rss_gib_per_worker=[1.2, 1.8])
    return data


def test_a_host_peak_may_exceed_its_series_where_a_workers_own_peak_is_higher():
    assert messages(host(mega(), 1.8), "memory peak") == []


@pytest.mark.parametrize("peak", (1.5, 1.4, 2.5))
def test_a_host_peak_other_than_the_most_of_its_series_and_workers_fails(peak):
    assert messages(host(mega(), peak), "memory peak") == [
        f"memory.peak_host_rss_gib is {peak:g} in the result, 1.8 the most of series.mem_host_rss_gib and "
        "host_rss_gib_per_worker"]


def test_the_checked_fields_are_recomputed_and_the_device_used_peak_stays_a_stated_gap():
    checked = {f"performance.breakdown.{key}" for key in ("forward_s", "backward_s", "optimizer_s", "other_s",
                                                         "step_time_s", "count")}
    checked |= {"memory.peak_allocated_gib", "memory.peak_reserved_gib", "memory.peak_host_rss_gib"}
    assert checked <= set(figure_evidence.RECOMPUTED) and not checked & set(figure_evidence.NOT_YET)
    assert "memory.peak_device_used_gib" in figure_evidence.NOT_YET


# -- evaluations compare only over the same documents and tokens: validate's own fairness ---------------------------

def evaluated_pair(tmp_path, edit) -> list[Loaded]:
    """Megatron and NeMo on H100, both evaluated alike; edit(nemo's result) makes them differ."""
    mega_ = write(tmp_path, "nvd", "mega-llama-r1", BF16)
    nemo = write(tmp_path, "nvd", "nemo-llama-r1", BF16)
    edit(nemo)
    return [Loaded("nvd/mega-llama-r1", mega_, {}), Loaded("nvd/nemo-llama-r1", nemo, {})]


def unfair(items: list[Loaded]) -> list[str]:
    return [f.message for f in fairness(items) if f.fatal and "evaluation" in f.message]


def test_runs_evaluated_alike_are_fair(tmp_path):
    assert unfair(evaluated_pair(tmp_path, lambda r: None)) == []


def test_runs_evaluated_over_different_numbers_of_tokens_are_unfair_in_validate(tmp_path):
    def fewer(r):
        r["evaluation"]["iters"], r["evaluation"]["tokens"] = 1, r["evaluation"]["tokens"] // 4

    found = unfair(evaluated_pair(tmp_path, fewer))
    assert len(found) == 1 and found[0].startswith("llama: evaluation tokens differs: 1,048,576 in "
                                                   "nvd/mega-llama-r1; 262,144 in nvd/nemo-llama-r1")


def test_runs_evaluated_on_other_documents_of_the_same_cut_are_unfair_in_validate(tmp_path):
    def other(r):
        r["evaluation"]["split"] = {**SPLIT, "fingerprint": "sha256:" + "b" * 64}

    found = unfair(evaluated_pair(tmp_path, other))
    assert found == [f"llama: evaluation split differs: 95,5,0 {SPLIT['fingerprint']} in nvd/mega-llama-r1; "
                     f"95,5,0 sha256:{'b' * 64} in nvd/nemo-llama-r1"]


def test_the_report_names_a_split_difference_once_from_validate(tmp_path):
    write(tmp_path, "nvd", "mega-llama-r1", BF16)
    write(tmp_path, "nvd", "nemo-llama-r1", BF16, split={**SPLIT, "fingerprint": "sha256:" + "b" * 64})
    text = compare.compare([tmp_path / "nvd"], tmp_path / "out")
    assert "**UNFAIR COMPARISON**" in text and text.count("evaluation split differs") == 1


def test_the_evaluation_keys_have_one_definition_shared_by_validate_and_the_ranking():
    assert not hasattr(quality, "split_key") and not hasattr(quality, "split_findings")
    assert time_to_train.split_key is evaluation_checks.split_key
    assert time_to_train.tokens_key is evaluation_checks.tokens_key
