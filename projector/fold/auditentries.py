"""The audit of the cache log: what each record did, and whom it concerns (pure, like the fold).

For every record the fold applies, the audit derives the record's type, a summary of what it did
(the fold's verdict for scheduler records; for pods the fields a person asks about after an
incident), and its subjects, the keys under which a history finds it:

    pod:NS/NAME   uid:UID   job:NS/PODGROUP   node:NAME   queue:NAME   priorityclass:NAME   hypernode:NAME

The work is split by who pays for it. The fold's thread keeps, per record, references it holds
already (``Kept``: the message as the log holds it, its offset and stamp, the fold's outcome, and
for a scheduler record what the state knew of its pod just before, ``context``: a BIND_FAILED's
node is gone afterwards) and the record's subjects (``subjects``: a few strings, from the object
the fold parsed). The index's writer process stores them; a reader derives the rest
(``described``, then ``describe``) for the few records it shows.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from strata.projector.fold.kinds import GROUP_NAME
from strata.projector.fold.state import CacheState, Outcome
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
    decode,
    objectjson,
)
from strata.schemas.records import LogRecord

# the records a scheduler writes: each names its pod by uid
SchedulerRecord = Bind | BindFailed | Evict | EvictFailed | BindSucceeded | EvictSucceeded
_SCHEDULER_RECORDS = frozenset((Bind, BindFailed, Evict, EvictFailed, BindSucceeded, EvictSucceeded))

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


Context = PodContext | tuple[PodContext, ...] | None  # a BIND_GROUP's: one per bind


class Kept(NamedTuple):
    """A record as the audit index keeps it: references the fold's thread holds already.

    ``value`` is the record's Avro single-object encoding, as the log holds it (a bad message's
    ``BadRecord``, encoded); ``outcome`` and ``context`` are what only the fold knew."""

    offset: int
    time_ms: int
    value: bytes
    outcome: Outcome
    context: Context


class AuditEntry(NamedTuple):
    """One record as the fold saw it; ``describe`` (or the properties) says what it did."""

    offset: int
    time_ms: int
    record: LogRecord
    outcome: Outcome
    context: Context
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
        return tuple(pod_context(state, b.pod) for b in record.binds)
    uid = getattr(record, "pod", None)
    if uid is None:
        return None
    return pod_context(state, uid)


def pod_context(state: CacheState, uid: str) -> PodContext:
    """``context`` of a record naming the pod ``uid`` (for a reader that does not build the record)."""
    key = state.pod_uids.get(uid)
    task = state.tasks.get(uid)
    if key is None:
        return PodContext(None, None, task.job, task.node) if task is not None else _UNKNOWN_POD
    return PodContext(key[0], key[1], task.job if task is not None else None, task.node if task is not None else "")


_UNKNOWN_POD = PodContext(None, None, None, "")


def described(kept: Kept) -> AuditEntry:
    """The entry of a kept record: its record decoded and a pod's shown fields parsed again from
    the same bytes the fold parsed (``objectjson.loads``, which never depends on the reader)."""
    record = decode(kept.value)
    assert isinstance(record, LogRecord), f"offset {kept.offset}: a {type(record).__name__} is no log record"
    return AuditEntry(kept.offset, kept.time_ms, record, kept.outcome, kept.context, _fields(record))


def _fields(record: LogRecord) -> dict[str, Any] | None:
    if type(record) is not WatchEvent or record.kind != "Pod":
        return None
    try:
        obj = objectjson.loads(record.object)
    except ValueError:
        obj = None  # the fold found it bad: no fields, as its ``last_object`` was None
    return pod_fields(obj)


PodRefs = tuple[str | None, str | None] | None  # a pod's group and node, as ``pod_refs`` gives them


def pod_refs(record: LogRecord, obj: Any) -> PodRefs:
    """What only the fold's parse of a record can add to its subjects: for a pod's watch event,
    its group annotation and node name (each a non-empty string, or None), from the object the
    fold parsed (``state.last_object``); None for any other record. The fold's thread asks it of
    every record and hands it to the index's writer, which spells the subjects out
    (``subjects_of``) from the record's bytes: the strings cost the fold a sixth of its thread."""
    return watch_refs(record.kind, obj) if type(record) is WatchEvent else None


def watch_refs(kind: str, obj: Any) -> PodRefs:
    """``pod_refs`` of a WatchEvent of ``kind`` (for a reader that does not build the record)."""
    if kind != "Pod":
        return None
    group, node = _pod_refs(obj)
    return (group if type(group) is str and group else None, node if type(node) is str and node else None)


def subjects(record: LogRecord, context: Context, obj: Any) -> tuple[str, ...]:
    """The keys a history finds the record under (``describe``'s subjects), from what the fold
    holds right after applying it: the record, the pod context taken before, and the object it
    parsed (``state.last_object``)."""
    return subjects_of(record, context, pod_refs(record, obj))


def subjects_of(record: LogRecord, context: Context, refs: PodRefs) -> tuple[str, ...]:
    """``subjects`` from a pod's ``pod_refs`` instead of its object (the index's writer's side)."""
    kind = type(record)
    if kind is WatchEvent:
        assert isinstance(record, WatchEvent)
        return watch_subjects(record.kind, record.namespace, record.name, record.uid, refs)
    if kind in _SCHEDULER_RECORDS:
        return _scheduler_subjects(record, context if isinstance(context, PodContext) else None)  # type: ignore[arg-type]
    if kind is BindGroup:
        assert isinstance(record, BindGroup)
        return _group_subjects(record, () if context is None or isinstance(context, PodContext) else context)
    return ()


# The fields of a WatchEvent its subjects are spelled from (with its pod_refs), in the order
# ``watch_subjects`` takes them: the index's writer reads these alone of each message.
WATCH_SUBJECT_FIELDS = ("kind", "namespace", "name", "uid")


def watch_subjects(kind: str, namespace: str | None, name: str, uid: str | None, refs: PodRefs) -> tuple[str, ...]:
    """``subjects_of`` a watch event, from its WATCH_SUBJECT_FIELDS and its ``pod_refs``."""
    if kind != "Pod":
        return _object_subjects(kind, namespace, name)
    return _pod_subjects(namespace, name, uid, *(refs or (None, None)))


def _pod_refs(obj: Any) -> tuple[object, object]:
    """A pod object's group annotation and node name, as ``pod_fields`` and ``_group_of`` read them."""
    if type(obj) is not dict:
        return None, None
    meta, spec = obj.get("metadata"), obj.get("spec")
    annotations = (meta.get("annotations") or _EMPTY) if type(meta) is dict else _EMPTY
    group = annotations.get(GROUP_NAME) if isinstance(annotations, dict) else None
    return group, spec.get("nodeName") if type(spec) is dict else None


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
    for i, bind in enumerate(record.binds):
        ctx = contexts[i] if i < len(contexts) else _UNKNOWN_POD
        shown: dict[str, Any] = {"pod": bind.pod, "node": bind.node}
        if ctx.name is not None:
            shown.update(namespace=ctx.namespace, name=ctx.name)
        if bind.extensions:
            shown["extensions"] = dict(bind.extensions)
        binds.append(shown)
    summary: dict[str, Any] = {"binds": binds, "outcome": _VERDICT["BIND_GROUP"].get(outcome.result, outcome.result)}
    if record.replica:
        summary["replica"] = record.replica
    if outcome.result in ("rejected", "bad"):
        summary["reason"] = outcome.reason
    return Described("BIND_GROUP", _group_subjects(record, contexts), summary)


def _group_subjects(record: BindGroup, contexts: tuple[PodContext, ...]) -> tuple[str, ...]:
    found: dict[str, None] = {}  # ordered, without repeats
    for i, bind in enumerate(record.binds):
        ctx = contexts[i] if i < len(contexts) else _UNKNOWN_POD
        found[f"uid:{bind.pod}"] = None
        if ctx.name is not None:
            found[f"pod:{ctx.namespace}/{ctx.name}"] = None
        if ctx.job:
            found[f"job:{ctx.job}"] = None
        found[f"node:{bind.node}"] = None
    return tuple(found)


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
    if fields is None:
        return Described(record.op, _object_subjects(record.kind, record.namespace, record.name), summary)
    summary["fields"] = fields
    subjects = _pod_subjects(record.namespace, record.name, record.uid, _group_of(fields), fields.get("nodeName"))
    return Described(record.op, subjects, summary)


def _pod_subjects(namespace: str | None, name: str, uid: str | None, group: object, node: object) -> tuple[str, ...]:
    # the pod's own subject first: the index keys a pod's consecutive versions by it
    found = [f"pod:{namespace}/{name}"]
    if uid:
        found.append(f"uid:{uid}")
    if isinstance(group, str) and group:
        found.append(f"job:{namespace}/{group}")
    if isinstance(node, str) and node:
        found.append(f"node:{node}")
    return tuple(found)


def _group_of(fields: dict[str, Any]) -> object:
    annotations = fields.get("annotations")  # any JSON type in a bad record
    return annotations.get(GROUP_NAME) if isinstance(annotations, dict) else None


def _object_subjects(kind: str, namespace: str | None, name: str) -> tuple[str, ...]:
    """The subject of a watch event of any kind but a pod (none for a kind no history covers)."""
    if kind not in _SUBJECT_OF_KIND:
        return ()
    shown = f"{namespace}/{name}" if kind == "PodGroup" else name
    return (f"{_SUBJECT_OF_KIND[kind]}:{shown}",)


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
    summary: dict[str, Any] = {"pod": record.pod}
    if ctx is not None and ctx.name is not None:
        summary.update(namespace=ctx.namespace, name=ctx.name)
    node = _node_of(record, ctx)
    if node:
        summary["node"] = node
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
    return Described(kind, _scheduler_subjects(record, ctx), summary)


def _node_of(record: SchedulerRecord, ctx: PodContext | None) -> str:
    if isinstance(record, (Bind, BindSucceeded)):
        return record.node
    return ctx.node if ctx is not None else ""


def _scheduler_subjects(record: SchedulerRecord, ctx: PodContext | None) -> tuple[str, ...]:
    return scheduler_subjects(record.pod, _node_of(record, ctx), ctx)


def scheduler_subjects(pod: str, node: str, ctx: PodContext | None) -> tuple[str, ...]:
    """``subjects_of`` a scheduler record naming ``pod`` and ``node`` (a BIND's or a
    BIND_SUCCEEDED's own, any other's from its pod context ``ctx``)."""
    found = [f"uid:{pod}"]
    if ctx is not None and ctx.name is not None:
        found.append(f"pod:{ctx.namespace}/{ctx.name}")
    if ctx is not None and ctx.job:
        found.append(f"job:{ctx.job}")
    if node:
        found.append(f"node:{node}")
    return tuple(found)
