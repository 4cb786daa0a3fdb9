"""The projector's writer child reports the checkpoint it wrote, so that the fold exports it
without asking the store in its own pause."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

from strata.projector.checkpoint import Checkpoint
from strata.projector.replay import replay_file
from strata.projector.sqlstore import SqlCheckpointStore
from strata.projector.writer import Stored, Writer
from tests.contracts import LOG

TRACE = Path(__file__).with_name("conformance") / "c01.jsonl"


def _writer(tmp_path: Path, store: SqlCheckpointStore | None = None) -> tuple[Writer, SqlCheckpointStore]:
    store = store or SqlCheckpointStore(f"sqlite:///{tmp_path / 'cp.db'}")
    return Writer(store, LOG), store


def test_the_child_reports_the_checkpoint_the_store_holds(tmp_path: Path) -> None:
    state, _ = replay_file(TRACE)
    writer, store = _writer(tmp_path)
    writer.start(state)
    job, ok = writer.wait()
    (saved,) = store.list(LOG)
    assert ok and job.stored is not None
    assert (job.stored.version, job.stored.size) == (saved.version, saved.size) == (state.version, saved.size)
    assert writer.saved == state.version


class _Slow(SqlCheckpointStore):
    def save(self, checkpoint: Checkpoint) -> None:
        time.sleep(3)
        super().save(checkpoint)


def test_the_child_closes_the_descriptors_it_is_told_to(tmp_path: Path) -> None:
    """A pipe's write end held by the checkpoint child would keep its reader (the audit index's
    writer) from seeing the end of its input until the checkpoint is stored."""
    state, _ = replay_file(TRACE)
    writer, _ = _writer(tmp_path, _Slow(f"sqlite:///{tmp_path / 'cp.db'}"))
    read_end, write_end = os.pipe()
    writer.start(state, [write_end])
    os.close(write_end)
    try:
        assert select.select([read_end], [], [], 2.0)[0], "the child still holds the write end"
        assert os.read(read_end, 1) == b""
    finally:
        os.close(read_end)
    assert writer.wait()[1]


class _Refusing(SqlCheckpointStore):
    def save(self, checkpoint: Checkpoint) -> None:
        raise OSError("disk full")


def test_a_failed_child_reports_nothing(tmp_path: Path) -> None:
    state, _ = replay_file(TRACE)
    writer, _ = _writer(tmp_path, _Refusing(f"sqlite:///{tmp_path / 'cp.db'}"))
    writer.start(state)
    job, ok = writer.wait()
    assert not ok and job.stored is None and writer.saved == -1


def test_a_report_that_is_not_one_is_none() -> None:
    assert Stored.decode(Stored(7, 1024, "2026-12-02T01:00:00+00:00").encode()) == Stored(
        7, 1024, "2026-12-02T01:00:00+00:00"
    )
    for data in (b"", b"7 1024", b"x 1024 t", b"7 -1 t", b"\xff\xfe"):
        assert Stored.decode(data) is None, data
