"""The audit index in SQL, beside the checkpoints (same database, same migrations).

``strata project`` writes it as it folds (in the forked writer, off the fold's path); ``strata
history`` and ``strata story`` read it (after bringing it up to the log's end the same way, when
it lags), so a subject's history on a long log is an index lookup and a few blocks decompressed,
not a scan of the log.

Storage, about 50 bytes a record in SQLite and 140 in PostgreSQL (a summary row and a row per
subject took 870 and 1,300):

- ``audit_blocks``: the entries of ``BLOCK_RECORDS`` consecutive offsets (offsets k*N .. k*N+N-1),
  one zstd-compressed row. Blocks sit at fixed offsets, so what is stored depends only on the
  records, never on when the projector flushed: a write that ends inside a block stores it
  partly, and the next write decodes that part and stores the block whole. An entry holds only
  what changed since the previous entry of its first subject (a pod's, a uid's) *in the same
  block*, the first one whole, so a block decodes on its own.
- ``audit_postings``: (subject, block) for every subject an entry of the block names. A subject is
  stored as a 64-bit hash: no table of names to look up or grow, and a collision only makes a
  reader decompress a block it then filters out (entries keep their subjects' names).

A projector that restarts from an older checkpoint writes offsets the index has again: those
below the index's position are skipped, and a block rewritten from the same records is the same
bytes (blocks are upserted, postings inserted with "on conflict do nothing").
"""

from __future__ import annotations

import bisect
import hashlib
import json
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, pairwise
from typing import Any, NamedTuple

import zstandard
from sqlalchemy import BigInteger, ForeignKey, Integer, LargeBinary, String, Text, UniqueConstraint, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Mapped, mapped_column

from strata.projector.audit import AuditEntry, describe
from strata.projector.checkpoint import LogIdentity
from strata.projector.sqlstore import _INSERTS, Base
from strata.schemas.objectjson import SortedJson, number_text

BLOCK_RECORDS = 1024  # offsets per block: a node's history reads one block per record of it, so not more
BATCH_ROWS = 5000  # rows per INSERT statement: SQLite limits the bound parameters of one statement
SQLITE_CACHE_KIB = 64 * 1024  # the writer's page cache
ZSTD_LEVEL = 3  # higher levels save a few percent and cost the writer twice the time


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
    # the primary key is the lookup index: equality on (log_id, subject_key), then blocks in order;
    # in SQLite the table is that index alone (WITHOUT ROWID)
    __table_args__ = ({"sqlite_with_rowid": False},)

    log_id: Mapped[int] = mapped_column(ForeignKey("audit_logs.id", ondelete="CASCADE"), primary_key=True)
    subject_key: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # subject_key(subject)
    first_offset: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # the block's


@dataclass(frozen=True)
class AuditRow:
    offset: int
    time_ms: int
    type: str
    summary: dict[str, Any]


class Row(NamedTuple):
    """An entry as a block stores it: ``describe``'s result at an offset and time."""

    offset: int
    time_ms: int
    type: str
    subjects: tuple[str, ...]
    summary: dict[str, Any]


def subject_key(subject: str) -> int:
    """A subject's posting key: the first 8 bytes of its BLAKE2b, signed (SQL's BIGINT)."""
    digest = hashlib.blake2b(subject.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


# A summary's JSON (a NumberLiteral as its text, in a string). _json is the fast one;
# tests/test_audit_fastjson.py holds it to _SUMMARY, character for character.
_SUMMARY_JSON = SortedJson(number_text)
_SUMMARY = _SUMMARY_JSON.stdlib
_json = _SUMMARY_JSON.text


_COMPRESS = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress
_DECOMPRESS = zstandard.ZstdDecompressor().decompress


# ------------------------------------------------------------------------------------ blocks
# A block's bytes, before zstd: the length of a JSON head (4 bytes, little-endian), the head
# {"n": entries, "y": the types, "s": the subjects}, arrays of little-endian integers (_ARRAYS,
# each as long as the head and the arrays before it say), then the entries' summaries, one
# compact JSON text each. A reader parses the small head and the arrays at C speed, and only the
# summaries of the entries it returns.
_ARRAYS = (
    ("types", "I"),  # per entry: its type's index in the head's "y"
    ("steps", "q"),  # per entry: its offset less the previous one's (the first's, less the block's start - 1)
    ("stamps", "q"),  # per entry: its time_ms less the previous one's (the first's, less 0)
    ("sizes", "I"),  # per entry: the bytes of its summary
    ("entry_ptr", "I"),  # entry n names subjects entry_subjects[entry_ptr[n] : entry_ptr[n + 1]]
    ("entry_subjects", "I"),
    ("subject_ptr", "I"),  # subject i is named by entries subject_entries[subject_ptr[i] : subject_ptr[i + 1]]
    ("subject_entries", "I"),
)
_BIG_ENDIAN = sys.byteorder == "big"


def encode_block(rows: Sequence[Row]) -> bytes:
    """The stored form of one block's rows (in offset order; see _ARRAYS).

    An entry's summary is stored whole the first time its first subject (a pod's event names the
    pod first; a scheduler record, the pod's uid) appears in the block, later only what changed
    since that subject's previous entry (``_delta``): a block decodes on its own.
    """
    type_ids: dict[str, int] = {}
    subject_ids: dict[str, int] = {}
    named: list[list[int]] = []  # per subject, the entries naming it
    entry_subjects: list[int] = []
    entry_ptr = [0]
    lines: list[bytes] = []
    last: dict[str, _Last] = {}  # first subject -> its last entry
    for n, row in enumerate(rows):
        for subject in row.subjects:
            i = subject_ids.setdefault(subject, len(named))
            if i == len(named):
                named.append([])
            named[i].append(n)
            entry_subjects.append(i)
        entry_ptr.append(len(entry_subjects))
        line = _delta(last, row.subjects[0], row.summary) if row.subjects else _json(row.summary)
        lines.append(line.encode("utf-8", "surrogatepass"))
    start = rows[0].offset - rows[0].offset % BLOCK_RECORDS - 1
    columns = {
        "types": [type_ids.setdefault(r.type, len(type_ids)) for r in rows],
        "steps": [b - a for a, b in pairwise(chain((start,), (r.offset for r in rows)))],
        "stamps": [b - a for a, b in pairwise(chain((0,), (r.time_ms for r in rows)))],
        "sizes": [len(line) for line in lines],
        "entry_ptr": entry_ptr,
        "entry_subjects": entry_subjects,
        "subject_ptr": list(accumulate(map(len, named), initial=0)),
        "subject_entries": [n for entries in named for n in entries],
    }
    head = json.dumps({"n": len(rows), "y": list(type_ids), "s": list(subject_ids)}, ensure_ascii=False)
    head_bytes = head.encode("utf-8", "surrogatepass")
    packed = [len(head_bytes).to_bytes(4, "little"), head_bytes]
    for name, code in _ARRAYS:
        values = array(code, columns[name])
        if _BIG_ENDIAN:
            values.byteswap()
        packed.append(values.tobytes())
    return _COMPRESS(b"".join(packed + lines))


# A subject's last entry in the block: its summary, and the JSON texts of those of its values that
# are no string (by key; a pod's fields by field), made when a comparison first needed them.
_Last = tuple[dict[str, Any], dict[str, str], dict[str, str]]


def _delta(last: dict[str, _Last], key: str, summary: dict[str, Any]) -> str:
    """What to store of ``summary``: itself the first time ``key`` (the entry's first subject)
    appears in the block, else ``[changed, changed fields, gone]`` against the key's previous
    entry: the keys whose JSON text differs (a NumberLiteral and the string it is stored as are
    the same; 1 and true are not), those of a pod's ``fields`` too, and the keys no longer there.

    Two strings compare as themselves and None only to None (their texts differ exactly when
    they do); any other value by its text, made once per entry. Most values of a summary are
    strings that did not change, so most are never encoded."""
    texts: dict[str, str] = {}
    field_texts: dict[str, str] = {}
    before = last.get(key)
    last[key] = (summary, texts, field_texts)
    if before is None:
        return _json(summary)
    then, then_texts, then_field_texts = before
    changed = {
        k: v
        for k, v in summary.items()
        if k != "fields" and (k not in then or not _same(then[k], v, k, then_texts, texts))
    }
    gone = _SUMMARY(sorted(then.keys() - summary.keys())) if then.keys() - summary.keys() else "[]"
    fields, then_fields = summary.get("fields"), then.get("fields")
    if type(fields) is dict and type(then_fields) is dict and then_fields.keys() == fields.keys():
        moved = {f: v for f, v in fields.items() if not _same(then_fields[f], v, f, then_field_texts, field_texts)}
        return f"[{_json(changed)},{_json(moved)},{gone}]"
    if "fields" in summary and ("fields" not in then or not _same(then_fields, fields, "fields", then_texts, texts)):
        changed["fields"] = fields
    return f"[{_json(changed)},null,{gone}]"


def _same(old: Any, new: Any, name: str, old_texts: dict[str, str], new_texts: dict[str, str]) -> bool:
    """Whether two values have the same JSON text (``old_texts``/``new_texts`` keep the texts)."""
    if type(new) is str and type(old) is str:
        return new == old
    if new is None or old is None:
        return new is old
    old_text = old_texts.get(name)
    if old_text is None:
        old_text = old_texts[name] = _json(old)
    new_text = new_texts.get(name)
    if new_text is None:
        new_text = new_texts[name] = _json(new)
    return old_text == new_text


class Block:
    """One stored block, decoded lazily: the head and arrays at once, a summary when asked."""

    def __init__(self, first_offset: int, data: bytes) -> None:
        raw = _DECOMPRESS(data)
        end = 4 + int.from_bytes(raw[:4], "little")
        head = json.loads(raw[4:end])
        self.types: list[str] = head["y"]
        self.subjects: list[str] = head["s"]
        self.count: int = head["n"]
        arrays: dict[str, array[int]] = {}
        for name, code in _ARRAYS:
            if name == "subject_ptr":
                length = len(self.subjects) + 1
            elif name in ("entry_subjects", "subject_entries"):
                length = arrays["entry_ptr"][-1]
            else:
                length = self.count + (name == "entry_ptr")
            values = array(code)
            values.frombytes(raw[end : end + length * values.itemsize])
            if _BIG_ENDIAN:
                values.byteswap()
            arrays[name], end = values, end + length * values.itemsize
        self._arrays = arrays
        self.offsets = list(accumulate(arrays["steps"], initial=first_offset - 1))[1:]
        self.stamps = list(accumulate(arrays["stamps"]))
        self._starts = list(accumulate(arrays["sizes"], initial=end))
        self._raw = raw
        self._summaries: dict[int, dict[str, Any]] = {}

    def __len__(self) -> int:
        return self.count

    def type(self, n: int) -> str:
        return self.types[self._arrays["types"][n]]

    def about(self, subjects: Iterable[str]) -> list[int]:
        """The indexes of the entries naming any of ``subjects``, in order."""
        ptr, entries = self._arrays["subject_ptr"], self._arrays["subject_entries"]
        found: set[int] = set()
        for subject in subjects:
            try:
                i = self.subjects.index(subject)
            except ValueError:
                continue  # a subject of the query this block does not name (or a posting key's collision)
            found.update(entries[ptr[i] : ptr[i + 1]])
        return sorted(found)

    def named(self, n: int) -> tuple[str, ...]:
        ptr, subjects = self._arrays["entry_ptr"], self._arrays["entry_subjects"]
        return tuple(self.subjects[i] for i in subjects[ptr[n] : ptr[n + 1]])

    def row(self, n: int) -> Row:
        return Row(self.offsets[n], self.stamps[n], self.type(n), self.named(n), self.summary(n))

    def summary(self, n: int) -> dict[str, Any]:
        """The entry's summary, whole again."""
        if n not in self._summaries:
            stored = json.loads(self._raw[self._starts[n] : self._starts[n + 1]])
            self._summaries[n] = stored if type(stored) is dict else self._undelta(n, *stored)
        return self._summaries[n]

    def _undelta(
        self, n: int, changed: dict[str, Any], fields: dict[str, Any] | None, gone: list[str]
    ) -> dict[str, Any]:
        before = self.summary(self._previous(n))
        summary = {k: v for k, v in before.items() if k not in gone}
        summary.update(changed)
        if fields is not None:
            summary["fields"] = {**before["fields"], **fields}
        return summary

    def _previous(self, n: int) -> int:
        """The entry before ``n`` in the block with the same first subject (a delta's base)."""
        first = self._arrays["entry_subjects"]
        ptr = self._arrays["entry_ptr"]
        key = first[ptr[n]]
        subject_ptr, entries = self._arrays["subject_ptr"], self._arrays["subject_entries"]
        return max(m for m in entries[subject_ptr[key] : subject_ptr[key + 1]] if m < n and first[ptr[m]] == key)


def _rows(entries: Iterable[AuditEntry]) -> list[Row]:
    rows = []
    for e in entries:
        kind, subjects, summary = describe(e)
        rows.append(Row(e.offset, e.time_ms, kind, subjects, summary))
    return rows


def _blocks(rows: list[Row]) -> Iterator[list[Row]]:
    start = 0
    while start < len(rows):
        end_offset = rows[start].offset - rows[start].offset % BLOCK_RECORDS + BLOCK_RECORDS
        end = bisect.bisect_left(rows, end_offset, lo=start, key=lambda r: r.offset)
        yield rows[start:end]
        start = end


# ------------------------------------------------------------------------------------- index
_PG_POSTINGS = (
    "INSERT INTO audit_postings (log_id, subject_key, first_offset) "
    "SELECT %s, k, f FROM unnest(%s::bigint[], %s::bigint[]) AS p(k, f) ON CONFLICT DO NOTHING"
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
        posting_columns = ("log_id", "subject_key", "first_offset")
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
            return conn.execute(select(AuditLogRow.indexed_to).where(AuditLogRow.id == log_id)).scalar_one()

    def write(self, log: LogIdentity, entries: Sequence[AuditEntry], upto: int) -> None:
        """Store entries (in offset order) and mark the log indexed up to ``upto`` (records
        applied), in one transaction."""
        log_id = self.log_id(log)
        with self.engine.connect().execution_options(sqlite_immediate=True) as conn, conn.begin():
            if conn.dialect.name == "sqlite":
                # postings go in at random places of their B-tree (keys are hashes), which SQLite's
                # default 2 MiB page cache stops holding after a few hundred thousand records
                conn.exec_driver_sql(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
            indexed = self._position(conn, log_id)  # locked until commit: one writer per log at a time
            rows = _rows(entries[bisect.bisect_left(entries, indexed, key=lambda e: e.offset) :])
            if rows:
                start = rows[0].offset - rows[0].offset % BLOCK_RECORDS
                if start < rows[0].offset:  # the block was begun by an earlier write
                    rows = self._stored(conn, log_id, start, rows[0].offset) + rows
                self._store(conn, log_id, rows)
            if upto > indexed:
                conn.execute(update(AuditLogRow).where(AuditLogRow.id == log_id).values(indexed_to=upto))

    def _position(self, conn: Connection, log_id: int) -> int:
        query = select(AuditLogRow.indexed_to).where(AuditLogRow.id == log_id)
        if conn.dialect.name == "postgresql":
            query = query.with_for_update()  # SQLite's BEGIN IMMEDIATE locked the database already
        return int(conn.execute(query).scalar_one())

    def _stored(self, conn: Connection, log_id: int, start: int, below: int) -> list[Row]:
        data = conn.execute(
            select(AuditBlockRow.data).where(AuditBlockRow.log_id == log_id, AuditBlockRow.first_offset == start)
        ).scalar_one_or_none()
        if data is None:
            return []
        block = Block(start, bytes(data))
        return [block.row(n) for n in range(len(block)) if block.offsets[n] < below]

    def _store(self, conn: Connection, log_id: int, rows: list[Row]) -> None:
        blocks: list[tuple[int, int, int, int, int, bytes]] = []
        postings: list[tuple[int, int, int]] = []
        for chunk in _blocks(rows):
            first = chunk[0].offset - chunk[0].offset % BLOCK_RECORDS
            stamps = [r.time_ms for r in chunk]
            blocks.append((log_id, first, chunk[-1].offset, min(stamps), max(stamps), encode_block(chunk)))
            named = {s for r in chunk for s in r.subjects}
            postings.extend((log_id, subject_key(s), first) for s in sorted(named))
        # Plain tuples through the driver's executemany: SQLAlchemy's per-row bound parameters
        # cost more than the encoding.
        for i in range(0, len(blocks), BATCH_ROWS):
            conn.exec_driver_sql(self._blocks_sql, blocks[i : i + BATCH_ROWS])
        if conn.dialect.name == "postgresql":
            # one statement with two arrays, not an executemany of a flush's ~20,000 postings
            keys, firsts = [p[1] for p in postings], [p[2] for p in postings]
            conn.exec_driver_sql(_PG_POSTINGS, (log_id, keys, firsts))
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
                    out.append(AuditRow(offset, stamp, block.type(n), block.summary(n)))
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
        matching = (
            select(AuditPostingRow.first_offset)
            .where(AuditPostingRow.log_id == log_id, AuditPostingRow.subject_key.in_(keys))
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
        with self.engine.connect() as conn:
            found = conn.execute(query).all()
        for first_offset, data in found:
            yield Block(first_offset, bytes(data))


def _bounds(low: int | None, high: int | None) -> tuple[int | float, int | float]:
    return (low if low is not None else float("-inf"), high if high is not None else float("inf"))
