"""Divergence detection: readers report digests at agreed versions; `strata verify --replicas`
names a reader that was fed a tampered record, and that reader finds itself outvoted."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strata.ingest.from_trace import publish_trace
from strata.log.cachelog import LogEntry
from strata.log.config import Settings
from strata.log.digests import DIVERGENT, DigestReporter, divergences
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.scheduler.cache import LogCache
from strata.schemas import BadRecord, Digest, WatchEvent
from strata.schemas.trace import read_trace
from tests.cli.test_cli import run
from tests.cli.test_log import env_of
from tests.paths import CONFORMANCE

CONFORMANCE = CONFORMANCE
FOLD = "schedulerNames=volcano;defaultQueue=default"


def test_the_majority_names_the_dissenter_and_a_tie_names_both():
    reports = [Digest(10, "a", "r1", FOLD), Digest(10, "a", "r2", FOLD), Digest(10, "b", "r3", FOLD)]
    reports += [Digest(20, "a", "r1", FOLD), Digest(20, "b", "r2", FOLD), Digest(30, "a", "r1", FOLD)]
    reports += [Digest(40, "x", "r1", FOLD), Digest(40, "y", "r2", "other fold")]  # other folds never compare
    (at10, at20) = divergences(reports)
    assert (at10.version, at10.majority, at10.dissenters) == (10, "a", ("r3",))
    assert (at20.version, at20.majority, at20.dissenters) == (20, None, ("r1", "r2"))


@pytest.mark.kafka
def test_the_versions_until_a_report_count_down_to_it(kafka: Settings):
    reporter = DigestReporter(kafka.with_(digest_every=50_000), "near", "test")
    assert [reporter.until_due(v) for v in (48_975, 48_976, 49_999, 50_000, 50_001, 0)] == [
        1_025,
        1_024,
        1,
        0,
        49_999,
        0,
    ]
    assert DigestReporter(kafka.with_(digest_every=0), "never", "test").until_due(50_000) is None


@pytest.mark.kafka
def test_a_replica_fed_a_tampered_record_is_named(kafka: Settings, tmp_path: Path):
    settings = kafka.with_(digest_every=200)
    publish_trace(settings, CONFORMANCE / "c04.jsonl")
    store = SqlCheckpointStore(f"sqlite:///{tmp_path / 'c.db'}")
    stop = threading.Event()
    caches = {name: LogCache(settings, name, store) for name in ("a", "b", "c")}
    honest_follow = caches["c"].runner.reader.follow
    records = [line.record for line in read_trace(CONFORMANCE / "c04.jsonl")]
    # the last Node event: nothing after it undoes the damage of losing it
    target = max(
        i for i, r in enumerate(records) if isinstance(r, WatchEvent) and r.kind == "Node" and r.op != "DELETED"
    )

    def tampered(start: int, stop: threading.Event, **kw: Any) -> Iterator[LogEntry | None]:
        for entry in honest_follow(start, stop, **kw):  # a corrupted fetch: one record goes bad
            if entry is not None and entry.offset == target:
                entry = LogEntry(entry.offset, entry.timestamp_ms, BadRecord(b"", "tampered", "test"))
            yield entry

    caches["c"].runner.reader.follow = tampered  # type: ignore[method-assign]
    for cache in caches.values():
        cache.run(stop)
    for cache in caches.values():
        cache.wait_for_version(1000, timeout_s=60)
        cache.digests.drain()
    stop.set()
    outvoted = {name: cache.digests.check() for name, cache in caches.items()}
    assert outvoted["a"] == [] and outvoted["b"] == []
    assert [d.version for d in outvoted["c"]] == [1000]
    assert DIVERGENT.labels("c")._value.get() == 1 and DIVERGENT.labels("a")._value.get() == 0

    out = run("verify", "--replicas", env=env_of(settings))
    assert out.returncode == 1
    assert out.stdout.splitlines()[0].startswith("version 1000: c disagree with the majority")
    assert len(out.stdout.splitlines()) == 1
    assert "1 divergent version(s) among 5 compared, from 3 reader(s)" in out.stderr
