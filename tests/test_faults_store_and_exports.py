"""Issue 45's hostile cases for the results store and its exports: a stored result is no more trusted than a file.

Grouped by the issue's classes. Class 2: what the store holds is judged again when read (an edited figure is shown
failed), its text is escaped wherever it is written, the HTML page embeds only its own folder's images, a failed
copy never hides the honest run, and a NUL is refused by name. Class 4: a CSV export runs no formula in a
spreadsheet and sends no escape sequence to a terminal. Classes 5 and 6: a damaged store, a bad --where or
--baseline, and the places a store may be (read-only, full, a device, non-ASCII) are one line each. The fixtures
are tests/test_evaluate_history.py's run sets (the repository's results, refigured).
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import pwd
import resource
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas
import pytest

from evaluate.compare import main as compare
from evaluate.comparison.html import page
from evaluate.history.sql import Database, Location
from tests.test_evaluate_history import history, postgres, run_set, shared_folder, store, stored  # noqa: F401
from utils.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
FIRST, SECOND = "2026-11-01T10:00:00+00:00", "2026-11-02T10:00:00+00:00"
LLAMA = "run_id = 'mega-llama-r1'"
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAAB"
                       "JRU5ErkJggg==")


def filled(tmp_path: Path, *sets: str, tag: str | None = None) -> str:
    """A SQLite store holding one run set per start time given."""
    db = str(tmp_path / "history.sqlite")
    for index, started in enumerate(sets):
        folder = run_set(tmp_path / f"in{index}", f"2026110{index + 1}-100000-nvd", started, jitter=0.002 * (index + 1))
        assert history("add", "--db", db, str(folder), *([f"--tag={tag}"] if tag else [])) == 0
    return db


def edit(db: str, statement: str, params: tuple = ()) -> None:
    """Change the store behind TPrimat's back, as anyone with the file can."""
    with sqlite3.connect(db) as connection:
        connection.execute(statement, params)


def history_section(report: str) -> str:
    return report.split("## History", 1)[1].split("\n## ", 1)[0]


# Class 2: the results store is trusted.

def doubled(db: str, in_result: bool) -> float:
    """Double mega-llama-r1's stored tokens/s/GPU (its column; its result's headline too when in_result)."""
    row = sqlite3.connect(db).execute(f"SELECT result, tokens_per_s_per_gpu FROM results WHERE {LLAMA}").fetchone()
    result = json.loads(row[0])
    result["performance"]["tokens_per_s_per_gpu"] *= 2 if in_result else 1
    edit(db, f"UPDATE results SET result = ?, tokens_per_s_per_gpu = ? WHERE {LLAMA}", (json.dumps(result), row[1] * 2))
    return row[1] * 2


@pytest.mark.parametrize("in_result", [True, False], ids=["in-its-result-and-column", "in-its-column-only"])
def test_a_figure_edited_inside_the_store_is_shown_failed_in_compare_s_history_tables(tmp_path, capsys, in_result):
    db = filled(tmp_path, FIRST)
    figure = doubled(db, in_result)
    assert compare(["--history", db, "-o", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    report = (tmp_path / "out" / "report.md").read_text()
    section = history_section(report)
    assert section.count("| failed |") == 1 and section.count("| ok |") == 1
    assert f"{figure:.0f}" not in section.replace(",", "")


def test_a_figure_edited_inside_the_store_is_exported_as_a_failure_without_it(tmp_path, capsys):
    db = filled(tmp_path, FIRST)
    doubled(db, in_result=False)
    capsys.readouterr()
    assert history("export", "--db", db, "--format", "csv") == 0
    rows = {r["tprimat_run_id"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert (rows["mega-llama-r1"]["status"], rows["mega-llama-r1"]["performance"]) == ("FAILURE", "")
    assert "the store was edited" in rows["mega-llama-r1"]["tprimat_failure"]


def test_a_verdict_from_the_store_puts_no_link_or_image_into_report_md_or_html(tmp_path, capsys):
    db = filled(tmp_path, FIRST)
    (tmp_path / "secret.png").write_bytes(PNG)
    edit(db, f"UPDATE results SET verdict = ? WHERE {LLAMA}", ("ok [click](http://evil.example) ![s](../secret.png)",))
    assert compare(["--history", db, "-o", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    markdown, html = ((tmp_path / "out" / name).read_text() for name in ("report.md", "report.html"))
    assert "[click](http" not in markdown and "![s](" not in markdown
    assert "evil.example" not in html and base64.b64encode(PNG).decode() not in html


def test_list_shows_no_escape_sequence_from_a_stored_verdict(tmp_path, capsys):
    db = filled(tmp_path, FIRST)
    edit(db, f"UPDATE results SET verdict = ? WHERE {LLAMA}", ("ok\x1b[2J\x1b]0;owned\x07",))
    capsys.readouterr()
    assert history("list", "--db", db) == 0
    assert "\x1b" not in capsys.readouterr().out


def test_regressions_show_no_escape_sequence_from_a_stored_run_set(tmp_path, capsys):
    db = filled(tmp_path, FIRST, SECOND)
    edit(db, "UPDATE results SET run_set = ? WHERE run_set = '20261101-100000-nvd'", ("a\x1b[31mred",))
    capsys.readouterr()
    history("regressions", "--db", db)
    out = capsys.readouterr().out
    assert "no change" in out and "\x1b" not in out


@pytest.mark.parametrize("way_out", ["dot-dot", "link"])
def test_the_html_report_embeds_no_image_from_outside_its_folder(tmp_path, way_out):
    folder = tmp_path / "out"
    folder.mkdir()
    (tmp_path / "secret.png").write_bytes(PNG)
    source = "../secret.png"
    if way_out == "link":
        (folder / "plot.png").symlink_to(tmp_path / "secret.png")
        source = "plot.png"
    html = page(f"![x]({source})", folder)
    assert "data:image" not in html and "is not embedded in this page" in html


def test_an_image_inside_the_report_folder_is_still_embedded(tmp_path):
    (tmp_path / "compare.png").write_bytes(PNG)
    assert f"data:image/png;base64,{base64.b64encode(PNG).decode()}" in page("![c](compare.png)", tmp_path)


def test_an_honest_result_added_after_a_failed_copy_of_it_is_the_one_stored(store, tmp_path, capsys):
    tampered = run_set(tmp_path / "a", "20261101-100000-nvd", FIRST)
    honest = run_set(tmp_path / "b", "20261101-100000-nvd", FIRST)
    path = tampered / "mega-llama-r1" / "result.json"
    result = json.loads(path.read_text())
    result["performance"]["tokens_per_s_per_gpu"] *= 2
    path.write_text(json.dumps(result))
    assert history("add", "--db", store, str(tampered)) == 0
    assert history("add", "--db", store, str(honest)) == 0
    assert "1 replacing a failed copy" in capsys.readouterr().out
    assert {(r["run_id"], r["verdict"]) for r in stored(store)} == {("mega-llama-r1", "ok"), ("mega-qwen-r1", "ok")}


def test_compare_counts_the_stored_honest_run_not_a_failed_copy_given_beside_it(tmp_path, capsys):
    db = filled(tmp_path, FIRST)
    tampered = run_set(tmp_path / "copy", "20261101-100000-nvd", FIRST, jitter=0.002)
    path = tampered / "mega-llama-r1" / "result.json"
    result = json.loads(path.read_text())
    result["performance"]["tokens_per_s_per_gpu"] *= 2
    path.write_text(json.dumps(result))
    assert compare([str(tampered), "--history", db, "--where", "framework=mega", "-o", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert "Results that fail evaluate.validate's checks" not in (tmp_path / "out" / "report.md").read_text()


def test_a_nul_in_a_run_id_refuses_that_result_by_name_and_stores_the_others(store, tmp_path, capsys):
    folder = run_set(tmp_path, "20261101-100000-nvd", FIRST)
    path = folder / "mega-llama-r1" / "result.json"
    result = json.loads(path.read_text())
    result["run"]["id"] = "mega\x00llama"
    path.write_text(json.dumps(result))
    assert history("add", "--db", store, str(folder)) == 0
    err = capsys.readouterr().err
    assert "nvd/mega\\x00llama has a NUL character in its run_id" in err and "left out" in err
    assert [r["run_id"] for r in stored(store)] == ["mega-qwen-r1"]


# Class 4: CSV exports a spreadsheet would run.

@pytest.mark.parametrize("tag", ['=HYPERLINK("http://evil.example","x")', "+1+1", "-2+3", "@SUM(A1:A2)", "\t=1+1",
                                 "\r=1+1"])
def test_a_csv_cell_that_begins_like_a_formula_is_behind_a_quote_and_numbers_stay_numbers(tmp_path, tag):
    db = filled(tmp_path, FIRST, tag=tag)
    out = tmp_path / "perf.csv"
    assert history("export", "--db", db, "--format", "csv", "-o", str(out)) == 0
    for row in csv.DictReader(out.open(newline="", encoding="utf-8")):
        assert row["tprimat_tag"].startswith("'") and row["tprimat_tag"].lstrip("'\t\r")[:1] in "=+-@"
    table = pandas.read_csv(out)
    assert all(str(v).startswith("'") for v in table["tprimat_tag"])
    assert table["performance"].dtype.kind == "f" and table["n_gpus"].dtype.kind == "i"


def test_a_csv_export_to_the_terminal_carries_no_control_character(tmp_path, capsys):
    db = filled(tmp_path, FIRST, tag="rocm\x1b[2J\x1b]0;owned\x07\x9b7")
    capsys.readouterr()
    assert history("export", "--db", db, "--format", "csv") == 0
    out = capsys.readouterr().out
    assert not any(c < " " and c != "\n" or "\x7f" <= c <= "\x9f" for c in out)
    assert "rocm[2J]0;owned7" in out


# Classes 5 and 6: the store's damage and whereabouts, and the command line that chooses from it.

COMMANDS = {"show": lambda db, key: history("show", "--db", db, key),
            "list": lambda db, key: history("list", "--db", db),
            "export": lambda db, key: history("export", "--db", db, "--format", "jsonl"),
            "regressions": lambda db, key: history("regressions", "--db", db),
            "compare": lambda db, key: compare(["--history", db, "-o", str(Path(db).parent / "out")])}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_stored_result_that_is_not_json_is_one_line_naming_it(tmp_path, command):
    db = filled(tmp_path, FIRST)
    key = sqlite3.connect(db).execute(f"SELECT content_key FROM results WHERE {LLAMA}").fetchone()[0]
    edit(db, f"UPDATE results SET result = '{{' WHERE {LLAMA}")
    with pytest.raises(UsageError, match=f"holds a damaged result \\(ID {key[:12]}\\): its result is not valid JSON"):
        COMMANDS[command](db, key[:12])


@pytest.mark.parametrize("column, value, problem", [("result", "{}", "its result is not a TPrimat result"),
                                                    ("run_date", "yesterday", "its run_date is not a date")])
def test_a_damaged_stored_row_stops_regressions_in_one_line(tmp_path, column, value, problem):
    db = filled(tmp_path, FIRST, SECOND)
    edit(db, f"UPDATE results SET {column} = ? WHERE {LLAMA}", (value,))
    with pytest.raises(UsageError, match=problem):
        history("regressions", "--db", db)


def test_a_damaged_schema_version_is_one_line_exit_2(tmp_path):
    db = filled(tmp_path, FIRST)
    edit(db, "UPDATE meta SET value = 'two' WHERE key = 'schema_version'")
    done = subprocess.run([sys.executable, "-m", "evaluate.history", "list", "--db", db], cwd=ROOT,
                          capture_output=True, text=True)
    assert (done.returncode, done.stderr.count("\n"), "Traceback" in done.stderr) == (2, 1, False)
    assert "damaged TPrimat results store (its schema version is two, not a number)" in done.stderr


@pytest.mark.parametrize("where", ["tp=\u00b2", "tp=" + "9" * 20])
def test_a_where_number_that_is_none_or_too_large_is_one_line_exit_2(tmp_path, capsys, where):
    db = filled(tmp_path, FIRST)
    with pytest.raises(SystemExit) as stopped:
        history("list", "--db", db, "--where", where)
    assert stopped.value.code == 2 and "tp is a whole number" in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--where", "framework=mgea"], ["--baseline", "nemo-2504"]])
def test_a_typo_in_where_or_baseline_is_refused_not_reported_as_no_regression(tmp_path, option):
    db = filled(tmp_path, FIRST, SECOND)
    with pytest.raises(UsageError, match="mega" if option[0] == "--where" else "no stored stack, tag or run set"):
        history("regressions", "--db", db, *option)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")
def test_a_store_in_a_folder_the_reader_cannot_write_is_read(shared_folder):  # noqa: F811
    """As `nobody` (root reads anything), in a forked child: the folder and the file are read-only to it."""
    db = shared_folder / "h.sqlite"
    history("add", "--db", str(db), str(run_set(shared_folder / "in", "20261101-100000-nvd", FIRST)))
    shutil.rmtree(shared_folder / "in")
    db.chmod(0o444)
    shared_folder.chmod(0o555)
    child = os.fork()
    if child == 0:
        nobody = pwd.getpwnam("nobody")
        os.setgroups([])
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)
        try:
            os._exit(len(stored(str(db))))
        except BaseException:  # noqa: BLE001 - any refusal fails the test below
            os._exit(99)
    _, status = os.waitpid(child, 0)
    shared_folder.chmod(0o755)
    assert os.waitstatus_to_exitcode(status) == 2
    assert sorted(p.name for p in shared_folder.iterdir()) == ["h.sqlite"]


def test_a_store_past_the_file_size_limit_is_named_as_such_not_as_a_disk_i_o_error(tmp_path):
    folder = run_set(tmp_path, "20261101-100000-nvd", FIRST)
    db = tmp_path / "h.sqlite"
    limit = 16 * 1024
    done = subprocess.run([sys.executable, "-m", "evaluate.history", "add", "--db", str(db), str(folder)], cwd=ROOT,
                          capture_output=True, text=True,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert (done.returncode, "Traceback" in done.stderr, "disk I/O error" in done.stderr) == (1, False, False)
    assert f"cannot write {db}: the file reached the file-size limit" in done.stderr.strip().splitlines()[-1]


def test_a_full_disk_under_the_store_is_named_as_the_disk_being_full(tmp_path):
    database = Database(Location(path=tmp_path / "h.sqlite"))
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13
    assert f"cannot write {tmp_path / 'h.sqlite'}: the disk is full" in database._sqlite_line(full)


@pytest.mark.parametrize("device", ["/dev/zero", "made"])
def test_a_device_given_as_the_store_is_refused_and_nothing_is_written_beside_it(tmp_path, device):
    if device == "made":
        device = str(tmp_path / "zero")
        os.mknod(device, 0o600 | 0o020000, os.makedev(1, 5))
    with pytest.raises(UsageError, match="is not a database file"):
        history("add", "--db", device, str(run_set(tmp_path, "20261101-100000-nvd", FIRST)))
    assert not any(Path(device + suffix).exists() for suffix in ("-journal", "-wal", "-shm"))


def test_a_store_path_with_non_ascii_letters_is_accepted(tmp_path, capsys):
    db = tmp_path / "résultats" / "historique.sqlite"
    assert history("add", "--db", str(db), str(run_set(tmp_path, "20261101-100000-nvd", FIRST))) == 0
    assert history("list", "--db", str(db)) == 0
    assert "2 stored result(s)" in capsys.readouterr().out

