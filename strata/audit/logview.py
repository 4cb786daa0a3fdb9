"""Looking at the cache log: a summary, and the records back in the trace format."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

from strata.log.cachelog import LogEntry
from strata.schemas import BadRecord, BindGroup, LogRecord, WatchEvent, objectjson


def summarize(entries: Iterable[LogEntry]) -> dict[str, Any]:
    by_type: Counter[str] = Counter()
    by_kind: Counter[str] = Counter()
    bad: list[dict[str, Any]] = []
    first = last = None
    for entry in entries:
        first = entry if first is None else first
        last = entry
        record = entry.record
        by_type[record.TYPE] += 1
        if isinstance(record, WatchEvent):
            by_kind[record.kind] += 1
        elif isinstance(record, BadRecord):
            bad.append({"offset": entry.offset, "error": record.error, "source": record.source})
    return {
        "records": sum(by_type.values()),
        "offsets": [first.offset, last.offset] if first and last else [],
        "timestamps_ms": [first.timestamp_ms, last.timestamp_ms] if first and last else [],
        "by_type": dict(sorted(by_type.items())),
        "watch_events_by_kind": dict(sorted(by_kind.items())),
        "bad": bad,
    }


def as_trace_line(record: LogRecord) -> bytes:
    """The record as a line of the trace format, so a dumped log replays like the original trace."""
    if isinstance(record, WatchEvent):
        return b'{"type":"' + record.op.encode() + b'","object":' + record.object + b"}"
    if isinstance(record, BadRecord):
        if record.source.startswith("trace/"):
            return record.raw  # the original line: still bad, in its place
        return json.dumps({"type": "BAD", "error": record.error, "source": record.source}).encode()
    body: dict[str, Any] = {"type": record.TYPE}
    if isinstance(record, BindGroup):
        body["binds"] = [{"pod": b.pod, "node": b.node} for b in record.binds]
        if record.replica is not None:
            body["replica"] = record.replica
        return objectjson.dumps(body)
    for f in fields(record):
        value = getattr(record, f.name)
        if isinstance(value, Mapping):
            value = dict(value) or None  # extensions: only when there are some
        if value is not None:
            body[f.name] = value
    return objectjson.dumps(body)


def format_summary(summary: dict[str, Any], topic: str) -> str:
    lines = [f"cache log {topic}: {summary['records']} records"]
    if summary["offsets"]:
        lines[0] += f", offsets {summary['offsets'][0]}..{summary['offsets'][1]}"
    lines.append("  by type:  " + ", ".join(f"{k} {v}" for k, v in summary["by_type"].items()))
    if summary["watch_events_by_kind"]:
        lines.append("  by kind:  " + ", ".join(f"{k} {v}" for k, v in summary["watch_events_by_kind"].items()))
    lines.append(f"  bad:      {len(summary['bad'])}")
    lines += [f"    offset {b['offset']}: {b['error']}" for b in summary["bad"]]
    return "\n".join(lines)
