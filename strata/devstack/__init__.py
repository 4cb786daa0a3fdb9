"""The local stack for development, tests and the demo: what `strata dev up` starts.

Each service is started once and reused while it runs, so `strata dev up` is idempotent and
cheap; `strata dev down` stops everything. Later services (etcd, kube-apiserver, PostgreSQL)
join the same list.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from strata.devstack.kafka import KafkaBroker


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


@dataclass(frozen=True)
class Stack:
    data_dir: Path
    kafka_port: int = 19092

    @property
    def kafka(self) -> KafkaBroker:
        return KafkaBroker(self.data_dir, self.kafka_port)

    def up(self) -> dict[str, str]:
        """Start (or reuse) every service; returns the environment that points at them."""
        _log(self.kafka.up(log=_log))
        return {"STRATA_KAFKA_BOOTSTRAP": self.kafka.bootstrap, "STRATA_DATA_DIR": str(self.data_dir.resolve())}

    def down(self) -> list[str]:
        return ["kafka"] if self.kafka.down() else []

    def status(self) -> dict[str, str]:
        state = self.kafka.running()
        return {"kafka": f"running (pid {state.pid}) at {self.kafka.bootstrap}" if state else "stopped"}
