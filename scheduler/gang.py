"""An example scheduler on the Cache interface: gang-aware first fit.

Documentation and the driver of the multi-replica tests, not a product. Each cycle takes one
snapshot, places whole gangs (a job is bound only when at least ``minMember`` of its tasks can
be allocated), and publishes the binds as one batch. Several replicas may run it at once on the
same log: they decide from the same snapshots, and the fold admits the first BIND for a node's
last capacity and rejects the others in every replica alike. A gang of which only part was
admitted keeps its admitted tasks and retries the rest next cycle (no rollback: good enough for
an example, and it shows the rejections in the log).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from strata.projector.fold.kinds import PodView, node_allocatable
from strata.projector.fold.snapshot import Snapshot
from strata.projector.fold.task import ALLOCATED, TaskStatus
from strata.scheduler.interface import BindContext, Cache

_NO_SCHEDULE = frozenset({"NoSchedule", "NoExecute"})


@dataclass
class CycleReport:
    version: int
    planned: int = 0
    admitted: int = 0
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def idle(self) -> bool:
        return self.planned == 0


def free_capacity(snapshot: Snapshot) -> dict[str, dict[str, int]]:
    """Idle resources of every node a task may land on, in the snapshot's node order."""
    idle = {}
    for name in snapshot.node_list():
        node = snapshot.nodes[name]
        if node.unschedulable or any(t.effect in _NO_SCHEDULE for t in node.taints):
            continue
        free = dict(node_allocatable(node, snapshot.csinodes.get(name)))
        for k, v in (snapshot.node_used.get(name) or {}).items():
            free[k] = free.get(k, 0) - v
        idle[name] = free
    return idle


def fits(task: PodView, free: dict[str, int]) -> bool:
    # the fold's own admission test (cache-semantics.md, section 6)
    return all(task.resreq.get(k, 0) <= free.get(k, 0) for k in {"cpu", "memory", *task.resreq})


def plan(snapshot: Snapshot) -> list[BindContext]:
    """Gang-aware first fit over one snapshot."""
    by_job: dict[str, list[PodView]] = {}
    allocated: dict[str, int] = {}
    for task in snapshot.tasks.values():
        if task.job is None or task.job not in snapshot.podgroups:
            continue
        if task.status in ALLOCATED:
            allocated[task.job] = allocated.get(task.job, 0) + 1
        elif task.status == TaskStatus.PENDING and not task.node:
            by_job.setdefault(task.job, []).append(task)
    free = free_capacity(snapshot)
    binds: list[BindContext] = []
    for job in _job_order(snapshot, by_job):
        pg = snapshot.podgroups[job]
        if snapshot.job_queue(pg) not in snapshot.queues:
            continue
        taken: dict[str, dict[str, int]] = {}  # what this gang would take, node by node
        placed = []
        for task in sorted(by_job[job], key=lambda t: (-t.priority, t.name)):
            node = next((n for n, f in free.items() if fits(task, taken.get(n, f))), None)
            if node is not None:
                left = taken.setdefault(node, dict(free[node]))
                for k, v in task.resreq.items():
                    left[k] = left.get(k, 0) - v
                placed.append(BindContext(task, node))
        if placed and allocated.get(job, 0) + len(placed) >= pg.min_member:
            free.update(taken)
            binds += placed
    return binds


def _job_order(snapshot: Snapshot, jobs: Iterable[str]) -> list[str]:
    return sorted(jobs, key=lambda j: (-snapshot.job_priority(snapshot.podgroups[j]), j))


def run_cycle(cache: Cache) -> CycleReport:
    cache.on_session_open()
    try:
        snapshot = cache.snapshot()
        binds = plan(snapshot)
        report = CycleReport(snapshot.version, planned=len(binds))
        if binds:
            for result in cache.add_bind_tasks(binds):
                if result.admitted:
                    report.admitted += 1
                else:
                    report.rejected += 1
                    report.reasons[result.reason] = report.reasons.get(result.reason, 0) + 1
        return report
    finally:
        cache.on_session_close()


def wait_for_change(cache: Cache, version: int, stop: threading.Event, timeout_s: float) -> None:
    """Wait until the snapshot moves past ``version`` (there may be news to schedule) or time is up."""
    for _ in range(max(1, int(timeout_s / 0.02))):
        if stop.wait(0.02) or cache.snapshot().version > version:
            return
