"""What the fault scenarios share: a throw-away topic prefix, the `strata` executable, digests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from strata.log.cachelog import CacheLogReader, LogEntry
from strata.log.config import Settings
from strata.log.topics import drop_topics, ensure_topics
from strata.projector.fold.kinds import FoldConfig
from strata.projector.fold.state import CacheState

STRATA = str(Path(sys.executable).with_name("strata"))


@contextmanager
def fresh_log(settings: Settings, name: str) -> Iterator[Settings]:
    """Settings with a new topic prefix whose topics exist; they are deleted afterwards."""
    scoped = settings.with_(topic_prefix=f"faults-{name}-{uuid.uuid4().hex[:8]}.", command_partitions=2)
    ensure_topics(scoped)
    try:
        yield scoped
    finally:
        drop_topics(scoped)


def env_for(settings: Settings, **more: str) -> dict[str, str]:
    """The environment of a `strata` subprocess that talks to this deployment; ``more`` wins."""
    env = {
        **os.environ,
        "STRATA_KAFKA_BOOTSTRAP": settings.bootstrap,
        "STRATA_TOPIC_PREFIX": settings.topic_prefix,
        "STRATA_DATA_DIR": str(settings.data_dir),
        "STRATA_COMMAND_PARTITIONS": str(settings.command_partitions),
        "STRATA_RETRY_DELAYS": ",".join(map(str, settings.retry_delays_s)),
    }
    if settings.kubeconfig:
        env["KUBECONFIG"] = settings.kubeconfig
    return {**env, **more}


class LogView:
    """The cache log folded as it grows (``CacheLogReader.follow``): a probe asked again and again
    reads only what arrived since, not the whole log."""

    def __init__(self, reader: CacheLogReader, config: FoldConfig | None = None) -> None:
        self._stop = threading.Event()
        self._entries: Iterator[LogEntry | None] = reader.follow(0, self._stop, tick_s=0.2)
        self.state = CacheState(config)
        self.records: list[Any] = []

    def refresh(self) -> LogView:
        for entry in self._entries:
            if entry is None:
                break
            self.records.append(entry.record)
            self.state.apply(entry.record)
        return self

    def of(self, *types: type) -> list[Any]:
        return [r for r in self.refresh().records if isinstance(r, types)]

    def tasks(self, ns: str) -> dict[str, str]:
        return {t.name: t.status for t in self.refresh().state.tasks.values() if t.namespace == ns}

    def close(self) -> None:
        self._stop.set()
        self._entries.close()  # type: ignore[attr-defined]


def terminate(proc: subprocess.Popen[Any], timeout_s: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if it is still there after ``timeout_s``; waits for the end."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def kill_after(
    argv: list[str], env: dict[str, str], delay_s: float, when: str | None = None, timeout_s: float = 60.0
) -> tuple[bool, list[str]]:
    """Start ``argv`` and SIGKILL it ``delay_s`` after it starts, or after its stderr first holds
    ``when``: whether it was still running when killed, and the lines it wrote to stderr."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    said = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if when is not None and when in line:
                said.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if when is not None:
        said.wait(timeout_s)
    time.sleep(delay_s)
    alive = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    reader.join(10)
    return alive, lines


def until(
    probe: Callable[[], Any], timeout_s: float, every_s: float = 0.2, tolerate: tuple[type[Exception], ...] = ()
) -> bool:
    """Ask ``probe`` until it is true (True) or ``timeout_s`` has passed (False); an exception of
    ``tolerate`` counts as not yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if probe():
                return True
        except tolerate:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)


def strata(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([STRATA, *args], env=env, capture_output=True, text=True, timeout=timeout)


def api_writes(settings: Settings, namespace: str) -> dict[tuple[str, str], tuple[int, ...]]:
    """Per (write, pod name) in ``namespace``: the HTTP status of each of the binder's and the
    evictor's writes that reached the local API server (``binding`` and ``eviction`` creates, pod
    ``delete``s), in order, as its audit log recorded them. A command carried out again after it
    was done shows here as a second call after a success, 409 or not."""
    from strata.dev.stack import Stack

    calls: dict[tuple[str, str], list[int]] = {}
    for event in Stack(Path(settings.data_dir)).apiserver.audit_events():
        ref = event.get("objectRef") or {}
        if ref.get("namespace") != namespace or ref.get("resource") not in ("pods", "bindings"):
            continue
        what = ref.get("subresource") or ("binding" if ref.get("resource") == "bindings" else event.get("verb", ""))
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        calls.setdefault((what, ref.get("name", "")), []).append(code)
    return {key: tuple(codes) for key, codes in calls.items()}


@dataclass(frozen=True)
class ApiCall:
    """One audited write: when the API server received it and answered it (epoch seconds), and how."""

    received: float
    answered: float
    status: int


def api_calls(settings: Settings, namespace: str) -> dict[tuple[str, str], tuple[ApiCall, ...]]:
    """``api_writes`` with the times of each call: a retry's distance from the failure before it."""
    from strata.dev.stack import Stack

    calls: dict[tuple[str, str], list[ApiCall]] = {}
    for event in Stack(Path(settings.data_dir)).apiserver.audit_events():
        ref = event.get("objectRef") or {}
        if ref.get("namespace") != namespace or ref.get("resource") not in ("pods", "bindings"):
            continue
        what = ref.get("subresource") or ("binding" if ref.get("resource") == "bindings" else event.get("verb", ""))
        call = ApiCall(
            _epoch(event.get("requestReceivedTimestamp")),
            _epoch(event.get("stageTimestamp")),
            int((event.get("responseStatus") or {}).get("code") or 0),
        )
        calls.setdefault((what, ref.get("name", "")), []).append(call)
    return {key: tuple(found) for key, found in calls.items()}


def _epoch(stamp: str | None) -> float:
    return datetime.fromisoformat(stamp).timestamp() if stamp else 0.0


def pod_body(ns: str, name: str, group: str, scheduler: str = "volcano", cpu: str = "100m") -> dict[str, Any]:
    """A pod of a PodGroup, for the named scheduler: a task of the snapshot once its group exists."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": {"scheduling.k8s.io/group-name": group}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def create_node(api: Any, name: str, cpu: str = "64", memory: str = "256Gi", pods: str = "500") -> None:
    """A Ready node with this allocatable (no kubelet runs: the status is written by hand)."""
    node = api.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    res = {"cpu": cpu, "memory": memory, "pods": pods}
    node["status"] = {"capacity": res, "allocatable": res, "conditions": [{"type": "Ready", "status": "True"}]}
    api.request("PUT", f"/api/v1/nodes/{name}/status", node)


def fold_digests(trace: Path, versions: set[int]) -> dict[int, str]:
    """The digest of an uninterrupted fold of the trace at each of these versions (one pass)."""
    from strata.projector.fold.state import CacheState
    from strata.projector.replay import fold_line
    from strata.schemas.trace import split_lines

    state = CacheState()
    out = {}
    if 0 in versions:
        out[0] = state.snapshot().digest()
    for _, line in split_lines(trace.read_bytes()):
        fold_line(state, line)
        if state.version in versions:
            out[state.version] = state.snapshot().digest()
    return out


def rss_mb(pid: int) -> float:
    """A running process's resident memory now (Linux), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[int], p: int) -> int:
    """The p-th percentile of sorted ``values`` (0 for none)."""
    if not values:
        return 0
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def settled_writes(settings: Settings, ns: str, timeout_s: float = 30.0) -> dict[tuple[str, str], tuple[int, ...]]:
    """The audited writes (``api_writes``) once two reads a second apart agree: the audit log gets
    each event as its request ends."""
    last = api_writes(settings, ns)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = api_writes(settings, ns)
        if now == last:
            break
        last = now
    return last
