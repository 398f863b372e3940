"""Issue 45, class 1: validation and time to train are not taken on faith. evaluate.validate recomputes a result's
`evaluation` and `time_to_train` from their evidence (the step series, the trainer's evals.jsonl, the split trained
with, utils.spec.metrics.time_to_target), compare ranks no time to train over different evaluations, and a low
precision without its BF16 twin wins nothing. Results are tests/test_evaluate_compare_quality.py's fixtures: the
real NVIDIA set with small hand-made validation points, edited the way a hand or a bug would."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from evaluate import compare, evaluation_checks, figure_evidence
from evaluate.collect import Loaded, load
from evaluate.comparison import quality
from evaluate.comparison.repeats import repeats_of
from evaluate.validate import check_result
from tests.fixtures.refigure import refigure
from tests.test_evaluate_compare_quality import BF16, RESULTS, SPLIT, first_points, section, write
from utils.spec.metrics import time_to_target
from utils.spec.result import schema

RUN = "mega-llama-r1"
TTT = "the trainer stopped at the first evaluation at or below the target"


def failed(data: dict, evals=None) -> set[str]:
    """The fatal checks validate finds in a result (with its evals.jsonl)."""
    return {f.check for f in check_result(load_one(data, evals)) if f.fatal}


def load_one(data: dict, evals=None) -> Loaded:
    return Loaded("test", data, {}, evals=evals)


def sound(tmp_path: Path, target: float | None = None, losses=BF16) -> dict:
    return write(tmp_path, "nvd", RUN, losses, target=target)


def evals_of(data: dict) -> list[dict]:
    points = data["evaluation"]["points"]
    return [dict(zip(points, column)) for column in zip(*points.values())]


def stopped(tmp_path: Path, losses=(8.0, 6.0, 5.0, 4.5)) -> dict:
    """Megatron stopped at target 5.0 at step 15 of 20 (as tests/test_evaluate_compare_quality.py's)."""
    data = sound(tmp_path, 5.0, losses)
    first_points(data["evaluation"], 3)
    data["time_to_train"] = time_to_target(data["evaluation"]["points"], 5.0, stopped_at_target=True, how=TTT)
    data["series"] = {key: values[:15] for key, values in data["series"].items()}
    data["run"]["steps_completed"] = 15
    refigure(data)
    return data


# -- the fixtures pass: each case below fails by its one edit ---------------------------------------------------

def test_a_sound_evaluated_run_with_its_evals_jsonl_and_a_reached_target_passes(tmp_path):
    data = sound(tmp_path, target=6.5)
    assert failed(data, evals_of(data)) == set()


def test_a_run_stopped_at_its_target_passes_and_is_held_to_the_steps_up_to_it(tmp_path):
    assert failed(stopped(tmp_path)) == set()


# -- losses are the trainer's: evals.jsonl, written as each evaluation ended ------------------------------------

@pytest.mark.parametrize("column", ["loss", "wall_s", "train_time_s", "eval_time_s"])
def test_a_points_column_edited_after_the_run_differs_from_evals_jsonl_and_fails(tmp_path, column):
    data = sound(tmp_path)
    evidence = evals_of(data)
    data["evaluation"]["points"][column][2] *= 0.9  # lowered in result.json only
    if column == "eval_time_s":
        data["evaluation"]["time_s"] = sum(data["evaluation"]["points"]["eval_time_s"])
    assert "evaluation evidence" in failed(data, evidence)


def test_lowered_losses_in_result_json_fail_through_collect_reading_evals_jsonl(tmp_path):
    data = sound(tmp_path)
    run_dir = tmp_path / "nvd" / RUN
    (run_dir / "evals.jsonl").write_text("".join(json.dumps(p) + "\n" for p in evals_of(data)))
    data["evaluation"]["points"]["loss"] = [v - 1.0 for v in data["evaluation"]["points"]["loss"]]
    (run_dir / "result.json").write_text(json.dumps(data))
    (item,) = load([tmp_path / "nvd"])
    assert any(f.check == "evaluation evidence" and "5, 10, 15, 20" in f.message for f in check_result(item))


def test_an_evals_jsonl_line_that_is_no_object_fails(tmp_path):
    assert "evaluation evidence" in failed(sound(tmp_path), "evals.jsonl holds a line that is no JSON object")


def test_an_evaluation_missing_from_result_json_but_in_evals_jsonl_fails(tmp_path):
    data = sound(tmp_path)
    evidence = evals_of(data)
    first_points(data["evaluation"], 3)
    assert "evaluation evidence" in failed(data, evidence)


# -- points at steps that ran, at the request's cadence ---------------------------------------------------------

def test_evaluations_beyond_the_last_step_that_ran_fail(tmp_path):
    data = sound(tmp_path)
    data["series"] = {key: values[:12] for key, values in data["series"].items()}
    data["run"]["steps_completed"] = 12
    refigure(data)
    assert "evaluation" in failed(data)


@pytest.mark.parametrize("steps", [[5, 10, 15, 19], [5, 10, 20, 20], [4, 8, 12, 20], [10, 15, 20, 20]])
def test_evaluations_off_the_cadence_or_skipping_one_fail(tmp_path, steps):
    data = sound(tmp_path)
    data["evaluation"]["points"]["step"] = steps
    data["evaluation"]["points"]["tokens"] = [s * data["training"]["gbs"] * data["training"]["seq_len"]
                                              for s in steps]
    assert failed(data) & {"evaluation cadence", "evaluation"}


def test_tokens_per_evaluation_that_are_not_its_batches_fail(tmp_path):
    data = sound(tmp_path)
    data["evaluation"]["tokens"] = 3
    assert "evaluation" in failed(data)


# -- the split trained with is the split evaluated on -----------------------------------------------------------

@pytest.mark.parametrize("edit", [{"training": "90,10,0"}, {"megatron_split": "90,10,0"},
                                  {"documents": None}])
def test_a_split_that_disagrees_with_itself_or_with_training_fails(tmp_path, edit):
    data = sound(tmp_path)
    data["training"]["validation_split"] = edit.pop("training", "95,5,0")
    data["evaluation"]["split"] = {**data["evaluation"]["split"], **edit}
    assert "validation split" in failed(data)


# -- time to train: the points' first evaluation at or below the target, on the run's clock ---------------------

def test_a_target_reached_at_a_loss_above_it_fails(tmp_path):
    data = sound(tmp_path, target=5.0)  # BF16's losses end at 6.0: never reached
    at = data["evaluation"]["points"]
    data["time_to_train"].update(reached=True, step=20, tokens=at["tokens"][3], wall_s=at["wall_s"][3],
                                 train_time_s=at["train_time_s"][3])
    assert "time to train" in failed(data)


def test_a_wall_time_to_target_shorter_than_its_step_times_fails(tmp_path):
    data = sound(tmp_path, target=6.5)
    data["evaluation"]["points"]["wall_s"][2] = 30.0  # step 15: its step times sum to 162 s
    data["time_to_train"] = time_to_target(data["evaluation"]["points"], 6.5, stopped_at_target=False,
                                           how="read from the validation series")
    assert "evaluation" in failed(data)


def test_an_incomplete_run_claiming_it_stopped_at_its_target_fails_and_is_held_to_all_its_steps(tmp_path):
    data = stopped(tmp_path, losses=(8.0, 6.0, 5.5, 4.5))  # at step 15 the loss is 5.5: not the target
    data["time_to_train"].update(reached=True, step=15, stopped_at_target=True)
    found = {f.check: f.message for f in check_result(load_one(data)) if f.fatal}
    assert "time to train" in found and "15 steps ran, 20 requested" in found["steps"]


def test_a_framework_that_cannot_stop_claiming_it_stopped_fails(tmp_path):
    data = stopped(tmp_path)
    data["framework"] = "prim"
    assert {"time to train", "steps"} <= failed(data)


# -- comparisons: one evaluation, one split, and a low precision only with its twin ------------------------------

@pytest.mark.parametrize("edit, label", [({"iters": 1, "tokens": 128 * 2048}, "evaluation tokens"),
                                         ({"split": {**SPLIT, "fingerprint": "sha256:" + "b" * 64}},
                                          "evaluation split")])
def test_runs_of_different_evaluations_are_unfair_and_not_ranked_together(tmp_path, edit, label):
    write(tmp_path, "nvd", "mega-llama-r1", (8.0, 6.0, 5.0, 4.5), target=5.0)
    data = write(tmp_path, "nvd", "nemo-llama-r1", (8.0, 5.0, 4.8, 4.6), target=5.0)
    data["evaluation"].update(edit)
    (tmp_path / "nvd" / "nemo-llama-r1" / "result.json").write_text(json.dumps(data))
    text = compare.compare([tmp_path / "nvd"], tmp_path / "out")
    assert "**UNFAIR COMPARISON**" in text and f"{label} differs" in text
    ranking = section(text, "Time to train")
    assert not any(line.startswith("| 2 |") for line in ranking.splitlines())  # each ranked alone


def test_a_low_precision_without_its_bf16_twin_wins_no_decision(tmp_path):
    write(tmp_path, "nvd", RUN, (8.0, 7.0, 6.5, 6.0), name="mega-llama-fp8-r1", precision="fp8", speed=3.0)
    items = load([tmp_path / "nvd", RESULTS / "amd"])
    rows = repeats_of(items)
    fp8 = [row for row in rows if row.precision.startswith("fp8")]
    assert fp8 and fp8[0] in quality.unranked_rows(rows, quality.twins(rows), quality.QualitySettings())
    text = compare.compare([tmp_path / "nvd", RESULTS / "amd"], tmp_path / "out",
                           quality=quality.QualitySettings(precision_comparison=True))
    assert "no BF16 twin" in text


# -- the structural guard: every figure field names the check that recomputes it --------------------------------

def _figure_leaves(node: dict, path: str) -> list[str]:
    """The number-typed leaves under a schema node (arrays of numbers included), as dotted paths."""
    if "$ref" in node:
        node = {**schema()["$defs"][node["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}
    if "properties" in node:
        return [leaf for key, child in node["properties"].items() for leaf in _figure_leaves(child, f"{path}.{key}")]
    if "items" in node:
        return _figure_leaves(node["items"], path)
    kinds = node.get("type", [])
    return [path] if {"number", "integer"} & set([kinds] if isinstance(kinds, str) else kinds) else []


def test_every_figure_field_of_evaluation_and_time_to_train_names_its_check():
    fields = [leaf for section_ in ("evaluation", "time_to_train")
              for leaf in _figure_leaves(schema()["properties"][section_], section_)]
    assert len(fields) >= 15
    assert sorted(set(fields) - set(evaluation_checks.FIGURE_EVIDENCE)) == []
    assert sorted(set(evaluation_checks.FIGURE_EVIDENCE) - set(fields)) == []  # no entry for a field gone
    assert all(callable(getattr(evaluation_checks, name, None)) for name in evaluation_checks.FIGURE_EVIDENCE.values())


def test_every_figure_field_of_the_schema_is_recomputed_or_its_gap_is_stated():
    """A new number in a figure section fails here until a check recomputes it (or its gap is written down)."""
    fields = [leaf for section_ in figure_evidence.FIGURE_SECTIONS
              for leaf in _figure_leaves(schema()["properties"][section_], section_)]
    recomputed, gaps = set(figure_evidence.RECOMPUTED), set(figure_evidence.NOT_YET)
    assert sorted(set(fields) - recomputed - gaps) == []
    assert sorted((recomputed | gaps) - set(fields)) == [] and recomputed & gaps == set()
    for check in set(figure_evidence.RECOMPUTED.values()):
        module, _, function = check.partition(".")
        assert callable(getattr(importlib.import_module(f"evaluate.{module}"), function, None)), check
