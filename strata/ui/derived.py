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
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from strata.projector.fold.cowmap import SHARD_MASK, FrozenMap
from strata.projector.fold.kinds import PodView
from strata.projector.fold.snapshot import Snapshot
from strata.projector.fold.task import ALLOCATED, TaskStatus

STATUSES = tuple(TaskStatus)
_INDEX = {status: i for i, status in enumerate(STATUSES)}
_PENDING = TaskStatus.PENDING
PROBE = 256  # tasks looked at to tell whether a base's tasks are the same objects
MIN_ALIKE = 0.5  # of the probed tasks: below this a base saves too little, the figures are computed anew
KEPT = 16  # versions whose figures are kept to advance from
WRITTEN_TRIED = 4  # the kept versions nearest a new one whose written keys are looked up
NEAR = 4096  # written tasks below which a job's or node's tasks come from advanced figures, not a pass
# Comparing two task maps costs more the further apart they are; beyond this many records it costs
# more than counting anew (at 150,000 tasks: 190 ms 150,000 records apart, 310-470 ms at 240,000-
# 540,000, 240 ms counting anew)
COMPARED_REACH = 200_000
# Records within which figures that carry a task index are advanced from before any nearer ones
# (advancing 16,384 records' written tasks costs about 11 ms at 150,000 pods)
INDEXED_REACH = 32_768


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


class Written(Protocol):
    """A superset of the task uids written between versions a and b, or None if unknown (or, with
    ``most``, if they are more than that: the caller would not use them)."""

    def __call__(self, a: int, b: int, most: int | None = None) -> set[str] | None: ...


_NO_JOB = JobFigures((0,) * len(STATUSES), {}, {})


@dataclass(frozen=True)
class TaskIndex:
    """The uids of each job's and each node's tasks at one version: a job or node page takes its
    tasks from it instead of a pass over every task (30-50 ms at 150,000 pods)."""

    by_job: dict[str, frozenset[str]]  # job key -> uids of its tasks
    by_node: dict[str, frozenset[str]]  # node name -> uids of tasks naming it

    @classmethod
    def of(cls, tasks: FrozenMap[str, PodView]) -> TaskIndex:
        """One pass over the tasks (about 110 ms at 150,000 pods, as long as the figures'
        count: so the figures build it only when a page will use it)."""
        by_job: defaultdict[str, list[str]] = defaultdict(list)
        by_node: defaultdict[str, list[str]] = defaultdict(list)
        for shard in tasks.shards():
            for uid, task in shard.items():
                job, node = task.job, task.node
                if job:
                    by_job[job].append(uid)
                if node:
                    by_node[node].append(uid)
        return cls(
            {job: frozenset(uids) for job, uids in by_job.items()},
            {node: frozenset(uids) for node, uids in by_node.items()},
        )

    def moved(self, job_moves: dict[str, dict[str, bool]], node_moves: dict[str, dict[str, bool]]) -> TaskIndex:
        return TaskIndex(_moved(self.by_job, job_moves), _moved(self.by_node, node_moves))


@dataclass(frozen=True)
class Figures:
    version: int
    tasks: FrozenMap[str, PodView]  # the snapshot's, to find what differs in the next version
    jobs: dict[str, JobFigures]  # job key -> its figures (jobs with at least one task)
    statuses: tuple[int, ...]  # every task per status, in STATUSES order
    # what is derived from them: the queues' figures, the job table, the task index (``index``)
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, snapshot: Snapshot) -> Figures:
        """The figures counted anew: one pass over the tasks that counts each job's tasks by
        status and request object (a job's pods share a few request objects: the fold memoizes
        them), then sums each group's request once, times its tasks. Without the task index,
        which would double the pass's time (``index``)."""
        statuses = [0] * len(STATUSES)
        groups: dict[tuple[str, TaskStatus, int], int] = {}  # (job, status, id of a request) -> tasks
        requests: dict[int, dict[str, int]] = {}  # id -> the request (alive: the tasks hold it)
        index = _INDEX
        for shard in snapshot.tasks.shards():
            for task in shard.values():
                job = task.job
                if job is None:
                    statuses[index[task.status]] += 1
                    continue
                resreq = task.resreq
                key = (job, task.status, id(resreq))
                n = groups.get(key)
                if n is None:
                    groups[key] = 1
                    requests[id(resreq)] = resreq
                else:
                    groups[key] = n + 1
        jobs = _job_figures(groups, requests, statuses)  # counts the jobs' tasks into statuses
        return cls(snapshot.version, snapshot.tasks, jobs, tuple(statuses))

    def index(self) -> TaskIndex:
        """The version's task index: built by a pass over its tasks the first time, kept with
        the figures, and carried along to the figures advanced from them."""
        found = self.kept_index()
        if found is None:
            found = self.memo["index"] = TaskIndex.of(self.tasks)
        return found

    def kept_index(self) -> TaskIndex | None:
        """The task index if built (here or in the figures these advanced from), else None."""
        found: TaskIndex | None = self.memo.get("index")
        return found

    def advance(self, snapshot: Snapshot, keys: Iterable[str] | None = None) -> Figures:
        """The figures of ``snapshot``, from these and the tasks that differ: those of ``keys``
        when given (a superset of the task uids written between the two versions, which the
        timeline records as it folds: then the two need not share any object), else found by
        comparing the two task maps shard by shard. The differing tasks are netted by (job,
        status, request) first, as ``of`` counts them, so each job's figures are made once
        however many of its tasks moved (about 1 us a task, against 8-9 us when each task made
        its job's figures anew)."""
        if keys is None:
            differing = _differing(self.tasks, snapshot.tasks)
        else:
            differing = _differing_keys(self.tasks, snapshot.tasks, keys)
        statuses = list(self.statuses)
        index = self.kept_index()
        job_moves: dict[str, dict[str, bool]] = {}  # job -> uid -> joins (True) or leaves (False)
        node_moves: dict[str, dict[str, bool]] = {}
        groups: dict[tuple[str, TaskStatus, int], int] = {}  # (job, status, id of a request) -> tasks in less out
        requests: dict[int, dict[str, int]] = {}  # id -> the request (alive: the tasks hold it)
        for uid, old, new in differing:
            if index is not None:
                _move(job_moves, uid, old.job if old is not None else None, new.job if new is not None else None)
                _move(node_moves, uid, old.node if old is not None else None, new.node if new is not None else None)
            for task, sign in ((old, -1), (new, 1)):  # inlined: this loop runs per differing task
                if task is None:
                    continue
                job = task.job
                if job is None:
                    statuses[_INDEX[task.status]] += sign
                    continue
                resreq = task.resreq
                key = (job, task.status, id(resreq))
                groups[key] = groups.get(key, 0) + sign
                requests[id(resreq)] = resreq
        jobs = dict(self.jobs)  # values are immutable: a shallow copy keeps these figures intact
        touched = _apply(jobs, groups, requests, statuses)  # jobs whose figures changed
        advanced = Figures(snapshot.version, snapshot.tasks, jobs, tuple(statuses))
        if index is not None:
            advanced.memo["index"] = index.moved(job_moves, node_moves)
        # the queue figures advance too (``queue_figures``), from the nearest figures that have
        # them: these, or their own base (one base each, never a chain)
        if "queues" in self.memo:
            advanced.memo["base"] = (self, touched)
        elif "base" in self.memo:
            base, before = self.memo["base"]
            advanced.memo["base"] = (base, before | touched)
        return advanced

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


def _apply(
    jobs: dict[str, JobFigures],
    groups: dict[tuple[str, TaskStatus, int], int],
    requests: dict[int, dict[str, int]],
    statuses: list[int],
) -> set[str]:
    """Correct ``jobs`` and ``statuses`` by the netted ``groups``; the jobs whose figures changed."""
    changes = _totals(groups, requests, statuses)
    for job, (counts, allocated_change, request_change) in changes.items():
        before = jobs.get(job, _NO_JOB)
        figures = JobFigures(
            tuple(a + b for a, b in zip(before.counts, counts, strict=True)),
            _added(before.allocated, allocated_change),
            _added(before.request, request_change),
        )
        if figures.tasks:
            jobs[job] = figures
        else:
            jobs.pop(job, None)
    return set(changes)


def _added(total: dict[str, int], change: dict[str, int]) -> dict[str, int]:
    """``total`` plus ``change``, without the resources that come to nothing; ``total`` itself
    when nothing changes (the figures before share it)."""
    if not any(change.values()):
        return total
    out = dict(total)
    for k, v in change.items():
        n = out.get(k, 0) + v
        if n:
            out[k] = n
        else:
            out.pop(k, None)
    return out


def _job_figures(
    groups: dict[tuple[str, TaskStatus, int], int], requests: dict[int, dict[str, int]], statuses: list[int]
) -> dict[str, JobFigures]:
    """Each job's figures from its tasks counted by (job, status, request), adding each group's
    tasks into ``statuses`` too. In the groups' order, which is their first tasks', so each sum
    lists its resources in the order a pass adding task by task would."""
    return {
        job: JobFigures(tuple(counts), _nonzero(allocated), _nonzero(request))
        for job, (counts, allocated, request) in _totals(groups, requests, statuses).items()
    }


def _totals(
    groups: dict[tuple[str, TaskStatus, int], int], requests: dict[int, dict[str, int]], statuses: list[int]
) -> dict[str, tuple[list[int], dict[str, int], dict[str, int]]]:
    """Per job, (tasks per status, allocated, request) summed over its groups, each group's tasks
    (a count, or a net change of one) added into ``statuses`` too; groups that net to nothing (a
    task replaced by one that counts the same) are skipped."""
    totals: dict[str, tuple[list[int], dict[str, int], dict[str, int]]] = {}
    index, allocated_statuses, pending = _INDEX, ALLOCATED, _PENDING
    for (job, status, request), n in groups.items():
        if not n:
            continue
        i = index[status]
        statuses[i] += n
        total = totals.get(job)
        if total is None:
            total = totals[job] = ([0] * len(STATUSES), {}, {})
        total[0][i] += n
        if status in allocated_statuses:
            accumulate(total[1], requests[request], n)
            accumulate(total[2], requests[request], n)
        elif status == pending:
            accumulate(total[2], requests[request], n)
    return totals


def accumulate(total: dict[str, int], add: dict[str, int], times: int = 1) -> None:
    """Add ``add`` into ``total``, ``times`` over (-1: take it out)."""
    for k, v in add.items():
        total[k] = total.get(k, 0) + v * times


def _nonzero(total: dict[str, int]) -> dict[str, int]:
    """As ``_added`` leaves a sum: without the resources that add up to nothing."""
    return {k: v for k, v in total.items() if v} if 0 in total.values() else total


def _move(moves: dict[str, dict[str, bool]], uid: str, before: str | None, after: str | None) -> None:
    """Record that task ``uid`` left group ``before`` and joined ``after`` (None, "": no group)."""
    if before == after:
        return
    if before:
        moves.setdefault(before, {})[uid] = False
    if after:
        moves.setdefault(after, {})[uid] = True


def _moved(groups: dict[str, frozenset[str]], moves: dict[str, dict[str, bool]]) -> dict[str, frozenset[str]]:
    """``groups`` with ``moves`` applied: one new set per group that changed."""
    if not moves:
        return groups
    out = dict(groups)
    for key, changes in moves.items():
        members = set(out.get(key, ()))
        for uid, joins in changes.items():
            if joins:
                members.add(uid)
            else:
                members.discard(uid)
        if members:
            out[key] = frozenset(members)
        else:
            out.pop(key, None)
    return out


def _differing_keys(
    old: FrozenMap[str, Any], new: FrozenMap[str, Any], keys: Iterable[str]
) -> Iterator[tuple[str, Any, Any]]:
    """``_differing`` among ``keys`` alone."""
    olds, news = old.shards(), new.shards()  # a shard's own lookup: ``FrozenMap.get`` is a Python call
    for key in keys:
        i = hash(key) & SHARD_MASK
        before, after = olds[i].get(key), news[i].get(key)
        if before is not after:
            yield key, before, after


def _differing(old: FrozenMap[str, Any], new: FrozenMap[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    """(key, old value, new value) of every key whose value is not the same object in both
    (None where absent); shards the two share are skipped whole."""
    for a, b in zip(old.shards(), new.shards(), strict=True):
        if a is b:
            continue
        for key, value in b.items():
            before = a.get(key)
            if before is not value:
                yield key, before, value
        for key in a.keys() - b.keys():
            yield key, a[key], None


class FiguresCache:
    """The figures of the last few versions asked for; a new version advances from the one that
    shares the most task shards with it, or from a landmark's (the survey's keys' figures)."""

    def __init__(self, kept: int = KEPT, landmarks: Callable[[int], list[Figures]] | None = None) -> None:
        self.kept = kept
        self.landmarks = landmarks  # version -> figures kept elsewhere near it, to advance from too
        self._lock = threading.Lock()
        self._by_version: OrderedDict[int, Figures] = OrderedDict()

    def of(self, snapshot: Snapshot, written: Written | None = None) -> Figures:
        """The figures of ``snapshot``: kept, or advanced from a kept version's, by the task
        uids ``written`` between the two (the timeline's record) when it knows them, else by
        comparing task maps with a version of the same lineage, else counted anew."""
        figures = self.near(snapshot, written, len(snapshot.tasks) // 4)
        if figures is None:
            version = snapshot.version
            nearest = [f for f in self._nearest(version) if abs(f.version - version) <= COMPARED_REACH]
            # the nearest version of the same lineage: the fewest tasks to count again
            alike = [f for f in nearest if f.likeness(snapshot) >= MIN_ALIKE][:1]
            figures = self._keep(alike[0].advance(snapshot) if alike else Figures.of(snapshot))
        return figures

    def near(
        self, snapshot: Snapshot, written: Written | None, most: int = NEAR, reach: int | None = None
    ) -> Figures | None:
        """The figures of ``snapshot`` if kept, or advanced from a kept version's or a
        landmark's by fewer than ``most`` written tasks, looking only at those at most ``reach``
        records away (the written tasks of a long stretch cost a union of many records'); None
        if they would cost more."""
        with self._lock:
            found = self._by_version.get(snapshot.version)
            if found is not None:
                self._by_version.move_to_end(snapshot.version)
                return found
        if written is None:
            return None
        version = snapshot.version

        def rank(base: Figures) -> tuple[bool, int]:
            # nearest first, but figures that carry a task index first within INDEXED_REACH: a
            # landmark nearer by a few records would leave the job and node pages without one
            far = abs(base.version - version)
            return (base.kept_index() is None or far > INDEXED_REACH, far)

        bases = self._nearest(version)[:WRITTEN_TRIED]
        if self.landmarks is not None:
            bases = sorted([*bases, *self.landmarks(version)], key=rank)
        for base in bases:
            if reach is not None and abs(base.version - version) > reach:
                continue
            keys = written(base.version, snapshot.version, most)
            if keys is not None and len(keys) < most:
                return self._keep(base.advance(snapshot, keys))
        return None

    def _nearest(self, version: int) -> list[Figures]:
        with self._lock:
            candidates = list(self._by_version.values())
        return sorted(candidates, key=lambda f: abs(f.version - version))

    def _keep(self, figures: Figures) -> Figures:
        with self._lock:
            self._by_version[figures.version] = figures
            while len(self._by_version) > self.kept:
                self._by_version.popitem(last=False)
        return figures


QueueSums = dict[str, tuple[dict[str, int], dict[str, int]]]


@dataclass(frozen=True)
class QueueFigures:
    """Per stored queue, (allocated, request) of its shown jobs (Volcano's queue figures), and
    PodGroups per queue name (stored or not), with what they were computed from."""

    sums: QueueSums
    jobs: dict[str, int]
    podgroups: FrozenMap[str, Any]
    queues: frozenset[str]
    default_queue: str


def queue_figures(snapshot: Snapshot, figures: Figures) -> QueueFigures:
    """The version's queue figures, once per version: advanced from those of the version its
    figures advanced from, by the jobs whose figures changed and the PodGroups that differ (a
    pass over every job and PodGroup otherwise)."""
    found: QueueFigures | None = figures.memo.get("queues")
    if found is not None:
        return found
    queues = frozenset(name for name, _q in snapshot.queues.items())
    base = figures.memo.pop("base", None)
    before: QueueFigures | None = base[0].memo.get("queues") if base is not None else None
    same = before is not None and (before.queues, before.default_queue) == (queues, snapshot.config.default_queue)
    if base is not None and before is not None and same:
        found = _advance_queues(snapshot, figures, base[0], before, base[1])
    if found is None:
        found = _queue_figures(snapshot, figures, queues)
    figures.memo["queues"] = found
    return found


def queue_sums(snapshot: Snapshot, figures: Figures) -> QueueSums:
    return queue_figures(snapshot, figures).sums


def _queue_figures(snapshot: Snapshot, figures: Figures, queues: frozenset[str]) -> QueueFigures:
    sums: QueueSums = {name: ({}, {}) for name in queues}
    jobs: dict[str, int] = {}
    for key, pg in snapshot.podgroups.items():
        queue = snapshot.job_queue(pg)
        jobs[queue] = jobs.get(queue, 0) + 1
        job = figures.jobs.get(key)
        totals = sums.get(queue)
        if job is None or totals is None:
            continue
        for total, add in zip(totals, (job.allocated, job.request), strict=True):
            for k, v in add.items():
                total[k] = total.get(k, 0) + v
    return QueueFigures(sums, jobs, snapshot.podgroups, queues, snapshot.config.default_queue)


def _advance_queues(
    snapshot: Snapshot, figures: Figures, base: Figures, before: QueueFigures, touched: set[str]
) -> QueueFigures:
    sums: QueueSums = {name: (dict(a), dict(r)) for name, (a, r) in before.sums.items()}
    jobs = dict(before.jobs)
    keys = set(touched)
    keys.update(key for key, _old, _new in _differing(before.podgroups, snapshot.podgroups))
    default = before.default_queue
    for key in keys:
        for podgroups, job_figures, sign in ((before.podgroups, base.jobs, -1), (snapshot.podgroups, figures.jobs, 1)):
            pg = podgroups.get(key)
            if pg is None:
                continue
            queue = pg.queue or default
            jobs[queue] = jobs.get(queue, 0) + sign
            if not jobs[queue]:
                del jobs[queue]
            job = job_figures.get(key)
            totals = sums.get(queue)
            if job is None or totals is None:
                continue
            for total, add in zip(totals, (job.allocated, job.request), strict=True):
                for k, v in add.items():
                    total[k] = total.get(k, 0) + sign * v
    return QueueFigures(sums, jobs, snapshot.podgroups, before.queues, default)
