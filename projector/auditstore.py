"""The audit index in SQL, beside the checkpoints (same database, same migrations).

``strata project`` writes it as it folds; ``strata history`` and ``strata story`` read it, so a
pod's history on a long log is an index lookup, not a scan of the log. Rows are keyed by log and
offset and inserted with "on conflict do nothing": a projector that restarts from an older
checkpoint writes the same rows again, harmlessly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Integer, String, Text, UniqueConstraint, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, mapped_column

from projector.audit import AuditEntry
from projector.checkpoint import LogIdentity
from projector.sqlstore import _INSERTS, Base

BATCH_ROWS = 5000  # rows per INSERT statement: SQLite limits the bound parameters of one statement


class AuditLogRow(Base):
    __tablename__ = "audit_logs"
    __table_args__ = (UniqueConstraint("topic", "cluster_id", "fold"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    topic: Mapped[str] = mapped_column(String(249))
    cluster_id: Mapped[str] = mapped_column(String(255))
    fold: Mapped[str] = mapped_column(Text)
    indexed_to: Mapped[int] = mapped_column(BigInteger, default=0)  # records 0..indexed_to-1 are in


class AuditRecordRow(Base):
    __tablename__ = "audit_records"

    log_id: Mapped[int] = mapped_column(ForeignKey("audit_logs.id", ondelete="CASCADE"), primary_key=True)
    offset: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    time_ms: Mapped[int] = mapped_column(BigInteger)
    type: Mapped[str] = mapped_column(String(32))
    summary: Mapped[str] = mapped_column(Text)  # JSON


class AuditSubjectRow(Base):
    __tablename__ = "audit_subjects"
    # the primary key is the lookup index: equality on (log_id, subject), then offsets in order

    log_id: Mapped[int] = mapped_column(ForeignKey("audit_logs.id", ondelete="CASCADE"), primary_key=True)
    subject: Mapped[str] = mapped_column(String(600), primary_key=True)
    offset: Mapped[int] = mapped_column(BigInteger, primary_key=True)


@dataclass(frozen=True)
class AuditRow:
    offset: int
    time_ms: int
    type: str
    summary: dict[str, Any]


class AuditIndex:
    """Writes and reads the audit of one database (the checkpoint store's engine)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._insert = _INSERTS[engine.dialect.name]
        self._ids: dict[LogIdentity, int] = {}

    def log_id(self, log: LogIdentity) -> int:
        if log not in self._ids:
            with self.engine.begin() as conn:
                conn.execute(
                    self._insert(AuditLogRow)
                    .values(topic=log.topic, cluster_id=log.cluster_id, fold=log.fold, indexed_to=0)
                    .on_conflict_do_nothing(index_elements=["topic", "cluster_id", "fold"])
                )
                self._ids[log] = conn.execute(
                    select(AuditLogRow.id).where(
                        AuditLogRow.topic == log.topic,
                        AuditLogRow.cluster_id == log.cluster_id,
                        AuditLogRow.fold == log.fold,
                    )
                ).scalar_one()
        return self._ids[log]

    def indexed_to(self, log: LogIdentity) -> int:
        log_id = self.log_id(log)
        with self.engine.connect() as conn:
            return conn.execute(select(AuditLogRow.indexed_to).where(AuditLogRow.id == log_id)).scalar_one()

    def write(self, log: LogIdentity, entries: Sequence[AuditEntry], upto: int) -> None:
        """Store entries and mark the log indexed up to ``upto`` (records applied), in one transaction."""
        log_id = self.log_id(log)
        records = [
            {
                "log_id": log_id,
                "offset": e.offset,
                "time_ms": e.time_ms,
                "type": e.type,
                "summary": json.dumps(e.summary, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
            }
            for e in entries
        ]
        subjects = [{"log_id": log_id, "subject": s[:600], "offset": e.offset} for e in entries for s in e.subjects]
        with self.engine.begin() as conn:
            for table, rows in ((AuditRecordRow, records), (AuditSubjectRow, subjects)):
                for i in range(0, len(rows), BATCH_ROWS):
                    conn.execute(self._insert(table).on_conflict_do_nothing(), rows[i : i + BATCH_ROWS])
            conn.execute(
                update(AuditLogRow)
                .where(AuditLogRow.id == log_id, AuditLogRow.indexed_to < upto)
                .values(indexed_to=upto)
            )

    def offsets(self, log: LogIdentity, subjects: Iterable[str]) -> list[int]:
        log_id = self.log_id(log)
        query = (
            select(AuditSubjectRow.offset)
            .where(AuditSubjectRow.log_id == log_id, AuditSubjectRow.subject.in_(list(subjects)))
            .distinct()
        )
        with self.engine.connect() as conn:
            return sorted(conn.execute(query).scalars())

    def rows(
        self,
        log: LogIdentity,
        subjects: Iterable[str],
        since_offset: int | None = None,
        until_offset: int | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
    ) -> list[AuditRow]:
        """Every indexed record about any of ``subjects``, in log order, within the bounds (inclusive)."""
        log_id = self.log_id(log)
        matching = (
            select(AuditSubjectRow.offset)
            .where(AuditSubjectRow.log_id == log_id, AuditSubjectRow.subject.in_(list(subjects)))
            .scalar_subquery()
        )
        query = (
            select(AuditRecordRow)
            .where(AuditRecordRow.log_id == log_id, AuditRecordRow.offset.in_(matching))
            .order_by(AuditRecordRow.offset)
        )
        for column, low, high in (
            (AuditRecordRow.offset, since_offset, until_offset),
            (AuditRecordRow.time_ms, since_ms, until_ms),
        ):
            if low is not None:
                query = query.where(column >= low)
            if high is not None:
                query = query.where(column <= high)
        with self.engine.connect() as conn:
            return [AuditRow(r.offset, r.time_ms, r.type, json.loads(r.summary)) for r in conn.execute(query)]
