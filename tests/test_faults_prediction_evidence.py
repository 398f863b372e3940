"""Hostile cases for issue 45's prediction evidence: a result's predicted memory, time bound, efficiency and measured
peak edited after the run are named against the judge's own recomputation from the run's config.json
(evaluate.prediction_checks), in a directory and in a zip; a result without its config.json has nothing to
recompute from and is left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_evaluate_judge import ended_run, judged
from tests.fixtures.zipped import edited as edit, evidence_findings, zipped


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A NeMo run judged with TARGET_DEVICE=h100 in its request: a time bound and an efficiency beside the memory."""
    folder = ended_run(tmp_path, "nemo.log")
    config = json.loads((folder / "config.json").read_text())
    config["environment"]["target_device"] = "h100"
    (folder / "config.json").write_text(json.dumps(config))
    code, result = judged(folder)
    assert code == 0 and result["prediction"]["time_bound"]["step_s"] and result["prediction"]["efficiency"]
    return folder


def prediction(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())["prediction"]


def edited(run_dir: Path, change) -> None:
    edit(run_dir, change, "prediction")


def findings(source: Path) -> list[str]:
    return [f.line() for f in evidence_findings(source, "prediction evidence")]


def test_a_prediction_as_the_judge_wrote_it_recomputes_in_a_folder_a_zip_and_beside_its_result(run_dir):
    assert findings(run_dir) == [] and findings(zipped(run_dir)) == [] and findings(run_dir / "result.json") == []


EDITS = {
    "memory.weights_gib": lambda p: p["memory"].update(weights_gib=p["memory"]["weights_gib"] * 1.5),
    "memory.peak_gib": lambda p: p["memory"].update(peak_gib=p["memory"]["peak_gib"] - 20),
    "memory.device_gib": lambda p: p["memory"].update(device_gib=192.0),
    "time_bound.step_s": lambda p: p["time_bound"].update(step_s=p["time_bound"]["step_s"] * 2),
    "time_bound.dp_s": lambda p: p["time_bound"].update(dp_s=0.0),
    "efficiency": lambda p: p.update(efficiency=1.01),
    "measured_peak_gib": lambda p: p.update(measured_peak_gib=p["measured_peak_gib"] + 10),
    "memory_error": lambda p: p.update(memory_error=0.01),
}


@pytest.mark.parametrize("field", EDITS)
def test_a_predicted_figure_edited_after_the_run_is_named_with_both_values(run_dir, field):
    before = prediction(run_dir)
    edited(run_dir, EDITS[field])
    line, = findings(run_dir)
    after = prediction(run_dir)
    path = field.split(".")
    was, now = (before[path[0]][path[1]], after[path[0]][path[1]]) if len(path) == 2 else (before[field], after[field])
    assert line.startswith("warn ") and f"prediction.{field} is {now} in the result, {was} from config.json" in line


def test_an_efficiency_removed_from_the_result_is_named(run_dir):
    edited(run_dir, lambda p: p.update(efficiency=None))
    line, = findings(run_dir)
    assert "prediction.efficiency is None in the result, " in line


def test_many_edited_figures_are_one_line_naming_six_and_counting_the_rest(run_dir):
    edited(run_dir, lambda p: p["memory"].update({key: value + 1 for key, value in p["memory"].items()
                                                  if key.endswith("_gib") and value is not None}))
    line, = findings(run_dir)
    assert line.count(" from config.json") == 6 and line.endswith(" and 4 more")


def test_an_edited_figure_in_a_zip_is_named_as_in_its_folder(run_dir):
    edited(run_dir, EDITS["memory.peak_gib"])
    line, = findings(zipped(run_dir))
    assert "prediction.memory.peak_gib is " in line


def test_a_request_edited_instead_of_the_result_is_named_too(run_dir):
    config = json.loads((run_dir / "config.json").read_text())
    config["environment"]["target_device"] = "mi300x"
    (run_dir / "config.json").write_text(json.dumps(config))
    assert "prediction.memory.device_gib is " in findings(run_dir)[0]


@pytest.mark.parametrize("packed", [False, True], ids=["folder", "zip"])
def test_without_its_config_json_a_prediction_has_nothing_to_recompute_from(run_dir, packed):
    edited(run_dir, EDITS["memory.peak_gib"])
    source = zipped(run_dir, leave_out="config.json") if packed else run_dir
    if not packed:
        (run_dir / "config.json").unlink()
    assert findings(source) == []


def test_a_config_json_that_is_no_request_is_said_once(run_dir):
    (run_dir / "config.json").write_text("[]")
    line, = findings(run_dir)
    assert "the request beside the result cannot be read" in line
