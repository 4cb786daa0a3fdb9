"""The local stack for development, tests and the demo: what `strata dev up` starts.

Each service is started once and reused while it runs, so `strata dev up` is idempotent and
cheap; `strata dev down` stops everything. Later services (etcd, kube-apiserver) join the same
list. PostgreSQL is optional: it starts when its binaries are installed; SQLite stays the
default checkpoint store, so only STRATA_PG_URL points at it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from strata.devstack.kafka import KafkaBroker
from strata.devstack.postgres import PostgresServer

NOT_INSTALLED = "not installed"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


@dataclass(frozen=True)
class Stack:
    data_dir: Path
    kafka_port: int = 19092
    postgres_port: int = 15432

    @property
    def kafka(self) -> KafkaBroker:
        return KafkaBroker(self.data_dir, self.kafka_port)

    @property
    def postgres(self) -> PostgresServer:
        return PostgresServer(self.data_dir, self.postgres_port)

    def up(self) -> dict[str, str]:
        """Start (or reuse) every service; returns the environment that points at them."""
        _log(self.kafka.up(log=_log))
        env = {"STRATA_KAFKA_BOOTSTRAP": self.kafka.bootstrap, "STRATA_DATA_DIR": str(self.data_dir.resolve())}
        if self.postgres.installed():
            _log(self.postgres.up(log=_log))
            env["STRATA_PG_URL"] = self.postgres.url
        return env

    def down(self) -> list[str]:
        stopped = ["kafka"] if self.kafka.down() else []
        return [*stopped, "postgres"] if self.postgres.down() else stopped

    def purge(self) -> str:
        """Delete the stopped stack's data: the broker's log directories and PostgreSQL's cluster."""
        import shutil

        for home in (self.kafka.home, self.postgres.home):
            shutil.rmtree(home, ignore_errors=True)
        return f"{self.kafka.home} and {self.postgres.home}"

    def status(self) -> dict[str, str]:
        kafka = self.kafka.running()
        status = {"kafka": f"running (pid {kafka.pid}) at {self.kafka.bootstrap}" if kafka else "stopped"}
        postgres = self.postgres.running()
        if postgres is not None:
            status["postgres"] = f"running (pid {postgres.pid}) at 127.0.0.1:{self.postgres.port}"
        else:
            status["postgres"] = "stopped" if self.postgres.installed() else NOT_INSTALLED
        return status
