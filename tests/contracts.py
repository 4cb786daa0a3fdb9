"""Contract test suites, one per interface, as the ``eventsourcing`` library's
``tests/persistence.py``: an abstract class of tests that every implementation subclasses, giving
the one fixture the suite needs. A class whose name starts with ``Test`` is collected, so these
are not; ``tests/projector/checkpoints/test_sql.py`` runs ``CheckpointStoreContract`` on SQLite and PostgreSQL
and ``tests/scheduler/test_cache.py`` runs ``CacheContract`` with ``LogCache`` on the real broker.
"""

from __future__ import annotations

import hashlib
import os
import threading
import traceback
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from strata.projector.checkpoints.interface import Checkpoint, CheckpointInfo, CheckpointStore, LogIdentity
from strata.projector.fold.task import TaskStatus
from strata.scheduler.interface import BindContext, Cache

LOG = LogIdentity("strata.cache-log", "cluster-a", "schedulerNames=volcano;defaultQueue=default")


def checkpoint(version: int, log: LogIdentity = LOG, state: bytes | None = None, state_format: int = 1) -> Checkpoint:
    state = f"state of {log} at {version}".encode() if state is None else state
    info = CheckpointInfo(log, version, hashlib.sha256(state).hexdigest(), len(state), "")
    return Checkpoint(info, state, state_format)


def versions(store: CheckpointStore, log: LogIdentity = LOG) -> list[int]:
    return [info.version for info in store.list(log)]


class CheckpointStoreContract:
    """What every ``CheckpointStore`` does. A storage engine subclasses this and gives ``store``:
    a fresh, empty store (closed after the test)."""

    @pytest.fixture
    def store(self) -> Iterator[CheckpointStore]:
        raise NotImplementedError("a storage engine's test class gives the store")

    def test_a_forked_child_saves_and_the_parent_reads(self, store: CheckpointStore) -> None:
        """The projector's writer forks (``projector.checkpoints.writer``): after ``forked()`` the child uses
        connections of its own, and the parent's go on working."""
        store.save(checkpoint(1))
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                store.forked()
                store.save(checkpoint(2))
                code = 0
            except BaseException:
                traceback.print_exc()  # the child's reason, in the test's captured output
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert versions(store) == [1, 2]
        store.save(checkpoint(3))
        assert versions(store) == [1, 2, 3]

    def test_save_latest_list_prune(self, store: CheckpointStore) -> None:
        assert store.latest(LOG) is None
        assert store.list(LOG) == []
        for version in (300, 100, 200):  # saved out of order, listed oldest first
            store.save(checkpoint(version, state_format=version // 100))

        newest = store.latest(LOG)
        assert newest is not None
        assert newest.state == checkpoint(300).state
        assert newest.state_format == 3
        assert newest.info.log == LOG
        assert newest.info.digest == checkpoint(300).info.digest
        assert newest.info.size == len(checkpoint(300).state)
        assert versions(store) == [100, 200, 300]
        assert [info.digest for info in store.list(LOG)] == [checkpoint(v).info.digest for v in (100, 200, 300)]

        assert store.prune(LOG, keep=2) == 1
        assert versions(store) == [200, 300]
        assert store.prune(LOG, keep=2) == 0
        assert store.prune(LOG, keep=5) == 0
        assert store.prune(LOG, keep=0) == 2
        assert store.list(LOG) == []
        assert store.latest(LOG) is None
        with pytest.raises(ValueError):
            store.prune(LOG, keep=-1)

    def test_latest_at_or_below(self, store: CheckpointStore) -> None:
        for version in (0, 10, 20):
            store.save(checkpoint(version))

        def at(bound: int | None) -> int | None:
            found = store.latest(LOG, at_or_below=bound)
            return None if found is None else found.info.version

        assert [at(b) for b in (None, 20, 19, 10, 9, 0, -1)] == [20, 20, 10, 10, 0, 0, None]
        found = store.latest(LOG, 15)
        assert found is not None and found.state == checkpoint(10).state

    def test_created_at_is_utc_iso8601(self, store: CheckpointStore) -> None:
        before = datetime.now(UTC).replace(microsecond=0)
        store.save(checkpoint(1))
        created = datetime.fromisoformat(store.list(LOG)[0].created_at)
        offset = created.utcoffset()
        assert offset is not None and offset.total_seconds() == 0
        assert abs((created - before).total_seconds()) < 60  # the store's clock, not the caller's ""
        latest = store.latest(LOG)
        assert latest is not None and latest.info.created_at == store.list(LOG)[0].created_at

    def test_saving_a_version_twice_keeps_the_first(self, store: CheckpointStore) -> None:
        first = checkpoint(42, state=b"first")
        store.save(first)
        store.save(checkpoint(42, state=b"second, longer", state_format=2))
        kept = store.latest(LOG)
        assert kept is not None
        assert (kept.state, kept.state_format, kept.info.digest) == (b"first", 1, first.info.digest)
        assert versions(store) == [42]

    def test_logs_never_mix(self, store: CheckpointStore) -> None:
        # differ in one field each: another topic, another cluster (a restored log), another fold
        others = [
            LogIdentity("other.cache-log", LOG.cluster_id, LOG.fold),
            LogIdentity(LOG.topic, "cluster-b", LOG.fold),
            LogIdentity(LOG.topic, LOG.cluster_id, "schedulerNames=volcano;defaultQueue=other"),
        ]
        for version in (1, 2, 3):
            store.save(checkpoint(version))
        for n, log in enumerate(others):
            store.save(checkpoint(10 * (n + 1), log))  # a newer version than any of LOG's
            store.save(checkpoint(2, log))  # the same version as one of LOG's: no conflict

        def state(log: LogIdentity, at: int | None = None) -> bytes | None:
            found = store.latest(log, at)
            assert found is None or found.info.log == log
            return None if found is None else found.state

        assert versions(store) == [1, 2, 3]
        assert (state(LOG), state(LOG, 2)) == (checkpoint(3).state, checkpoint(2).state)
        for n, log in enumerate(others):
            assert versions(store, log) == [2, 10 * (n + 1)]
            assert state(log, 2) == checkpoint(2, log).state
        assert state(LogIdentity("unknown", LOG.cluster_id, LOG.fold)) is None

        assert store.prune(others[0], keep=0) == 2
        assert versions(store) == [1, 2, 3]
        assert [versions(store, log) for log in others] == [[], [2, 20], [2, 30]]

    def test_a_20_mb_state_round_trips_byte_exact(self, store: CheckpointStore) -> None:
        state = os.urandom(20 * 1024 * 1024)  # incompressible, and every byte value occurs
        store.save(checkpoint(7, state=state))
        back = store.latest(LOG)
        assert back is not None
        assert type(back.state) is bytes
        assert back.state == state
        assert back.info.size == len(state)
        assert store.list(LOG)[0].size == len(state)


# --------------------------------------------------------------------------------------- Cache
GROUP = "scheduling.k8s.io/group-name"
SYNCED_KINDS = ("Pod", "Node", "PodGroup", "Queue", "PriorityClass", "CSINode", "HyperNode")


def small_cluster(nodes: int, jobs: int, per_job: int, cpu: str = "500m") -> list[dict[str, Any]]:
    """Trace lines: nodes of 4 cpu, the default queue, gangs of ``per_job`` pods, every kind SYNCED."""
    res = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    lines: list[dict[str, Any]] = [
        {
            "type": "ADDED",
            "object": {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"n{i}", "uid": f"u-n{i}"},
                "status": {"allocatable": res, "capacity": res},
            },
        }
        for i in range(nodes)
    ]
    lines.append(
        {
            "type": "ADDED",
            "object": {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": "default", "uid": "u-q", "resourceVersion": "1"},
                "spec": {"weight": 1},
            },
        }
    )
    for j in range(jobs):
        meta = {"name": f"j{j}", "namespace": "ns", "uid": f"u-j{j}", "resourceVersion": "1"}
        pg = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": meta}
        lines.append({"type": "ADDED", "object": {**pg, "spec": {"minMember": per_job, "queue": "default"}}})
        for i in range(per_job):
            name = f"j{j}-p{i}"
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "annotations": {GROUP: f"j{j}"}},
                "spec": {
                    "schedulerName": "volcano",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                },
                "status": {"phase": "Pending"},
            }
            lines.append({"type": "ADDED", "object": pod})
    lines += [{"type": "SYNCED", "kind": kind} for kind in SYNCED_KINDS]
    return lines


class CacheContract:
    """What every ``Cache`` (the interface a scheduler replica embeds) does. An implementation
    subclasses this and gives ``cache_of``: a function from a cluster's history (trace lines) to a
    running cache of it, stopped with ``stop``."""

    @pytest.fixture
    def cache_of(self) -> Callable[[list[dict[str, Any]], threading.Event], Cache]:
        raise NotImplementedError("an implementation's test class gives cache_of")

    @pytest.fixture
    def stop(self) -> Iterator[threading.Event]:
        stop = threading.Event()
        yield stop
        stop.set()

    def test_it_syncs_and_shows_the_history(self, cache_of: Any, stop: threading.Event) -> None:
        cache: Cache = cache_of(small_cluster(nodes=2, jobs=2, per_job=2), stop)
        assert cache.wait_for_cache_sync(stop)
        snap = cache.snapshot()
        assert sorted(snap.nodes.keys()) == ["n0", "n1"]
        assert sorted(snap.tasks.keys()) == ["u-j0-p0", "u-j0-p1", "u-j1-p0", "u-j1-p1"]
        assert {t.status for t in snap.tasks.values()} == {TaskStatus.PENDING}

    def test_add_bind_task_answers_with_the_folds_verdict(self, cache_of: Any, stop: threading.Event) -> None:
        cache: Cache = cache_of(small_cluster(nodes=1, jobs=1, per_job=2), stop)
        assert cache.wait_for_cache_sync(stop)
        tasks = cache.snapshot().tasks
        first = cache.add_bind_task(BindContext(tasks["u-j0-p0"], "n0"))
        again = cache.add_bind_task(BindContext(tasks["u-j0-p0"], "n0"))
        nowhere = cache.add_bind_task(BindContext(tasks["u-j0-p1"], "no-such-node"))
        assert first.admitted and not first.reason
        assert (again.admitted, again.reason) == (False, "task is Binding, not Pending")
        assert (nowhere.admitted, nowhere.reason) == (False, "node no-such-node is not stored")
        assert again.offset == first.offset + 1 and nowhere.offset == again.offset + 1
        # read-your-writes: the snapshot after the call shows the verdict
        assert cache.snapshot().tasks["u-j0-p0"].status == TaskStatus.BINDING
        assert cache.snapshot().tasks["u-j0-p1"].status == TaskStatus.PENDING

    def test_a_bind_that_does_not_fit_is_rejected(self, cache_of: Any, stop: threading.Event) -> None:
        cache: Cache = cache_of(small_cluster(nodes=1, jobs=1, per_job=3, cpu="2"), stop)  # 3 x 2 cpu, 4 cpu
        assert cache.wait_for_cache_sync(stop)
        tasks = cache.snapshot().tasks
        results = cache.add_bind_tasks([BindContext(tasks[f"u-j0-p{i}"], "n0") for i in range(3)])
        # one job's binds are one BIND_GROUP: the third does not fit, so none is admitted
        assert [r.admitted for r in results] == [False, False, False]
        assert len({r.offset for r in results}) == 1
        assert "does not fit" in results[0].reason and "bind 3 of 3" in results[0].reason
        assert {t.status for t in cache.snapshot().tasks.values()} == {TaskStatus.PENDING}

    def test_each_jobs_binds_are_admitted_or_rejected_whole(self, cache_of: Any, stop: threading.Event) -> None:
        cache: Cache = cache_of(small_cluster(nodes=1, jobs=2, per_job=2, cpu="1"), stop)  # 4 x 1 cpu, 4 cpu
        assert cache.wait_for_cache_sync(stop)
        tasks = cache.snapshot().tasks
        contexts = [BindContext(tasks[f"u-j{j}-p{i}"], "n0") for j in range(2) for i in range(2)]
        results = cache.add_bind_tasks(contexts)
        assert [r.admitted for r in results] == [True] * 4
        assert results[0].offset == results[1].offset != results[2].offset == results[3].offset

    def test_evict_answers_with_the_folds_verdict(self, cache_of: Any, stop: threading.Event) -> None:
        cache: Cache = cache_of(small_cluster(nodes=1, jobs=1, per_job=2), stop)
        assert cache.wait_for_cache_sync(stop)
        tasks = cache.snapshot().tasks
        assert cache.add_bind_task(BindContext(tasks["u-j0-p0"], "n0")).admitted
        on_node = cache.evict(cache.snapshot().tasks["u-j0-p0"], "preempted")
        nowhere = cache.evict(tasks["u-j0-p1"], "preempted")
        assert on_node.applied and cache.snapshot().tasks["u-j0-p0"].status == TaskStatus.RELEASING
        assert (nowhere.applied, nowhere.reason) == (False, "the task is on no node")
