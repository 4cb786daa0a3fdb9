"""Histories and stories from the audit index: what happened to a pod, a job or a node.

The index (``projector.auditindex.store``) gives a subject's entries, each with its summary whole and
in log order; this module adds what changed between consecutive versions of a pod, and tells a
job's scheduling story in sentences.
"""

from __future__ import annotations

import math
import re
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from strata.errors import StrataError
from strata.projector.auditindex.store import AuditIndex, AuditRow
from strata.projector.checkpoints.interface import LogIdentity
from strata.projector.fold.auditentries import POD_FIELDS
from strata.projector.runner import LogRunner

_OFFSET = re.compile(r"^[0-9]+$")
SUBJECT_KINDS = ("pod", "job", "node")


@dataclass(frozen=True)
class Position:
    """A point in the log named by the user: an offset, or a time (ISO-8601)."""

    offset: int | None = None
    time_ms: int | None = None

    @classmethod
    def parse(cls, text: str) -> Position:
        text = text.strip()
        if _OFFSET.match(text):
            return cls(offset=int(text))
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise StrataError(
                f"{text!r} is neither an offset nor an ISO-8601 time (like 2026-11-29T10:42:00Z)"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)  # a time without a zone is UTC, as Kafka's stamps are
        return cls(time_ms=int(moment.timestamp() * 1000))


def version_at(reader: Any, position: Position, end: int) -> int:
    """The version (records applied) the user means: after the record at an offset, or as of a time."""
    if position.offset is not None:
        if position.offset >= end:
            raise StrataError(f"offset {position.offset} is beyond the log's end ({end} records)")
        return position.offset + 1
    assert position.time_ms is not None
    return reader.version_at_time(position.time_ms)


def catch_up(
    runner: LogRunner, index: AuditIndex, end: int, notice: Callable[[str], None] = lambda _line: None
) -> None:
    """Bring the audit index up to ``end`` (records) as `strata project --stop-at-end` would.

    A history read from an index that lags the log would leave out the newest records without a
    word; the index derives from the log, so the reader brings it up to date itself, with the
    projector's own follow: the newest checkpoint at or below the index's position (none: the log
    from offset 0), the fold on to ``end`` with its audit entries, and a checkpoint there, so that
    the next catch-up starts from it and not from as far back. ``notice`` hears one line first
    (on a long log with no projector running, the catch-up takes a while); an index already at
    ``end`` costs one query."""
    indexed = index.indexed_to(runner.identity)
    if indexed >= end:
        return
    notice(
        f"indexing offsets {indexed} to {end - 1} of the cache log first "
        "(`strata project` keeps the audit index up to date)"
    )
    runner.follow(
        threading.Event(),
        every_records=sys.maxsize,  # one checkpoint, at the end
        every_seconds=math.inf,
        audit_index=index,
        until=end,  # the fold stops at ``end``, not at an idle tick
    )


def iso(time_ms: int) -> str:
    return datetime.fromtimestamp(time_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def subject_of(kind: str, name: str) -> str:
    if kind in ("pod", "job") and name.count("/") != 1:
        raise StrataError(f"a {kind} is named NAMESPACE/NAME, not {name!r}")
    if kind not in SUBJECT_KINDS:
        raise StrataError(f"history covers {', '.join(SUBJECT_KINDS)}, not {kind!r}")
    return f"{kind}:{name}"


def history(
    index: AuditIndex, log: LogIdentity, kind: str, name: str, since: Position | None, until: Position | None
) -> list[dict[str, Any]]:
    """Every indexed record about the subject, in log order, as JSON-ready entries."""
    subjects = [subject_of(kind, name)]
    bounds = {
        "since_offset": since.offset if since else None,
        "since_ms": since.time_ms if since else None,
        "until_offset": until.offset if until else None,
        "until_ms": until.time_ms if until else None,
    }
    rows = index.rows(log, subjects, **bounds)
    if kind == "pod":
        # scheduler records whose uid the index could not name (a BIND for a pod it never saw
        # under that name) are found by the uids the pod had
        uids = sorted({r.summary["uid"] for r in index.rows(log, subjects) if r.summary.get("uid")})
        if uids:
            rows = index.rows(log, subjects + [f"uid:{u}" for u in uids], **bounds)
    return entries(rows)


def entries(rows: Sequence[AuditRow]) -> list[dict[str, Any]]:
    out = []
    previous: dict[tuple[str, str], dict[str, Any]] = {}  # pod -> its fields in the last entry
    for row in rows:
        item: dict[str, Any] = {"offset": row.offset, "time": iso(row.time_ms), "type": row.type}
        item.update({k: v for k, v in row.summary.items() if k != "fields"})
        fields = row.summary.get("fields")
        if fields is not None:
            key = (row.summary.get("namespace", ""), row.summary.get("name", ""))
            before = previous.get(key, {})
            item["changes"] = {f: [before.get(f), fields.get(f)] for f in POD_FIELDS if before.get(f) != fields.get(f)}
            previous[key] = {} if row.type == "DELETED" else fields
        out.append(item)
    return out


def describe(entry: dict[str, Any]) -> str:
    """One line that says what a history entry did."""
    t = entry["type"]
    namespace = entry.get("namespace")
    who = entry.get("name") and f"{namespace + '/' if namespace else ''}{entry['name']}"
    if t in ("ADDED", "MODIFIED", "DELETED"):
        text = f"{entry.get('kind')} {who} {t.lower()}"
        changes = entry.get("changes") or {}
        shown = [f"{f} {_short(old)} -> {_short(new)}" for f, (old, new) in changes.items()]
        if shown and t != "ADDED":
            text += ": " + ", ".join(shown)
        if entry.get("outcome") not in (None, "applied"):
            text += f" [{entry['outcome']}{': ' + entry['reason'] if entry.get('reason') else ''}]"
        return text
    if t == "BIND_GROUP":
        binds = entry.get("binds") or []
        target = ", ".join(f"{b.get('name', b.get('pod', '?'))} -> {b.get('node')}" for b in binds)
        text = f"BIND_GROUP of {len(binds)} [{target}]"
    else:
        text = f"{t} {who or entry.get('pod', '?')}"
    if entry.get("node"):
        text += f" -> {entry['node']}"
    if entry.get("replica"):
        text += f" by {entry['replica']}"
    if entry.get("outcome"):
        text += f": {entry['outcome']}"
    if entry.get("reason"):
        text += f" ({entry['reason']})"
    if entry.get("detail"):
        text += f" - {entry['detail']}"
    return text


def _short(value: Any) -> str:
    if value in (None, "", {}, []):
        return "-"
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def story(job: str, items: Sequence[dict[str, Any]]) -> list[str]:
    """A job's scheduling story, one sentence per line, from its history."""
    if not items:
        return [f"The audit index has no record of job {job}."]
    lines: list[str] = []
    start_ms: int | None = None
    pods: set[str] = set()
    on_node: set[str] = set()  # pods whose object names a node
    attempts = rejected = 0
    fully_bound_ms: int | None = None

    def say(item: dict[str, Any], text: str) -> None:
        lines.append(f"{item['time']} (offset {item['offset']}): {text}")

    for item in items:
        t, kind = item["type"], item.get("kind")
        name = item.get("name", item.get("pod", "?"))
        if kind == "PodGroup":
            if t == "ADDED":
                start_ms = start_ms if start_ms is not None else _ms(item["time"])
            say(item, f"PodGroup {job} {'appeared' if t == 'ADDED' else t.lower()}.")
        elif kind == "Pod":
            changes = item.get("changes") or {}
            if t == "ADDED" and name not in pods:
                pods.add(name)
                start_ms = start_ms if start_ms is not None else _ms(item["time"])
                say(item, f"pod {name} appeared ({_phase(item)}).")
            elif t == "DELETED":
                pods.discard(name)
                on_node.discard(name)
                say(item, f"pod {name} was deleted.")
            else:
                if changes.get("nodeName", [None, None])[1]:
                    say(item, f"pod {name} is bound to {changes['nodeName'][1]}.")
                if "phase" in changes:
                    say(item, f"pod {name} is {changes['phase'][1]}.")
                if changes.get("deletionTimestamp", [None, None])[1]:
                    say(item, f"pod {name} is terminating.")
            node = (changes.get("nodeName") or [None, None])[1]
            if node:
                on_node.add(name)
            if fully_bound_ms is None and pods and on_node >= pods:
                fully_bound_ms = _ms(item["time"])
        elif t == "BIND":
            attempts += 1
            by = f" by replica {item['replica']}" if item.get("replica") else ""
            if item.get("outcome") == "admitted":
                say(item, f"bind of {name} to {item.get('node')}{by} admitted.")
            else:
                rejected += 1
                say(item, f"bind of {name} to {item.get('node')}{by} rejected: {item.get('reason')}.")
        elif t == "BIND_GROUP":
            attempts += 1
            by = f" by replica {item['replica']}" if item.get("replica") else ""
            binds = item.get("binds") or []
            placed = ", ".join(f"{b.get('name', b.get('pod'))} to {b.get('node')}" for b in binds)
            if item.get("outcome") == "admitted":
                say(item, f"gang bind of {len(binds)} pod(s){by} admitted: {placed}.")
            else:
                rejected += 1
                say(item, f"gang bind of {len(binds)} pod(s){by} rejected, none placed: {item.get('reason')}.")
        elif t == "BIND_SUCCEEDED":
            say(item, f"the binder bound {name} to {item.get('node')}.")
        elif t == "BIND_FAILED":
            say(item, f"the binder gave up on {name}: {item.get('detail') or 'no reason given'}.")
        elif t == "EVICT":
            verdict = "applied" if item.get("outcome") == "applied" else f"rejected: {item.get('reason')}"
            say(item, f"eviction of {name} ({item.get('detail') or 'no reason given'}) {verdict}.")
        elif t == "EVICT_SUCCEEDED":
            say(item, f"the evictor evicted {name}.")
        elif t == "EVICT_FAILED":
            say(item, f"the evictor could not evict {name}: {item.get('detail') or 'no reason given'}.")
    summary = f"In all: {attempts} bind attempt(s), {rejected} rejected; {len(on_node)} of {len(pods)} pod(s) on a node"
    if fully_bound_ms is not None and start_ms is not None:
        summary += f"; fully bound {(fully_bound_ms - start_ms) / 1000:.3f} s after the job appeared"
    lines.append(summary + ".")
    return lines


def _phase(item: dict[str, Any]) -> str:
    changes = item.get("changes") or {}
    return str((changes.get("phase") or [None, "no phase"])[1])


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
