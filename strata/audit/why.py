"""`strata why`'s edge: the cache at a version, the BIND attempts from the audit index, and a
pending pod's tolerations from its object in the log; ``projector.fold.explain`` (pure) explains.

The fold keeps no tolerations, so they are read where they are: the index names the offset of
the pod's last watch event up to the version, and that record is read back from the cache log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from strata.audit.history import Position, catch_up, subject_of, version_at
from strata.errors import StrataError
from strata.log.config import Settings
from strata.projector.auditindex.store import AuditIndex, AuditRow
from strata.projector.checkpoints.interface import LogIdentity
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.projector.fold.explain import (
    BindAttempt,
    Explanation,
    Toleration,
    tasks_of,
    tolerations_of,
    why_job,
    why_pod,
)
from strata.projector.fold.kinds import PodView
from strata.projector.fold.snapshot import Snapshot
from strata.projector.fold.state import FoldConfig
from strata.projector.fold.task import TaskStatus
from strata.projector.runner import LogRunner
from strata.schemas import WatchEvent, objectjson

KINDS = ("pod", "job")
RUN_GAP = 512  # records: pod events closer than this are read in one pass over the log
_STORED = ("ADDED", "MODIFIED")


def explain(
    settings: Settings,
    kind: str,
    namespace: str,
    name: str,
    at: Position | None = None,
    fold: FoldConfig | None = None,
    notice: Callable[[str], None] = lambda _line: None,
) -> Explanation:
    """`strata why KIND NAMESPACE/NAME [--at AT]`: the cache after the records up to ``at`` (the
    log's end by default), as `strata snapshot` computes it; ``notice`` hears about a catch-up."""
    if kind not in KINDS:
        raise StrataError(f"why covers {', '.join(KINDS)}, not {kind!r}")
    store = SqlCheckpointStore(settings.checkpoint_url)
    runner = LogRunner(settings, store, fold or FoldConfig())
    end = runner.reader.end_offset()
    version = end if at is None else version_at(runner.reader, at, end)
    index = AuditIndex(store.engine)
    catch_up(runner, index, version, notice)
    snapshot = runner.state_at(version).snapshot()
    return explain_snapshot(runner, index, snapshot, kind, namespace, name)


def parse_name(kind: str, text: str) -> tuple[str, str]:
    """NAMESPACE/NAME, checked as `strata history` checks it."""
    subject_of(kind, text)
    namespace, _, name = text.partition("/")
    return namespace, name


def explain_snapshot(
    runner: LogRunner, index: AuditIndex, snapshot: Snapshot, kind: str, namespace: str, name: str
) -> Explanation:
    """The explanation for a snapshot the caller already has (the web UI keeps some); the index
    must cover the snapshot's version. The index names the pod's uid and its job's pods, so the
    pure side looks tasks up instead of passing over all of them."""
    log, version = runner.identity, snapshot.version
    if kind == "job":
        key = f"{namespace}/{name}"
        uids = job_uids(index, log, key, version)
        tasks = tasks_of(snapshot, key, uids)
        binds = bind_attempts_of(index, log, [t.uid for t in tasks], version)
        tolerations = pod_tolerations(runner, index, _pending(tasks), version)
        return why_job(snapshot, namespace, name, binds, tolerations=tolerations, job_uids=uids)
    last = last_pod_events(index, log, [(namespace, name)], version).get((namespace, name))
    task = snapshot.tasks.get(last[0]) if last is not None else None
    if task is None or (task.namespace, task.name) != (namespace, name):
        return why_pod(snapshot, namespace, name, [])  # no pod by that name in the index: one pass tells
    siblings = job_uids(index, log, task.job, version) if task.job is not None else set()
    attempts = bind_attempts(index, log, task.uid, version)
    known = pod_tolerations(runner, index, _pending([task]), version).get(task.uid)
    return why_pod(snapshot, namespace, name, attempts, uid=task.uid, tolerations=known, job_uids=siblings)


def _pending(tasks: Iterable[PodView]) -> list[PodView]:
    return [t for t in tasks if t.status == TaskStatus.PENDING]


def job_uids(index: AuditIndex, log: LogIdentity, key: str, version: int) -> set[str]:
    """The uids of the pods whose events named job ``key`` among the first ``version`` records: a
    superset of the job's tasks at that version (every task took its job from such an event)."""
    if version <= 0:
        return set()
    rows = index.rows(log, [f"job:{key}"], until_offset=version - 1)
    return {uid for row in rows if row.summary.get("kind") == "Pod" and isinstance(uid := row.summary.get("uid"), str)}


# ------------------------------------------------------------------------------- bind attempts
def bind_attempts(index: AuditIndex, log: LogIdentity, uid: str, version: int) -> list[BindAttempt]:
    """The BIND attempts for the task ``uid`` among the first ``version`` records, in log order."""
    return bind_attempts_of(index, log, [uid], version).get(uid, [])


def bind_attempts_of(
    index: AuditIndex, log: LogIdentity, uids: Sequence[str], version: int
) -> dict[str, list[BindAttempt]]:
    """``bind_attempts`` for several tasks with one read of the index: uid -> attempts."""
    if not uids or version <= 0:
        return {}
    wanted = set(uids)
    out: dict[str, list[BindAttempt]] = {}
    for row in index.rows(log, [f"uid:{u}" for u in sorted(wanted)], until_offset=version - 1):
        for uid, attempt in _attempts(row, wanted):
            out.setdefault(uid, []).append(attempt)
    return out


def _attempts(row: AuditRow, wanted: set[str]) -> Iterator[tuple[str, BindAttempt]]:
    """The binds of ``wanted`` tasks in one indexed record: a BIND, or a BIND_GROUP's (which
    carries the group's verdict, replica and reason)."""
    summary = row.summary
    if row.type == "BIND":
        binds: Iterable[Any] = [summary]
    elif row.type == "BIND_GROUP":
        binds = summary.get("binds") or []
    else:
        return
    for bind in binds:
        uid = bind.get("pod") if isinstance(bind, dict) else None
        if uid in wanted:
            yield (
                uid,
                BindAttempt(
                    offset=row.offset,
                    node=str(bind.get("node") or ""),
                    replica=summary.get("replica"),
                    verdict=str(summary.get("outcome") or ""),
                    reason=summary.get("reason"),
                ),
            )


# --------------------------------------------------------------------------------- tolerations
def pod_tolerations(
    runner: LogRunner, index: AuditIndex, tasks: Sequence[PodView], version: int
) -> dict[str, tuple[Toleration, ...]]:
    """uid -> tolerations of each task's pod as its last watch event before ``version`` stored it;
    a task whose event the index lacks has none in the result (its tolerations are unknown)."""
    if not tasks or version <= 0:
        return {}
    last = last_pod_events(index, runner.identity, [(t.namespace, t.name) for t in tasks], version)
    offsets = {t.uid: found[1] for t in tasks if (found := last.get((t.namespace, t.name))) and found[0] == t.uid}
    objects = objects_at(runner, sorted(offsets.values()))
    return {uid: tolerations_of(objects[offset]) for uid, offset in offsets.items() if offset in objects}


def last_pod_events(
    index: AuditIndex, log: LogIdentity, pods: Iterable[tuple[str, str]], version: int
) -> dict[tuple[str, str], tuple[str, int]]:
    """(namespace, name) -> (uid, offset) of the pod's last applied ADDED or MODIFIED among the
    first ``version`` records, for each pod stored then (a later DELETED removes it)."""
    wanted = set(pods)
    if not wanted or version <= 0:
        return {}
    found: dict[tuple[str, str], tuple[str, int]] = {}
    for row in index.rows(log, sorted(f"pod:{ns}/{name}" for ns, name in wanted), until_offset=version - 1):
        s = row.summary
        key = (s.get("namespace"), s.get("name"))
        if s.get("kind") != "Pod" or key not in wanted or s.get("outcome") != "applied":
            continue
        if row.type == "DELETED":
            found.pop(key, None)
        elif row.type in _STORED and isinstance(s.get("uid"), str):
            found[key] = (s["uid"], row.offset)  # rows come in log order: the last one stays
    return found


def objects_at(runner: LogRunner, offsets: Sequence[int]) -> dict[int, Any]:
    """offset -> the parsed object of the watch event at each offset (sorted), read from the log
    in runs, so that the events of a job's pods, usually close together, cost one read."""
    out: dict[int, Any] = {}
    wanted = set(offsets)
    for start, stop in _runs(offsets):
        for entry in runner.reader.read(start=start, end=stop):
            if entry.offset in wanted and isinstance(entry.record, WatchEvent):
                out[entry.offset] = objectjson.loads(entry.record.object)
    return out


def _runs(offsets: Sequence[int]) -> list[tuple[int, int]]:
    """[start, stop) ranges covering the sorted offsets, merging those less than RUN_GAP apart."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and offset - runs[-1][1] < RUN_GAP:
            runs[-1] = (runs[-1][0], offset + 1)
        else:
            runs.append((offset, offset + 1))
    return runs
