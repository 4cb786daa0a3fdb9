"""Offline replay: fold a trace file (or any iterable of records) with no Kafka.

Reading the file is this module's only I/O; the fold itself stays pure. A trace line is folded
exactly as its published form would be (``schemas.trace`` decides what a line is), without the
detour through the Avro codec.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.projector.fold.kinds import KINDS
from strata.projector.fold.state import APPLIED, CacheState, FoldConfig, Outcome
from strata.schemas import objectjson
from strata.schemas.trace import (
    SCHEDULER_RECORDS,
    WATCH_OPS,
    BadLine,
    bind_group,
    check_watch,
    offset_field,
    record_from_json,
)


@dataclass
class ReplayReport:
    records: int = 0
    bad: list[tuple[int, str]] = field(default_factory=list)  # (line number or offset, error)
    rejected: list[tuple[int, str]] = field(default_factory=list)

    def count(self, where: int, outcome: Outcome, strict: bool = False, unit: str = "line") -> None:
        """Count one folded record; with ``strict`` a bad one ends the replay (``StrictStop``)."""
        self.records += 1
        if outcome is APPLIED:
            return
        if outcome.result == "bad":
            self.bad.append((where, outcome.reason))
            if strict:
                raise StrictStop(where, outcome.reason, unit)
        elif outcome.result == "rejected":
            self.rejected.append((where, outcome.reason))


class StrictStop(Exception):
    """--strict: the first bad record ends the replay."""

    def __init__(self, where: int, error: str, unit: str = "line") -> None:
        super().__init__(f"{unit} {where}: bad record: {error}")


def fold_line(state: CacheState, line: bytes) -> Outcome:
    """Apply one non-blank trace line to ``state``."""
    try:
        value = objectjson.loads(line)
    except (UnicodeDecodeError, ValueError) as exc:
        return state.apply_bad(f"{type(exc).__name__}: {exc}")
    if type(value) is not dict:
        return state.apply_bad("not a JSON object")
    op = value.get("type")
    try:
        # `type(op) is str` first: a "type" that is an object or an array is unhashable, and the
        # set lookup raised TypeError out of the fold.
        if type(op) is str and op in WATCH_OPS:
            obj = value.get("object")
            # The fold checks the identity of the kinds it reads; others need the trace
            # format's own required fields to be a record at all.
            if type(obj) is not dict:
                check_watch(op, obj)  # raises BadLine: a watch event without an object
                raise AssertionError("check_watch accepted a watch event without an object")
            kind = (obj.get("apiVersion"), obj.get("kind"))
            try:
                known = kind in KINDS
            except TypeError:  # an object or an array as apiVersion or kind: unhashable
                known = False
            if not known:
                check_watch(op, obj)
            return state.apply_watch(op, obj, kind)
        if op == "BIND":  # the commonest scheduler record, its fields checked inline
            pod, node, replica = value.get("pod"), value.get("node"), value.get("replica")
            if type(pod) is str and type(node) is str and (replica is None or type(replica) is str):
                return state.bind(pod, node)
        elif op == "BIND_GROUP":
            record = bind_group(value)  # raises BadLine for a malformed one
            return state.bind_group([(b.pod, b.node) for b in record.binds])
        elif op == "BIND_SUCCEEDED":
            pod, node = value.get("pod"), value.get("node")
            if type(pod) is str and type(node) is str:
                return state.informational()
        if isinstance(op, str) and op in SCHEDULER_RECORDS:
            _, required, optional = SCHEDULER_RECORDS[op]
            for name in required:
                if type(value.get(name)) is not str:
                    record_from_json(value, "")  # raises BadLine, which says what is missing
            for name in optional:
                v = value.get(name)
                if v is not None and type(v) is not str:
                    record_from_json(value, "")
            if op == "BIND":
                return state.bind(value["pod"], value["node"])
            if op == "BIND_FAILED":
                return state.bind_failed(value["pod"], offset_field(value, op))
            if op == "EVICT":
                return state.evict(value["pod"])
            if op == "EVICT_FAILED":
                return state.evict_failed(value["pod"], offset_field(value, op))
            if op == "SYNCED":
                return state.mark_synced(value["kind"])
            return state.informational()
    except BadLine as exc:
        return state.apply_bad(str(exc))
    return state.apply_bad(f"unknown record type {op!r}")


def replay_lines(
    lines: Iterable[bytes],
    config: FoldConfig | None = None,
    until: int | None = None,
    strict: bool = False,
    progress: Callable[[int], None] | None = None,
) -> tuple[CacheState, ReplayReport]:
    """Fold raw lines (each with or without its LF) in order; blank lines are not records."""
    state = CacheState(config)
    report = ReplayReport()
    limit = until if until is not None else -1
    number = applied = 0
    for raw in lines:  # split_lines' rules, inlined: this loop runs per record
        number += 1
        if progress is not None:
            progress(len(raw))
        if raw[:1] == b"{":
            line = raw  # not blank; a trailing CR or LF is JSON whitespace, so no need to cut it off
        else:
            line = raw[:-1] if raw[-1:] == b"\n" else raw
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line.strip(b" \t\r"):
                continue
        if state.version == limit:
            break
        outcome = fold_line(state, line)
        if outcome is APPLIED:
            applied += 1  # report.count's case that needs no more than a count
        else:
            report.count(number, outcome, strict)
    report.records += applied
    return state, report


def replay_bytes(data: bytes, **kwargs: Any) -> tuple[CacheState, ReplayReport]:
    return replay_lines(data.split(b"\n"), **kwargs)


def replay_file(path: Path, **kwargs: Any) -> tuple[CacheState, ReplayReport]:
    """Fold a trace file, streaming it: memory holds the state, not the file."""
    try:
        with open(path, "rb", buffering=1 << 20) as f:
            return replay_lines(f, **kwargs)
    except OSError as exc:
        raise FileNotFoundError(f"cannot read trace {path}: {exc.strerror}") from exc
