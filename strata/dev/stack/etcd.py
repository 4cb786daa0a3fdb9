"""A single-member etcd 3.6 on 127.0.0.1, the storage of the local kube-apiserver.

Built from Go modules by ``strata.dev.stack.build`` (cached by version outside the clone); data
under ``<data dir>/etcd``, written without fsync (a test server: speed over durability).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strata.dev.stack import build, process
from strata.errors import StrataError

Log = Callable[[str], None]
NAME = "strata"


def healthy(url: str) -> bool:
    """Whether the etcd of client URL ``url`` answers its /health with true (it has a leader)."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            return b'"health":"true"' in resp.read()
    except (OSError, urllib.error.URLError):
        return False


@dataclass(frozen=True)
class EtcdServer(process.LocalServer):
    HOME = "etcd"
    WHAT = "etcd"
    port: int = 12379  # clients; the peer port is the next one

    @property
    def peer_port(self) -> int:
        return self.port + 1

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def member_dir(self) -> Path:
        return self.home / "data"

    def ready(self) -> bool:
        return process.port_open(self.port) and healthy(self.url)

    @property
    def signature(self) -> process.Signature:
        return process.Signature("etcd", str(self.member_dir))

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.port, self.peer_port)

    def _up(self, log: Log, timeout_s: float) -> str:
        """Start etcd (building it first if need be), or reuse the running one; says which."""
        state = self.running(log)
        if state is not None:
            if state.port != self.port:
                raise StrataError(f"an etcd of this data directory already runs on port {state.port}")
            process.wait_until(self.ready, "etcd", timeout_s, state, self.log_path)
            return f"etcd {build.ETCD.version} already running (pid {state.pid}) at {self.url}"
        self.check_ports_free(f"; etcd needs {self.port} and {self.peer_port}")
        exe = build.ensure(build.ETCD, log)
        self.home.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        peer = f"http://127.0.0.1:{self.peer_port}"
        state = process.start(
            [
                str(exe),
                f"--name={NAME}",
                f"--data-dir={self.member_dir}",
                f"--listen-client-urls={self.url}",
                f"--advertise-client-urls={self.url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster={NAME}={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            self.log_path,
            self.state_path,
            marker=self.signature.marker,
            port=self.port,
            cwd=self.home,
        )
        process.wait_until(self.ready, "etcd", timeout_s, state, self.log_path)
        took = time.monotonic() - started
        return f"etcd {build.ETCD.version} started in {took:.1f} s (pid {state.pid}) at {self.url}"
