"""Results of a shape TPrimat did not write (valid JSON that is no result, a newer schema, bytes that are not text)
are left out by every reader, each with one line naming the file and its first problem; the others are read on.
compare exits 2 only when no result it can read is left; validate fails each such file as a check."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from evaluate import compare, validate, wrap
from evaluate.collect import SAMPLED_SERIES, collect, first_problem
from tests.test_train_plan import node
from train.plan import build_plan, estimate_s, request

RESULTS = Path(__file__).parent / "fixtures" / "results"
GOOD = RESULTS / "amd" / "mega-llama-r1" / "result.json"
NOT_A_RESULT = {"schema_version": "1.3", "run": []}  # the issue's: valid JSON, no result


def run_set(tmp_path: Path, **foreign: bytes) -> Path:
    """A copy of the AMD fixture run set, plus a run directory per keyword holding that result.json."""
    root = tmp_path / "set"
    shutil.copytree(RESULTS / "amd", root)
    for name, data in foreign.items():
        (root / name).mkdir()
        (root / name / "result.json").write_bytes(data)
    return root


def test_compare_leaves_out_a_result_of_a_foreign_shape_in_one_line_and_reports_the_others(tmp_path, capsys):
    root = run_set(tmp_path, odd=json.dumps(NOT_A_RESULT).encode())
    assert compare.main([str(root), "-o", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"[tprimat] warning: {root}:odd/result.json: not a TPrimat result (15 problem(s), first: (top): "
                   "'platform' is a required property); left out"]
    assert "prim-llama-r1" in (tmp_path / "out" / "report.md").read_text()


def test_compare_says_once_per_file_that_a_newer_tprimat_wrote_it_and_leaves_it_out(tmp_path, capsys):
    newer = {**json.loads(GOOD.read_text()), "schema_version": "9.0"}
    root = run_set(tmp_path, later=json.dumps(newer).encode())
    assert compare.main([str(root), "-o", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert err.count("newer") == 1
    assert f"{root}:later/result.json: written by a newer TPrimat (result schema 9.0; this checkout reads 1.0 to " \
           "1.10): update TPrimat to read it; left out" in err
    assert "newer" not in (tmp_path / "out" / "report.md").read_text()


def test_compare_exits_2_only_when_no_result_it_can_read_is_left(tmp_path, capsys):
    (tmp_path / "result.json").write_text(json.dumps(NOT_A_RESULT))
    assert compare.main([str(tmp_path / "result.json"), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "left out" in err[0]
    assert err[1] == f"evaluate.compare: no result this checkout reads under {tmp_path / 'result.json'} (1 file(s) " \
                     "left out, see above)"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("data, problem", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff", "not text (bytes that are not UTF-8)"),
    (b"{\"run\": ", "not valid JSON (Expecting value at line 1 column 9)"),
    (b"[1, 2]", "not a result (a JSON list, not an object)"),
    (b"null", "not a result (a JSON NoneType, not an object)"),
])
def test_validate_fails_each_foreign_file_in_one_line_and_checks_the_others(tmp_path, capsys, data, problem):
    root = run_set(tmp_path, odd=data)
    assert validate.main([str(root)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert f"FAIL {root}:odd/result.json: schema: {problem}" in out
    assert out[-1].startswith("7 result(s): ")  # the six fixture results were checked too


def test_validate_names_the_first_schema_problem_of_valid_json_that_is_no_result(tmp_path, capsys):
    (tmp_path / "result.json").write_text(json.dumps(NOT_A_RESULT))
    assert validate.main([str(tmp_path / "result.json")]) == 1
    assert capsys.readouterr().out.splitlines()[0] == (
        f"FAIL {tmp_path / 'result.json'}: schema: not a TPrimat result (15 problem(s), first: (top): 'platform' "
        "is a required property)")


def test_a_damaged_system_json_is_said_and_its_results_are_still_read(tmp_path, capsys):
    root = run_set(tmp_path)
    (root / "system.json").write_text("{not json")
    found = collect([root])
    assert len(found.results) == 6
    assert "system.json: not valid JSON" in capsys.readouterr().err


def test_a_long_series_is_checked_whole_a_bad_value_far_in_is_still_found():
    result = json.loads(GOOD.read_text())
    steps = SAMPLED_SERIES * 10
    result["series"] = {key: [1.0] * steps for key in result["series"]}
    result["series"]["step"] = list(range(1, steps + 1))
    assert first_problem(result) is None
    result["series"]["loss"][steps - 3] = "1.0"
    assert first_problem(result) == f"not a TPrimat result (1 problem(s), first: series/loss/{steps - 3}: '1.0' " \
                                    "is not of type 'number', 'null')"
    result["series"]["loss"][steps - 3] = 1.0
    result["series"]["step"][steps - 1] = 0
    assert f"series/step/{steps - 1}: 0 is less than the minimum of 1" in first_problem(result)


def test_wrap_names_a_result_compare_will_leave_out(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    root = run_set(tmp_path, odd=json.dumps(NOT_A_RESULT).encode())
    assert wrap.main([str(root), "-o", str(tmp_path / "out.zip")]) == 0
    assert "  note: odd/result.json: not a TPrimat result (15 problem(s), first: (top): 'platform' is a required " \
           "property); packed as it is, compare will leave it out" in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("launch", ["[]", '{"status": "ok"}', '{"status": "ok", "wall_s": "long"}', "\udcff"])
def test_the_time_estimate_leaves_out_an_earlier_run_whose_launch_record_is_foreign(tmp_path, launch):
    cfg = node("nvd", FRAMEWORK="mega", MODELS="llama", OUTPUT_DIR=str(tmp_path))
    req = request(cfg, build_plan(cfg)[0])
    for index, text in enumerate([launch, json.dumps({"status": "ok", "wall_s": 120.0})]):
        run_dir = tmp_path / f"set{index}" / "mega-llama"
        run_dir.mkdir(parents=True)
        replace(req).write(run_dir / "config.json")
        (run_dir / "launch.json").write_bytes(text.encode(errors="surrogateescape"))
    assert estimate_s(tmp_path, req) == 120.0
