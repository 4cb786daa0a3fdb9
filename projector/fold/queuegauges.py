"""Volcano's own queue gauges, computed from a snapshot (issue 14; docs/metrics.md).

Volcano's scheduler and controller export per-queue gauges (``volcano_queue_allocated_milli_cpu``
and the rest) that its Grafana dashboards plot. Those that the cache alone determines are computed
here from one ``Snapshot``, with Volcano's names, help texts, labels and units, so the dashboards
Volcano ships show Strata's view at each version. Pure: no clock, no I/O, no prometheus_client
(``strata.projector.queuemetrics`` turns the samples into metric families when scraped).

Where Volcano's value depends on a scheduling session or on what one process has seen since it
started, the figure is what a session opened on this snapshot would report, and the docs say how
it differs.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from strata.projector.fold.resources import Resources
from strata.projector.fold.snapshot import Snapshot
from strata.projector.fold.task import ALLOCATED, TaskStatus

MAX_FLOAT64 = sys.float_info.max  # Go's math.MaxFloat64: the capacity plugin's "unlimited"
_PENDING = TaskStatus.PENDING
_NOT_SCALAR = frozenset({"cpu", "memory"})  # Volcano's Resource keeps these two apart from its scalars


class Family(NamedTuple):
    """One metric family as Volcano registers it."""

    name: str
    help: str
    labels: tuple[str, ...]


_QUEUE = ("queue_name",)
_SCALAR = ("queue_name", "resource")

# pkg/scheduler/metrics/queue.go (the proportion and capacity plugins set them)
ALLOCATED_CPU = Family("volcano_queue_allocated_milli_cpu", "Allocated CPU count for one queue", _QUEUE)
ALLOCATED_MEMORY = Family("volcano_queue_allocated_memory_bytes", "Allocated memory for one queue", _QUEUE)
ALLOCATED_SCALAR = Family(
    "volcano_queue_allocated_scalar_resources", "Allocated scalar resources for one queue", _SCALAR
)
REQUEST_CPU = Family("volcano_queue_request_milli_cpu", "Request CPU count for one queue", _QUEUE)
REQUEST_MEMORY = Family("volcano_queue_request_memory_bytes", "Request memory for one queue", _QUEUE)
REQUEST_SCALAR = Family("volcano_queue_request_scalar_resources", "Request scalar resources for one queue", _SCALAR)
WEIGHT = Family("volcano_queue_weight", "Weight for one queue", _QUEUE)
CAPACITY_CPU = Family("volcano_queue_capacity_milli_cpu", "Capacity CPU count for one queue", _QUEUE)
CAPACITY_MEMORY = Family("volcano_queue_capacity_memory_bytes", "Capacity memory for one queue", _QUEUE)
CAPACITY_SCALAR = Family("volcano_queue_capacity_scalar_resources", "Capacity scalar resources for one queue", _SCALAR)

# pkg/controllers/metrics/queue.go (the queue controller counts PodGroups by status.phase)
PHASES = ("Inqueue", "Pending", "Running", "Unknown", "Completed")
POD_GROUP_COUNTS = tuple(
    Family(f"volcano_queue_pod_group_{phase.lower()}_count", f"The number of {phase} PodGroup in this queue", _QUEUE)
    for phase in PHASES
)

FAMILIES: tuple[Family, ...] = (
    ALLOCATED_CPU,
    ALLOCATED_MEMORY,
    ALLOCATED_SCALAR,
    REQUEST_CPU,
    REQUEST_MEMORY,
    REQUEST_SCALAR,
    WEIGHT,
    CAPACITY_CPU,
    CAPACITY_MEMORY,
    CAPACITY_SCALAR,
    *POD_GROUP_COUNTS,
)


@dataclass(frozen=True)
class QueueFigures:
    """What one stored queue's gauges are computed from (resource maps as the fold stores them:
    cpu in millicores, memory in bytes, scalars in thousandths, ``pods`` as a count)."""

    name: str
    weight: int
    allocated: Resources  # resreq of the Binding, Bound and Running tasks of the queue's shown jobs
    request: Resources  # allocated plus the Pending tasks' resreq
    capability: Resources  # spec.capability; {} when the Queue has none
    has_jobs: bool  # a shown job names the queue (the capacity plugin reports such queues differently)
    pod_groups: tuple[int, ...]  # stored PodGroups of the queue per phase, in PHASES order


class Sample(NamedTuple):
    family: Family
    labels: tuple[str, ...]  # values of ``family.labels``, in order
    value: float


def queue_figures(snapshot: Snapshot) -> tuple[QueueFigures, ...]:
    """Every stored queue's figures, by queue name: one pass over the PodGroups and the tasks."""
    job_queues = _shown_job_queues(snapshot)
    allocated, request = _task_sums(snapshot, job_queues)
    counts = _phase_counts(snapshot, job_queues)
    with_jobs = set(job_queues.values())
    return tuple(
        QueueFigures(
            name=name,
            weight=queue.weight,
            allocated=allocated.get(name, {}),
            request=request.get(name, {}),
            capability=queue.capability,
            has_jobs=name in with_jobs,
            pod_groups=tuple(counts.get((name, phase), 0) for phase in PHASES),
        )
        for name, queue in sorted(snapshot.queues.items())
    )


def _shown_job_queues(snapshot: Snapshot) -> dict[str, str]:
    """Job key -> queue of the jobs a scheduling session sees: PodGroup stored, queue stored
    (Volcano's ``Snapshot()`` leaves the others out, and so does the canonical snapshot)."""
    shown = {}
    for key, pg in snapshot.podgroups.items():
        queue = snapshot.job_queue(pg)
        if queue in snapshot.queues:
            shown[key] = queue
    return shown


def _task_sums(snapshot: Snapshot, job_queues: Mapping[str, str]) -> tuple[dict[str, Resources], dict[str, Resources]]:
    """Per queue, what the proportion and capacity plugins call allocated and request: tasks in
    Volcano's AllocatedStatus count in both, Pending tasks in the request only; Releasing,
    terminated and Unknown tasks in neither."""
    allocated: dict[str, Resources] = {}
    request: dict[str, Resources] = {}
    for task in snapshot.tasks.values():
        queue = job_queues.get(task.job) if task.job is not None else None
        if queue is None:
            continue
        if task.status in ALLOCATED:
            _accumulate(allocated.setdefault(queue, {}), task.resreq)
            _accumulate(request.setdefault(queue, {}), task.resreq)
        elif task.status == _PENDING:
            _accumulate(request.setdefault(queue, {}), task.resreq)
    return allocated, request


def _phase_counts(snapshot: Snapshot, job_queues: Mapping[str, str]) -> dict[tuple[str, str], int]:
    """(queue, phase) -> number of PodGroups; phases other than PHASES count nowhere, as in the
    queue controller's switch."""
    counts: dict[tuple[str, str], int] = {}
    for key, pg in snapshot.podgroups.items():
        queue = job_queues.get(key)
        if queue is not None:
            counts[queue, pg.phase] = counts.get((queue, pg.phase), 0) + 1
    return counts


def _accumulate(total: Resources, add: Mapping[str, int]) -> None:
    # keys at 0 stay, as in Volcano's Resource.Add: they become series of value 0
    for k, v in add.items():
        total[k] = total.get(k, 0) + v


# ------------------------------------------------------------------------------------ samples
def samples(figures: Iterable[QueueFigures]) -> tuple[Sample, ...]:
    """Every sample of every family, in FAMILIES order, then by queue, then by resource."""
    order = {family: i for i, family in enumerate(FAMILIES)}
    flat = [s for f in figures for s in _queue_samples(f)]
    return tuple(sorted(flat, key=lambda s: (order[s.family], s.labels)))


def _queue_samples(f: QueueFigures) -> Iterator[Sample]:
    capacity = capacity_reported(f)
    scalars = scalar_names(f)
    for family, resources in ((ALLOCATED_CPU, f.allocated), (REQUEST_CPU, f.request)):
        yield Sample(family, (f.name,), float(resources.get("cpu", 0)))
    for family, resources in ((ALLOCATED_MEMORY, f.allocated), (REQUEST_MEMORY, f.request)):
        yield Sample(family, (f.name,), float(resources.get("memory", 0)))
    for family, resources in ((ALLOCATED_SCALAR, f.allocated), (REQUEST_SCALAR, f.request)):
        for name in scalars:
            yield Sample(family, (f.name, name), float(resources.get(name, 0)))
    yield Sample(WEIGHT, (f.name,), float(f.weight))
    if capacity is not None:
        cpu, memory, scalar = capacity
        yield Sample(CAPACITY_CPU, (f.name,), cpu)
        yield Sample(CAPACITY_MEMORY, (f.name,), memory)
        for name in scalars:
            yield Sample(CAPACITY_SCALAR, (f.name, name), float(scalar.get(name, 0)))
    for family, count in zip(POD_GROUP_COUNTS, f.pod_groups, strict=True):
        yield Sample(family, (f.name,), float(count))


def capacity_reported(f: QueueFigures) -> tuple[float, float, Resources] | None:
    """(milli cpu, memory bytes, scalars) the capacity plugin reports for the queue, or None when
    it reports nothing. A queue with jobs gets ``attr.capability``: an unset or zero cpu or memory
    of a given capability reads as MaxFloat64, no capability as zeros. A queue without jobs gets
    its spec's capability as written, and only when it has one."""
    if not f.capability:
        return (0.0, 0.0, {}) if f.has_jobs else None
    cpu, memory = float(f.capability.get("cpu", 0)), float(f.capability.get("memory", 0))
    if f.has_jobs:
        cpu, memory = cpu if cpu > 0 else MAX_FLOAT64, memory if memory > 0 else MAX_FLOAT64
    return cpu, memory, {k: v for k, v in f.capability.items() if k not in _NOT_SCALAR}


def scalar_names(f: QueueFigures) -> list[str]:
    """The resource labels of the queue's scalar series. Volcano keeps one set of scalar names per
    queue for all its families and sets 0 for a name a family lacks (``knownScalarResources``);
    here the set is the names the queue's reported maps hold at this version."""
    names = set(f.allocated) | set(f.request)
    capacity = capacity_reported(f)
    if capacity is not None:
        names |= set(capacity[2])
    return sorted(names - _NOT_SCALAR)
