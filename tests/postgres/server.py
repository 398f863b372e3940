"""A real PostgreSQL server on this machine, for the results store's tests.

The distribution's server (tests/postgres/install.sh) in a private temporary data folder, listening on 127.0.0.1
at a free port and on a socket in that folder, with trust authentication for the one user it was made with: it
never touches a system cluster. initdb and postgres refuse to run as root, so as root both run as the `postgres`
user (setpriv, which execs the program itself: the child's process id is the server's). The server is a child of
this process, stopped by its process id.

    python3 -m tests.postgres.server   # start it, print its URL, stop on Ctrl-C
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.slurm.cluster import free_ports

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
USER = "tprimat"
SERVICE_USER = "postgres"  # who runs the server when this process is root


class ServerError(RuntimeError):
    """The server could not be started; the message holds the end of its log."""


def binaries() -> Path | None:
    """The newest installed server's bin folder (Debian: /usr/lib/postgresql/<major>/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def unavailable_reason() -> str | None:
    """Why no server can be started here (None when one can)."""
    if binaries() is None:
        return "no PostgreSQL server installed: tests/postgres/install.sh installs it (as root)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVICE_USER)
        except KeyError:
            return f"no '{SERVICE_USER}' user to run the server as (root may not): reinstall the postgresql package"
        if not shutil.which("setpriv"):
            return "no setpriv (util-linux) to start the server as the postgres user"
    return None


@dataclass
class PostgresServer:
    """start() it, stop() it (idempotent); url(database) names a database, create_database() makes one."""

    base: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tprimat-postgres-")))
    port: int = 0
    _proc: subprocess.Popen | None = None

    def _as_service(self, argv: list[str]) -> list[str]:
        user = f"--reuid={SERVICE_USER}", f"--regid={SERVICE_USER}", "--init-groups"
        return ["setpriv", *user, *argv] if os.geteuid() == 0 else argv

    def start(self) -> "PostgresServer":
        bin_dir = binaries()
        data = self.base / "data"
        self.base.chmod(0o755)
        if os.geteuid() == 0:
            owner = pwd.getpwnam(SERVICE_USER)
            os.chown(self.base, owner.pw_uid, owner.pw_gid)
        init = subprocess.run(self._as_service([str(bin_dir / "initdb"), "-D", str(data), "-U", USER,
                                                "--auth=trust", "--no-sync", "-E", "UTF8"]),
                              capture_output=True, text=True, timeout=120)
        if init.returncode != 0:
            raise ServerError(f"initdb failed ({init.returncode}): {init.stderr[-2000:]}")
        self.port = free_ports(1)[0]
        log = open(self.base / "server.log", "wb")
        with log:
            self._proc = subprocess.Popen(
                self._as_service([str(bin_dir / "postgres"), "-D", str(data), "-p", str(self.port),
                                  "-h", "127.0.0.1", "-k", str(self.base), "-c", "fsync=off",
                                  "-c", "full_page_writes=off", "-c", "synchronous_commit=off"]),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        import psycopg
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ServerError(f"postgres exited with code {self._proc.returncode}:\n{self.tail()}")
            try:
                psycopg.connect(self.url("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                time.sleep(0.1)
        raise ServerError(f"postgres did not answer within {START_TIMEOUT_S:.0f} s:\n{self.tail()}")

    def url(self, database: str) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database; its URL."""
        import psycopg
        with psycopg.connect(self.url("postgres"), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def tail(self, lines: int = 20) -> str:
        path = self.base / "server.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        """Stop the server (SIGINT: a fast shutdown), SIGKILL after STOP_TIMEOUT_S; remove its folder."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGINT)
            try:
                self._proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(self._proc.pid, signal.SIGKILL)
                self._proc.wait(timeout=STOP_TIMEOUT_S)
        self._proc = None
        shutil.rmtree(self.base, ignore_errors=True)


if __name__ == "__main__":
    server = PostgresServer().start()
    print(f"PostgreSQL at {server.url('postgres')} (data in {server.base}); Ctrl-C stops it")
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
