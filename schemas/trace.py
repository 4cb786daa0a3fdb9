"""Trace files (``spec/trace-format.md``): recorded cluster histories as JSON lines.

``read_trace`` turns each non-blank line into the log record it stands for, in order: a
``WatchEvent`` (object redacted and written back with numbers kept to the letter), a scheduler
record, or a ``BadRecord`` that keeps the line's place in the order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from strata.schemas import (
    BadRecord,
    Bind,
    BindFailed,
    BindGroup,
    BindSucceeded,
    Evict,
    EvictFailed,
    EvictSucceeded,
    GroupBind,
    LogRecord,
    Synced,
    WatchEvent,
    objectjson,
)
from strata.schemas.redaction import redact

WATCH_OPS = frozenset({"ADDED", "MODIFIED", "DELETED"})
NAMESPACED = frozenset({("v1", "Pod"), ("scheduling.volcano.sh/v1beta1", "PodGroup")})
_BLANK = frozenset(b" \t\r")

# type -> (record class, required fields, optional fields)
SCHEDULER_RECORDS: dict[str, tuple[type, tuple[str, ...], tuple[str, ...]]] = {
    "BIND": (Bind, ("pod", "node"), ("replica",)),
    "BIND_FAILED": (BindFailed, ("pod",), ("reason",)),
    "EVICT": (Evict, ("pod",), ("reason", "replica")),
    "EVICT_FAILED": (EvictFailed, ("pod",), ("reason",)),
    "BIND_SUCCEEDED": (BindSucceeded, ("pod", "node"), ()),
    "EVICT_SUCCEEDED": (EvictSucceeded, ("pod",), ()),
    "SYNCED": (Synced, ("kind",), ()),
}
# Strata's own optional fields beyond the trace format (written by `strata log dump`): the
# offset of the BIND or EVICT that an outcome answers. Any other value than an integer is ignored.
OFFSET_FIELDS: dict[str, str] = {
    "BIND_FAILED": "bind_offset",
    "BIND_SUCCEEDED": "bind_offset",
    "EVICT_FAILED": "evict_offset",
    "EVICT_SUCCEEDED": "evict_offset",
}


def offset_field(value: dict[str, Any], kind: str) -> int | None:
    name = OFFSET_FIELDS.get(kind)
    found = value.get(name) if name else None
    return found if type(found) is int and found >= 0 else None


class BadLine(ValueError):
    """Why a line is no record."""


@dataclass(frozen=True, slots=True)
class TraceLine:
    number: int  # 1-based line number in the file
    raw: bytes
    record: LogRecord


def split_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(line number, line) for every non-blank line; one CR right before an LF is dropped."""
    for number, line in enumerate(data.split(b"\n"), start=1):
        if line.endswith(b"\r"):
            line = line[:-1]
        if line and not _BLANK.issuperset(line):
            yield number, line


def read_trace(path: Path) -> Iterator[TraceLine]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FileNotFoundError(f"cannot read trace {path}: {exc.strerror}") from exc
    source = f"trace/{path.name}"
    for number, line in split_lines(data):
        yield TraceLine(number, line, parse_line(line, f"{source}:{number}"))


def parse_line(line: bytes, source: str) -> LogRecord:
    try:
        return record_from_json(objectjson.loads(line), source)
    except (UnicodeDecodeError, ValueError) as exc:  # BadLine and json.JSONDecodeError are ValueErrors
        return BadRecord(
            raw=line, error=f"{type(exc).__name__}: {exc}" if not isinstance(exc, BadLine) else str(exc), source=source
        )


def record_from_json(value: Any, source: str) -> LogRecord:
    """The log record for one parsed trace line; raises ``BadLine``."""
    if not isinstance(value, dict):
        raise BadLine("not a JSON object")
    kind = value.get("type")
    # `isinstance` first: a "type" that is an object or array is unhashable (TypeError, a crash)
    if isinstance(kind, str) and kind in WATCH_OPS:
        return _watch_event(kind, value.get("object"), source)
    if kind == "BIND_GROUP":
        return bind_group(value)
    if isinstance(kind, str) and kind in SCHEDULER_RECORDS:
        cls, required, optional = SCHEDULER_RECORDS[kind]
        fields: dict[str, str | int] = {name: _string(value, name, kind) for name in required}
        for name in optional:
            if value.get(name) is not None:
                fields[name] = _string(value, name, kind)
        origin = offset_field(value, kind)
        if origin is not None:
            fields[OFFSET_FIELDS[kind]] = origin
        record: LogRecord = cls(**fields)
        return record
    raise BadLine(f"unknown record type {kind!r}")


def bind_group(value: dict[str, Any]) -> BindGroup:
    """A BIND_GROUP line's record; raises ``BadLine`` unless ``binds`` is a non-empty array of
    objects each with a string ``pod`` and ``node`` (spec v1.1: the record is bad otherwise)."""
    binds = value.get("binds")
    if type(binds) is not list or not binds:
        raise BadLine("BIND_GROUP needs binds: a non-empty array of {pod, node}")
    out = []
    for i, bind in enumerate(binds):
        if type(bind) is not dict or type(bind.get("pod")) is not str or type(bind.get("node")) is not str:
            raise BadLine(f"BIND_GROUP bind {i + 1} is not an object with string pod and node")
        out.append(GroupBind(bind["pod"], bind["node"]))
    replica = value.get("replica")
    if replica is not None and type(replica) is not str:
        raise BadLine("BIND_GROUP replica must be a string")
    return BindGroup(tuple(out), replica)


class Envelope(NamedTuple):
    api_version: str
    kind: str
    namespace: str | None
    name: str
    uid: str | None
    resource_version: str | None


def check_watch(op: str, obj: Any) -> Envelope:
    """The identity of a watch event's object; raises ``BadLine`` when a required field is missing.

    Required (trace-format.md): apiVersion, kind and metadata.name; metadata.namespace for Pod and
    PodGroup; metadata.uid for Pod, in DELETED records too (present: its type is checked only in
    ADDED and MODIFIED records, by the fold).
    """
    if not isinstance(obj, dict):
        raise BadLine(f"{op} without an object")
    api_version = _string(obj, "apiVersion", op)
    kind = _string(obj, "kind", op)
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        raise BadLine(f"{op} {kind} without metadata")
    name = _string(metadata, "name", f"{op} {kind}")
    namespace = metadata.get("namespace")
    if (api_version, kind) in NAMESPACED:
        namespace = _string(metadata, "namespace", f"{op} {kind}")
    uid = metadata.get("uid")
    if (api_version, kind) == ("v1", "Pod") and uid is None:
        raise BadLine(f"{op} {kind} lacks uid")
    rv = metadata.get("resourceVersion")
    return Envelope(
        api_version,
        kind,
        namespace if isinstance(namespace, str) else None,
        name,
        uid if isinstance(uid, str) else None,
        rv if isinstance(rv, str) else None,
    )


def _watch_event(op: str, obj: Any, source: str) -> WatchEvent:
    env = check_watch(op, obj)
    return WatchEvent(
        op=op,
        api_version=env.api_version,
        kind=env.kind,
        name=env.name,
        namespace=env.namespace,
        uid=env.uid,
        resource_version=env.resource_version,
        source=source,
        object=objectjson.dumps_parsed(redact(obj)),
    )


def _string(obj: dict[str, Any], field: str, what: str) -> str:
    value = obj.get(field)
    if value is None:
        raise BadLine(f"{what} lacks {field}")
    if not isinstance(value, str):
        raise BadLine(f"{what}: {field} is {type(value).__name__}, not a string")
    return value
