"""evaluate.project: data-parallel weak scaling from one measured run, labelled as a projection; and the result's
prediction section and the report's view of it."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evaluate.comparison import prediction as prediction_view
from evaluate.collect import Loaded
from evaluate.project import LABEL, table
from tests.fixtures.train_matrix.requests import run_request
from utils.cli import UsageError
from utils.predict import result_section
from utils.spec.result import load_result, schema_errors

ROOT = Path(__file__).resolve().parent.parent
H100_RUN = ROOT / "tests" / "fixtures" / "results" / "nvd" / "mega-llama-r1" / "result.json"


def project(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evaluate.project", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def rows(lines: list[str]) -> list[list[str]]:
    return [line.split() for line in lines if line.strip() and line.split()[0].isdigit()]


def test_the_projection_is_labelled_and_states_its_assumptions():
    lines = table(load_result(H100_RUN), [1, 2, 1024], None, 1e12)
    assert lines[0].startswith(LABEL) and "assumptions: data-parallel weak scaling" in lines[1]
    assert [row[:2] for row in rows(lines)] == [["1", "8"], ["2", "16"], ["1024", "8192"]]


def test_one_node_reproduces_the_measured_run_and_more_nodes_never_go_faster_per_gpu():
    result = load_result(H100_RUN)
    found = rows(table(result, [1, 2, 8, 64, 1024], None, None))
    assert float(found[0][2]) == pytest.approx(result["performance"]["step_time_s"]["median"], abs=1e-3)
    rates = [float(row[3].replace(",", "")) for row in found]
    assert rates == sorted(rates, reverse=True)


def test_a_slower_inter_node_link_projects_slower_steps():
    result = load_result(H100_RUN)
    fast, slow = (rows(table(result, [64], gbps, None))[0] for gbps in (400.0, 25.0))
    assert float(slow[2]) > float(fast[2])


def test_time_to_train_follows_the_token_count():
    lines = table(load_result(H100_RUN), [1024], None, 1e12)
    assert lines[5].rstrip().endswith("time for 1e+12 tokens") and rows(lines)[0][-1].endswith("h")


@pytest.mark.parametrize("args, message", [
    (["--nodes", "0,2"], "--nodes '0,2': give node counts of at least 1"),
    (["--nodes", "1", "--link-gbps", "0"], "--link-gbps: 0: give a finite number above 0"),
])
def test_bad_node_counts_and_links_are_one_line_and_exit_2(args, message):
    out = project(str(H100_RUN), *args)
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_file_that_is_no_result_is_refused_in_one_line(tmp_path):
    other = tmp_path / "notes.json"
    other.write_text(json.dumps({"hello": 1}))
    out = project(str(other), "--nodes", "1", "--tokens", "1e9")
    assert out.returncode == 2 and "not a TPrimat result" in out.stderr


def test_a_run_without_a_known_gpu_is_refused():
    result = load_result(H100_RUN)
    result["system"]["gpu"]["name"] = None
    with pytest.raises(UsageError, match="nothing to project with"):
        table(result, [1], None, None)


def judged(measured_reserved_gib: float) -> dict:
    """The fixture H100 run with the prediction the judge adds (its request: the plan's for the same layout)."""
    result = copy.deepcopy(load_result(H100_RUN))
    result["memory"]["peak_reserved_gib"] = measured_reserved_gib
    p, t = result["parallelism"], result["training"]
    request = run_request("nvd", "mega", "llama", TP=str(p["tp"]), DP=str(p["dp"]), GA=str(p["ga"]),
                          MBS=str(t["mbs"]), SL=str(t["seq_len"]))
    result["prediction"] = result_section(request, result)
    return result


def test_the_result_records_the_bound_and_efficiency_and_validates():
    result = judged(40.0)
    section = result["prediction"]
    assert schema_errors(result) == []
    assert section["device"] == "NVIDIA H100 80GB HBM3" and section["memory"]["fits"] is True
    assert section["efficiency"] == pytest.approx(10.01 / section["time_bound"]["step_s"])
    assert section["memory_error"] == pytest.approx(40.0 / section["memory"]["peak_gib"] - 1)


def test_the_report_shows_where_the_time_went_and_warns_on_a_memory_miss_above_15_percent():
    near = judged(0.0)
    near["memory"]["peak_reserved_gib"] = near["prediction"]["memory"]["peak_gib"] * 1.1
    near["prediction"] = {**near["prediction"], "measured_peak_gib": near["memory"]["peak_reserved_gib"],
                          "memory_error": 0.1}
    far = judged(70.0)
    lines = prediction_view.section([Loaded(H100_RUN, near, {}), Loaded(H100_RUN, far, {})])
    text = "\n".join(lines)
    assert "## Predicted against measured" in text and "compute " in text and "; the rest " in text
    warnings = [line for line in lines if line.startswith("- **warning**")]
    assert len(warnings) == 1 and "70 GiB (peak_reserved_gib)" in warnings[0] and "from the predicted" in warnings[0]


def compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evaluate.compare", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_compare_asked_to_project_adds_a_labelled_panel_and_section(tmp_path):
    results = ROOT / "tests" / "fixtures" / "results"
    out = compare(str(results / "nvd"), str(results / "amd"), "-o", str(tmp_path), "--project-nodes", "1,8,64",
                  "--link-gbps", "100")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "compare-strategies.png").stat().st_size > 0  # drawn although the runs share one strategy
    report = (tmp_path / "report.md").read_text()
    section = report[report.index("## Projection to many nodes"):]
    assert f"**{LABEL}**" in section and section.count("assumptions: data-parallel weak scaling") == 8
    assert "100 Gb/s per GPU between nodes" in section and "![strategies and projection]" in section


def test_the_projection_panel_draws_each_configurations_fastest_strategy_and_names_what_it_cannot_project(tmp_path):
    from evaluate.collect import collect
    from evaluate.comparison import projection, strategies
    from evaluate.comparison.repeats import repeats_of

    items = strategies.entries(repeats_of(collect([ROOT / "tests" / "fixtures" / "results" / "nvd"]).results))
    drawn = strategies.plot(items, tmp_path / "strategies.png", projection.Ask([1, 4]))
    assert {title: n for title, n in drawn.items() if LABEL in title} == {
        f"Llama 3.1 8B: {LABEL}": 2, f"Qwen 2.5 7B: {LABEL}": 2}  # mega and nemo on the H100
    unknown = dataclasses.replace(items[0], result={**items[0].result, "system": {}})
    done, skipped = projection.projected([unknown], projection.Ask([1, 4]))
    assert done == [] and len(skipped) == 1 and "has no entry in utils/machine/hardware.py" in skipped[0]


@pytest.mark.parametrize("args, message", [
    (["--link-gbps", "100"], "--link-gbps goes with --project-nodes"),
    (["--project-nodes", "0,2"], "--nodes '0,2': give node counts of at least 1"),
    (["--project-nodes", "1,2", "--link-gbps", "0"], "--link-gbps: 0: give a finite number above 0")])
def test_compare_refuses_a_bad_projection_request_in_one_line(tmp_path, args, message):
    out = compare(str(ROOT / "tests" / "fixtures" / "results" / "nvd"), "-o", str(tmp_path), *args)
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1
