"""Hostile cases for issue 45's straggler evidence: a result's stragglers section (its slowest GPU and node against
the median) edited, forged or hidden after the run is caught against the ranks' own step times beside it
(rank_steps/rank<R>.jsonl), else against its telemetry's per-GPU clocks (evaluate.straggler_checks), in a directory
and in a zip."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from evaluate.collect import Loaded
from tests.fixtures import energy_results
from tests.test_evaluate_judge import ended_run, judged
from utils.machine.stragglers import RANK_STEPS_DIR
from tests.fixtures.zipped import edited, evidence_findings, zipped

HOSTS = ("n0", "n0", "n1", "n1")  # rank -> host


def rank_steps(run_dir: Path, slow_rank: int = 3) -> None:
    """Four ranks on two nodes, each step in 1 s but slow_rank's in 1.2 s, as the trainers leave them."""
    (run_dir / RANK_STEPS_DIR).mkdir()
    for rank, host in enumerate(HOSTS):
        lines = [{"rank": rank, "local_rank": rank % 2, "host": host}]
        lines += [{"step": step, "step_time_s": 1.2 if rank == slow_rank else 1.0} for step in range(1, 13)]
        (run_dir / RANK_STEPS_DIR / f"rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A NeMo run judged with its ranks' step times beside it: rank 3 (GPU 1 on n1) flagged 20% slower."""
    folder = ended_run(tmp_path, "nemo.log")
    rank_steps(folder)
    code, result = judged(folder)
    assert code == 0 and result["stragglers"]["flagged"] and result["stragglers"]["slowest"]["rank"] == 3
    return folder


def findings(source: Path | Loaded) -> list[str]:
    found = evidence_findings(source, "straggler evidence")
    assert all(f.fatal for f in found)
    return [f.line() for f in found]


def test_a_result_as_the_judge_wrote_it_agrees_with_its_rank_files_in_a_folder_a_zip_and_alone(run_dir):
    assert findings(run_dir) == [] and findings(zipped(run_dir)) == [] and findings(run_dir / "result.json") == []


def member(section: dict, n: int) -> dict:
    return section["members"][n]


EDITS = {  # what is edited -> (the edit, the field the finding names)
    "slowest rank": (lambda s: s["slowest"].update(rank=0, index=0, host="n0"), "stragglers.slowest.index is 0"),
    "member value": (lambda s: member(s, 3).update(value=1.0), "stragglers.members[3].value is 1.0"),
    "threshold": (lambda s: s.update(threshold=0.5, flagged=False), "stragglers.threshold is 0.5"),
    "median": (lambda s: s.update(median=1.2), "stragglers.median is 1.2"),
    "slowest node": (lambda s: s["slowest_node"].update(host="n0"), "stragglers.slowest_node.host is n0"),
    "member added": (lambda s: s["members"].append({**member(s, 0), "rank": 4}), "stragglers.members[4].rank is 4"),
    "member removed": (lambda s: s["members"].pop(), "stragglers.members[3].rank is None in the result, 3"),
}


@pytest.mark.parametrize("edit", EDITS)
def test_a_straggler_figure_edited_after_the_run_fails_naming_both_values(run_dir, edit):
    change, named = EDITS[edit]
    edited(run_dir, lambda r: change(r["stragglers"]))
    line, = findings(run_dir)
    assert line.startswith("FAIL ") and named in line and "from the rank_step_time" in line


def test_many_differences_are_one_line_naming_six_and_counting_the_rest(run_dir):
    def doubled(section: dict) -> None:
        for part in [*section["members"], section["slowest"], section["slowest_node"]]:
            part["value"] *= 2
        section["median"] *= 2
    edited(run_dir, lambda r: doubled(r["stragglers"]))
    line, = findings(run_dir)
    assert line.count(" is ") == 6 and line.endswith("(and 1 more)")


def test_an_edited_section_in_a_zip_fails_as_in_its_folder(run_dir):
    edited(run_dir, lambda r: r["stragglers"]["slowest"].update(value=1.0))
    line, = findings(zipped(run_dir))
    assert "stragglers.slowest.value is 1.0 in the result, 1.2 from the rank_step_time" in line


def test_a_section_removed_while_the_rank_files_show_a_straggler_fails_as_hidden(run_dir):
    edited(run_dir, lambda r: r.pop("stragglers"))
    line, = findings(run_dir)
    assert "no stragglers section" in line and "GPU 1 on n1, 20.0% slower" in line and "a straggler hidden" in line


def test_rank_files_edited_instead_of_the_result_fail_too(run_dir):
    path = run_dir / RANK_STEPS_DIR / "rank3.jsonl"
    path.write_text(path.read_text().replace('"step_time_s": 1.2', '"step_time_s": 1.0'))
    assert "stragglers.flagged is True in the result, False from the rank_step_time" in findings(run_dir)[0]


def test_a_section_whose_rank_files_cannot_be_read_fails(run_dir):
    (run_dir / RANK_STEPS_DIR / "rank1.jsonl").write_text('{"rank": 1}\n{"step": 3, "step_time_s": "slow"}\n')
    line, = findings(run_dir)
    assert "cannot be read" in line and "rank1.jsonl line 2" in line


def test_a_section_added_without_evidence_fails(tmp_path, run_dir):
    section = json.loads((run_dir / "result.json").read_text())["stragglers"]
    bare = ended_run(tmp_path / "bare", "nemo.log")
    code, result = judged(bare)
    assert code == 0 and "stragglers" not in result
    assert findings(bare) == []
    edited(bare, lambda r: r.update(stragglers=section))
    line, = findings(bare)
    assert "neither rank_steps/ nor the telemetry" in line and "without evidence" in line


def test_without_rank_files_the_section_is_checked_against_the_telemetry_as_the_judge_made_it():
    sound = energy_results.nvd()
    assert sound.result["stragglers"]["method"] == "telemetry_sm_clock" and findings(sound) == []
    forged = Loaded(sound.where, copy.deepcopy(sound.result), sound.system, beside=sound.beside)
    forged.result["stragglers"]["slowest"].update(index=5, value=1700)
    line, = findings(forged)
    assert "stragglers.slowest.index is 5 in the result, 0 from the telemetry_sm_clock" in line


def test_a_flagged_straggler_of_the_fixture_agrees_with_its_rank_files():
    assert findings(energy_results.with_straggler(energy_results.nvd())) == []


def test_a_result_read_without_its_run_directory_is_not_checked_here():
    """No beside: a rank file absent cannot be told from one not carried (the judge's own check, the history)."""
    item = energy_results.with_straggler(energy_results.nvd())
    item.result["stragglers"]["median"] = 99.0
    assert findings(Loaded(item.where, item.result, item.system, beside=None)) == []
