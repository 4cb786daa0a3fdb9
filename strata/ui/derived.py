"""Per-version figures that a snapshot does not hold and a pass over every task would cost.

The cluster page counts each job's tasks by status and sums what they hold (Volcano's allocated
and request, per job and per queue). A pass over 150,000 tasks takes a few hundred ms, more than
a page may; but two snapshots of one lineage share every shard of the task map that the fold has
not written between them, so the figures of a new version are those of a nearby one, corrected
by the tasks that differ: ``Figures.advance`` skips the shards the two share and, in the others,
redoes only the tasks that are not the same object in both (along one lineage, a fork or a later
version refers to the very task views it did not change). Sums are exact integers, so taking a
task out undoes adding it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from strata.projector.cowmap import FrozenMap
from strata.projector.kinds import PodView
from strata.projector.snapshot import Snapshot
from strata.projector.task import ALLOCATED, TaskStatus

STATUSES = tuple(TaskStatus)
_INDEX = {status: i for i, status in enumerate(STATUSES)}
_PENDING = TaskStatus.PENDING
PROBE = 256  # tasks looked at to tell whether a base's tasks are the same objects
MIN_ALIKE = 0.5  # of the probed tasks: below this a base saves too little, the figures are computed anew
KEPT = 8  # versions whose figures are kept to advance from


@dataclass(frozen=True)
class JobFigures:
    counts: tuple[int, ...]  # tasks per status, in STATUSES order
    allocated: dict[str, int]  # resreq of its Binding, Bound and Running tasks
    request: dict[str, int]  # allocated plus its Pending tasks' resreq (Volcano's queue "request")

    @property
    def tasks(self) -> int:
        return sum(self.counts)

    def by_status(self) -> dict[str, int]:
        return {str(s): n for s, n in zip(STATUSES, self.counts, strict=True) if n}


_NO_JOB = JobFigures((0,) * len(STATUSES), {}, {})


@dataclass(frozen=True)
class Figures:
    version: int
    tasks: FrozenMap[str, PodView]  # the snapshot's, to find what differs in the next version
    jobs: dict[str, JobFigures]  # job key -> its figures (jobs with at least one task)
    statuses: tuple[int, ...]  # every task per status, in STATUSES order
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # what is derived from them

    @classmethod
    def of(cls, snapshot: Snapshot) -> Figures:
        jobs: dict[str, JobFigures] = {}
        statuses = [0] * len(STATUSES)
        for task in snapshot.tasks.values():
            statuses[_INDEX[task.status]] += 1
            if task.job is not None:
                jobs[task.job] = _with(jobs.get(task.job, _NO_JOB), task, 1)
        return cls(snapshot.version, snapshot.tasks, jobs, tuple(statuses))

    def advance(self, snapshot: Snapshot) -> Figures:
        """The figures of ``snapshot``, from these and the tasks that differ."""
        jobs = dict(self.jobs)  # values are immutable: a shallow copy keeps these figures intact
        statuses = list(self.statuses)
        for old, new in _differing(self.tasks, snapshot.tasks):
            for task, sign in ((old, -1), (new, 1)):
                if task is None:
                    continue
                statuses[_INDEX[task.status]] += sign
                if task.job is not None:
                    figures = _with(jobs.get(task.job, _NO_JOB), task, sign)
                    if figures.tasks:
                        jobs[task.job] = figures
                    else:
                        jobs.pop(task.job, None)
        return Figures(snapshot.version, snapshot.tasks, jobs, tuple(statuses))

    def likeness(self, snapshot: Snapshot) -> float:
        """The share of a sample of ``snapshot``'s tasks that are the very objects these figures
        counted: high along one lineage (forks and snapshots share the fold's task views), nil
        between two restores of a checkpoint, whose objects are all new."""
        probed = alike = 0
        for a, b in zip(self.tasks.shards(), snapshot.tasks.shards(), strict=True):
            for key, value in b.items():
                probed += 1
                alike += a.get(key) is value
                if probed % 8 == 0:
                    break  # a few tasks from every shard
            if probed >= PROBE:
                break
        return alike / probed if probed else 1.0

    def by_status(self) -> dict[str, int]:
        return {str(s): n for s, n in zip(STATUSES, self.statuses, strict=True) if n}


def _with(figures: JobFigures, task: PodView, sign: int) -> JobFigures:
    counts = list(figures.counts)
    counts[_INDEX[task.status]] += sign
    allocated, request = figures.allocated, figures.request
    if task.status in ALLOCATED:
        allocated = _add(allocated, task.resreq, sign)
        request = _add(request, task.resreq, sign)
    elif task.status == _PENDING:
        request = _add(request, task.resreq, sign)
    return JobFigures(tuple(counts), allocated, request)


def _add(total: dict[str, int], add: dict[str, int], sign: int) -> dict[str, int]:
    out = dict(total)
    for k, v in add.items():
        n = out.get(k, 0) + sign * v
        if n:
            out[k] = n
        else:
            out.pop(k, None)
    return out


def _differing(old: FrozenMap[str, Any], new: FrozenMap[str, Any]) -> Iterator[tuple[Any, Any]]:
    """(old value, new value) of every key whose value is not the same object in both (None
    where absent); shards the two share are skipped whole."""
    for a, b in zip(old.shards(), new.shards(), strict=True):
        if a is b:
            continue
        for key, value in b.items():
            before = a.get(key)
            if before is not value:
                yield before, value
        for key in a.keys() - b.keys():
            yield a[key], None


class FiguresCache:
    """The figures of the last few versions asked for; a new version advances from the one that
    shares the most task shards with it."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._lock = threading.Lock()
        self._by_version: OrderedDict[int, Figures] = OrderedDict()

    def of(self, snapshot: Snapshot) -> Figures:
        with self._lock:
            found = self._by_version.get(snapshot.version)
            if found is not None:
                self._by_version.move_to_end(snapshot.version)
                return found
            candidates = list(self._by_version.values())
        scored = [(f.likeness(snapshot), -abs(f.version - snapshot.version), i) for i, f in enumerate(candidates)]
        best = max(scored, default=None)
        if best is not None and best[0] >= MIN_ALIKE:
            figures = candidates[best[2]].advance(snapshot)
        else:
            figures = Figures.of(snapshot)
        with self._lock:
            self._by_version[snapshot.version] = figures
            while len(self._by_version) > self.kept:
                self._by_version.popitem(last=False)
        return figures


def queue_sums(snapshot: Snapshot, figures: Figures) -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    """Per stored queue, (allocated, request) of its shown jobs (Volcano's queue figures); once
    per version."""
    if "queues" not in figures.memo:
        figures.memo["queues"] = _queue_sums(snapshot, figures)
    sums: dict[str, tuple[dict[str, int], dict[str, int]]] = figures.memo["queues"]
    return sums


def _queue_sums(snapshot: Snapshot, figures: Figures) -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    sums: dict[str, tuple[dict[str, int], dict[str, int]]] = {name: ({}, {}) for name, _q in snapshot.queues.items()}
    for key, job in figures.jobs.items():
        pg = snapshot.podgroups.get(key)
        if pg is None:
            continue
        queue = sums.get(snapshot.job_queue(pg))
        if queue is None:
            continue
        for total, add in zip(queue, (job.allocated, job.request), strict=True):
            for k, v in add.items():
                total[k] = total.get(k, 0) + v
    return sums
