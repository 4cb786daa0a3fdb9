"""The audit index's blocks and postings (no broker: the fold, SQLite and PostgreSQL).

Every answer is checked against the entries themselves: what ``describe`` says of each record,
stored and read back through JSON, is what a history must find under each of its subjects.
"""

from __future__ import annotations

import io
import json
import random
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from strata.gen import generate
from strata.ingest.trace import parse_line, split_lines
from strata.projector import audit
from strata.projector.auditstore import (
    BLOCK_RECORDS,
    AuditBlockRow,
    AuditIndex,
    AuditPostingRow,
    Block,
    Row,
    encode_block,
)
from strata.projector.checkpoint import LogIdentity
from strata.projector.sqlstore import SqlCheckpointStore
from strata.projector.state import CacheState
from strata.schemas.objectjson import NumberLiteral

CONFORMANCE = Path(__file__).with_name("conformance")
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


def folded(data: bytes) -> list[audit.AuditEntry]:
    """The audit entries of a trace, as the projector makes them (stamps: 7 ms apart)."""
    state = CacheState()
    entries = []
    for offset, (_, line) in enumerate(split_lines(data)):
        record = parse_line(line, "t")
        ctx = audit.context(state, record)
        outcome = state.apply_at(offset, record)
        entries.append(audit.entry(offset, START_MS + 7 * offset, record, outcome, ctx, state.last_object))
    return entries


@pytest.fixture(scope="module")
def generated() -> list[audit.AuditEntry]:
    out = io.BytesIO()
    generate(out, nodes=30, pods=600, seed=3)
    entries = folded(out.getvalue())
    assert len(entries) > 4 * BLOCK_RECORDS
    return entries


def expected(entries: list[audit.AuditEntry]) -> dict[str, list[tuple[int, int, str, Any]]]:
    """Per subject, the (offset, time, type, summary as JSON reads it back) of its entries."""
    out = defaultdict(list)
    for e in entries:
        kind, subjects, summary = audit.describe(e)
        stored = json.loads(json.dumps(summary, default=lambda n: n.text))
        for subject in subjects:
            out[subject].append((e.offset, e.time_ms, kind, stored))
    return out


def found(index: AuditIndex, subject: str, **bounds: Any) -> list[tuple[int, int, str, Any]]:
    return [(r.offset, r.time_ms, r.type, r.summary) for r in index.rows(LOG, [subject], **bounds)]


def write_in_pieces(index: AuditIndex, entries: list[audit.AuditEntry], rng: random.Random) -> None:
    """Flushes of random sizes (ending inside blocks), and a restart that writes some again."""
    i = 0
    while i < len(entries):
        size = rng.randint(1, 3 * BLOCK_RECORDS)
        index.write(LOG, entries[i : i + size], entries[min(i + size, len(entries)) - 1].offset + 1)
        i += size
        if rng.random() < 0.3:
            i = max(0, i - rng.randint(1, 2 * BLOCK_RECORDS))  # restarted from an older checkpoint


def test_every_subject_finds_exactly_its_entries(index: AuditIndex, generated: list[audit.AuditEntry]):
    write_in_pieces(index, generated, random.Random(5))
    assert index.indexed_to(LOG) == len(generated)
    want = expected(generated)
    rng = random.Random(9)
    subjects = sorted(want)
    for subject in [*rng.sample(subjects, 150), max(subjects, key=lambda s: len(want[s]))]:
        assert found(index, subject) == want[subject], subject
        assert index.offsets(LOG, [subject]) == [o for o, *_ in want[subject]]


def test_bounds_by_offset_and_time(index: AuditIndex, generated: list[audit.AuditEntry]):
    index.write(LOG, generated, len(generated))
    want = expected(generated)
    node = max((s for s in want if s.startswith("node:")), key=lambda s: len(want[s]))
    items = want[node]
    low, high = items[len(items) // 4], items[3 * len(items) // 4]
    assert found(index, node, since_offset=low[0], until_offset=high[0]) == [
        i for i in items if low[0] <= i[0] <= high[0]
    ]
    assert found(index, node, since_ms=low[1] + 1, until_ms=high[1]) == [i for i in items if low[1] < i[1] <= high[1]]
    assert found(index, node, since_offset=high[0] + 1, until_offset=high[0]) == []


def test_blocks_depend_only_on_the_records(url: str, tmp_path: Path, generated: list[audit.AuditEntry]):
    """Written at once, or in pieces with rewrites: the same bytes, the same postings."""
    store = SqlCheckpointStore(url)
    try:
        pieces = AuditIndex(store.engine)
        write_in_pieces(pieces, generated, random.Random(11))
        pieces.write(LOG, generated[:2000], 2000)  # a restart from the very beginning: nothing changes
        once = SqlCheckpointStore(f"sqlite:///{tmp_path / 'once.db'}")
        try:
            AuditIndex(once.engine).write(LOG, generated, len(generated))
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
    for subject, items in want.items():
        assert found(index, subject) == items, subject


def test_a_pod_summary_round_trips_through_deltas():
    """Changes a delta must carry: a key that goes, a fields set that changes, 1 after true,
    a number as written after the string it is stored as."""
    pod = ("pod:ns/p", "uid:u")
    fields = {"phase": "Pending", "nodeName": None, "deletionTimestamp": None, "annotations": {}, "requests": {}}
    summaries: list[dict[str, Any]] = [
        {"op": "ADDED", "kind": "Pod", "name": "p", "reason": "r", "fields": fields},
        {"op": "MODIFIED", "kind": "Pod", "name": "p", "fields": {**fields, "annotations": {"a": True}}},
        {"op": "MODIFIED", "kind": "Pod", "name": "p", "fields": {**fields, "annotations": {"a": 1}}},
        {"op": "MODIFIED", "kind": "Pod", "name": "p", "fields": {}},
        {"op": "MODIFIED", "kind": "Pod", "name": "p", "fields": {**fields, "requests": {"c": {"cpu": "0.5"}}}},
        {"op": "MODIFIED", "kind": "Pod", "name": "p", "fields": {**fields, "requests": {"c": {"cpu": "0.5"}}}},
        {"op": "MODIFIED", "kind": "Pod", "name": "p", "fields": {**fields, "requests": {"c": {"cpu": "0.5"}}}},
    ]
    summaries[5]["fields"]["requests"] = {"c": {"cpu": NumberLiteral("0.5")}}  # the same once stored
    rows = [Row(BLOCK_RECORDS + n, START_MS, s["op"], pod, s) for n, s in enumerate(summaries)]
    block = Block(BLOCK_RECORDS, encode_block(rows))
    back = [block.summary(n) for n in range(len(block))]
    assert back == json.loads(json.dumps(summaries, default=lambda n: n.text))
    assert [block.row(n).subjects for n in range(len(block))] == [pod] * len(rows)
    assert block.about({"uid:u", "node:x"}) == list(range(len(rows)))


def test_the_upgrade_drops_the_old_index_and_has_it_rebuilt(url: str):
    """0003 drops the per-record tables and sets every log back to 0: `strata project` refolds."""
    from alembic import command
    from sqlalchemy import inspect, text

    from strata.projector.sqlstore import alembic_config, open_engine

    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "0002")
            conn.execute(text("INSERT INTO audit_logs (topic, cluster_id, fold, indexed_to) VALUES ('t', 'c', 'f', 9)"))
            conn.execute(text("INSERT INTO audit_records VALUES (1, 0, 0, 'BAD', '{}')"))
        store = SqlCheckpointStore(url)  # opening a store upgrades to the head
        index = AuditIndex(store.engine)
        assert index.indexed_to(LOG) == 0
        index.write(LOG, folded((CONFORMANCE / "c01.jsonl").read_bytes()), 5)
        store.close()
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
        assert {"audit_blocks", "audit_postings"} <= tables and not {"audit_records", "audit_subjects"} & tables
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0002")
            assert conn.execute(text("SELECT indexed_to FROM audit_logs")).scalars().all() == [0]
    finally:
        engine.dispose()
