"""A local PostgreSQL server on 127.0.0.1 for development and the tests of the SQL store.

Debian's binaries (``/usr/lib/postgresql/<major>/bin``), our own data directory under
``<data dir>/postgres`` and our own port: the Debian package's clusters (port 5432, managed by
``pg_ctlcluster``) are neither used nor touched. Trust authentication for TCP from 127.0.0.1 and
no Unix socket: it is a test server bound to loopback.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from strata.dev.stack import process
from strata.errors import StrataError

Log = Callable[[str], None]
SYSTEM_USER = "postgres"  # PostgreSQL refuses to run as root; Debian's package creates this user
SUPERUSER = "postgres"
DATABASE = ROLE = "strata"


def bindir() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian's layout, else the PATH)."""
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if found:
        newest = max(found, key=lambda p: int(re.search(r"/(\d+)/bin/", p).group(1)))  # type: ignore[union-attr]
        return Path(newest).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_server_user(argv: list[str], *, execs: bool = False) -> list[str]:
    """``argv`` run as the ``postgres`` user when we are root, else as ourselves."""
    if os.geteuid() != 0:
        return argv
    if execs:
        # The server: setpriv execs in place, so the pid we keep is the postmaster's and our
        # signals reach it. runuser stays as a parent that SIGKILLs its child 2 s after a SIGTERM.
        return [
            "setpriv",
            f"--reuid={SYSTEM_USER}",
            f"--regid={SYSTEM_USER}",
            "--init-groups",
            "--reset-env",
            "--",
            *argv,
        ]
    return ["runuser", "-u", SYSTEM_USER, "--", *argv]


@dataclass(frozen=True)
class PostgresServer(process.LocalServer):
    HOME = "postgres"
    WHAT = "PostgreSQL"
    port: int = 15432

    @property
    def pgdata(self) -> Path:
        return self.home / "data"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{ROLE}@127.0.0.1:{self.port}/{DATABASE}"

    def installed(self) -> bool:
        return bindir() is not None

    def _connect(self, user: str = SUPERUSER, dbname: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=user, dbname=dbname, connect_timeout=2, autocommit=True
        )

    def ready(self) -> bool:
        if not process.port_open(self.port):
            return False
        try:
            # the port opens before recovery ends ("the database system is starting up")
            self._connect().close()
            return True
        except psycopg.Error:
            return False

    @property
    def signature(self) -> process.Signature:
        # the postmaster: setpriv execs it in place; its children rewrite their command lines
        return process.Signature("postgres", str(self.pgdata))

    def _up(self, log: Log, timeout_s: float) -> str:
        """Start the server, or reuse the running one; says which."""
        state = self.running(log)
        if state is not None:
            if state.port != self.port:
                raise StrataError(f"a PostgreSQL of this data directory already runs on port {state.port}")
            process.wait_until(self.ready, "PostgreSQL", timeout_s, state, self.log_path)
            self._ensure_database()
            return f"postgres already running (pid {state.pid}) at 127.0.0.1:{self.port}"
        bin_ = bindir()
        if bin_ is None:
            raise StrataError("PostgreSQL is not installed; install the Debian package postgresql")
        self.check_ports_free()
        started = time.monotonic()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(bin_, log)
        state = process.start(
            _as_server_user(
                [
                    str(bin_ / "postgres"),
                    "-D",
                    str(self.pgdata),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    f"port={self.port}",
                    "-c",
                    "unix_socket_directories=",  # TCP only: no socket path to own, none to clash
                ],
                execs=True,
            ),
            self.log_path,
            self.state_path,
            marker=self.signature.marker,
            port=self.port,
            cwd=self.home,
        )
        process.wait_until(self.ready, "PostgreSQL", timeout_s, state, self.log_path)
        self._ensure_database()
        took = time.monotonic() - started
        return f"postgres started in {took:.1f} s (pid {state.pid}) at 127.0.0.1:{self.port}"

    def _stop(self) -> bool:
        state = self.running()
        if state is not None:
            # SIGINT is PostgreSQL's "fast" shutdown; SIGTERM ("smart") would wait for every client
            os.kill(state.pid, signal.SIGINT)
            deadline = time.monotonic() + 30
            while process.alive(state) and time.monotonic() < deadline:
                time.sleep(0.1)
        process.stop(self.state_path)  # a server that ignored SIGINT; removes the pid state
        return state is not None

    def _initdb(self, bin_: Path, log: Log) -> None:
        log(f"creating a PostgreSQL cluster in {self.pgdata}")
        self.pgdata.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam(SYSTEM_USER)
            except KeyError:
                raise StrataError(f"running as root, PostgreSQL needs the system user {SYSTEM_USER!r}") from None
            os.chown(self.pgdata, user.pw_uid, user.pw_gid)
            # The server user must be able to walk down to its data directory, even from a
            # checkout under a 0700 directory (mktemp -d): let others search (x), not read.
            for parent in self.pgdata.parents:
                mode = parent.stat().st_mode
                if not mode & 0o001:
                    parent.chmod(mode | 0o001)
        self.pgdata.chmod(0o700)
        result = subprocess.run(
            _as_server_user(
                [
                    str(bin_ / "initdb"),
                    "-D",
                    str(self.pgdata),
                    f"--username={SUPERUSER}",
                    "--auth-local=trust",
                    "--auth-host=trust",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                ]
            ),
            capture_output=True,
            text=True,
            cwd=self.home,
        )
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip()[-300:]
            hint = f" ({SYSTEM_USER} must be able to reach {self.pgdata})" if "ermission denied" in detail else ""
            raise StrataError(f"initdb failed{hint}: {detail}")

    def _ensure_database(self) -> None:
        """The role and database of ``url`` (on every start: cheap, and repairs a half-made first start)."""
        with self._connect() as conn:
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEDB").format(sql.Identifier(ROLE)))
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
                conn.execute(
                    sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(DATABASE), sql.Identifier(ROLE))
                )
