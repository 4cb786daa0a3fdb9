"""Checkpoints: the fold's state at one version, kept so that a restart replays only the tail.

This module is the persistence interface (values and a Protocol); each storage engine is a
module of its own that implements ``CheckpointStore``. A checkpoint at version v holds the state
after records 0..v-1 of one cache log, so a process that loads it resumes at offset v.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class LogIdentity:
    """Which log, and which fold of it, a checkpoint belongs to."""

    topic: str  # the cache log's topic name
    cluster_id: str  # the Kafka cluster id (a restored log in a new cluster is another log)
    fold: str  # FoldConfig.identity: scheduler names and default queue change the result


@dataclass(frozen=True)
class CheckpointInfo:
    log: LogIdentity
    version: int  # records applied; the next offset to read
    digest: str  # SHA-256 of the canonical snapshot at this version
    size: int  # bytes of the serialized state
    created_at: str  # ISO-8601 UTC, for operators; never read by the fold


@dataclass(frozen=True)
class Checkpoint:
    info: CheckpointInfo
    state: bytes  # the serialized, compressed state (projector.fold.statecodec)
    state_format: int  # the statecodec format that wrote ``state``


class CheckpointStore(Protocol):
    def save(self, checkpoint: Checkpoint) -> None:
        """Store a checkpoint; saving the same log and version twice keeps the first."""

    def latest(self, log: LogIdentity, at_or_below: int | None = None) -> Checkpoint | None:
        """The newest checkpoint of ``log`` with version <= ``at_or_below`` (no bound: the newest)."""

    def list(self, log: LogIdentity) -> list[CheckpointInfo]:
        """Every checkpoint of ``log``, oldest first, without the state."""

    def prune(self, log: LogIdentity, keep: int) -> int:
        """Delete all but the ``keep`` newest checkpoints of ``log``; returns how many went."""

    def forked(self) -> None:
        """Call first in a forked child that writes to the store: the connections open in the
        parent stay the parent's, the child opens its own."""

    def close(self) -> None: ...
