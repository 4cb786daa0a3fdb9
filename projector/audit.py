"""The audit of the cache log: what each record did, and whom it concerns (pure, like the fold).

For every record the fold applies, ``Auditor`` derives an ``AuditEntry``: the record's type, a
summary of what it did (the fold's verdict for scheduler records; for pods the fields a person
asks about after an incident), and its subjects, the keys under which a history finds it:

    pod:NS/NAME   uid:UID   job:NS/PODGROUP   node:NAME   queue:NAME   priorityclass:NAME   hypernode:NAME

A scheduler record names a pod by uid; the auditor resolves it through the state *before* the
record is applied (a BIND_FAILED's node is gone afterwards). What changed between two versions
of a pod is computed when a history is read, from consecutive entries' fields, so the index
never needs the previous version in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from strata.projector.kinds import GROUP_NAME
from strata.projector.state import CacheState, Outcome
from strata.schemas import (
    BadRecord,
    Bind,
    BindFailed,
    BindSucceeded,
    Evict,
    EvictFailed,
    EvictSucceeded,
    Synced,
    WatchEvent,
)
from strata.schemas.records import LogRecord

# the records a scheduler writes: each names its pod by uid
SchedulerRecord = Bind | BindFailed | Evict | EvictFailed | BindSucceeded | EvictSucceeded

# fields of a pod that a history shows as they change
POD_FIELDS = ("phase", "nodeName", "deletionTimestamp", "annotations", "requests")
_SUBJECT_OF_KIND = {
    "Node": "node",
    "CSINode": "node",
    "PodGroup": "job",
    "Queue": "queue",
    "PriorityClass": "priorityclass",
    "HyperNode": "hypernode",
}
_VERDICT = {  # the fold's outcome in the words of each scheduler record
    "BIND": {"applied": "admitted", "rejected": "rejected"},
    "EVICT": {"applied": "applied", "rejected": "rejected"},
    "BIND_FAILED": {"applied": "reverted", "ignored": "ignored"},
    "EVICT_FAILED": {"applied": "reverted", "ignored": "ignored"},
}


@dataclass(frozen=True)
class AuditEntry:
    offset: int
    time_ms: int
    type: str
    subjects: tuple[str, ...]
    summary: Mapping[str, Any]


class PodContext(NamedTuple):
    """What the state knew about a scheduler record's pod just before the record."""

    namespace: str | None
    name: str | None
    job: str | None
    node: str


def context(state: CacheState, record: LogRecord) -> PodContext | None:
    """Call before ``state.apply(record)``."""
    uid = getattr(record, "pod", None)
    if uid is None or isinstance(record, WatchEvent):
        return None
    key = state.pod_uids.get(uid)
    task = state.tasks.get(uid)
    return PodContext(
        key[0] if key else None,
        key[1] if key else None,
        task.job if task is not None else None,
        task.node if task is not None else "",
    )


def entry(
    offset: int, time_ms: int, record: LogRecord, outcome: Outcome, ctx: PodContext | None, obj: Any
) -> AuditEntry:
    """Call after ``state.apply(record)``; ``obj`` is ``state.last_object`` for a watch event."""
    if isinstance(record, WatchEvent):
        return _watch(offset, time_ms, record, outcome, obj)
    if isinstance(record, BadRecord):
        return AuditEntry(offset, time_ms, "BAD", (), {"error": record.error})
    if isinstance(record, Synced):
        return AuditEntry(offset, time_ms, "SYNCED", (), {"kind": record.kind})
    return _scheduler(offset, time_ms, record, outcome, ctx)


def _watch(offset: int, time_ms: int, record: WatchEvent, outcome: Outcome, obj: Any) -> AuditEntry:
    summary: dict[str, Any] = {
        "op": record.op,
        "kind": record.kind,
        "name": record.name,
        "outcome": outcome.result,
    }
    for key, value in (
        ("namespace", record.namespace),
        ("uid", record.uid),
        ("resourceVersion", record.resource_version),
    ):
        if value is not None:
            summary[key] = value
    if outcome.reason:
        summary["reason"] = outcome.reason
    subjects: list[str] = []
    if record.kind == "Pod":
        subjects.append(f"pod:{record.namespace}/{record.name}")
        if record.uid:
            subjects.append(f"uid:{record.uid}")
        fields = pod_fields(obj)
        summary["fields"] = fields
        annotations = fields.get("annotations")  # any JSON type in a bad record
        group = annotations.get(GROUP_NAME) if isinstance(annotations, dict) else None
        if isinstance(group, str) and group:
            subjects.append(f"job:{record.namespace}/{group}")
        if isinstance(fields.get("nodeName"), str) and fields["nodeName"]:
            subjects.append(f"node:{fields['nodeName']}")
    elif record.kind in _SUBJECT_OF_KIND:
        name = f"{record.namespace}/{record.name}" if record.kind == "PodGroup" else record.name
        subjects.append(f"{_SUBJECT_OF_KIND[record.kind]}:{name}")
    return AuditEntry(offset, time_ms, record.op, tuple(subjects), summary)


def pod_fields(obj: Any) -> dict[str, Any]:
    """The fields of a pod object a history shows (absent ones as None)."""
    if not isinstance(obj, dict):
        return {}
    meta = obj.get("metadata")
    spec = obj.get("spec")
    status = obj.get("status")
    if not isinstance(meta, dict):
        meta = {}
    if not isinstance(spec, dict):
        spec = {}
    if not isinstance(status, dict):
        status = {}
    requests = {}
    for group in ("initContainers", "containers"):
        containers = spec.get(group)
        for c in containers if isinstance(containers, list) else ():
            if isinstance(c, dict) and isinstance(c.get("resources"), dict):
                req = c["resources"].get("requests")
                if req:
                    requests[str(c.get("name"))] = req
    return {
        "phase": status.get("phase"),
        "nodeName": spec.get("nodeName"),
        "deletionTimestamp": meta.get("deletionTimestamp"),
        "annotations": meta.get("annotations") or {},
        "requests": requests,
    }


def _scheduler(
    offset: int, time_ms: int, record: SchedulerRecord, outcome: Outcome, ctx: PodContext | None
) -> AuditEntry:
    kind = record.TYPE
    uid = record.pod
    summary: dict[str, Any] = {"pod": uid}
    subjects = [f"uid:{uid}"]
    node = ""
    if isinstance(record, (Bind, BindSucceeded)):
        node = record.node
    elif ctx is not None:
        node = ctx.node
    if ctx is not None and ctx.name is not None:
        summary.update(namespace=ctx.namespace, name=ctx.name)
        subjects.append(f"pod:{ctx.namespace}/{ctx.name}")
    if ctx is not None and ctx.job:
        subjects.append(f"job:{ctx.job}")
    if node:
        summary["node"] = node
        subjects.append(f"node:{node}")
    replica = getattr(record, "replica", None)
    if replica:
        summary["replica"] = replica
    detail = getattr(record, "reason", None)
    if detail:
        summary["detail"] = detail  # the writer's own words (a binder's error, an eviction's cause)
    if isinstance(record, Bind) and record.extensions:
        summary["extensions"] = dict(record.extensions)
    if kind in _VERDICT:
        summary["outcome"] = _VERDICT[kind].get(outcome.result, outcome.result)
        if outcome.result == "rejected":
            summary["reason"] = outcome.reason
    elif isinstance(record, (EvictSucceeded, BindSucceeded, BindFailed, EvictFailed, Evict)):
        summary["outcome"] = outcome.result
    return AuditEntry(offset, time_ms, kind, tuple(subjects), summary)
