"""The one SQL layer under the results store: SQLite from Python's standard library (a file, the default) or a
PostgreSQL server (a `postgresql://` URL, through psycopg 3), behind the same few calls.

Statements are written once, with `?` placeholders and types both databases read alike (TEXT, INTEGER, DOUBLE
PRECISION); `Database.sql` turns them into psycopg's `%s` form, the one place the two differ in syntax. A write is
one transaction that first takes the store's write lock (SQLite's BEGIN IMMEDIATE, which waits up to the busy
timeout for another writer; a PostgreSQL advisory lock), so that two writers at once both land and a write that
fails lands nothing. Every refusal of the driver (a locked or read-only file, a server that refuses or goes away)
becomes one line (StoreError, exit 1) naming the store and the fix.
"""

from __future__ import annotations

import errno
import os
import resource
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from utils.cli import quoted
from utils.config.machine import KNOBS
from utils.config.parse import Knob, convert
from utils.config.reading import knob_text
from utils.config.workload import DATA
from utils.errors import UsageError, WorkError
from utils.files import disk_problem

URL_PREFIXES = ("postgresql://", "postgres://")
DEFAULT_NAME = "history.sqlite"  # under OUTPUT_DIR
BUSY_TIMEOUT_S = 30.0  # how long a writer waits for another one before it says the store is locked
CONNECT_TIMEOUT_S = 10
WRITE_LOCK = 3535  # the PostgreSQL advisory lock key of TPrimat's store writers (any constant shared by all)
SQLITE_FULL, SQLITE_IOERR = 13, 10  # SQLite's primary result codes of a write the disk refused
FULL_BELOW = 1 << 20  # bytes free under which an I/O error of SQLite's is the disk being full


class StoreError(WorkError):
    """The store could not be read or written (locked, read-only, server refused or gone); the message is the line."""


@dataclass(frozen=True)
class Location:
    """Where the store is: a SQLite file or a PostgreSQL URL (never with a password: HISTORY_DB's rule)."""

    path: Path | None = None
    url: str | None = None

    def __str__(self) -> str:
        return self.url or str(self.path)


def location(given: str | None = None, env: dict | None = None) -> Location:
    """The store: --db when given, else HISTORY_DB (environment, then config.env), else OUTPUT_DIR/history.sqlite;
    UsageError naming a value that is none."""
    name, raw = ("--db", given) if given is not None else ("HISTORY_DB", knob_text("HISTORY_DB", env))
    problems: list[str] = []
    # a path typed on the command line may have any letters (HISTORY_DB's rule is for config.env's ASCII lines)
    typed_path = given is not None and not given.startswith(URL_PREFIXES) and given.isprintable()
    value = given if typed_path else convert(name, raw, KNOBS["HISTORY_DB"], problems)
    if not problems and value.startswith(URL_PREFIXES):
        return Location(url=value)
    if not problems and value:
        path = Path(convert(name, value, Knob("file"), problems))
        if path.is_dir():
            raise UsageError(f"{name}={quoted(value, 120)} is a folder: give the store's file (e.g. {path / DEFAULT_NAME})")
        if path.exists() and not path.is_file():  # /dev/zero, a FIFO: SQLite would read it and write beside it
            raise UsageError(f"{name}={quoted(value, 120)} is not a database file (a device, FIFO or socket): give "
                             "the store's file")
        return Location(path=path)
    if not problems:
        output = convert("OUTPUT_DIR", knob_text("OUTPUT_DIR", env), DATA["OUTPUT_DIR"], problems)
        if not problems:
            return Location(path=Path(output) / DEFAULT_NAME)
    raise UsageError(problems[0])


def _first_line(err: BaseException) -> str:
    return quoted(next((line for line in str(err).splitlines() if line.strip()), type(err).__name__), 300)


class Database:
    """One open connection to the store's database."""

    def __init__(self, where: Location, busy_timeout_s: float = BUSY_TIMEOUT_S, read_only: bool = False):
        self.where = where
        self.busy_timeout_s = busy_timeout_s
        self.read_only = read_only
        self.postgres = where.url is not None
        self.connection = self._connect()

    def _connect(self):
        if self.postgres:
            import psycopg  # only a PostgreSQL store needs the driver
            try:
                return psycopg.connect(self.where.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
            except psycopg.Error as err:
                raise StoreError(f"the store's server at {self.where} refused the connection: {_first_line(err)}; "
                                 "start it or fix HISTORY_DB/--db (a password goes in PGPASSWORD or ~/.pgpass)") from None
        path, uri = self.where.path, False
        if self.read_only:  # a reader needs no write access: a store on a read-only mount or folder is read
            folder_writable = os.access(path.parent, os.W_OK)
            path, uri = Path(path).absolute().as_uri() + ("?mode=ro" if folder_writable else "?immutable=1"), True
        try:
            return sqlite3.connect(path, timeout=self.busy_timeout_s, isolation_level=None, uri=uri)
        except sqlite3.Error as err:
            raise StoreError(self._sqlite_line(err)) from None

    def close(self) -> None:
        self.connection.close()

    def sql(self, statement: str) -> str:
        """A statement in this database's parameter style (written with `?`, which no statement uses otherwise)."""
        return statement.replace("?", "%s") if self.postgres else statement

    def execute(self, statement: str, params: Sequence = ()) -> list[tuple]:
        """Run one statement; its rows (none for a write)."""
        with self.refusals():
            cursor = self.connection.execute(self.sql(statement), tuple(params))
            return cursor.fetchall() if cursor.description else []

    def tables(self) -> set[str]:
        """The tables the database holds (in PostgreSQL: in the URL's current schema)."""
        query = ("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
                 if self.postgres else "SELECT name FROM sqlite_master WHERE type = 'table'")
        return {row[0] for row in self.execute(query)}

    @contextmanager
    def writing(self) -> Iterator[None]:
        """One transaction holding the store's write lock: committed whole at the end, or rolled back whole."""
        self.execute("BEGIN" if self.postgres else "BEGIN IMMEDIATE")
        try:
            if self.postgres:
                self.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))
            yield
            self.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        """Undo the open transaction; a connection already gone has nothing left to undo (the server dropped it)."""
        try:
            self.connection.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - the server or file is gone: its transaction died with it
            pass

    @contextmanager
    def refusals(self) -> Iterator[None]:
        """The driver's errors as one line each (StoreError, or UsageError for a file that is no database)."""
        try:
            yield
        except sqlite3.DatabaseError as err:
            if "not a database" in str(err):
                raise UsageError(f"{self.where} is not a TPrimat results store (not an SQLite database); give "
                                 "another --db or HISTORY_DB") from None
            raise StoreError(self._sqlite_line(err)) from None
        except Exception as err:
            if not self.postgres or not _is_psycopg(err):
                raise
            raise StoreError(self._postgres_line(err)) from None

    def _sqlite_line(self, err: sqlite3.Error) -> str:
        text = str(err)
        if full := self._disk_line(err):
            return full
        if "locked" in text or "busy" in text:
            return (f"the store {self.where} is locked by another writer (waited {self.busy_timeout_s:g} s); nothing "
                    "was changed: try again when it is done")
        if "readonly" in text or "read-only" in text:
            return f"cannot write the store {self.where}: the file is read-only; make it writable or give another --db"
        if "unable to open" in text:
            folder = self.where.path.parent if self.where.path else "?"
            problem = "it does not exist" if not os.path.isdir(folder) else "it is not writable"
            return f"cannot open the store {self.where}: its folder {folder}: {problem}; give another --db"
        return f"the store {self.where} refused: {_first_line(err)}"

    def _disk_line(self, err: sqlite3.Error) -> str | None:
        """utils.files.disk_problem's line for a write SQLite says the disk refused (its "disk I/O error" hides the
        errno): the file-size limit when one is set, a full disk when SQLite says so or the folder has no room."""
        code = (getattr(err, "sqlite_errorcode", None) or 0) & 0xFF
        if code not in (SQLITE_FULL, SQLITE_IOERR) or self.where.path is None:
            return None
        folder = self.where.path.absolute().parent
        if code == SQLITE_IOERR and resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:
            refused = errno.EFBIG
        elif code == SQLITE_FULL or _free(folder) < FULL_BELOW:
            refused = errno.ENOSPC
        else:
            return None
        return disk_problem(OSError(refused, os.strerror(refused), str(self.where.path)))

    def _postgres_line(self, err: Exception) -> str:
        import psycopg
        if isinstance(err, psycopg.OperationalError) or self.connection.closed:
            return (f"the store's server at {self.where} went away: {_first_line(err)}; nothing of this command was "
                    "stored (its transaction was rolled back): start the server and run it again")
        return f"the store's server at {self.where} refused: {_first_line(err)}"


def _free(folder: Path) -> int:
    """Bytes free to a writer in folder (unknown: as much as it needs)."""
    try:
        found = os.statvfs(folder)
    except OSError:
        return FULL_BELOW
    return found.f_bavail * found.f_frsize


def _is_psycopg(err: Exception) -> bool:
    return type(err).__module__.split(".")[0] == "psycopg"
