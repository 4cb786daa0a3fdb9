"""The audit of the cache log: what each record did, and whom it concerns (pure, like the fold).

For every record the fold applies, the audit derives the record's type, a summary of what it did
(the fold's verdict for scheduler records; for pods the fields a person asks about after an
incident), and its subjects, the keys under which a history finds it:

    pod:NS/NAME   uid:UID   job:NS/PODGROUP   node:NAME   queue:NAME   priorityclass:NAME   hypernode:NAME

The work is split by who pays for it. In the fold's thread, per record, ``context`` (before the
record is applied) and ``entry`` (after) only keep what the derivation needs: the record, the
fold's outcome, what the state knew of a scheduler record's pod (a BIND_FAILED's node is gone
afterwards), and a pod's shown fields (picked now, so the parsed object, ten times their size, is
not kept until the index is written). ``describe`` builds the strings and summaries from that; the
index writer calls it, in a process of its own, off the fold's path.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from strata.projector.kinds import GROUP_NAME
from strata.projector.state import CacheState, Outcome
from strata.schemas import (
    BadRecord,
    Bind,
    BindFailed,
    BindGroup,
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
    "BIND_GROUP": {"applied": "admitted", "rejected": "rejected"},
    "EVICT": {"applied": "applied", "rejected": "rejected"},
    "BIND_FAILED": {"applied": "reverted", "ignored": "ignored"},
    "EVICT_FAILED": {"applied": "reverted", "ignored": "ignored"},
}


class PodContext(NamedTuple):
    """What the state knew about a scheduler record's pod just before the record."""

    namespace: str | None
    name: str | None
    job: str | None
    node: str


class Described(NamedTuple):
    type: str
    subjects: tuple[str, ...]
    summary: dict[str, Any]


class AuditEntry(NamedTuple):
    """One record as the fold saw it; ``describe`` (or the properties) says what it did."""

    offset: int
    time_ms: int
    record: LogRecord
    outcome: Outcome
    context: PodContext | tuple[PodContext, ...] | None  # a BIND_GROUP's: one per bind
    fields: dict[str, Any] | None  # a pod's watch event: ``pod_fields`` of its object

    @property
    def type(self) -> str:
        return describe(self).type

    @property
    def subjects(self) -> tuple[str, ...]:
        return describe(self).subjects

    @property
    def summary(self) -> dict[str, Any]:
        return describe(self).summary


def context(state: CacheState, record: LogRecord) -> PodContext | tuple[PodContext, ...] | None:
    """Call before ``state.apply(record)``."""
    if type(record) is WatchEvent:  # most records: the cheapest test first
        return None
    if type(record) is BindGroup:
        return tuple(_pod_context(state, b.pod) for b in record.binds)
    uid = getattr(record, "pod", None)
    if uid is None:
        return None
    return _pod_context(state, uid)


def _pod_context(state: CacheState, uid: str) -> PodContext:
    key = state.pod_uids.get(uid)
    task = state.tasks.get(uid)
    if key is None:
        return PodContext(None, None, task.job, task.node) if task is not None else _UNKNOWN_POD
    return PodContext(key[0], key[1], task.job if task is not None else None, task.node if task is not None else "")


_UNKNOWN_POD = PodContext(None, None, None, "")


def entry(
    offset: int,
    time_ms: int,
    record: LogRecord,
    outcome: Outcome,
    ctx: PodContext | tuple[PodContext, ...] | None,
    obj: Any,
) -> AuditEntry:
    """Call after ``state.apply(record)``; ``obj`` is ``state.last_object`` for a watch event."""
    if type(record) is WatchEvent and record.kind == "Pod":
        return AuditEntry(offset, time_ms, record, outcome, ctx, pod_fields(obj))
    return AuditEntry(offset, time_ms, record, outcome, ctx, None)


def describe(e: AuditEntry) -> Described:
    """The entry's type, subjects and summary (the index writer's work, off the fold's path)."""
    record = e.record
    if isinstance(record, WatchEvent):
        return _watch(record, e.outcome, e.fields)
    if isinstance(record, BadRecord):
        return Described("BAD", (), {"error": record.error})
    if isinstance(record, Synced):
        return Described("SYNCED", (), {"kind": record.kind})
    if isinstance(record, BindGroup):
        group = () if e.context is None or isinstance(e.context, PodContext) else e.context
        return _group(record, e.outcome, group)
    return _scheduler(record, e.outcome, e.context if isinstance(e.context, PodContext) else None)


def _group(record: BindGroup, outcome: Outcome, contexts: tuple[PodContext, ...]) -> Described:
    """A BIND_GROUP names every pod, job and node of its binds; its verdict is the group's."""
    binds: list[dict[str, Any]] = []
    subjects: dict[str, None] = {}  # ordered, without repeats
    for i, bind in enumerate(record.binds):
        ctx = contexts[i] if i < len(contexts) else _UNKNOWN_POD
        shown: dict[str, Any] = {"pod": bind.pod, "node": bind.node}
        subjects[f"uid:{bind.pod}"] = None
        if ctx.name is not None:
            shown.update(namespace=ctx.namespace, name=ctx.name)
            subjects[f"pod:{ctx.namespace}/{ctx.name}"] = None
        if ctx.job:
            subjects[f"job:{ctx.job}"] = None
        subjects[f"node:{bind.node}"] = None
        if bind.extensions:
            shown["extensions"] = dict(bind.extensions)
        binds.append(shown)
    summary: dict[str, Any] = {"binds": binds, "outcome": _VERDICT["BIND_GROUP"].get(outcome.result, outcome.result)}
    if record.replica:
        summary["replica"] = record.replica
    if outcome.result in ("rejected", "bad"):
        summary["reason"] = outcome.reason
    return Described("BIND_GROUP", tuple(subjects), summary)


def _watch(record: WatchEvent, outcome: Outcome, fields: dict[str, Any] | None) -> Described:
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
    if fields is not None:
        # the pod's own subject first: the index keys a pod's consecutive versions by it
        subjects.append(f"pod:{record.namespace}/{record.name}")
        if record.uid:
            subjects.append(f"uid:{record.uid}")
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
    return Described(record.op, tuple(subjects), summary)


def pod_fields(obj: Any) -> dict[str, Any]:
    """The fields of a pod object a history shows (absent ones as None).

    Runs in the fold's thread for every pod event: ``type(x) is dict`` rather than
    ``isinstance``, as parsed JSON holds plain dicts and lists only.
    """
    if type(obj) is not dict:
        return {}
    meta = obj.get("metadata")
    spec = obj.get("spec")
    status = obj.get("status")
    if type(meta) is not dict:
        meta = _EMPTY
    if type(spec) is not dict:
        spec = _EMPTY
    requests = {}
    for group in _CONTAINER_GROUPS:
        containers = spec.get(group)
        if type(containers) is list:
            for c in containers:
                if type(c) is dict:
                    resources = c.get("resources")
                    if type(resources) is dict:
                        req = resources.get("requests")
                        if req:
                            requests[str(c.get("name"))] = req
    return {
        "phase": status.get("phase") if type(status) is dict else None,
        "nodeName": spec.get("nodeName"),
        "deletionTimestamp": meta.get("deletionTimestamp"),
        "annotations": meta.get("annotations") or {},
        "requests": requests,
    }


_EMPTY: dict[str, Any] = {}  # read only
_CONTAINER_GROUPS = ("initContainers", "containers")


def _scheduler(record: SchedulerRecord, outcome: Outcome, ctx: PodContext | None) -> Described:
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
    return Described(kind, tuple(subjects), summary)
