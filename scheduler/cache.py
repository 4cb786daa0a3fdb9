"""``LogCache``: the Cache interface implemented on the cache log (an edge: Kafka and the API).

The cache follows the log in a thread and folds every record with the same pure fold as every
other reader; what a replica sees at version v is what every replica sees at v. Writes that
change the cache (BIND, EVICT) are appended to the log and their outcome is read back from the
local fold, so a replica never trusts its own intention over the log's order.
"""

from __future__ import annotations

import functools
import gc
import logging
import threading
import time
from collections.abc import Callable, Sequence
from types import MappingProxyType

from prometheus_client import Counter, Histogram

from strata.errors import StrataError
from strata.kubeapi import KubeApi
from strata.log.cachelog import CacheLogWriter
from strata.log.config import Settings
from strata.log.digests import DigestReporter
from strata.log.metrics import FOLLOWING
from strata.projector.checkpoints.interface import CheckpointStore
from strata.projector.fold.kinds import PodView
from strata.projector.fold.snapshot import Snapshot
from strata.projector.fold.state import CacheState, FoldConfig, Outcome
from strata.projector.runner import ALL_KINDS, LogRunner, sync_reason
from strata.scheduler.event_recorder import ApiEventRecorder, job_status_event
from strata.scheduler.interface import BindContext, BindResult, Cache, EvictResult, JobStatus, QueueStatus
from strata.scheduler.status_updater import StatusUpdater
from strata.schemas import Bind, BindGroup, Evict, GroupBind

LOG = logging.getLogger("strata.cache")
BINDS = Counter("strata_cache_binds", "BINDs this replica published, by outcome", ["replica", "outcome"])
SESSIONS = Histogram("strata_cache_session_seconds", "scheduling sessions (open to close)", ["replica"])


class LogCache:
    def __init__(
        self,
        settings: Settings,
        replica: str,
        store: CheckpointStore,
        fold: FoldConfig | None = None,
        kinds: Sequence[str] = ALL_KINDS,
        api: KubeApi | None = None,
        wait_timeout_s: float = 60.0,
    ) -> None:
        if not replica:
            raise StrataError("a scheduler replica needs a non-empty id")
        self.settings = settings
        self.replica = replica
        self.kinds = tuple(kinds)
        self.runner = LogRunner(settings, store, fold or FoldConfig())
        self.writer = CacheLogWriter(settings)
        self.wait_timeout_s = wait_timeout_s
        self._api = api
        self._changed = threading.Condition()
        self._state: CacheState | None = None
        self._snapshot: Snapshot | None = None
        self._outcomes: dict[int, Outcome] = {}  # outcomes of this replica's own records, by offset
        # divergence detection: this replica's digest at agreed versions, compared with the others'
        self.digests = DigestReporter(settings, replica, self.runner.fold.identity)
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._session_started: float | None = None
        self._end_at_start = 0

    # ---------------------------------------------------------------------------- following
    def run(self, stop: threading.Event) -> None:
        if self._thread is not None:
            return
        self._end_at_start = FOLLOWING.end = self.runner.reader.end_offset()
        self._thread = threading.Thread(target=self._follow, args=(stop,), name=f"cache-{self.replica}", daemon=True)
        self._thread.start()

    def _follow(self, stop: threading.Event) -> None:
        try:
            state = self.runner.restore()
            state.rendered = None  # a replica never renders the canonical JSON: keep no old shards for it
            gc.freeze()  # the restored state lives on: the collector's full passes need not walk it
            with self._changed:
                self._state, self._snapshot = state, state.snapshot()
                self._changed.notify_all()
            for entry in self.runner.reader.follow(state.version, stop):
                if entry is None or entry.offset % 4096 == 0:  # the end as last heard, for the lag metrics
                    FOLLOWING.end = max(self.runner.reader.followed_end() or 0, state.version)
                if entry is None:
                    continue
                FOLLOWING.applied_entry(entry.offset, entry.timestamp_ms, entry.record)
                with self._changed:
                    outcome = state.apply_at(entry.offset, entry.record)
                    if isinstance(entry.record, (Bind, BindGroup, Evict)) and entry.record.replica == self.replica:
                        self._outcomes[entry.offset] = outcome
                    self._snapshot = None
                    state.hashes.tend(state, self.digests.until_due(state.version))
                    if self.digests.due(state.version) and state.hashes.ready(state):
                        self.digests.offer(state.version, state.state_digest())
                    self._changed.notify_all()
        except BaseException as exc:  # a waiter must hear of it instead of waiting forever
            LOG.error("replica %s stopped following the cache log: %s", self.replica, exc)
            with self._changed:
                self._failure = exc
                self._changed.notify_all()

    def _wait(
        self, done: Callable[[], bool], stop: threading.Event | None = None, timeout_s: float | None = None
    ) -> bool:
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self.wait_timeout_s)
        with self._changed:
            while not done():
                if self._failure is not None:
                    raise StrataError(f"the cache stopped following the log: {self._failure}")
                if stop is not None and stop.is_set():
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StrataError(f"replica {self.replica}: the cache log did not get there in time")
                self._changed.wait(min(remaining, 0.2))
        return True

    def sync_reason(self) -> str | None:
        """Why this cache is not yet fit to schedule from (None once it is), for /readyz."""
        if self._failure is not None:
            return f"the cache stopped following the log: {self._failure}"
        return sync_reason(self._state, self._end_at_start, self.kinds)

    def wait_for_cache_sync(self, stop: threading.Event, timeout_s: float = 3600.0) -> bool:
        end = self.runner.reader.end_offset()

        def synced() -> bool:
            state = self._state
            return state is not None and state.version >= end and set(self.kinds) <= state.synced

        return self._wait(synced, stop, timeout_s)

    def wait_for_version(self, version: int, timeout_s: float | None = None) -> None:
        """Block until the local fold has applied ``version`` records (read-your-writes for tools)."""
        self._wait(lambda: self._state is not None and self._state.version >= version, timeout_s=timeout_s)

    @property
    def version(self) -> int:
        with self._changed:
            return self._state.version if self._state is not None else 0

    def snapshot(self) -> Snapshot:
        with self._changed:
            if self._state is None:
                raise StrataError("the cache is not running: call run() first")
            if self._snapshot is None:
                self._snapshot = self._state.snapshot()  # O(1): frozen views of the fold's maps
            return self._snapshot

    # ------------------------------------------------------------------------- bind / evict
    def add_bind_task(self, bind_context: BindContext) -> BindResult:
        return self.add_bind_tasks([bind_context])[0]

    def add_bind_tasks(self, bind_contexts: Sequence[BindContext]) -> list[BindResult]:
        # One record per job: a gang's binds go as one BIND_GROUP, admitted all or nothing.
        by_job: dict[str | None, list[int]] = {}
        for i, c in enumerate(bind_contexts):
            by_job.setdefault(c.task.job, []).append(i)
        groups = list(by_job.values())
        records = [self._bind_record([bind_contexts[i] for i in group]) for group in groups]
        results: list[BindResult] = [BindResult(0, False, "")] * len(bind_contexts)
        for group, (offset, o) in zip(groups, self._publish(records), strict=True):
            for i in group:
                results[i] = BindResult(offset, o.result == "applied", o.reason)
        for r in results:
            BINDS.labels(self.replica, "admitted" if r.admitted else "rejected").inc()
        return results

    def _bind_record(self, contexts: list[BindContext]) -> Bind | BindGroup:
        if len(contexts) == 1:
            c = contexts[0]
            return Bind(pod=c.task.uid, node=c.node, replica=self.replica, extensions=dict(c.extensions))
        binds = tuple(GroupBind(c.task.uid, c.node, MappingProxyType(dict(c.extensions))) for c in contexts)
        return BindGroup(binds, replica=self.replica)

    def evict(self, task: PodView, reason: str) -> EvictResult:
        ((offset, outcome),) = self._publish([Evict(pod=task.uid, reason=reason, replica=self.replica)])
        return EvictResult(offset, outcome.result == "applied", outcome.reason)

    def _publish(self, records: Sequence[Bind | BindGroup | Evict]) -> list[tuple[int, Outcome]]:
        reported: dict[int, int] = {}  # record's index -> its offset
        for i, record in enumerate(records):
            self.writer.append(record, on_offset=functools.partial(reported.__setitem__, i))
        self.writer.flush()
        if len(reported) != len(records):
            raise StrataError("the broker took a record without reporting its offset")
        offsets = [reported[i] for i in range(len(records))]
        last = max(offsets)
        self._wait(lambda: self._state is not None and self._state.version > last)
        with self._changed:
            return [(o, self._outcomes.pop(o)) for o in offsets]

    # ------------------------------------------------------------------------ status writes
    def client(self) -> KubeApi:
        if self._api is None:
            self._api = KubeApi(self.settings.kubeconfig)
        return self._api

    def event_recorder(self) -> ApiEventRecorder:
        return ApiEventRecorder(self.client(), "strata-scheduler", self.replica)

    def update_job_status(self, job: JobStatus, update_pg: bool = True) -> None:
        if update_pg:
            StatusUpdater(self.client()).update_pod_group(job)
        self.record_job_status_event(job, update_pg)

    def record_job_status_event(self, job: JobStatus, update_pg: bool) -> None:
        job_status_event(self.event_recorder(), job)

    def update_queue_status(self, queue: QueueStatus) -> None:
        StatusUpdater(self.client()).update_queue_status(queue)

    # ----------------------------------------------------------------------------- sessions
    def on_session_open(self) -> None:
        self._session_started = time.monotonic()

    def on_session_close(self) -> None:
        if self._session_started is not None:
            SESSIONS.labels(self.replica).observe(time.monotonic() - self._session_started)
            self._session_started = None


def _implements_cache(cache: LogCache) -> Cache:
    """Never called: mypy checks here that LogCache satisfies the Cache protocol, method for method
    (as kube-scheduler's ``var _ Cache = &cacheImpl{}``)."""
    return cache
