"""The Cache interface on the real broker (no API server needed): replicas that race for the same
nodes never double-book one, and learn the same outcome for every BIND."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from strata.log.cachelog import CacheLogReader, CacheLogWriter
from strata.log.config import Settings
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.projector.fold.kinds import node_allocatable
from strata.projector.fold.state import CacheState
from strata.scheduler.cache import ALL_KINDS, LogCache
from strata.scheduler.gang import plan, run_cycle
from strata.scheduler.interface import BindContext, Cache
from strata.schemas import Bind, BindGroup
from strata.schemas.trace import record_from_json
from tests.contracts import CacheContract

pytestmark = pytest.mark.kafka
GROUP = "scheduling.k8s.io/group-name"


def node(name: str, cpu: str = "4", memory: str = "8Gi") -> dict[str, Any]:
    res = {"cpu": cpu, "memory": memory, "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"u-{name}"},
        "status": {"allocatable": res, "capacity": res},
    }


def podgroup(name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "resourceVersion": "1"},
        "spec": {"minMember": min_member, "queue": "default"},
    }


def pod(name: str, job: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "annotations": {GROUP: job}},
        "spec": {"schedulerName": "volcano", "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Pending"},
    }


def cluster_history(nodes: int, jobs: int, per_job: int) -> list[dict[str, Any]]:
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "default", "uid": "u-q", "resourceVersion": "1"},
        "spec": {"weight": 1},
    }
    lines = [{"type": "ADDED", "object": node(f"n{i}")} for i in range(nodes)]
    lines.append({"type": "ADDED", "object": queue})
    for j in range(jobs):
        lines.append({"type": "ADDED", "object": podgroup(f"j{j}", per_job)})
        lines += [{"type": "ADDED", "object": pod(f"j{j}-p{i}", f"j{j}", "500m")} for i in range(per_job)]
    lines += [{"type": "SYNCED", "kind": kind} for kind in ALL_KINDS]
    return lines


def publish(settings: Settings, lines: list[dict[str, Any]]) -> None:
    writer = CacheLogWriter(settings)
    for line in lines:
        writer.append(record_from_json(line, "test"))
    writer.flush()


def caches(settings: Settings, tmp_path: Path, n: int, stop: threading.Event) -> list[LogCache]:
    store = SqlCheckpointStore(f"sqlite:///{tmp_path / 'c.db'}")
    result = [LogCache(settings, f"r{i}", store) for i in range(n)]
    for cache in result:
        cache.run(stop)
        assert cache.wait_for_cache_sync(stop, timeout_s=30)
    return result


def test_replicas_racing_for_the_same_nodes_never_double_book(kafka: Settings, tmp_path: Path):
    # 4 nodes x 4 cpu = 32 tasks of 500m fit; 12 gangs of 4 want 48: some gangs must wait
    publish(kafka, cluster_history(nodes=4, jobs=12, per_job=4))
    stop = threading.Event()
    replicas = caches(kafka, tmp_path, 3, stop)
    barrier = threading.Barrier(3)
    reports: dict[str, list[Any]] = {}

    def schedule(cache: LogCache) -> None:
        barrier.wait()  # the same snapshot, the same plan: the worst race there is
        reports[cache.replica] = [run_cycle(cache) for _ in range(3)]

    threads = [threading.Thread(target=schedule, args=(c,)) for c in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    end = CacheLogReader(kafka).end_offset()
    for cache in replicas:
        cache.wait_for_version(end)  # each has folded the others' BINDs too
    stop.set()

    state, admitted, rejected = CacheState(), {}, []
    reader = CacheLogReader(kafka)
    for entry in reader.read():
        outcome = state.apply(entry.record)
        assert not isinstance(entry.record, Bind), "a gang's binds go as one BIND_GROUP"
        if isinstance(entry.record, BindGroup):
            assert len(entry.record.binds) == 4  # the whole gang, never part of it
            if outcome.result == "applied":
                for bind in entry.record.binds:
                    assert bind.pod not in admitted, "a task admitted twice"
                    admitted[bind.pod] = entry.record.replica
            else:
                rejected.append(outcome.reason)
        for name, n in state.nodes.items():  # at no offset does a node hold more than it has
            used = state.node_used.get(name) or {}
            assert all(v <= node_allocatable(n, None).get(k, 0) for k, v in used.items()), (entry.offset, name)
    assert len(admitted) == 32
    assert rejected and all("does not fit" in r or "not Pending" in r for r in rejected)
    # every replica's own view of its BINDs is the log's
    own = {r: sum(c.admitted for c in reps) for r, reps in reports.items()}
    assert sum(own.values()) == 32
    assert {s.snapshot().digest() for s in replicas} == {state.snapshot().digest()}
    # whole gangs only: every job has 0 or all 4 tasks admitted
    per_job: dict[str, int] = {}
    for uid in admitted:
        job = uid.split("-")[1]
        per_job[job] = per_job.get(job, 0) + 1
    assert set(per_job.values()) == {4}, per_job


class TestLogCache(CacheContract):
    """The Cache contract with LogCache on the real broker (a fresh topic prefix per test)."""

    @pytest.fixture
    def cache_of(self, kafka: Settings, tmp_path: Path) -> Callable[[list[dict[str, Any]], threading.Event], Cache]:
        def make(history: list[dict[str, Any]], stop: threading.Event) -> Cache:
            publish(kafka, history)
            cache = LogCache(kafka, "r0", SqlCheckpointStore(f"sqlite:///{tmp_path / 'c.db'}"))
            cache.run(stop)
            return cache

        return make


def test_extensions_travel_in_the_bind_record_and_a_half_allocated_gang_is_completed(kafka: Settings, tmp_path: Path):
    publish(kafka, cluster_history(nodes=1, jobs=1, per_job=2))
    stop = threading.Event()
    (cache,) = caches(kafka, tmp_path, 1, stop)
    task = cache.snapshot().tasks["u-j0-p0"]
    first = cache.add_bind_task(BindContext(task, "n0", {"volume-binding": "none"}))
    stop.set()
    entries = list(CacheLogReader(kafka).read(start=first.offset, end=first.offset + 1))
    assert dict(entries[0].record.extensions) == {"volume-binding": "none"}
    # the gang of 2 has one task allocated: the other alone completes it
    assert [(c.task.uid, c.node) for c in plan(cache.snapshot())] == [("u-j0-p1", "n0")]
