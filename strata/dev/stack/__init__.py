"""The local stack for development, tests and the demo: what `strata dev up` starts.

Each service is started once and reused while it runs, so `strata dev up` is idempotent and
cheap; `strata dev down` stops everything. PostgreSQL and Prometheus are optional: each starts
when its binaries are installed; SQLite stays the default checkpoint store, so only STRATA_PG_URL
points at PostgreSQL. One `up` or `down` runs at a time per data directory (a file lock); a server
of the data directory found running without its pid file is adopted (``process.LocalServer``).
The Kubernetes control plane (etcd and kube-apiserver, built from Go modules on first use) starts
only when asked for (``up(kube=True)``, `strata dev up --kube`); the stack exports KUBECONFIG then.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from strata.dev.stack.apiserver import KubeAPIServer, apply_crds
from strata.dev.stack.etcd import EtcdServer
from strata.dev.stack.kafka import KafkaBroker
from strata.dev.stack.postgres import PostgresServer
from strata.dev.stack.process import LocalServer, data_dir_lock
from strata.dev.stack.prometheus import PrometheusServer

NOT_INSTALLED = "not installed"
# A control plane that was set up here but is not running: not "stopped" (exit 3 of `strata dev
# status`), because a plain `strata dev up` does not start it either.
NOT_RUNNING = "not running (strata dev up --kube starts it)"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


@dataclass(frozen=True)
class Stack:
    data_dir: Path
    kafka_port: int = 19092
    postgres_port: int = 15432
    etcd_port: int = 12379
    kube_port: int = 16443
    prometheus_port: int = 19090

    @property
    def kafka(self) -> KafkaBroker:
        return KafkaBroker(self.data_dir, self.kafka_port)

    @property
    def postgres(self) -> PostgresServer:
        return PostgresServer(self.data_dir, self.postgres_port)

    @property
    def etcd(self) -> EtcdServer:
        return EtcdServer(self.data_dir, self.etcd_port)

    @property
    def apiserver(self) -> KubeAPIServer:
        return KubeAPIServer(self.data_dir, self.kube_port, etcd_url=self.etcd.url)

    @property
    def prometheus(self) -> PrometheusServer:
        return PrometheusServer(self.data_dir, self.prometheus_port)

    def up(self, kube: bool = False) -> dict[str, str]:
        """Start (or reuse) every service; returns the environment that points at them.

        With ``kube``, also the Kubernetes control plane (``up_kube``) and KUBECONFIG."""
        with data_dir_lock(self.data_dir, _log):
            _log(self.kafka.up(log=_log))
            env = {"STRATA_KAFKA_BOOTSTRAP": self.kafka.bootstrap, "STRATA_DATA_DIR": str(self.data_dir.resolve())}
            if self.postgres.installed():
                _log(self.postgres.up(log=_log))
                env["STRATA_PG_URL"] = self.postgres.url
            if self.prometheus.installed():
                _log(self.prometheus.up(log=_log))
                env["STRATA_PROMETHEUS_URL"] = self.prometheus.url
            if kube:
                env.update(self.up_kube())
            return env

    def up_kube(self) -> dict[str, str]:
        """Start (or reuse) etcd and kube-apiserver, building them first when the cache lacks them,
        and apply Strata's CRDs; returns {"KUBECONFIG": the admin kubeconfig}."""
        with data_dir_lock(self.data_dir, _log):
            _log(self.etcd.up(log=_log))
            _log(self.apiserver.up(log=_log))
            crds = apply_crds(self.apiserver.kubeconfig)
            _log(f"CRDs established: {', '.join(crds)}")
            return {"KUBECONFIG": str(self.apiserver.kubeconfig)}

    def down(self) -> list[str]:
        # in the order of _servers: the API server before its storage
        with data_dir_lock(self.data_dir, _log):
            return [name for name, server in self._servers() if server.down()]

    def _servers(self) -> list[tuple[str, LocalServer]]:
        return [
            ("kube-apiserver", self.apiserver),
            ("etcd", self.etcd),
            ("kafka", self.kafka),
            ("postgres", self.postgres),
            ("prometheus", self.prometheus),
        ]

    def purge(self) -> str:
        """Delete the stopped stack's data: the broker's log directories, PostgreSQL's cluster,
        etcd's member directory, the control plane's certificates and kubeconfig, and
        Prometheus' storage and target files."""
        import shutil

        homes = [server.home for _, server in self._servers()]
        with data_dir_lock(self.data_dir, _log):
            for home in homes:
                shutil.rmtree(home, ignore_errors=True)
        return ", ".join(map(str, homes))

    def kube_set_up(self) -> bool:
        """Whether the control plane ever ran in this data directory (its data exists)."""
        return self.etcd.home.exists() or self.apiserver.home.exists()

    def status(self) -> dict[str, str]:
        kafka = self.kafka.running()
        status = {"kafka": f"running (pid {kafka.pid}) at {self.kafka.bootstrap}" if kafka else "stopped"}
        status["postgres"] = _optional(self.postgres, f"127.0.0.1:{self.postgres.port}")
        status["prometheus"] = _optional(self.prometheus, self.prometheus.url)
        if self.kube_set_up():
            etcd = self.etcd.running()
            status["etcd"] = f"running (pid {etcd.pid}) at {self.etcd.url}" if etcd else NOT_RUNNING
            apiserver = self.apiserver.running()
            status["kube-apiserver"] = (
                f"running (pid {apiserver.pid}) at {self.apiserver.url}, KUBECONFIG={self.apiserver.kubeconfig}"
                if apiserver
                else NOT_RUNNING
            )
        return status


def _optional(server: PostgresServer | PrometheusServer, address: str) -> str:
    """The status of a server that starts only where its package is installed."""
    state = server.running()
    if state is not None:
        return f"running (pid {state.pid}) at {address}"
    return "stopped" if server.installed() else NOT_INSTALLED
