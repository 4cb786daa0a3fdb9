"""The Cache a scheduler replica embeds: Volcano's ``cache.Cache`` interface, on the cache log.

Volcano's scheduler reads a deep-copied snapshot each cycle and writes back through the cache.
Here every write that changes the cache is a record in the one cache log, and the fold (the
same in every replica) admits or rejects it; a replica learns the outcome by folding the log up
to its own record. A task moves like this (the methods that move it are below the drawing):

        pod ADDED (watch)                add_bind_task: BIND
     ------------------->  Pending  -------------------------->  Binding
                              ^      (admitted: Pending, node      |   |
                              |       known, request fits idle)    |   | the binder binds:
                 BIND_FAILED  |                                    |   | BIND_SUCCEEDED, then
         (binder gave up)     +------------------------------------+   | pod MODIFIED (nodeName)
                                                                       v
                                 evict: EVICT                        Bound / Running
                  Releasing  <--------------------------------------+
                      |      (applied: task on a node, PodGroup stored)
                      | the evictor evicts: EVICT_SUCCEEDED, then pod DELETED;
                      | or gives up: EVICT_FAILED (the task is its pod's again)

Rejected records change nothing, in any replica: two replicas that bind different tasks onto
the last free cpu of a node both publish, and the later BIND in the log is rejected in all of
them alike.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from strata.projector.fold.kinds import PodView
from strata.projector.fold.snapshot import Snapshot


@dataclass(frozen=True)
class BindContext:
    """One bind a scheduler decided (Volcano's ``BindContext``); extensions travel to the binder."""

    task: PodView
    node: str
    extensions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


class BindResult(NamedTuple):
    offset: int  # where the BIND sits in the cache log
    admitted: bool
    reason: str = ""  # the spec's rejection reason when not admitted


class EvictResult(NamedTuple):
    offset: int
    applied: bool
    reason: str = ""


@dataclass(frozen=True)
class JobStatus:
    """What ``update_job_status`` writes into a PodGroup (its status and the placement annotation)."""

    namespace: str
    name: str
    phase: str  # Pending | Inqueue | Running | Unknown | Completed
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    conditions: Sequence[Mapping[str, Any]] = ()
    allocated_hypernode: str | None = None


@dataclass(frozen=True)
class QueueStatus:
    """What ``update_queue_status`` writes into a Queue's status subresource."""

    name: str
    state: str = "Open"
    pending: int = 0
    running: int = 0
    inqueue: int = 0
    completed: int = 0
    allocated: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


class EventRecorder(Protocol):
    def event(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """Record a Kubernetes Event about ``obj`` (an object with apiVersion, kind and metadata)."""


class Cache(Protocol):
    """Volcano's ``cache.Cache``, method for method (snake_case), on the cache log."""

    def run(self, stop: threading.Event) -> None:
        """Start following the cache log in the background until ``stop`` is set."""

    def wait_for_cache_sync(self, stop: threading.Event) -> bool:
        """Block until every kind is SYNCED and the fold has caught up with the log's end as of
        the call; False when ``stop`` came first."""

    def snapshot(self) -> Snapshot:
        """The immutable snapshot of the local fold, with its version (records applied)."""

    def add_bind_task(self, bind_context: BindContext) -> BindResult:
        """Publish a BIND with this replica's id; return once the local fold has passed it."""

    def add_bind_tasks(self, bind_contexts: Sequence[BindContext]) -> list[BindResult]:
        """Several binds at once (Volcano binds in batches): one flush, one wait. The binds of one
        job go as one BIND_GROUP, admitted all or nothing (spec v1.1); each result says its
        record's verdict."""

    def evict(self, task: PodView, reason: str) -> EvictResult:
        """Publish an EVICT; return once the local fold has passed it."""

    def update_job_status(self, job: JobStatus, update_pg: bool = True) -> None:
        """Write the PodGroup's status (when ``update_pg``) and record the job's status event."""

    def record_job_status_event(self, job: JobStatus, update_pg: bool) -> None:
        """Record an Event on the job's PodGroup that tells its phase."""

    def update_queue_status(self, queue: QueueStatus) -> None:
        """Write the Queue's status subresource."""

    def client(self) -> Any:
        """The Kubernetes API client of this replica."""

    def event_recorder(self) -> EventRecorder: ...

    def on_session_open(self) -> None: ...

    def on_session_close(self) -> None: ...
