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

from strata.projector.audit import AuditEntry
from strata.projector.checkpoint import LogIdentity
from strata.projector.sqlstore import _INSERTS, Base
from strata.schemas.objectjson import NumberLiteral

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


def _number_text(value: object) -> str:
    # A JSON number with a fraction or exponent ("cpu": 0.5, or any field of a bad record) loads
    # as a NumberLiteral: the index shows it as its text, as written.
    if isinstance(value, NumberLiteral):
        return value.text
    raise TypeError(f"{type(value).__name__} is not JSON")


_SUMMARY = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_number_text).encode


def _insert_sql(engine: Engine, table: type[Base], columns: tuple[str, ...], mark: str) -> str:
    quote = engine.dialect.identifier_preparer.quote  # "offset" is a reserved word in PostgreSQL
    names = ", ".join(quote(c) for c in columns)
    marks = ", ".join(mark for _ in columns)
    return f"INSERT INTO {quote(table.__tablename__)} ({names}) VALUES ({marks}) ON CONFLICT DO NOTHING"


class AuditIndex:
    """Writes and reads the audit of one database (the checkpoint store's engine)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._insert = _INSERTS[engine.dialect.name]
        self._ids: dict[LogIdentity, int] = {}
        mark = "?" if engine.dialect.paramstyle == "qmark" else "%s"
        record_columns = ("log_id", "offset", "time_ms", "type", "summary")
        self._records_sql = _insert_sql(engine, AuditRecordRow, record_columns, mark)
        self._subjects_sql = _insert_sql(engine, AuditSubjectRow, ("log_id", "subject", "offset"), mark)

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
        # Plain tuples through the driver's executemany: SQLAlchemy's per-row bound parameters were
        # a fifth of the audit's cost.
        records = [(log_id, e.offset, e.time_ms, e.type, _SUMMARY(e.summary)) for e in entries]
        subjects = [(log_id, s[:600], e.offset) for e in entries for s in e.subjects]
        with self.engine.begin() as conn:
            for statement, rows in ((self._records_sql, records), (self._subjects_sql, subjects)):
                for i in range(0, len(rows), BATCH_ROWS):
                    conn.exec_driver_sql(statement, rows[i : i + BATCH_ROWS])
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
