"""Hostile cases for issue 45's side-file evidence: a result's power, energy, clocks, temperatures and throttle events
edited after the run are caught against the run's own telemetry.jsonl (evaluate.telemetry_checks), in a directory
and in a zip, and an energy figure whose samples are gone does not rank; a log's framework's validation points
edited after the run are caught against train.log's reports (evaluate.evaluation_checks.log_points)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from evaluate.collect import Loaded, collect
from evaluate.validate import check_result
from tests.test_evaluate_judge import ENDED, ended_run, judged
from utils.machine import telemetry
from tests.fixtures.zipped import edited as edit, evidence_findings, zipped

END = datetime.fromisoformat(ENDED["ended_at"]).timestamp()


def sampled(run_dir: Path, throttle_from: float | None = None) -> None:
    """Two GPUs sampled every half second over the run: power, clocks against their maximum, temperatures,
    utilisation, and (from throttle_from on) a power cap."""
    devices = [{"index": i, "name": "NVIDIA H100 80GB HBM3", "sm_clock_max_mhz": 1980} for i in range(2)]
    lines = [{"kind": "start", "time_s": END - 120, "host": "n0", "method": "nvml", "interval_ms": 500,
              "power_sensor": True, "note": None, "devices": devices}]
    t, n = END - 120, 0
    while t <= END:
        for i in range(2):
            lines.append({"kind": "sample", "time_s": t, "index": i, "power_w": 600.0 + 10 * i + n % 7,
                          "sm_clock_mhz": 1800 + n % 5 * 10, "temp_gpu_c": 60 + n % 4, "temp_mem_c": 70 + i,
                          "util_gpu_pct": 95, "throttle": ["sw_power_cap"] if throttle_from and t >= throttle_from
                          and i == 1 else []})
        t, n = t + 0.5, n + 1
    lines.append({"kind": "end", "time_s": END, "samples": len(lines) - 1})
    (run_dir / telemetry.FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A NeMo run judged with its samples beside it (its steps rebuilt from the run's end)."""
    folder = ended_run(tmp_path, "nemo.log")
    sampled(folder, throttle_from=END - 3)
    code, result = judged(folder)
    assert code == 0 and result["telemetry"]["tokens_per_joule"] and result["telemetry"]["throttle_events"]
    return folder


def edited(run_dir: Path, change) -> None:
    edit(run_dir, change, "telemetry")


def findings(source: Path) -> list[str]:
    return [f.line() for f in evidence_findings(source, "telemetry evidence")]


def test_a_result_as_the_judge_wrote_it_agrees_with_its_samples_in_a_folder_and_a_zip(run_dir):
    assert findings(run_dir) == [] and findings(zipped(run_dir)) == []
    assert findings(run_dir / "result.json") == []


EDITS = {
    "mean_power_w": lambda s: s.update(mean_power_w=s["mean_power_w"] * 0.8),
    "max_power_w": lambda s: s.update(max_power_w=s["max_power_w"] - 50),
    "energy_per_step_j": lambda s: s.update(energy_per_step_j=s["energy_per_step_j"] / 2),
    "tokens_per_joule": lambda s: s.update(tokens_per_joule=s["tokens_per_joule"] * 2),
    "wh_per_million_tokens": lambda s: s.update(wh_per_million_tokens=s["wh_per_million_tokens"] / 2),
    "min_median_sm_clock_ratio": lambda s: s.update(min_median_sm_clock_ratio=1.0),
    "max_temp_gpu_c": lambda s: s.update(max_temp_gpu_c=s["max_temp_gpu_c"] - 20),
    "samples": lambda s: s.update(samples=s["samples"] + 1),
    "per_gpu[1].energy_j": lambda s: s["per_gpu"][1].update(energy_j=s["per_gpu"][1]["energy_j"] * 0.9),
    "per_gpu[0].mean_power_w": lambda s: s["per_gpu"][0].update(mean_power_w=1.0),
    "per_gpu[0].median_sm_clock_mhz": lambda s: s["per_gpu"][0].update(median_sm_clock_mhz=1980),
    "throttle_events[0].duration_s": lambda s: s["throttle_events"][0].update(duration_s=0.1),
}


@pytest.mark.parametrize("field", EDITS)
def test_a_telemetry_figure_edited_after_the_run_fails_naming_both_values(run_dir, field):
    before = json.loads((run_dir / "result.json").read_text())["telemetry"]
    edited(run_dir, EDITS[field])
    line, = findings(run_dir)
    assert line.startswith("FAIL ") and f"telemetry.{field} is " in line and "from the samples" in line
    head = field.split("[")[0]
    if head in before and not isinstance(before[head], list):
        assert f"{before[head]} from the samples" in line  # the value recomputed is the judge's own


@pytest.mark.parametrize("flags", [{"method": None}, {"enabled": False}], ids=["method null", "telemetry off"])
def test_flags_that_say_no_figures_do_not_hide_an_edited_figure(run_dir, flags):
    edited(run_dir, lambda s: (s.update(flags), EDITS["mean_power_w"](s)))
    assert "telemetry.mean_power_w is " in findings(run_dir)[0]


def test_a_throttle_event_removed_from_the_result_fails(run_dir):
    edited(run_dir, lambda s: s.update(throttle_events=[]))
    line, = findings(run_dir)
    assert "telemetry.throttle_events has 0 event(s) in the result, 1 from the samples" in line


def test_a_throttle_event_moved_out_of_the_steady_steps_fails(run_dir):
    edited(run_dir, lambda s: s["throttle_events"][0].update(steady=not s["throttle_events"][0]["steady"]))
    assert "telemetry.throttle_events[0] is sw_power_cap (steady" in findings(run_dir)[0]


def test_an_edited_figure_in_a_zip_fails_as_in_its_folder(run_dir):
    edited(run_dir, EDITS["tokens_per_joule"])
    line, = findings(zipped(run_dir))
    assert "telemetry.tokens_per_joule is " in line


def test_samples_edited_instead_of_the_result_fail_too(run_dir):
    path = run_dir / telemetry.FILE
    path.write_text(path.read_text().replace('"power_w": 600.0', '"power_w": 300.0'))
    assert "telemetry.mean_power_w is " in findings(run_dir)[0]


@pytest.mark.parametrize("packed", [False, True], ids=["folder", "zip"])
def test_an_energy_figure_without_its_samples_fails_and_so_does_not_rank(run_dir, packed):
    source = zipped(run_dir, leave_out=telemetry.FILE) if packed else run_dir
    if not packed:
        (run_dir / telemetry.FILE).unlink()
    item, = collect([source]).results
    failing = [f for f in check_result(item) if f.check == "telemetry evidence"]
    assert [f.fatal for f in failing] == [True] and "mean_power_w and tokens_per_joule" in failing[0].message
    item.failures = [f.message for f in failing]
    assert not item.ok  # evaluate.comparison.energy ranks only results that pass


def test_a_section_without_figures_needs_no_samples(tmp_path):
    folder = ended_run(tmp_path, "nemo.log")  # no telemetry.jsonl: the judge says the record is missing
    code, result = judged(folder)
    assert code == 0 and result["telemetry"]["mean_power_w"] is None
    assert findings(folder) == []


def test_a_result_read_without_its_run_directory_is_not_checked_here(run_dir):
    result = json.loads((run_dir / "result.json").read_text())
    result["telemetry"]["tokens_per_joule"] *= 2
    assert [f for f in check_result(Loaded("history", result, {})) if f.check == "telemetry evidence"] == []


def test_a_malformed_sample_line_beside_a_section_with_figures_fails(run_dir):
    with open(run_dir / telemetry.FILE, "a") as out:
        out.write(json.dumps({"kind": "sample", "time_s": END, "index": 0, "power_w": "N/A"}) + "\n")
    assert "power_w is 'N/A'" in findings(run_dir)[0]


# --- The log's frameworks: evaluation points against train.log's validation reports ----------------------------

LOGGED = {"prim": ("primus_validation.log", "config-amd-validation.json"),
          "nemo": ("nemo_timed_validation.log", "config-nemo-validation.json")}


def logged_run(tmp_path: Path, framework: str) -> Path:
    """A run of a log's framework (no evals.jsonl) judged with its validation reports in train.log."""
    log, config = LOGGED[framework]
    folder = ended_run(tmp_path, log, config=config)
    judged(folder)
    return folder


def evaluation_findings(source: Path) -> list[str]:
    item, = collect([source]).results
    return [f.line() for f in check_result(item) if f.check == "evaluation evidence"]


def with_points(run_dir: Path, change) -> None:
    result = json.loads((run_dir / "result.json").read_text())
    change(result["evaluation"]["points"])
    (run_dir / "result.json").write_text(json.dumps(result))


@pytest.mark.parametrize("framework", LOGGED)
def test_a_logged_evaluation_agrees_with_its_log(tmp_path, framework):
    assert evaluation_findings(logged_run(tmp_path, framework)) == []


@pytest.mark.parametrize("framework", LOGGED)
def test_a_validation_loss_lowered_in_the_result_while_the_log_keeps_the_real_one_fails(tmp_path, framework):
    run_dir = logged_run(tmp_path, framework)
    real = json.loads((run_dir / "result.json").read_text())["evaluation"]["points"]["loss"][1]
    with_points(run_dir, lambda p: p["loss"].__setitem__(1, real - 1.0))
    line, = evaluation_findings(run_dir)
    assert line.startswith("FAIL ") and "are not train.log's validation reports" in line
    assert f"loss {real - 1.0} in the result, {real} in the log" in line


def test_an_evaluation_time_edited_in_the_result_fails(tmp_path):
    run_dir = logged_run(tmp_path, "nemo")
    with_points(run_dir, lambda p: p["eval_time_s"].__setitem__(0, 0.1))
    assert "points at step(s) 4 are not train.log's" in evaluation_findings(run_dir)[0]


def test_an_evaluation_the_log_does_not_hold_fails(tmp_path):
    run_dir = logged_run(tmp_path, "prim")
    with_points(run_dir, lambda p: [p[key].pop() for key in p])  # the last point dropped: as if never evaluated
    assert "points at step(s) 12 are not train.log's" in evaluation_findings(run_dir)[0]


def test_a_lowered_loss_in_a_zip_with_its_log_fails_and_without_its_log_is_not_read_again(tmp_path):
    run_dir = logged_run(tmp_path, "prim")
    with_points(run_dir, lambda p: p["loss"].__setitem__(0, 1.0))
    assert "points at step(s) 4 are not train.log's" in evaluation_findings(zipped(run_dir))[0]
    assert evaluation_findings(zipped(run_dir, leave_out="train.log")) == []
