"""The log runner: the fold driven by the cache log, with checkpoints (an edge, like ingest).

A runner restores the newest checkpoint of its log (at or below a target version), reads the
tail, and either stops at a given offset (`strata snapshot`) or follows the log and writes a
checkpoint every N records or T seconds (`strata project`). The clock here only decides *when*
to checkpoint; what a checkpoint holds depends on the records alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import KafkaException

from strata.digests import DigestReporter
from strata.log.cachelog import CacheLogReader, LogEntry, Publisher
from strata.log.config import Settings
from strata.projector import audit, statecodec
from strata.projector.auditstore import AuditIndex
from strata.projector.checkpoint import Checkpoint, CheckpointInfo, CheckpointStore, LogIdentity
from strata.projector.state import CacheState, FoldConfig

LOG = logging.getLogger("strata.projector")
AUDIT_BATCH = 20_000  # entries written at once when no checkpoint comes first


@dataclass
class Progress:
    version: int
    end: int  # the log's end as last seen
    checkpoints: int = 0
    bad: int = 0

    @property
    def lag(self) -> int:
        return max(0, self.end - self.version)


class LogRunner:
    def __init__(self, settings: Settings, store: CheckpointStore, fold: FoldConfig, quarantine: bool = False) -> None:
        self.settings = settings
        self.store = store
        self.fold = fold
        self.reader = CacheLogReader(settings, quarantine=Publisher(settings) if quarantine else None)
        self._identity: LogIdentity | None = None

    @property
    def identity(self) -> LogIdentity:
        if self._identity is None:
            self._identity = LogIdentity(self.reader.topic, self.reader.cluster_id(), self.fold.identity)
        return self._identity

    def _end_or(self, last: int) -> int:
        """The log's end for a progress report; while the brokers are away, the last one seen (the
        follower's consumer reconnects by itself, and a report is no reason to stop)."""
        try:
            return self.reader.end_offset()
        except KafkaException as exc:
            LOG.warning("the log's end is unknown for now: %s", exc.args[0].str() if exc.args else exc)
            return last

    def restore(self, at_or_below: int | None = None) -> CacheState:
        """The newest checkpointed state at or below ``at_or_below``, or an empty state."""
        checkpoint = self.store.latest(self.identity, at_or_below)
        if checkpoint is None:
            return CacheState(self.fold)
        return statecodec.decode(checkpoint.state)

    def state_at(self, end: int) -> CacheState:
        """The state after records 0..end-1: a checkpoint at or below ``end`` plus the tail."""
        state = self.restore(at_or_below=end)
        for entry in self.reader.read(start=state.version, end=end):
            state.apply_at(entry.offset, entry.record)
        state.expect_offset(end)
        return state

    def checkpoint(self, state: CacheState) -> CheckpointInfo:
        LOG.info("writing a checkpoint at version %d", state.version)
        blob = statecodec.encode(state)
        info = CheckpointInfo(
            log=self.identity,
            version=state.version,
            digest=state.snapshot().digest(),
            size=len(blob),
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        self.store.save(Checkpoint(info, blob, statecodec.FORMAT))
        LOG.info("checkpoint at version %d written", state.version)
        return info

    def follow(
        self,
        stop: threading.Event,
        every_records: int = 100_000,
        every_seconds: float = 60.0,
        report: Callable[[Progress], None] = lambda p: None,
        report_seconds: float = 5.0,
        audit_index: AuditIndex | None = None,
        digests: DigestReporter | None = None,
    ) -> CacheState:
        """Apply records as they arrive until ``stop`` is set; checkpoint on the way and at the end.

        With ``audit_index``, every record's audit entry is written too (with each checkpoint, in
        batches); a projector whose index lags its checkpoints starts from an older one.
        """
        LOG.info("restoring the newest checkpoint")
        state = self.restore(at_or_below=audit_index.indexed_to(self.identity) if audit_index else None)
        LOG.info("restored version %d", state.version)
        run = _Following(self, state, audit_index, digests, Progress(state.version, self.reader.end_offset()))
        last_checkpoint = last_report = time.monotonic()
        idle_at = -1
        for entry in self.reader.follow(state.version, stop):
            now = time.monotonic()
            due = False
            if entry is not None:
                due = state.version + 1 - run.saved_version >= every_records
                run.apply(entry, digest_due=not due)
            elif idle_at != state.version:
                idle_at = state.version
                LOG.info("idle at version %d", state.version)
            due = due or (now - last_checkpoint >= every_seconds and state.version != run.saved_version)
            if due:
                run.save()
                last_checkpoint = now
            elif entry is None:
                run.flush_audit()  # the log went quiet: the index catches up
            if now - last_report >= report_seconds:
                run.progress.end = max(self._end_or(run.progress.end), state.version)
                report(run.progress)
                last_report = now
        run.save()
        if digests is not None:
            digests.drain()
        run.progress.end = max(run.progress.end, state.version)
        report(run.progress)
        return state


class _Following:
    """One follow of the log: the state, its audit entries not yet written, the last checkpoint."""

    def __init__(
        self,
        runner: LogRunner,
        state: CacheState,
        audit_index: AuditIndex | None,
        digests: DigestReporter | None,
        progress: Progress,
    ) -> None:
        self.runner = runner
        self.state = state
        self.audit_index = audit_index
        self.digests = digests
        self.progress = progress
        self.saved_version = state.version
        self.pending: list[audit.AuditEntry] = []

    def apply(self, entry: LogEntry, digest_due: bool) -> None:
        """Fold one entry; its audit entry is kept, and a digest offered at an agreed version
        (``digest_due`` is False when a checkpoint, which reports its own, comes right after)."""
        state = self.state
        ctx = audit.context(state, entry.record) if self.audit_index else None
        outcome = state.apply_at(entry.offset, entry.record)
        if outcome.result == "bad":
            self.progress.bad += 1
        if self.audit_index is not None:
            self.pending.append(
                audit.entry(entry.offset, entry.timestamp_ms, entry.record, outcome, ctx, state.last_object)
            )
            if len(self.pending) >= AUDIT_BATCH:
                self.flush_audit()
        self.progress.version = state.version
        if digest_due and self.digests is not None and self.digests.due(state.version):
            self.digests.offer(state.snapshot())

    def flush_audit(self) -> None:
        if self.audit_index is not None and self.pending:
            self.audit_index.write(self.runner.identity, self.pending, self.state.version)
            self.pending.clear()

    def save(self) -> None:
        """The audit entries, then a checkpoint and its digest, unless this version is saved already."""
        self.flush_audit()
        if self.state.version == self.saved_version:
            return
        info = self.runner.checkpoint(self.state)
        if self.digests is not None:
            self.digests.report(info.version, info.digest)
        self.progress.checkpoints += 1
        self.saved_version = self.state.version
