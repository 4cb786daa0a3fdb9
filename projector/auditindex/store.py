"""The audit index in SQL, beside the checkpoints (same database, same migrations).

``strata project`` writes it as it folds (by a writer process of its own, ``auditindex.writer``, off
the fold's path); ``strata history`` and ``strata story`` read it (after bringing it up to the
log's end the same way, when it lags), so a subject's history on a long log is an index lookup
and a few blocks decompressed, not a scan of the log.

Storage, about 40 bytes a record (a summary row and a row per subject took 870 and 1,300):

- ``audit_blocks``: the records of ``BLOCK_RECORDS`` consecutive offsets (offsets k*N .. k*N+N-1),
  one zstd-compressed row: each message as the log holds it, with the fold's outcome and pod
  context (``audit.Kept``), and the subjects each names. A record's summary is derived when it
  is read (``audit.described``, ``audit.describe``), so storing costs the writer a decode and a
  light parse a record, and what zstd keeps of a pod's next version is what changed in it.
  Blocks sit at fixed offsets, so what is stored depends only on the records, never on when the
  projector flushed: a write that ends inside a block stores it partly, and the next write
  decodes that part and stores the block whole.
- ``audit_postings``: (bucket, subject, block) for every subject an entry of the block names. A
  subject is stored as a 64-bit hash: no table of names to look up or grow, and a collision only
  makes a reader decompress a block it then filters out (entries keep their subjects' names).
  The bucket (``bucket_of``) puts a transaction's postings in the last pages of the B-tree.

A projector that restarts from an older checkpoint writes offsets the index has again: those
below the index's position are skipped, and a block rewritten from the same records is the same
bytes (blocks are upserted, postings inserted with "on conflict do nothing").
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, pairwise
from typing import Any, NamedTuple

import msgspec
import zstandard
from sqlalchemy import BigInteger, ForeignKey, Integer, LargeBinary, String, Text, UniqueConstraint, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Mapped, mapped_column

from strata.projector.checkpoints.interface import LogIdentity
from strata.projector.checkpoints.sql import _INSERTS, Base
from strata.projector.fold.auditentries import Context, Kept, PodContext, describe, described
from strata.projector.fold.state import Outcome
from strata.schemas.objectjson import SortedJson, number_text

BLOCK_RECORDS = 1024  # offsets per block: a node's history reads one block per record of it, so not more
# Blocks whose postings share a bucket, the postings' first key after the log: a transaction then
# writes into the last bucket's pages, not all over a B-tree ordered by hashes (migration 0006,
# which converts at 65,536 records a bucket); a history looks each subject up once per bucket.
BUCKET_BLOCKS = 64
BATCH_ROWS = 5000  # rows per INSERT statement: SQLite limits the bound parameters of one statement
SQLITE_CACHE_KIB = 64 * 1024  # the writer's page cache
ZSTD_LEVEL = 1  # 3 saves 2 % of the bytes for a third more of the writer's time


class AuditLogRow(Base):
    __tablename__ = "audit_logs"
    __table_args__ = (UniqueConstraint("topic", "cluster_id", "fold"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    topic: Mapped[str] = mapped_column(String(249))
    cluster_id: Mapped[str] = mapped_column(String(255))
    fold: Mapped[str] = mapped_column(Text)
    indexed_to: Mapped[int] = mapped_column(BigInteger, default=0)  # records 0..indexed_to-1 are in


class AuditBlockRow(Base):
    __tablename__ = "audit_blocks"

    log_id: Mapped[int] = mapped_column(ForeignKey("audit_logs.id", ondelete="CASCADE"), primary_key=True)
    first_offset: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # a multiple of BLOCK_RECORDS
    last_offset: Mapped[int] = mapped_column(BigInteger)  # of its last entry so far
    first_ms: Mapped[int] = mapped_column(BigInteger)  # the bounds of its entries' stamps, to skip it by time
    last_ms: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)  # see encode_block


class AuditPostingRow(Base):
    __tablename__ = "audit_postings"
    # the primary key is the lookup index: equality on (log_id, bucket, subject_key), then blocks
    # in order; in SQLite the table is that index alone (WITHOUT ROWID)
    __table_args__ = ({"sqlite_with_rowid": False},)

    log_id: Mapped[int] = mapped_column(ForeignKey("audit_logs.id", ondelete="CASCADE"), primary_key=True)
    bucket: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # bucket_of(first_offset)
    subject_key: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # subject_key(subject)
    first_offset: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # the block's


@dataclass(frozen=True)
class AuditRow:
    offset: int
    time_ms: int
    type: str
    summary: dict[str, Any]


class Row(NamedTuple):
    """An entry as a history shows it: ``describe``'s result at an offset and time."""

    offset: int
    time_ms: int
    type: str
    subjects: tuple[str, ...]
    summary: dict[str, Any]


class Records(msgspec.Struct, array_like=True):
    """Consecutive records as the index stores them, column by column: a writer's frame, or a
    stored block read back (a block's bytes are these, MessagePack, zstd-compressed).

    Per record the writer does no work of its own in Python: the columns are arrays, bytes and
    lists that MessagePack, zstd and SQLite handle whole. ``values`` holds the messages one after
    another (``sizes``); ``exceptions`` names the records whose outcome is not a plain "applied"
    or that carry a pod context, by their index here."""

    first: int  # the offset of the first; the others follow it without a gap
    stamps: bytes  # array("q"): each record's time_ms
    sizes: bytes  # array("I"): each message's bytes in ``values``
    values: bytes
    subjects: list[list[str]]
    exceptions: list[tuple[int, str, str, Any]]  # (index, result, reason, plain context)

    def __len__(self) -> int:
        return len(self.sizes) // 4

    @property
    def end(self) -> int:
        return self.first + len(self)

    @classmethod
    def empty(cls, first: int) -> Records:
        return cls(first, b"", b"", b"", [], [])

    @classmethod
    def of(cls, kept: Sequence[Kept], subjects: Sequence[Sequence[str]]) -> Records:
        """Records from ``Kept`` ones (consecutive) and their subjects."""
        exceptions = [
            (i, k.outcome.result, k.outcome.reason, plain_context(k.context))
            for i, k in enumerate(kept)
            if k.context is not None or k.outcome != APPLIED
        ]
        return cls(
            kept[0].offset if kept else 0,
            array("q", [k.time_ms for k in kept]).tobytes(),
            array("I", [len(k.value) for k in kept]).tobytes(),
            b"".join(k.value for k in kept),
            [list(s) for s in subjects],
            exceptions,
        )

    def column(self, name: str) -> array[int]:
        values = array("q" if name == "stamps" else "I")
        values.frombytes(getattr(self, name))
        return values

    def part(self, low: int, high: int) -> Records:
        """The records at offsets in [low, high)."""
        i, j = min(max(low - self.first, 0), len(self)), min(max(high - self.first, 0), len(self))
        if (i, j) == (0, len(self)):
            return self
        sizes = self.column("sizes")
        start = sum(sizes[:i])
        end = start + sum(sizes[i:j])
        return Records(
            self.first + i,
            self.stamps[8 * i : 8 * j],
            self.sizes[4 * i : 4 * j],
            self.values[start:end],
            self.subjects[i:j],
            [(k - i, *rest) for k, *rest in self.exceptions[_at(self.exceptions, i) : _at(self.exceptions, j)]],
        )

    @classmethod
    def joined(cls, parts: Sequence[Records]) -> Records:
        """The records of ``parts``, one after another (each begins where the one before ends)."""
        parts = [p for p in parts if len(p)]
        if len(parts) <= 1:
            return parts[0] if parts else cls.empty(0)
        exceptions: list[tuple[int, str, str, Any]] = []
        base = 0
        for p in parts:
            exceptions.extend((k + base, *rest) for k, *rest in p.exceptions)
            base += len(p)
        for earlier, later in pairwise(parts):
            if later.first != earlier.end:
                raise ValueError(f"records {earlier.first}..{earlier.end - 1} and then {later.first}: a gap")
        return cls(
            parts[0].first,
            b"".join(p.stamps for p in parts),
            b"".join(p.sizes for p in parts),
            b"".join(p.values for p in parts),
            [s for p in parts for s in p.subjects],
            exceptions,
        )

    def blocks(self) -> Iterator[Records]:
        """These records a block at a time."""
        low = self.first - self.first % BLOCK_RECORDS
        while low < self.end:
            yield self.part(low, low + BLOCK_RECORDS)
            low += BLOCK_RECORDS

    @staticmethod
    def blocks_of(parts: Sequence[Records]) -> Iterator[Records]:
        """The records of ``parts`` (each beginning where the one before ends) a block at a time.
        A part that is a block's records already (most frames of the index's writer) is handed
        on as it is, the others joined per block: joining all the parts first and cutting the
        result into blocks copied every message twice (a tenth of the writer's time)."""
        pending: list[Records] = []
        end = None
        for part in parts:
            if not len(part):
                continue
            if end is not None and part.first != end:
                raise ValueError(f"records up to {end - 1} and then {part.first}: a gap")
            end = part.end
            for piece in part.blocks():
                if pending and piece.first // BLOCK_RECORDS != pending[0].first // BLOCK_RECORDS:
                    yield Records.joined(pending)
                    pending = []
                pending.append(piece)
        if pending:
            yield Records.joined(pending)


def _at(exceptions: list[tuple[int, str, str, Any]], index: int) -> int:
    """Where the exceptions (in order of their records) of records from ``index`` on begin."""
    return bisect.bisect_left(exceptions, index, key=lambda e: e[0])


APPLIED = Outcome("applied")
_RECORDS = msgspec.msgpack.Decoder(Records).decode
_encode_records = msgspec.msgpack.Encoder().encode


def plain_context(ctx: Context) -> Any:
    """A pod context as MessagePack and JSON hold it: a list of four, or of lists of four."""
    if ctx is None:
        return None
    return list(ctx) if isinstance(ctx, PodContext) else [list(c) for c in ctx]


def context_of(plain: Any) -> Context:
    """``plain_context``'s inverse (an empty list: a BIND_GROUP's contexts, of no binds)."""
    if plain is None:
        return None
    if not plain or isinstance(plain[0], list):
        return tuple(PodContext(*c) for c in plain)
    return PodContext(*plain)


def bucket_of(first_offset: int) -> int:
    """The postings' bucket of the block that begins at ``first_offset``."""
    return first_offset // (BLOCK_RECORDS * BUCKET_BLOCKS)


@functools.lru_cache(maxsize=1 << 17)  # a node's or a job's subject comes back block after block
def subject_key(subject: str) -> int:
    """A subject's posting key: the first 8 bytes of its BLAKE2b, signed (SQL's BIGINT)."""
    digest = hashlib.blake2b(subject.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


# A summary's JSON (a NumberLiteral as its text, in a string). _json is the fast one;
# tests/fold/test_auditentries_fastjson.py holds it to _SUMMARY, character for character.
_SUMMARY_JSON = SortedJson(number_text)
_SUMMARY = _SUMMARY_JSON.stdlib
_json = _SUMMARY_JSON.text


_COMPRESS = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress
_DECOMPRESS = zstandard.ZstdDecompressor().decompress


# ------------------------------------------------------------------------------------ blocks
def encode_block(records: Records) -> bytes:
    """The stored form of one block's records: their columns (``Records``), MessagePack, zstd.

    The messages are stored as the log holds them: consecutive versions of a pod differ in a few
    bytes, and zstd, which sees the whole block, keeps only what changed between them (about 36
    bytes a record at 5,000 nodes and 150,000 pods)."""
    return _COMPRESS(_encode_records(records))


class Block:
    """One stored block: its records, read as a history asks for them."""

    def __init__(self, first_offset: int, data: bytes) -> None:
        self._records = _RECORDS(_DECOMPRESS(data))
        if self._records.first - self._records.first % BLOCK_RECORDS != first_offset:
            raise ValueError(f"the block at {first_offset} holds records from {self._records.first}")
        self.count = len(self._records)
        self.offsets = range(self._records.first, self._records.end)
        self.stamps = self._records.column("stamps")
        self._starts: list[int] | None = None
        self._rows: dict[int, Row] = {}

    def __len__(self) -> int:
        return self.count

    def about(self, subjects: Iterable[str]) -> list[int]:
        """The indexes of the entries naming any of ``subjects``, in order (none: a posting key's
        collision). A scan per subject asked: a history asks one to three a block."""
        wanted = set(subjects)
        if len(wanted) == 1:
            (subject,) = wanted
            return [n for n, named in enumerate(self._records.subjects) if subject in named]
        return [n for n, named in enumerate(self._records.subjects) if not wanted.isdisjoint(named)]

    def named(self, n: int) -> tuple[str, ...]:
        return tuple(self._records.subjects[n])

    def kept(self, n: int) -> Kept:
        if self._starts is None:
            self._starts = list(accumulate(self._records.column("sizes"), initial=0))
        exceptions = self._records.exceptions
        i = _at(exceptions, n)
        outcome, ctx = APPLIED, None
        if i < len(exceptions) and exceptions[i][0] == n:
            _, result, reason, plain = exceptions[i]
            outcome, ctx = Outcome(result, reason), context_of(plain)
        value = self._records.values[self._starts[n] : self._starts[n + 1]]
        return Kept(self.offsets[n], self.stamps[n], value, outcome, ctx)

    def records(self) -> Records:
        """Every record of the block, as it was stored (to store the block again, longer)."""
        return self._records

    def row(self, n: int) -> Row:
        """The entry as a history shows it: its record described, as the fold saw it."""
        if n not in self._rows:
            kind, _, summary = describe(described(self.kept(n)))
            self._rows[n] = Row(self.offsets[n], self.stamps[n], kind, self.named(n), _as_stored(summary))
        return self._rows[n]

    def type(self, n: int) -> str:
        return self.row(n).type

    def summary(self, n: int) -> dict[str, Any]:
        return self.row(n).summary


def _as_stored(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary as JSON reads it back (a NumberLiteral as its text): what readers have always
    been given, and what the web UI and ``-o json`` print."""
    parsed: dict[str, Any] = json.loads(_json(summary))
    return parsed


# ------------------------------------------------------------------------------------- index
_PG_POSTINGS = (
    "INSERT INTO audit_postings (log_id, bucket, subject_key, first_offset) "
    "SELECT %s, b, k, f FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS p(b, k, f) ON CONFLICT DO NOTHING"
)


def _insert_sql(engine: Engine, table: type[Base], columns: tuple[str, ...], mark: str, conflict: str) -> str:
    quote = engine.dialect.identifier_preparer.quote
    names = ", ".join(quote(c) for c in columns)
    marks = ", ".join(mark for _ in columns)
    return f"INSERT INTO {quote(table.__tablename__)} ({names}) VALUES ({marks}) ON CONFLICT {conflict}"


class AuditIndex:
    """Writes and reads the audit of one database (the checkpoint store's engine)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._insert = _INSERTS[engine.dialect.name]
        self._ids: dict[LogIdentity, int] = {}
        mark = "?" if engine.dialect.paramstyle == "qmark" else "%s"
        block_columns = ("log_id", "first_offset", "last_offset", "first_ms", "last_ms", "data")
        replace = ", ".join(f"{c} = excluded.{c}" for c in block_columns[2:])
        self._blocks_sql = _insert_sql(
            engine, AuditBlockRow, block_columns, mark, f"(log_id, first_offset) DO UPDATE SET {replace}"
        )
        posting_columns = ("log_id", "bucket", "subject_key", "first_offset")
        self._postings_sql = _insert_sql(engine, AuditPostingRow, posting_columns, mark, "DO NOTHING")

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
            return self._position(conn, log_id, lock=False)

    def write(self, log: LogIdentity, records: Records | Sequence[Records], upto: int) -> None:
        """Store records (consecutive parts of them: a writer's frames) and mark the log indexed
        up to ``upto`` (records applied), in one transaction; the records the index holds
        already are skipped."""
        parts = [records] if isinstance(records, Records) else records
        log_id = self.log_id(log)
        with self.engine.connect().execution_options(sqlite_immediate=True) as conn, conn.begin():
            if conn.dialect.name == "sqlite":
                # set when the postings went in all over their B-tree (keys were hashes first); the
                # last bucket's pages, a few MB, are still more than SQLite's default 2 MiB cache
                conn.exec_driver_sql(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
            indexed = self._position(conn, log_id)  # locked until commit: one writer per log at a time
            new = [part for part in (p.part(indexed, sys.maxsize) for p in parts) if len(part)]
            if new:
                first = new[0].first
                start = first - first % BLOCK_RECORDS
                if start < first:  # the block was begun by an earlier write
                    new.insert(0, self._stored(conn, log_id, start, first))
                self._store(conn, log_id, new)
            if upto > indexed:
                conn.execute(update(AuditLogRow).where(AuditLogRow.id == log_id).values(indexed_to=upto))

    def _position(self, conn: Connection, log_id: int, lock: bool = True) -> int:
        """The log's ``indexed_to``; with ``lock``, held until the transaction ends (a writer's)."""
        query = select(AuditLogRow.indexed_to).where(AuditLogRow.id == log_id)
        if lock and conn.dialect.name == "postgresql":
            query = query.with_for_update()  # SQLite's BEGIN IMMEDIATE locked the database already
        return int(conn.execute(query).scalar_one())

    def _stored(self, conn: Connection, log_id: int, start: int, below: int) -> Records:
        data = conn.execute(
            select(AuditBlockRow.data).where(AuditBlockRow.log_id == log_id, AuditBlockRow.first_offset == start)
        ).scalar_one_or_none()
        if data is None:
            return Records.empty(below)
        return Block(start, bytes(data)).records().part(start, below)

    def _store(self, conn: Connection, log_id: int, parts: Sequence[Records]) -> None:
        blocks: list[tuple[int, int, int, int, int, bytes]] = []
        postings: list[tuple[int, int, int, int]] = []
        for block in Records.blocks_of(parts):
            first = block.first - block.first % BLOCK_RECORDS
            stamps = block.column("stamps")
            blocks.append((log_id, first, block.end - 1, min(stamps), max(stamps), encode_block(block)))
            bucket = bucket_of(first)
            postings.extend((log_id, bucket, subject_key(s), first) for s in set(chain.from_iterable(block.subjects)))
        # in key order, so that each insert lands next to the one before in the postings' B-tree
        postings.sort()
        # Plain tuples through the driver's executemany: SQLAlchemy's per-row bound parameters
        # cost more than the encoding.
        for i in range(0, len(blocks), BATCH_ROWS):
            conn.exec_driver_sql(self._blocks_sql, blocks[i : i + BATCH_ROWS])
        if conn.dialect.name == "postgresql":
            # one statement with three arrays, not an executemany of a flush's ~20,000 postings
            buckets, keys, firsts = [p[1] for p in postings], [p[2] for p in postings], [p[3] for p in postings]
            conn.exec_driver_sql(_PG_POSTINGS, (log_id, buckets, keys, firsts))
            return
        for i in range(0, len(postings), BATCH_ROWS):
            conn.exec_driver_sql(self._postings_sql, postings[i : i + BATCH_ROWS])

    # ------------------------------------------------------------------------------- reading
    def offsets(self, log: LogIdentity, subjects: Iterable[str]) -> list[int]:
        wanted = set(subjects)
        return [block.offsets[n] for block in self._read(log, wanted) for n in block.about(wanted)]

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
        wanted = set(subjects)
        low_offset, high_offset = _bounds(since_offset, until_offset)
        low_ms, high_ms = _bounds(since_ms, until_ms)
        out = []
        for block in self._read(log, wanted, since_offset, until_offset, since_ms, until_ms):
            for n in block.about(wanted):
                offset, stamp = block.offsets[n], block.stamps[n]
                if low_offset <= offset <= high_offset and low_ms <= stamp <= high_ms:
                    row = block.row(n)
                    out.append(AuditRow(offset, stamp, row.type, row.summary))
        return out

    def _read(
        self,
        log: LogIdentity,
        subjects: set[str],
        since_offset: int | None = None,
        until_offset: int | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
    ) -> Iterator[Block]:
        """The blocks whose postings name any of ``subjects`` and that may hold entries within the bounds."""
        if not subjects:
            return
        log_id = self.log_id(log)
        keys = sorted({subject_key(s) for s in subjects})
        with self.engine.connect() as conn:
            end = self._position(conn, log_id, lock=False)
            matching = (
                select(AuditPostingRow.first_offset)
                .where(
                    AuditPostingRow.log_id == log_id,
                    AuditPostingRow.bucket.in_(_buckets(end, since_offset, until_offset)),
                    AuditPostingRow.subject_key.in_(keys),
                )
                .scalar_subquery()
            )
            query = (
                select(AuditBlockRow.first_offset, AuditBlockRow.data)
                .where(AuditBlockRow.log_id == log_id, AuditBlockRow.first_offset.in_(matching))
                .order_by(AuditBlockRow.first_offset)
            )
            for low, high, first, last in (
                (since_offset, until_offset, AuditBlockRow.first_offset, AuditBlockRow.last_offset),
                (since_ms, until_ms, AuditBlockRow.first_ms, AuditBlockRow.last_ms),
            ):
                if low is not None:
                    query = query.where(last >= low)
                if high is not None:
                    query = query.where(first <= high)
            found = conn.execute(query).all()
        for first_offset, data in found:
            yield Block(first_offset, bytes(data))


def _buckets(end: int, since_offset: int | None, until_offset: int | None) -> list[int]:
    """The buckets of the blocks that may hold offsets within the bounds of an index that holds
    offsets below ``end``: a subject is looked up in each (a range over buckets would scan them,
    since the subject's key comes after the bucket)."""
    last = end - 1 if until_offset is None else min(end - 1, until_offset)
    first = max(since_offset or 0, 0)
    return list(range(bucket_of(first), bucket_of(max(last, 0)) + 1))


def _bounds(low: int | None, high: int | None) -> tuple[int | float, int | float]:
    return (low if low is not None else float("-inf"), high if high is not None else float("inf"))
