"""The records of Strata's logs as immutable values.

Each class mirrors one Avro schema of ``avsc/`` field for field; ``SCHEMA`` names it. Records of
the cache log also carry ``TYPE``, their name in the trace format (``spec/trace-format.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A watch event (ADDED, MODIFIED, DELETED) carrying a redacted Kubernetes object as JSON."""

    SCHEMA: ClassVar[str] = "strata.log.WatchEvent"
    op: str
    api_version: str
    kind: str
    name: str
    source: str
    object: bytes
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    observed_time_ms: int | None = None

    @property
    def TYPE(self) -> str:  # noqa: N802 - same spelling as the class attribute of the others
        return self.op


@dataclass(frozen=True, slots=True)
class Bind:
    SCHEMA: ClassVar[str] = "strata.log.Bind"
    TYPE: ClassVar[str] = "BIND"
    pod: str
    node: str
    replica: str | None = None
    extensions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class GroupBind:
    """One bind of a BIND_GROUP (not a record of its own)."""

    pod: str
    node: str
    extensions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class BindGroup:
    """A gang's binds, admitted all or nothing (spec v1.1)."""

    SCHEMA: ClassVar[str] = "strata.log.BindGroup"
    TYPE: ClassVar[str] = "BIND_GROUP"
    binds: tuple[GroupBind, ...]
    replica: str | None = None


@dataclass(frozen=True, slots=True)
class BindFailed:
    SCHEMA: ClassVar[str] = "strata.log.BindFailed"
    TYPE: ClassVar[str] = "BIND_FAILED"
    pod: str
    reason: str | None = None
    bind_offset: int | None = None


@dataclass(frozen=True, slots=True)
class Evict:
    SCHEMA: ClassVar[str] = "strata.log.Evict"
    TYPE: ClassVar[str] = "EVICT"
    pod: str
    reason: str | None = None
    replica: str | None = None


@dataclass(frozen=True, slots=True)
class EvictFailed:
    SCHEMA: ClassVar[str] = "strata.log.EvictFailed"
    TYPE: ClassVar[str] = "EVICT_FAILED"
    pod: str
    reason: str | None = None
    evict_offset: int | None = None


@dataclass(frozen=True, slots=True)
class BindSucceeded:
    SCHEMA: ClassVar[str] = "strata.log.BindSucceeded"
    TYPE: ClassVar[str] = "BIND_SUCCEEDED"
    pod: str
    node: str
    bind_offset: int | None = None


@dataclass(frozen=True, slots=True)
class EvictSucceeded:
    SCHEMA: ClassVar[str] = "strata.log.EvictSucceeded"
    TYPE: ClassVar[str] = "EVICT_SUCCEEDED"
    pod: str
    evict_offset: int | None = None


@dataclass(frozen=True, slots=True)
class Synced:
    SCHEMA: ClassVar[str] = "strata.log.Synced"
    TYPE: ClassVar[str] = "SYNCED"
    kind: str


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A line or message that is no valid record: it keeps its place in the order, nothing more."""

    SCHEMA: ClassVar[str] = "strata.log.BadRecord"
    TYPE: ClassVar[str] = "BAD"
    raw: bytes
    error: str
    source: str


@dataclass(frozen=True, slots=True)
class BindCommand:
    SCHEMA: ClassVar[str] = "strata.command.BindCommand"
    command_id: str
    log_offset: int
    pod_uid: str
    namespace: str
    name: str
    node: str
    replica: str | None = None
    extensions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class EvictCommand:
    SCHEMA: ClassVar[str] = "strata.command.EvictCommand"
    command_id: str
    log_offset: int
    pod_uid: str
    namespace: str
    name: str
    reason: str | None = None
    replica: str | None = None


@dataclass(frozen=True, slots=True)
class Digest:
    SCHEMA: ClassVar[str] = "strata.digest.Digest"
    version: int
    digest: str
    replica: str
    fold: str


LogRecord = (
    WatchEvent
    | Bind
    | BindGroup
    | BindFailed
    | Evict
    | EvictFailed
    | BindSucceeded
    | EvictSucceeded
    | Synced
    | BadRecord
)
"""Everything the cache log holds."""

Record = LogRecord | BindCommand | EvictCommand | Digest

RECORD_CLASSES: dict[str, type[Record]] = {
    cls.SCHEMA: cls
    for cls in (
        WatchEvent,
        Bind,
        BindGroup,
        BindFailed,
        Evict,
        EvictFailed,
        BindSucceeded,
        EvictSucceeded,
        Synced,
        BadRecord,
        BindCommand,
        EvictCommand,
        Digest,
    )
}
