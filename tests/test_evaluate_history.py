"""The results store (python3 -m evaluate.history): what it keeps, what it refuses, and the regressions it finds.

Every store test runs against both backends: a SQLite file, and a real PostgreSQL server started for this module
from the distribution's packages (tests/postgres/server.py; skipped with the reason where none can be installed).
The results are the repository's fixtures (tests/fixtures/results) copied into run sets with their step times
scaled and refigured (tests/fixtures/refigure.py), so that every figure stays earned and nothing trains.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import pwd
import shutil
import sqlite3
import tempfile
import zipfile
from pathlib import Path

import pytest

from evaluate.history import records
from evaluate.history.__main__ import main
from evaluate.history.sql import Database, Location, StoreError, location
from evaluate.history.store import SCHEMA_VERSION, open_store
from evaluate.gate import gated
from tests.fixtures.refigure import refigure
from tests.postgres.server import PostgresServer, unavailable_reason
from utils.errors import UsageError

FIXTURES = Path(__file__).parent / "fixtures" / "results" / "nvd"
RUNS = ("mega-llama-r1", "mega-qwen-r1")  # two configurations of one platform
SLOWER = 1.15  # the third run set's step times, against the first two's


@pytest.fixture(scope="module")
def postgres():
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no PostgreSQL test server: {reason}")
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path) -> str:
    """An empty store's --db: a SQLite file, or a new database on the test server."""
    if request.param == "sqlite":
        return str(tmp_path / "history.sqlite")
    server = request.getfixturevalue("postgres")
    return server.create_database(f"t{abs(hash(request.node.nodeid)) % 10**12}")


def run_set(root: Path, name: str, started: str, scale: float = 1.0, jitter: float = 0.0,
            stack: str | None = None) -> Path:
    """A run set of RUNS started at `started`, step times scaled by `scale`, each step moved by up to +-jitter."""
    folder = root / name
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "system.json", folder / "system.json")
    for run in RUNS:
        result = copy.deepcopy(json.loads((FIXTURES / run / "result.json").read_text()))
        result["run"]["started_at"] = started
        result["run"]["ended_at"] = started.replace("T10:", "T11:")
        result["series"]["step_time_s"] = [t * (1 + jitter * ((i * 7) % 5 - 2) / 2)
                                           for i, t in enumerate(result["series"]["step_time_s"])]
        if stack:
            result["schema_version"] = "1.5"
            result["stack"] = {"name": stack, "image": f"example/{stack}", "image_digest": None,
                               "image_digest_note": "test"}
        (folder / run).mkdir()
        (folder / run / "result.json").write_text(json.dumps(refigure(result, scale)))
    return folder


def history(*argv: str) -> int:
    return main(list(argv))


def stored(db: str) -> list[dict]:
    with open_store(location(db)) as found:
        return found.rows()


def test_a_result_added_twice_from_its_folder_and_its_zip_is_stored_once(store, tmp_path, capsys):
    first = run_set(tmp_path, "20261101-100000-nvd", "2026-11-01T10:00:00+00:00")
    archive = tmp_path / "output.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        for path in first.rglob("*.json"):
            packed.write(path, path.relative_to(tmp_path).as_posix())
    assert history("add", "--db", store, str(first)) == 0
    assert history("add", "--db", store, str(archive)) == 0
    assert "stored 0 new result(s)" in capsys.readouterr().out
    rows = stored(store)
    assert [r["run_id"] for r in rows] == list(RUNS) and {r["run_set"] for r in rows} == {first.name}
    assert rows[0]["tokens_per_s_per_gpu"] == json.loads(rows[0]["result"])["performance"]["tokens_per_s_per_gpu"]


def test_the_identity_and_the_per_step_series_are_stored(store, tmp_path):
    run_set(tmp_path, "20261101-100000-nvd", "2026-11-01T10:00:00+00:00", stack="nemo-25.04")
    history("add", "--db", store, str(tmp_path))
    row = stored(store)[0]
    original = json.loads((FIXTURES / "mega-llama-r1" / "result.json").read_text())
    assert (row["platform"], row["device"], row["stack"], row["framework"], row["model"]) == \
        ("nvd", "NVIDIA H100 SXM", "nemo-25.04", "mega", "llama")
    assert (row["tp"], row["pp"], row["dp"], row["ga"], row["mbs"], row["precision"]) == (1, 1, 8, 16, 1, "bf16")
    assert row["dataset_fingerprint"] == original["training"]["dataset_fingerprint"]
    assert json.loads(row["result"])["series"]["loss"] == original["series"]["loss"]


def test_a_result_that_fails_validate_is_stored_as_failed_with_its_reason_and_no_figure(store, tmp_path):
    folder = run_set(tmp_path, "20261101-100000-nvd", "2026-11-01T10:00:00+00:00")
    path = folder / "mega-llama-r1" / "result.json"
    result = json.loads(path.read_text())
    result["performance"]["tokens_per_s_per_gpu"] *= 2  # a headline its step times do not give
    path.write_text(json.dumps(result))
    history("add", "--db", store, str(folder))
    failed = next(r for r in stored(store) if r["run_id"] == "mega-llama-r1")
    assert failed["verdict"] == "failed" and "figures" in json.loads(failed["failures"])[0]
    assert all(failed[name] is None for name in records.FIGURES)


def test_regressions_names_the_configurations_of_a_slower_run_set_and_exits_1(store, tmp_path, capsys):
    run_set(tmp_path, "20261101-100000-nvd", "2026-11-01T10:00:00+00:00", jitter=0.002)
    run_set(tmp_path, "20261102-100000-nvd", "2026-11-02T10:00:00+00:00", jitter=0.003)
    run_set(tmp_path, "20261103-100000-nvd", "2026-11-03T10:00:00+00:00", scale=SLOWER, jitter=0.002)
    history("add", "--db", store, str(tmp_path))
    capsys.readouterr()
    assert history("regressions", "--db", store) == 1
    out = capsys.readouterr().out
    regressions = [line for line in out.splitlines() if line.startswith("REGRESSION")]
    assert len(regressions) == 2 and all("+15.0%" in line and "20261103-100000-nvd" in line for line in regressions)
    assert {"llama3.1-8b", "qwen2.5-7b"} == {v for v in ("llama3.1-8b", "qwen2.5-7b") for line in regressions if v in line}


def test_two_equal_run_sets_show_no_regression_and_exit_0(store, tmp_path, capsys):
    run_set(tmp_path, "20261101-100000-nvd", "2026-11-01T10:00:00+00:00", jitter=0.002)
    run_set(tmp_path, "20261102-100000-nvd", "2026-11-02T10:00:00+00:00", jitter=0.003)
    history("add", "--db", store, str(tmp_path))
    capsys.readouterr()
    assert history("regressions", "--db", store) == 0
    out = capsys.readouterr().out
    assert out.count("no change: ") == 2 and "0 regression(s) in 2 configuration(s)" in out


def test_a_change_within_the_runs_own_spread_is_no_regression(tmp_path, capsys):
    """Baseline repeats 8% apart: a candidate 6% slower than their median is inside what the runs themselves vary."""
    run_set(tmp_path, "20261101-100000-nvd", "2026-11-01T10:00:00+00:00", scale=0.96)
    run_set(tmp_path, "20261102-100000-nvd", "2026-11-02T10:00:00+00:00", scale=1.04)
    run_set(tmp_path, "20261103-100000-nvd", "2026-11-03T10:00:00+00:00", scale=1.06)
    db = str(tmp_path / "h.sqlite")
    history("add", "--db", db, str(tmp_path))
    assert history("regressions", "--db", db) == 0
    assert "runs' own spread 8.0%" in capsys.readouterr().out


def test_by_stack_a_named_baseline_and_since_choose_what_is_compared(tmp_path, capsys):
    run_set(tmp_path, "20261101-100000-nvd", "2026-11-01T10:00:00+00:00", stack="nemo-25.04")
    run_set(tmp_path, "20261102-100000-nvd", "2026-11-02T10:00:00+00:00", scale=SLOWER, stack="nemo-26.02")
    run_set(tmp_path, "20261103-100000-nvd", "2026-11-03T10:00:00+00:00", scale=SLOWER, stack="nemo-26.02")
    db = str(tmp_path / "h.sqlite")
    history("add", "--db", db, str(tmp_path))
    assert history("regressions", "--db", db) == 0  # the newest run set against the one before: the same stack
    assert history("regressions", "--db", db, "--by", "stack") == 1
    assert history("regressions", "--db", db, "--baseline", "nemo-25.04") == 1
    # From the 3rd on against the runs before, whose own medians differ by 15% (25.04 and 26.02): inside that spread
    assert history("regressions", "--db", db, "--since", "2026-11-03") == 0
    out = capsys.readouterr().out
    assert "on nemo-26.02 vs" in out and "on nemo-25.04" in out


def test_export_csv_opens_in_pandas_with_madengine_columns_and_jsonl_holds_one_result_per_line(store, tmp_path):
    import pandas
    run_set(tmp_path / "in", "20261101-100000-nvd", "2026-11-01T10:00:00+00:00")
    history("add", "--db", store, str(tmp_path / "in"))
    assert history("export", "--db", store, "--format", "csv", "-o", str(tmp_path / "perf.csv")) == 0
    table = pandas.read_csv(tmp_path / "perf.csv")
    assert {"model", "performance", "metric", "status", "n_gpus", "tprimat_stack", "tprimat_framework"} <= set(table.columns)
    assert list(table["model"]) == ["mega_llama3.1-8b", "mega_qwen2.5-7b"] and set(table["metric"]) == {"tokens/s/gpu"}
    assert list(table["performance"]) == pytest.approx([r["tokens_per_s_per_gpu"] for r in stored(store)])
    assert history("export", "--db", store, "--format", "jsonl", "-o", str(tmp_path / "all.jsonl")) == 0
    lines = (tmp_path / "all.jsonl").read_text().splitlines()
    assert [json.loads(line)["result"]["run"]["id"] for line in lines] == list(RUNS)


def _add_in_a_process(db: str, folders: list[str]) -> None:
    for folder in folders:
        main(["add", "--db", db, folder])


# Forked writers start in milliseconds (a fresh interpreter takes a second or two); the only other threads of this
# process are native libraries' idle pools, which the writers never use (the same for the read-only test's child).
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")
def test_two_writers_at_once_lose_nothing(store, tmp_path):
    folders = [run_set(tmp_path, f"2026110{day}-100000-nvd", f"2026-11-0{day}T10:00:00+00:00") for day in (1, 2, 3, 4)]
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_add_in_a_process, args=(store, [str(f) for f in half]))
               for half in (folders[:2], folders[2:])]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=60)
    assert [writer.exitcode for writer in writers] == [0, 0]
    assert len(stored(store)) == 2 * len(folders)


def test_a_newer_schema_and_a_store_that_is_not_tprimats_are_refused_in_one_line(store, tmp_path):
    history("add", "--db", store, str(run_set(tmp_path, "20261101-100000-nvd", "2026-11-01T10:00:00+00:00")))
    database = Database(location(store))
    database.execute("UPDATE meta SET value = ? WHERE key = ?", (str(SCHEMA_VERSION + 1), "schema_version"))
    with pytest.raises(UsageError, match=f"newer TPrimat \\(store schema {SCHEMA_VERSION + 1}; this checkout knows"):
        history("list", "--db", store)
    database.execute("DELETE FROM meta")
    database.close()
    with pytest.raises(UsageError, match="is not a TPrimat results store .it holds meta, results"):
        history("add", "--db", store, str(tmp_path))


def test_a_file_that_is_no_store_is_refused_and_left_as_it_was(tmp_path):
    folder = run_set(tmp_path, "20261101-100000-nvd", "2026-11-01T10:00:00+00:00")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n" * 100)
    with pytest.raises(UsageError, match="not a TPrimat results store .not an SQLite database"):
        history("add", "--db", str(notes), str(folder))
    assert notes.read_text() == "my notes\n" * 100
    songs = tmp_path / "songs.sqlite"
    with sqlite3.connect(songs) as other:
        other.execute("CREATE TABLE songs (title TEXT)")
        other.execute("INSERT INTO songs VALUES ('a')")
    with pytest.raises(UsageError, match="not a TPrimat results store .it holds songs and no"):
        history("add", "--db", str(songs), str(folder))
    with sqlite3.connect(songs) as other:
        assert other.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        assert other.execute("SELECT title FROM songs").fetchall() == [("a",)]


def test_a_locked_store_is_one_line_and_keeps_what_it_holds(tmp_path):
    db = tmp_path / "h.sqlite"
    history("add", "--db", str(db), str(run_set(tmp_path / "a", "20261101-100000-nvd", "2026-11-01T10:00:00+00:00")))
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer in the middle of its transaction
    try:
        rows = [records.row(item, "now", None) for item in gated([run_set(tmp_path / "b", "20261102-100000-nvd",
                                                                          "2026-11-02T10:00:00+00:00")]).results]
        with pytest.raises(StoreError, match="is locked by another writer .waited 0.2 s.; nothing was changed"):
            with open_store(Location(path=db), create=True, busy_timeout_s=0.2) as opened:
                opened.add(rows)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [r["run_set"] for r in stored(str(db))] == ["20261101-100000-nvd"] * 2


@pytest.fixture
def shared_folder():
    """A folder every user may reach (pytest's own temporary folders are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="tprimat-history-"))
    yield folder
    shutil.rmtree(folder)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")
def test_a_read_only_store_is_one_line_and_keeps_what_it_holds(shared_folder):
    """Root writes any file: the writer is a forked child that has become `nobody` (a fresh interpreter could not
    reach this Python's files as nobody)."""
    folder = shared_folder
    db = folder / "h.sqlite"
    history("add", "--db", str(db), str(run_set(folder / "a", "20261101-100000-nvd", "2026-11-01T10:00:00+00:00")))
    later = run_set(folder / "b", "20261102-100000-nvd", "2026-11-02T10:00:00+00:00")
    for path in (folder, *folder.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    folder.chmod(0o777)
    db.chmod(0o444)
    child = os.fork()
    if child == 0:
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
        try:
            history("add", "--db", str(db), str(later))
            os._exit(0)
        except StoreError as err:
            (folder / "line").write_text(str(err))
            os._exit(1)
        except BaseException as err:  # noqa: BLE001 - anything else fails the test below, saying what
            (folder / "line").write_text(repr(err))
            os._exit(3)
    _, status = os.waitpid(child, 0)
    line = f"cannot write the store {db}: the file is read-only; make it writable or give another --db"
    assert (os.waitstatus_to_exitcode(status), (folder / "line").read_text()) == (1, line)
    assert [r["run_set"] for r in stored(str(db))] == ["20261101-100000-nvd"] * 2


def test_an_unreachable_server_is_one_line(postgres):
    closed = postgres.url("postgres").replace(f":{postgres.port}/", ":1/")
    with pytest.raises(StoreError, match="refused the connection"):
        history("list", "--db", closed)


def test_a_server_that_goes_away_mid_write_loses_nothing_already_stored(postgres, tmp_path):
    import psycopg
    db = postgres.create_database("gone_mid_write")
    history("add", "--db", db, str(run_set(tmp_path / "a", "20261101-100000-nvd", "2026-11-01T10:00:00+00:00")))
    rows = [records.row(item, "now", None) for item in gated([run_set(tmp_path / "b", "20261102-100000-nvd",
                                                                      "2026-11-02T10:00:00+00:00")]).results]
    from evaluate.history.store import COLUMNS
    statement = f"INSERT INTO results ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})"
    with pytest.raises(StoreError, match="went away: .*nothing of this command was stored"):
        with open_store(location(db)) as opened, opened.db.writing():
            opened.insert(statement, rows[0])
            backend = opened.db.execute("SELECT pg_backend_pid()")[0][0]
            with psycopg.connect(postgres.url("postgres"), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
            opened.insert(statement, rows[1])
    assert [r["run_set"] for r in stored(db)] == ["20261101-100000-nvd"] * 2


def test_the_default_store_is_under_output_dir_and_a_password_in_its_url_is_refused(tmp_path):
    assert location(env={"OUTPUT_DIR": str(tmp_path)}) == Location(path=tmp_path / "history.sqlite")
    assert location(env={"HISTORY_DB": "postgresql://bench@db.example/tprimat"}).url == \
        "postgresql://bench@db.example/tprimat"
    with pytest.raises(UsageError, match="without a password") as refused:
        location("postgresql://bench:hunter2@db.example/tprimat")
    assert "hunter2" not in str(refused.value)


def test_compare_takes_a_history_query_and_its_report_gains_the_history_section(tmp_path):
    from evaluate.compare import compare
    from evaluate.history.query import HistoryQuery
    run_set(tmp_path / "in", "20261101-100000-nvd", "2026-11-01T10:00:00+00:00")
    run_set(tmp_path / "in", "20261102-100000-nvd", "2026-11-02T10:00:00+00:00", scale=SLOWER)
    db = tmp_path / "h.sqlite"
    history("add", "--db", str(db), str(tmp_path / "in"))
    text = compare([], tmp_path / "out", history=HistoryQuery(Location(path=db), {"model": "llama"}))
    assert "2 run(s) of Llama 3.1 8B" in text
    history_part = text[text.index("## History"):text.index("## Fairness")]
    assert "### NVIDIA H100 SXM mega llama3.1-8b" in history_part and "qwen" not in history_part
    assert "| 2026-11-01T10:00:00+00:00 | 20261101-100000-nvd | - | ok |" in history_part
    assert "![history](history.png)" in history_part and (tmp_path / "out" / "history.png").stat().st_size > 0


def test_a_store_of_before_expert_parallelism_gains_each_rows_ep_from_its_result(store, tmp_path):
    """Store schema 2 keeps the expert-parallel size as a configuration column (two MoE runs at EP 1 and 8 are no
    repeats of one another); a version-1 store is brought up to it with each stored result's own value, and its rows
    read as whole (no column differs from what the result gives)."""
    history("add", "--db", store, str(run_set(tmp_path, "20261101-100000-nvd", "2026-11-01T10:00:00+00:00")))
    database = Database(location(store))
    database.execute("ALTER TABLE results DROP COLUMN ep")
    database.execute("UPDATE meta SET value = ? WHERE key = ?", ("1", "schema_version"))
    database.close()
    rows = stored(store)
    assert [(row["ep"], json.loads(row["failures"])) for row in rows] == [(1, [])] * len(RUNS)
    assert all(" EP" not in records.label(row) for row in rows)
    with open_store(location(store)) as found:
        assert found.version() == SCHEMA_VERSION == 2
