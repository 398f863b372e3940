"""The results store: a versioned schema with its migrations, and the reads and writes of evaluate.history.

A `meta` table says whose store it is (`store` = tprimat-history) and its schema version. Opening a database
that has tables but no such row is refused (not TPrimat's: one line, exit 2), as is a version above the one this
checkout knows (written by a newer TPrimat); an older one is brought up to date by MIGRATIONS, each step in the
same write transaction as the version it records. One `results` row per stored result (evaluate/history/records.py
has its columns): the whole result and its system description as JSON (figures and per-step series), and the
identity and figures as columns to filter, list and export by.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Mapping

from evaluate.history.records import (DOCUMENTS, FIGURES, INTEGER_IDENTITY, ORIGIN, TEXT_IDENTITY, checked, damage,
                                      expert_parallel)
from evaluate.history.sql import BUSY_TIMEOUT_S, Database, Location
from utils.cli import quoted
from utils.errors import UsageError
from utils.spec.result_types import typed

STORE_NAME = "tprimat-history"
SCHEMA_VERSION = 2
COLUMNS = ORIGIN + TEXT_IDENTITY + INTEGER_IDENTITY + FIGURES + DOCUMENTS
FILTERS = TEXT_IDENTITY + INTEGER_IDENTITY + ("run_set", "tag", "verdict", "run_id")  # --where KEY=VALUE


def _column_type(name: str) -> str:
    if name == "content_key":
        return "TEXT PRIMARY KEY"
    if name in INTEGER_IDENTITY:
        return "INTEGER"
    if name in FIGURES:
        return "DOUBLE PRECISION"
    return "TEXT NOT NULL" if name in ("added_at", "run_id", "run_set", "source", "verdict", "failures",
                                       "result", "system") else "TEXT"


def _fill_expert_parallel(database: Database) -> None:
    """Version 2's ep column of the rows stored before it, from each stored result (records.expert_parallel)."""
    for key, result in database.execute("SELECT content_key, result FROM results"):
        database.execute("UPDATE results SET ep = ? WHERE content_key = ?",
                         (expert_parallel(typed(json.loads(result))), key))


# Version N's steps bring a store from version N-1 to N (0: an empty database): SQL statements, or a function of the
# database where a new column's value comes from the stored results. Version 1's table is made with every column of
# today (COLUMNS), so a step that adds a column runs only on a store made before it.
MIGRATIONS: dict[int, tuple[str | Callable[[Database], None], ...]] = {
    1: ("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE results (" + ", ".join(f"{name} {_column_type(name)}" for name in COLUMNS) + ")",
        "CREATE INDEX results_by_model ON results (framework, model)",
        "CREATE INDEX results_by_date ON results (run_date)"),
    # the expert-parallel size, part of a configuration (issue 47): two MoE runs at EP 1 and 8 are no repeats
    2: ("ALTER TABLE results ADD COLUMN ep INTEGER", _fill_expert_parallel),
}


class Store:
    """An open store; use as a context manager (open_store)."""

    def __init__(self, database: Database):
        self.db = database

    @property
    def where(self) -> Location:
        return self.db.where

    def version(self) -> int | None:
        """The schema version, None for an empty database; UsageError for a database that is not TPrimat's store."""
        tables = self.db.tables()
        if not tables:
            return None
        meta = dict(self.db.execute("SELECT key, value FROM meta")) if "meta" in tables else {}
        if meta.get("store") != STORE_NAME:
            shown = ", ".join(sorted(tables)[:5])
            raise UsageError(f"{self.where} is not a TPrimat results store (it holds {quoted(shown, 120)} and no "
                             f"'{STORE_NAME}' meta row); give another --db or HISTORY_DB")
        text = meta.get("schema_version", "0")
        if not (isinstance(text, str) and text.isascii() and text.isdigit() and len(text) < 10):
            raise UsageError(f"{self.where} is a damaged TPrimat results store (its schema version is "
                             f"{quoted(str(text), 40)}, not a number); restore it from a copy or give another --db")
        version = int(text)
        if version > SCHEMA_VERSION:
            raise UsageError(f"{self.where} was written by a newer TPrimat (store schema {version}; this checkout "
                             f"knows up to {SCHEMA_VERSION}): update TPrimat to read it")
        return version

    def migrate(self) -> None:
        """Create the schema in an empty database or bring an older one up to SCHEMA_VERSION, under the write lock
        (a second writer creating it at the same time waits, then finds it made)."""
        if self.version() == SCHEMA_VERSION:
            return
        with self.db.writing():
            current = self.version() or 0
            steps = MIGRATIONS[1] if current == 0 else [step for version in range(current + 1, SCHEMA_VERSION + 1)
                                                        for step in MIGRATIONS[version]]
            for step in steps:
                if callable(step):
                    step(self.db)
                else:
                    self.db.execute(step)
            if current == 0:
                self.db.execute("INSERT INTO meta (key, value) VALUES (?, ?)", ("store", STORE_NAME))
                self.db.execute("INSERT INTO meta (key, value) VALUES (?, ?)", ("schema_version", str(SCHEMA_VERSION)))
            else:
                self.db.execute("UPDATE meta SET value = ? WHERE key = ?", (str(SCHEMA_VERSION), "schema_version"))

    def add(self, rows: Iterable[Mapping]) -> tuple[int, int, int]:
        """Store the rows in one transaction; (new, replaced, already stored). A row whose content key is stored is
        skipped, unless the stored copy failed and this one is ok: a failed copy (edited figures, the same run's
        identity) added first must not hide the honest result added after it."""
        rows = list(rows)
        insert = f"INSERT INTO results ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})"
        update = f"UPDATE results SET {', '.join(f'{name} = ?' for name in COLUMNS)} WHERE content_key = ?"
        new = replaced = 0
        with self.db.writing():
            for row in rows:
                found = self.db.execute("SELECT verdict FROM results WHERE content_key = ?", (row["content_key"],))
                if not found:
                    self.insert(insert, row)
                    new += 1
                elif found[0][0] != "ok" and row["verdict"] == "ok":
                    self.db.execute(update, [row[name] for name in COLUMNS] + [row["content_key"]])
                    replaced += 1
        return new, replaced, len(rows) - new - replaced

    def insert(self, statement: str, row: Mapping) -> None:
        self.db.execute(statement, [row[name] for name in COLUMNS])

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM results")[0][0]

    def rows(self, where: Mapping[str, str] | None = None, columns: tuple[str, ...] = COLUMNS) -> list[dict]:
        """Stored results matching every KEY=VALUE of where (FILTERS), oldest run first."""
        where = where or {}
        clauses = [f"{key} = ?" for key in where]
        values = [int(v) if key in INTEGER_IDENTITY else v for key, v in where.items()]
        statement = (f"SELECT {', '.join(columns)} FROM results"
                     + (f" WHERE {' AND '.join(clauses)}" if clauses else "")
                     + " ORDER BY run_date, run_set, run_id, content_key")
        return [self.read(dict(zip(columns, found))) for found in self.db.execute(statement, values)]

    def read(self, stored: dict) -> dict:
        """A stored row as every reader takes it: judged again from its result (records.checked), or one line
        naming it when it is damaged (UsageError: the store is the input)."""
        if "result" not in stored:
            return stored
        problem = damage(stored)
        if problem:
            key = stored["content_key"][:12] if isinstance(stored["content_key"], str) else "?"
            raise UsageError(f"{self.where} holds a damaged result (ID {quoted(key, 12)}): {problem}; remove it or "
                             "restore the store from a copy")
        return checked(stored)

    def chosen(self, where: Mapping[str, str]) -> list[dict]:
        """rows(where), refusing a where that matches nothing (a typo must not read as "no regression"), naming
        the values each of its keys has in the store."""
        found = self.rows(where)
        if where and not found:
            known = "; ".join(f"{key} is one of {self.values(key)}" for key in where)
            asked = ",".join(f"{key}={value}" for key, value in where.items())
            raise UsageError(f"no stored result has {quoted(asked, 120)} ({known}): check --where for a typo")
        return found

    def values(self, key: str, limit: int = 8) -> str:
        """The distinct values of one FILTERS column, for a message."""
        found = sorted(str(v[0]) for v in self.db.execute(f"SELECT DISTINCT {key} FROM results"))
        more = f" and {len(found) - limit} more" if len(found) > limit else ""
        return ", ".join(quoted(v, 40) for v in found[:limit]) + more or "none stored"

    def find(self, prefix: str) -> dict:
        """The one stored result whose content key starts with prefix (the ID list prints); UsageError otherwise."""
        if not prefix or any(c not in "0123456789abcdef" for c in prefix.lower()):
            raise UsageError(f"{quoted(prefix, 80)} is no result ID: give the hexadecimal ID that list prints")
        found = self.db.execute(f"SELECT {', '.join(COLUMNS)} FROM results WHERE content_key >= ? AND content_key < ?",
                                (prefix.lower(), prefix.lower() + "g"))
        if len(found) != 1:
            why = "no stored result has" if not found else f"{len(found)} stored results have"
            raise UsageError(f"{why} an ID starting with {prefix}: give the ID that list prints"
                             + (" (more of its digits)" if found else ""))
        return self.read(dict(zip(COLUMNS, found[0])))


@contextmanager
def open_store(where: Location, create: bool = False, busy_timeout_s: float = BUSY_TIMEOUT_S) -> Iterator[Store]:
    """The store at where, its schema created or migrated when create (add), an older one migrated before it is
    read; reading one that does not exist yet is a usage error naming how to make it."""
    if not create and where.path is not None and not where.path.is_file():
        raise UsageError(f"no results store at {where} yet: add results first (python3 -m evaluate.history add "
                         "OUTPUT_DIR), or give another --db or HISTORY_DB")
    if create and where.path is not None:
        where.path.parent.mkdir(parents=True, exist_ok=True)
    database = Database(where, busy_timeout_s, read_only=not create)
    try:
        store = Store(database)
        version = store.version()  # a database that is not TPrimat's store is refused before anything changes it
        if not create and version is not None and version < SCHEMA_VERSION:  # an older store: brought up to date
            database.close()
            database = Database(where, busy_timeout_s, read_only=False)
            store = Store(database)
            store.migrate()
        if create:
            if version is None and not database.postgres:  # readers never block the writer; the file keeps it
                database.execute("PRAGMA journal_mode=WAL")
            store.migrate()
        elif version is None:
            raise UsageError(f"no results in the store at {where} yet: add results first (python3 -m "
                             "evaluate.history add OUTPUT_DIR)")
        yield store
    finally:
        database.close()
