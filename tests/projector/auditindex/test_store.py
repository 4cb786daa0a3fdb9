"""The audit index's blocks and postings (no broker: the fold, SQLite and PostgreSQL).

Every answer is checked against the fold's own view of each record: what ``describe`` says of the
record, the outcome and the object the fold parsed, read back through JSON, is what a history
must find under each of its subjects, though the index keeps only the record's bytes and derives
the rest when it writes and reads.
"""

from __future__ import annotations

import io
import itertools
import json
import random
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from strata.dev.gen import generate
from strata.projector.auditindex import store as auditstore
from strata.projector.auditindex.store import (
    BLOCK_RECORDS,
    AuditBlockRow,
    AuditIndex,
    AuditPostingRow,
    Block,
    Records,
    context_of,
    encode_block,
    plain_context,
)
from strata.projector.checkpoints.interface import LogIdentity
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.projector.fold import auditentries as audit
from strata.projector.fold.state import CacheState
from strata.schemas import encode
from strata.schemas.trace import parse_line, split_lines
from tests.paths import CONFORMANCE

CONFORMANCE = CONFORMANCE
LOG = LogIdentity("t", "c", "f")
START_MS = 1_700_000_000_000


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'a.db'}"
    return request.getfixturevalue("postgres_database")


@pytest.fixture
def index(url: str) -> Iterator[AuditIndex]:
    store = SqlCheckpointStore(url)
    yield AuditIndex(store.engine)
    store.close()


class Folded(list[audit.Kept]):
    """The kept records of a trace, as the projector keeps them, their subjects, and the fold's
    own view of each."""

    subjects: list[tuple[str, ...]]
    refs: list[audit.PodRefs]  # what the projector hands the index's writer instead of the subjects
    seen: list[audit.AuditEntry]

    def records(self, low: int = 0, high: int | None = None) -> Records:
        return Records.of(self[low:high], self.subjects[low:high])


def folded(data: bytes) -> Folded:
    """A trace folded as the projector folds it (stamps: 7 ms apart)."""
    state = CacheState()
    out = Folded()
    out.seen, out.subjects, out.refs = [], [], []
    for offset, (_, line) in enumerate(split_lines(data)):
        record = parse_line(line, "t")
        ctx = audit.context(state, record)
        outcome = state.apply_at(offset, record)
        stamp = START_MS + 7 * offset
        out.append(audit.Kept(offset, stamp, encode(record), outcome, ctx))
        out.subjects.append(audit.subjects(record, ctx, state.last_object))
        out.refs.append(audit.pod_refs(record, state.last_object))
        fields = audit.pod_fields(state.last_object) if getattr(record, "kind", None) == "Pod" else None
        out.seen.append(audit.AuditEntry(offset, stamp, record, outcome, ctx, fields))
    return out


@pytest.fixture(scope="module")
def generated() -> Folded:
    out = io.BytesIO()
    generate(out, nodes=30, pods=600, seed=3)
    kept = folded(out.getvalue())
    assert len(kept) > 4 * BLOCK_RECORDS
    return kept


def expected(kept: Folded) -> dict[str, list[tuple[int, int, str, Any]]]:
    """Per subject, the (offset, time, type, summary as JSON reads it back) of its entries, as
    the fold saw them."""
    out = defaultdict(list)
    for e in kept.seen:
        kind, subjects, summary = audit.describe(e)
        stored = json.loads(json.dumps(summary, default=lambda n: n.text))
        for subject in subjects:
            out[subject].append((e.offset, e.time_ms, kind, stored))
    return out


def found(index: AuditIndex, subject: str, **bounds: Any) -> list[tuple[int, int, str, Any]]:
    return [(r.offset, r.time_ms, r.type, r.summary) for r in index.rows(LOG, [subject], **bounds)]


def write_in_pieces(index: AuditIndex, entries: Folded, rng: random.Random) -> None:
    """Flushes of random sizes (ending inside blocks), some as several parts (a writer's frames),
    and a restart that writes some again."""
    i = 0
    while i < len(entries):
        size = rng.randint(1, 3 * BLOCK_RECORDS)
        upto = entries[min(i + size, len(entries)) - 1].offset + 1
        if rng.random() < 0.5:
            index.write(LOG, entries.records(i, i + size), upto)
        else:
            index.write(LOG, _parts(entries, i, i + size, rng), upto)
        i += size
        if rng.random() < 0.3:
            i = max(0, i - rng.randint(1, 2 * BLOCK_RECORDS))  # restarted from an older checkpoint


def _parts(entries: Folded, low: int, high: int, rng: random.Random) -> list[Records]:
    """Records low..high-1 as consecutive parts cut at random, at block boundaries too."""
    cuts = sorted({low, high, *(rng.randint(low, high) for _ in range(3)), high - high % BLOCK_RECORDS})
    return [entries.records(a, b) for a, b in itertools.pairwise(cuts) if low <= a < b <= high]


def test_blocks_of_parts_are_the_blocks_of_the_parts_joined(generated: Folded):
    """``Records.blocks_of``: the blocks of the parts joined, a part that is a block handed on
    as it is; parts with a gap between them refused."""
    rng = random.Random(5)
    for _ in range(20):
        low = rng.randint(0, 3 * BLOCK_RECORDS)
        high = rng.randint(low + 1, 6 * BLOCK_RECORDS)
        parts = _parts(generated, low, high, rng)
        assert list(Records.blocks_of(parts)) == list(Records.joined(parts).blocks())
    block = generated.records(BLOCK_RECORDS, 2 * BLOCK_RECORDS)
    assert next(Records.blocks_of([block])) is block
    with pytest.raises(ValueError, match="a gap"):
        list(Records.blocks_of([generated.records(0, 10), generated.records(11, 20)]))


@pytest.fixture(params=[auditstore.BUCKET_BLOCKS, 2], ids=["buckets", "small-buckets"])
def buckets(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also buckets of two blocks: a subject's postings in several, bounds inside them."""
    monkeypatch.setattr(auditstore, "BUCKET_BLOCKS", request.param)


@pytest.mark.usefixtures("buckets")
def test_every_subject_finds_exactly_its_entries(index: AuditIndex, generated: Folded):
    write_in_pieces(index, generated, random.Random(5))
    assert index.indexed_to(LOG) == len(generated)
    want = expected(generated)
    rng = random.Random(9)
    subjects = sorted(want)
    for subject in [*rng.sample(subjects, 150), max(subjects, key=lambda s: len(want[s]))]:
        assert found(index, subject) == want[subject], subject
        assert index.offsets(LOG, [subject]) == [o for o, *_ in want[subject]]


@pytest.mark.usefixtures("buckets")
def test_bounds_by_offset_and_time(index: AuditIndex, generated: Folded):
    index.write(LOG, generated.records(), len(generated))
    want = expected(generated)
    node = max((s for s in want if s.startswith("node:")), key=lambda s: len(want[s]))
    items = want[node]
    low, high = items[len(items) // 4], items[3 * len(items) // 4]
    assert found(index, node, since_offset=low[0], until_offset=high[0]) == [
        i for i in items if low[0] <= i[0] <= high[0]
    ]
    assert found(index, node, since_ms=low[1] + 1, until_ms=high[1]) == [i for i in items if low[1] < i[1] <= high[1]]
    assert found(index, node, since_offset=high[0] + 1, until_offset=high[0]) == []
    assert found(index, node, since_offset=len(generated)) == []


def test_blocks_depend_only_on_the_records(url: str, tmp_path: Path, generated: Folded):
    """Written at once, or in pieces with rewrites: the same bytes, the same postings."""
    store = SqlCheckpointStore(url)
    try:
        pieces = AuditIndex(store.engine)
        write_in_pieces(pieces, generated, random.Random(11))
        pieces.write(LOG, generated.records(0, 2000), 2000)  # a restart from the very beginning: nothing changes
        once = SqlCheckpointStore(f"sqlite:///{tmp_path / 'once.db'}")
        try:
            AuditIndex(once.engine).write(LOG, generated.records(), len(generated))
            assert _stored(store) == _stored(once)
        finally:
            once.close()
    finally:
        store.close()


def _stored(store: SqlCheckpointStore) -> tuple[list[Any], list[Any]]:
    with store.engine.connect() as conn:
        blocks = conn.execute(
            select(
                AuditBlockRow.first_offset,
                AuditBlockRow.last_offset,
                AuditBlockRow.first_ms,
                AuditBlockRow.last_ms,
                AuditBlockRow.data,
            ).order_by(AuditBlockRow.first_offset)
        ).all()
        postings = conn.execute(
            select(AuditPostingRow.subject_key, AuditPostingRow.first_offset).order_by(
                AuditPostingRow.subject_key, AuditPostingRow.first_offset
            )
        ).all()
    return [(*b[:4], bytes(b[4])) for b in blocks], [tuple(p) for p in postings]


def test_a_conformance_trace_with_odd_records(index: AuditIndex):
    entries = folded((CONFORMANCE / "c05.jsonl").read_bytes())
    write_in_pieces(index, entries, random.Random(2))
    want = expected(entries)
    for subject, rows in want.items():
        assert found(index, subject) == rows, subject


def test_a_block_keeps_the_records_and_what_only_the_fold_knew(generated: Folded):
    """Outcomes other than "applied", pod contexts (a BIND's, a BIND_GROUP's) and the messages'
    bytes come back from a block as they went in."""
    chunk = generated[2 * BLOCK_RECORDS : 3 * BLOCK_RECORDS]
    assert {k.outcome.result for k in chunk} > {"applied"} and any(k.context for k in chunk)
    block = Block(2 * BLOCK_RECORDS, encode_block(generated.records(2 * BLOCK_RECORDS, 3 * BLOCK_RECORDS)))
    assert [block.kept(n) for n in range(len(block))] == chunk
    assert [block.row(n).subjects for n in range(len(block))] == [e.subjects for e in generated.seen[2048:3072]]
    assert block.records() == generated.records(2 * BLOCK_RECORDS, 3 * BLOCK_RECORDS)


def test_the_upgrade_drops_the_old_index_and_has_it_rebuilt(url: str):
    """0003 drops the per-record tables and 0004 the summaries' blocks, each setting every log
    back to 0: `strata project` refolds."""
    from alembic import command
    from sqlalchemy import inspect, text

    from strata.projector.checkpoints.sql import alembic_config, open_engine

    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "0002")
            conn.execute(text("INSERT INTO audit_logs (topic, cluster_id, fold, indexed_to) VALUES ('t', 'c', 'f', 9)"))
            conn.execute(text("INSERT INTO audit_records VALUES (1, 0, 0, 'BAD', '{}')"))
        store = SqlCheckpointStore(url)  # opening a store upgrades to the head
        index = AuditIndex(store.engine)
        assert index.indexed_to(LOG) == 0
        index.write(LOG, folded((CONFORMANCE / "c01.jsonl").read_bytes()).records(), 5)
        store.close()
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
        assert {"audit_blocks", "audit_postings"} <= tables and not {"audit_records", "audit_subjects"} & tables
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0002")
            assert conn.execute(text("SELECT indexed_to FROM audit_logs")).scalars().all() == [0]
    finally:
        engine.dispose()


def test_the_buckets_are_those_the_stored_rows_were_put_in():
    """Rows bucketed by migration 0006 and by every write since are found only while a bucket
    spans the same offsets: another size needs a migration that moves them."""
    assert auditstore.BLOCK_RECORDS * auditstore.BUCKET_BLOCKS == 65536


def test_0006_puts_the_postings_in_buckets(url: str):
    """The postings are converted, the bucket computed from the block's offset, not forgotten;
    a downgrade gives them back as they were."""
    from alembic import command
    from sqlalchemy import text

    from strata.projector.checkpoints.sql import alembic_config, open_engine

    rows = [(1, 7, 0), (1, 7, 3 * 65536 + 1024), (1, -5, 65536)]
    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "0005")
            conn.execute(text("INSERT INTO audit_logs (topic, cluster_id, fold, indexed_to) VALUES ('t', 'c', 'f', 9)"))
            for row in rows:
                conn.execute(text("INSERT INTO audit_postings VALUES (:l, :k, :f)"), dict(zip("lkf", row, strict=True)))
            command.upgrade(alembic_config(conn), "0006")
            got = conn.execute(text("SELECT log_id, bucket, subject_key, first_offset FROM audit_postings")).all()
            assert sorted(map(tuple, got)) == [(1, 0, 7, 0), (1, 1, -5, 65536), (1, 3, 7, 197632)]
            command.downgrade(alembic_config(conn), "0005")
            got = conn.execute(text("SELECT log_id, subject_key, first_offset FROM audit_postings")).all()
            assert sorted(map(tuple, got)) == sorted(rows)
            command.upgrade(alembic_config(conn), "head")
    finally:
        engine.dispose()


def test_0004_forgets_the_summaries_blocks(url: str):
    """Blocks of summaries (0003's format) are deleted and every log set back to 0."""
    from alembic import command
    from sqlalchemy import text

    from strata.projector.checkpoints.sql import alembic_config, open_engine

    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "0003")
            conn.execute(text("INSERT INTO audit_logs (topic, cluster_id, fold, indexed_to) VALUES ('t', 'c', 'f', 9)"))
            conn.execute(text("INSERT INTO audit_blocks VALUES (1, 0, 8, 0, 0, :data)"), {"data": b"old"})
            conn.execute(text("INSERT INTO audit_postings VALUES (1, 7, 0)"))
        store = SqlCheckpointStore(url)
        try:
            assert AuditIndex(store.engine).indexed_to(LOG) == 0
        finally:
            store.close()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM audit_blocks")).scalar_one() == 0
            assert conn.execute(text("SELECT count(*) FROM audit_postings")).scalar_one() == 0
    finally:
        engine.dispose()


def test_a_pod_context_reads_back_as_it_was_kept() -> None:
    """What the index keeps of a record's pod context (``plain_context``) gives it back, a
    BIND_GROUP's of no binds included (an empty list, which reading back once raised TypeError)."""
    pod = audit.PodContext("ns", "p", "ns/job", "node-1")
    for ctx in (None, pod, (pod, audit.PodContext(None, None, None, "")), ()):
        assert context_of(plain_context(ctx)) == ctx
