"""The audit index's writer process, fed as the projector feeds it (no broker: the fold, a real
writer process, SQLite and PostgreSQL): the index it leaves is the one ``AuditIndex.write`` of
every record at once leaves, byte for byte, whatever happened to the writer on the way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from strata.errors import StrataError
from strata.projector.auditindex.store import BLOCK_RECORDS, AuditIndex
from strata.projector.auditindex.writer import AuditFeed
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.projector.release import PARTS_PER_TEND, Release
from tests.paths import REPO
from tests.projector.auditindex.test_store import LOG, Folded, _stored, generated, url  # noqa: F401 (fixtures)
from tests.projector.checkpoints.test_writer import lowered


def feed_all(feed: AuditFeed, kept: Folded, low: int = 0, high: int | None = None, hook: object = None) -> None:
    """Add the records as the projector does, pumping now and then and sealing on idle moments."""
    add = feed.adder()
    for n in range(low, len(kept) if high is None else high):
        k = kept[n]
        add(k.offset, k.time_ms, k.value, k.outcome, k.context, kept.refs[n])
        if n % 97 == 0:
            feed.pump()
        if n % 1500 == 1499:
            feed.seal()  # an idle moment: a partial block goes out
        if callable(hook):
            hook(n)
    assert feed.drain() >= 0


@dataclass
class Stores:
    """The database the writer writes, one written at once to hold it to, and the feeds to close."""

    url: str
    store: SqlCheckpointStore
    once: SqlCheckpointStore
    feeds: list[AuditFeed] = field(default_factory=list)

    def feed(self, indexed: int = 0) -> AuditFeed:
        self.feeds.append(AuditFeed(self.url, LOG, indexed))
        return self.feeds[-1]

    def alike(self) -> bool:
        return _stored(self.store) == _stored(self.once)


@pytest.fixture
def stores(url: str, tmp_path: Path, generated: Folded) -> Iterator[Stores]:  # noqa: F811
    once = SqlCheckpointStore(f"sqlite:///{tmp_path / 'once.db'}")
    AuditIndex(once.engine).write(LOG, generated.records(), len(generated))
    made = Stores(url, SqlCheckpointStore(url), once)
    yield made
    for feed in made.feeds:
        feed.close()
    made.store.close()
    once.close()


def test_the_writer_stores_what_write_stores(stores: Stores, generated: Folded) -> None:  # noqa: F811
    feed = stores.feed()
    feed_all(feed, generated)
    assert feed.indexed == len(generated) and feed.backlog == 0 and feed.restarts == 0
    feed.close()
    assert stores.alike()
    assert AuditIndex(stores.store.engine).indexed_to(LOG) == len(generated)


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_a_killed_writer_is_replaced_and_nothing_is_lost(stores: Stores, generated: Folded) -> None:  # noqa: F811
    feed = stores.feed()
    killed: list[int] = []
    before = _restarts()

    def kill(n: int) -> None:
        if n in (2 * BLOCK_RECORDS + 5, 4 * BLOCK_RECORDS + 500):
            process = feed._process
            assert process is not None
            process.send_signal(signal.SIGKILL)
            process.wait()
            killed.append(process.pid)

    feed_all(feed, generated, hook=kill)
    assert len(killed) == 2 and feed.restarts == 2 and _restarts() == before + 2
    assert stores.alike()


def _restarts() -> float:
    return REGISTRY.get_sample_value("strata_child_restarts_total", {"process": "audit_writer"}) or 0.0


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_a_restart_from_an_older_checkpoint_sends_only_what_the_index_lacks(stores: Stores, generated: Folded) -> None:  # noqa: F811
    half = len(generated) // 2 + 17
    feed_all(stores.feed(), generated, 0, half)
    stores.feeds[-1].close()
    feed = stores.feed(AuditIndex(stores.store.engine).indexed_to(LOG))
    feed_all(feed, generated, 0, half - 3 * BLOCK_RECORDS)  # the fold again from an older state
    assert feed.packer.values == []
    feed_all(feed, generated, half - 3 * BLOCK_RECORDS)
    feed.close()
    assert stores.alike()


@pytest.mark.parametrize("url", ["sqlite"], indirect=True)
def test_a_writer_that_cannot_write_tries_again_and_the_fold_waits(stores: Stores, generated: Folded) -> None:  # noqa: F811
    """The blocks' table away for a while: the writer says so and tries again; the fold, once its
    backlog is full, waits for it (bounded memory); nothing is lost."""
    feed = stores.feed()

    def rename(old: str, new: str) -> None:
        with stores.store.engine.begin() as conn:
            conn.exec_driver_sql(f"ALTER TABLE {old} RENAME TO {new}")

    feed_all(feed, generated, 0, BLOCK_RECORDS)
    rename("audit_blocks", "audit_blocks_away")
    back = threading.Timer(3.0, rename, ("audit_blocks_away", "audit_blocks"))
    back.start()
    add = feed.adder()
    for n in range(BLOCK_RECORDS, 4 * BLOCK_RECORDS):
        k = generated[n]
        add(k.offset, k.time_ms, k.value, k.outcome, k.context, generated.refs[n])
    assert feed.backlog == 3 * BLOCK_RECORDS
    waited = feed.wait(below=BLOCK_RECORDS)
    back.join()
    assert waited > 1.5 and feed.restarts == 0
    feed_all(feed, generated, 4 * BLOCK_RECORDS)
    assert stores.alike()


def test_the_writer_dies_with_the_fold(tmp_path: Path) -> None:
    """A projector killed mid-run leaves no writer behind to write late."""
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from strata.projector.auditindex.writer import AuditFeed
        from tests.projector.auditindex.test_store import LOG
        feed = AuditFeed("sqlite:///{tmp_path / "a.db"}", LOG, 0)
        feed.pump()
        print(feed._process.pid, flush=True)
        time.sleep(60)
        """
    )
    fold = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=REPO)
    assert fold.stdout is not None
    writer = int(fold.stdout.readline())
    os.kill(fold.pid, signal.SIGKILL)
    fold.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(writer):
        time.sleep(0.05)
    assert not _alive(writer)


def test_the_writer_runs_at_a_lower_priority_than_the_fold(tmp_path: Path) -> None:
    """The index's writer takes the CPU the fold leaves (the fold waits once its backlog is full)."""
    feed = AuditFeed(f"sqlite:///{tmp_path / 'a.db'}", LOG, 0)
    try:
        assert feed._process is not None and lowered(feed._process.pid)
    finally:
        feed.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


class _Broken(AuditFeed):
    COMMAND = (sys.executable, "-c", "import sys; sys.exit(3)")  # a writer that cannot start


def test_a_writer_that_never_starts_stops_the_fold(tmp_path: Path, generated: Folded) -> None:  # noqa: F811
    """A broken install fails loudly, once, instead of starting writers for ever."""
    feed = _Broken(f"sqlite:///{tmp_path / 'a.db'}", LOG, 0)
    before = _restarts()
    try:
        with pytest.raises(StrataError, match="stopped 5 times in a row before it stored anything"):
            feed_all(feed, generated, 0, 3 * BLOCK_RECORDS)
        assert feed.restarts == 5 and _restarts() == before + 4  # the fifth is not started
    finally:
        feed.close()


def test_a_database_away_at_the_start_is_waited_for(tmp_path: Path, generated: Folded) -> None:  # noqa: F811
    """The writer opens its database until it can (here its folder is a file for two seconds)."""
    folder = tmp_path / "db"
    folder.write_text("not a folder yet")
    db = f"sqlite:///{folder / 'a.db'}"

    def make_room() -> None:
        folder.unlink()
        folder.mkdir()

    room = threading.Timer(2.0, make_room)
    room.start()
    feed = AuditFeed(db, LOG, 0)
    try:
        feed_all(feed, generated, 0, 2 * BLOCK_RECORDS)
        room.join()
        assert feed.indexed == 2 * BLOCK_RECORDS and feed.restarts == 0
    finally:
        feed.close()
    store = SqlCheckpointStore(db)
    try:
        assert AuditIndex(store.engine).indexed_to(LOG) == 2 * BLOCK_RECORDS
    finally:
        store.close()


def test_acknowledged_frames_go_to_the_release(tmp_path: Path, generated: Folded) -> None:  # noqa: F811
    """Stored frames are let go of by the follower's release, a few parts a pause, not all at
    once when a transaction's acknowledgement comes; frames not stored yet stay with the feed."""
    release = Release()
    feed = AuditFeed(f"sqlite:///{tmp_path / 'a.db'}", LOG, 0, release)
    try:
        feed_all(feed, generated, 0, 3 * BLOCK_RECORDS)
        feed.pump()
        kept = len(release)  # every frame sent (a block's, an idle moment's), none dropped yet
        assert feed.backlog == 0 and kept >= 3
        release.tend()
        assert len(release) == kept - PARTS_PER_TEND
    finally:
        feed.close()
