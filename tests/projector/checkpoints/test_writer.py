"""The projector's writer child reports the checkpoint it wrote, so that the fold exports it
without asking the store in its own pause."""

from __future__ import annotations

import os
import select
import time
from dataclasses import replace
from pathlib import Path

from strata.children import BACKGROUND_NICE
from strata.projector.checkpoints.interface import Checkpoint, LogIdentity
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.projector.checkpoints.writer import Job, Stored, Writer
from strata.projector.fold import statecodec
from strata.projector.fold.snapshot import Fragments
from strata.projector.replay import fold_line, replay_bytes, replay_file
from strata.schemas.trace import split_lines
from tests.contracts import LOG
from tests.paths import CONFORMANCE

TRACE = CONFORMANCE / "c01.jsonl"


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


def lowered(pid: int, timeout_s: float = 5.0) -> bool:
    """Whether process ``pid`` comes to run BACKGROUND_NICE below this one (nice is at most 19)."""
    wanted = min(os.getpriority(os.PRIO_PROCESS, 0) + BACKGROUND_NICE, 19)
    deadline = time.monotonic() + timeout_s
    while os.getpriority(os.PRIO_PROCESS, pid) != wanted:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_the_child_writes_at_a_lower_priority_than_the_fold(tmp_path: Path) -> None:
    """The fold is what readers wait for: its checkpoint child takes the CPU the fold leaves."""
    state, _ = replay_file(TRACE)
    writer, _ = _writer(tmp_path, _Slow(f"sqlite:///{tmp_path / 'cp.db'}"))
    writer.start(state)
    assert writer._pid is not None and lowered(writer._pid)
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
    for stored in (Stored(7, 1024, "2026-12-02T01:00:00+00:00"), Stored(9, 1, "2026-12-02T01:00:00+00:00", 7)):
        assert Stored.decode(stored.encode()) == stored
    for data in (b"", b"7 1024", b"7 1024 t", b"x 1024 t -1", b"7 -1 t -1", b"7 1024 t x", b"\xff\xfe"):
        assert Stored.decode(data) is None, data


def _two_checkpoints(tmp_path: Path, store: SqlCheckpointStore | None = None) -> tuple[Writer, list[Job]]:
    """A writer's checkpoints at a third of TRACE and at its end, the fold going on between."""
    lines = [line for _, line in split_lines(TRACE.read_bytes())]
    cut = len(lines) // 3
    state, _ = replay_bytes(b"\n".join(lines[:cut]))
    writer, _ = _writer(tmp_path, store)
    jobs = []
    writer.start(state)
    jobs.append(writer.wait()[0])
    for line in lines[cut:]:
        fold_line(state, line)
    writer.start(state)
    jobs.append(writer.wait()[0])
    return writer, jobs


def test_a_checkpoint_renders_what_changed_since_the_last_one(tmp_path: Path) -> None:
    writer, (first, second) = _two_checkpoints(tmp_path)
    assert first.stored is not None and first.stored.rendered_from == -1
    assert second.stored is not None and second.stored.rendered_from == first.version
    for info in writer.store.list(LOG):  # each the fold of its prefix, byte for byte
        assert info.digest == replay_file(TRACE, until=info.version)[0].snapshot().digest()


class _Tampered(SqlCheckpointStore):
    """Hands out the first checkpoint with every fragment it keeps replaced."""

    def latest(self, log: LogIdentity, at_or_below: int | None = None) -> Checkpoint | None:
        found = super().latest(log, at_or_below)
        if found is None:
            return found
        state = statecodec.decode(found.state)
        wrong = Fragments(state.snapshot(), {}, {}, {})
        for name, fragment in state.rendered.nodes.items() if state.rendered else ():
            wrong.nodes[name] = fragment.replace("false", "true")
        return replace(found, state=statecodec.encode(state, wrong))


def test_the_digest_check_sees_a_checkpoint_rendered_from_the_wrong_fragments(tmp_path: Path) -> None:
    """The control of the test above: fragments that are not the base's make a wrong digest."""
    writer, (first, second) = _two_checkpoints(tmp_path, _Tampered(f"sqlite:///{tmp_path / 'cp.db'}"))
    assert second.stored is not None and second.stored.rendered_from == first.version
    newest = writer.store.list(LOG)[-1]
    assert newest.digest != replay_file(TRACE, until=newest.version)[0].snapshot().digest()


class _SlowChild(SqlCheckpointStore):
    """A store whose saves take 2 s in a forked child, none in the process that made it."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.parent = os.getpid()

    def save(self, checkpoint: Checkpoint) -> None:
        if os.getpid() != self.parent:
            time.sleep(2)
        super().save(checkpoint)


def test_an_abandoned_checkpoint_is_never_stored_and_the_next_one_is(tmp_path: Path) -> None:
    """``finish`` abandons a checkpoint older than the final one: the child is killed before
    it stores anything, and the final checkpoint is the store's newest (and only) one."""
    lines = [line for _, line in split_lines(TRACE.read_bytes())]
    older, _ = replay_bytes(b"\n".join(lines[: len(lines) // 2]))
    final, _ = replay_file(TRACE)
    assert older.version < final.version
    writer, store = _writer(tmp_path, _SlowChild(f"sqlite:///{tmp_path / 'cp.db'}"))
    writer.start(older)
    assert writer.busy and writer.pending == older.version
    writer.abandon()
    assert not writer.busy and writer.pending is None
    writer.start(final)
    job, ok = writer.wait()
    assert ok and job.version == final.version
    time.sleep(0.5)  # both children sleep 2 s: one left alive would have stored its checkpoint first
    assert [c.version for c in store.list(LOG)] == [final.version]
