"""The audit entries of odd but valid records can be stored (no broker: the fold and SQLite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata.projector.auditindex.store import AuditIndex, Records
from strata.projector.checkpoints.interface import LogIdentity
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.projector.fold import auditentries as audit
from strata.projector.fold.state import CacheState
from strata.schemas import encode
from strata.schemas.trace import parse_line

NODE = b'{"type":"ADDED","object":{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","uid":"n","resourceVersion":"1"},"status":{"allocatable":{"cpu":"8","pods":"110"}}}}'  # noqa: E501
POD = b'{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1","namespace":"ns","uid":"p","resourceVersion":"2"},"spec":{"schedulerName":"volcano","containers":[{"name":"c","resources":{"requests":{"cpu":0.50,"memory":1e3}}}]},"status":{"phase":"Pending"}}}'  # noqa: E501


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'a.db'}"
    return request.getfixturevalue("postgres_database")


def test_a_quantity_written_as_a_json_number_is_indexed_as_written(url: str):
    state = CacheState()
    entries, named = [], []
    for offset, line in enumerate((NODE, POD)):
        record = parse_line(line, "t")
        ctx = audit.context(state, record)
        outcome = state.apply(record)
        assert outcome.result == "applied"
        entries.append(audit.Kept(offset, 0, encode(record), outcome, ctx))
        named.append(audit.subjects(record, ctx, state.last_object))
    store = SqlCheckpointStore(url)
    try:
        index = AuditIndex(store.engine)
        log = LogIdentity("t", "c", "f")
        index.write(log, Records.of(entries, named), 2)
        index.write(log, Records.of(entries, named), 2)  # a restarted projector writes the same rows again: no error
        (row,) = index.rows(log, ["pod:ns/p1"])
        assert row.summary["fields"]["requests"] == {"c": {"cpu": "0.50", "memory": "1e3"}}
        assert index.offsets(log, ["node:n1", "uid:p"]) == [0, 1]
        assert index.indexed_to(log) == 2
    finally:
        store.close()
