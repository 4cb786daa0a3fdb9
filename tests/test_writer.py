"""The projector's writer child reports the checkpoint it wrote, so that the fold exports it
without asking the store in its own pause."""

from __future__ import annotations

from pathlib import Path

from strata.projector.checkpoint import Checkpoint
from strata.projector.replay import replay_file
from strata.projector.sqlstore import SqlCheckpointStore
from strata.projector.writer import Stored, Writer
from tests.contracts import LOG

TRACE = Path(__file__).with_name("conformance") / "c01.jsonl"


def _writer(tmp_path: Path, store: SqlCheckpointStore | None = None) -> tuple[Writer, SqlCheckpointStore]:
    store = store or SqlCheckpointStore(f"sqlite:///{tmp_path / 'cp.db'}")
    return Writer(store, None, LOG), store


def test_the_child_reports_the_checkpoint_the_store_holds(tmp_path: Path) -> None:
    state, _ = replay_file(TRACE)
    writer, store = _writer(tmp_path)
    writer.start(state, [], checkpoint=True)
    job, ok = writer.wait()
    (saved,) = store.list(LOG)
    assert ok and job.stored is not None
    assert (job.stored.version, job.stored.size) == (saved.version, saved.size) == (state.version, saved.size)
    assert writer.saved == state.version


def test_a_batch_without_a_checkpoint_reports_none(tmp_path: Path) -> None:
    state, _ = replay_file(TRACE)
    writer, store = _writer(tmp_path)
    writer.start(state, [], checkpoint=False)
    job, ok = writer.wait()
    assert ok and job.stored is None and store.list(LOG) == []


class _Refusing(SqlCheckpointStore):
    def save(self, checkpoint: Checkpoint) -> None:
        raise OSError("disk full")


def test_a_failed_child_reports_nothing(tmp_path: Path) -> None:
    state, _ = replay_file(TRACE)
    writer, _ = _writer(tmp_path, _Refusing(f"sqlite:///{tmp_path / 'cp.db'}"))
    writer.start(state, [], checkpoint=True)
    job, ok = writer.wait()
    assert not ok and job.stored is None and writer.saved == -1


def test_a_report_that_is_not_one_is_none() -> None:
    assert Stored.decode(Stored(7, 1024, "2026-12-02T01:00:00+00:00").encode()) == Stored(
        7, 1024, "2026-12-02T01:00:00+00:00"
    )
    for data in (b"", b"7 1024", b"x 1024 t", b"7 -1 t", b"\xff\xfe"):
        assert Stored.decode(data) is None, data
