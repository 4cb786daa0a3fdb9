"""A pause of the fold, step by step: what a long one is logged with, and when the loop calls for one."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from strata.log.cachelog import LogEntry
from strata.log.config import settings_from
from strata.log.digests import DigestReporter
from strata.projector import runner as runner_module
from strata.projector.auditindex.writer import AuditFeed
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.projector.fold.state import CacheState, FoldConfig
from strata.projector.fold.statedigest import SETTLE_EVERY
from strata.projector.release import Release
from strata.projector.replay import replay_file
from strata.projector.runner import (
    CHECK_ALWAYS_BELOW,
    PAUSE_STEPS,
    TEND_EVERY,
    LogRunner,
    Progress,
    _Following,
    _Pause,
)
from strata.schemas.trace import read_trace
from tests.contracts import LOG
from tests.projector.checkpoints.test_writer import TRACE


def test_a_pause_counts_its_steps_less_what_it_waited_for_the_audit_writer() -> None:
    pause = _Pause()
    time.sleep(0.02)
    pause.step("collect")
    waiting = time.perf_counter()
    time.sleep(0.03)
    pause.waited = time.perf_counter() - waiting  # the fold waited for the writer: counted apart, not as a pause
    pause.step("audit")
    names = [name for name, _ in pause.steps]
    assert names == ["collect", "audit"]
    assert 0.015 < pause.steps[0][1] < 0.2 and abs(pause.steps[1][1]) < 0.01
    assert abs(pause.seconds - sum(s for _, s in pause.steps)) < 1e-9
    assert str(pause).startswith("collect ") and ", audit " in str(pause)


def test_a_pause_that_forks_a_checkpoint_leaves_the_freeing_and_the_audit_to_the_next(tmp_path: Path) -> None:
    """A fork is its pause's long step: freeing parts or feeding the audit's writer then would
    copy every page they touch (the child shares them), so both wait for the next pause."""
    state, _ = replay_file(TRACE)
    url = f"sqlite:///{tmp_path / 'cp.db'}"
    runner = LogRunner(settings_from(), SqlCheckpointStore(url), FoldConfig())
    runner._identity = LOG  # no broker: the log's identity is what its cluster id would give
    release = Release()
    feed = AuditFeed(url, LOG, state.version, release)
    pumped: list[int] = []
    pump = feed.pump
    feed.pump = lambda: (pumped.append(state.version), pump())[-1]  # type: ignore[method-assign]
    try:
        run = _Following(runner, state, feed, None, None, Progress(state.version, state.version), 1, 3600.0, release)
        run.requested = -1  # a checkpoint is due now
        release.keep(object())
        run.tend(time.monotonic(), idle=True)
        assert run.writer.busy, "the pause forked a checkpoint's child"
        assert len(release) == 1 and pumped == []
        run.writer.wait()
        run.requested = state.version  # nothing due: an ordinary pause frees its parts and feeds the writer
        run.tend(time.monotonic(), idle=True)
        assert not run.writer.busy and len(release) == 0 and pumped == [state.version]
    finally:
        feed.close()


def _exported_pauses() -> dict[str, float]:
    return {s: REGISTRY.get_sample_value("strata_fold_paused_seconds_total", {"step": s}) or 0.0 for s in PAUSE_STEPS}


def test_the_pauses_add_up_by_step_for_the_run_and_for_the_process(tmp_path: Path) -> None:
    """Each pause's steps add to the run's totals (``project``'s last line) and to the process's
    (``strata_fold_paused_seconds_total{step}``); a step ``tend`` takes that PAUSE_STEPS lacks fails."""
    state, _ = replay_file(TRACE)
    runner = LogRunner(settings_from(), SqlCheckpointStore(f"sqlite:///{tmp_path / 'cp.db'}"), FoldConfig())
    runner._identity = LOG
    progress = Progress(state.version, state.version)
    run = _Following(runner, state, None, None, None, progress, 1, 3600.0, Release())
    before = _exported_pauses()
    run.requested = -1  # a checkpoint is due now: the first pause forks its writer
    run.tend(time.monotonic(), idle=True)
    run.writer.wait()
    run.tend(time.monotonic(), idle=True)
    assert list(progress.paused_s) == list(PAUSE_STEPS)
    assert progress.paused_s["checkpoint"] > 0 and all(s >= 0 for s in progress.paused_s.values())
    after = _exported_pauses()
    assert {s: after[s] - before[s] for s in PAUSE_STEPS} == pytest.approx(progress.paused_s)


@pytest.mark.parametrize(
    ("every_records", "digest_every"),
    [(CHECK_ALWAYS_BELOW, 1000), (CHECK_ALWAYS_BELOW, 50_000), (CHECK_ALWAYS_BELOW, 0), (1, 1000)],
)
def test_the_loop_calls_the_bookkeeping_at_every_version_it_has_work_and_no_other(
    tmp_path: Path, every_records: int, digest_every: int
) -> None:
    """``due_at`` spares the records between two pauses the call and the clocks: it must still
    name every version at which ``tend`` acts (a multiple of TEND_EVERY or SETTLE_EVERY, a digest
    report; every version for a follower that checkpoints often), and only those."""
    state, _ = replay_file(TRACE)
    settings = settings_from().with_(digest_every=digest_every)
    runner = LogRunner(settings, SqlCheckpointStore(f"sqlite:///{tmp_path / 'cp.db'}"), FoldConfig())
    runner._identity = LOG
    digests = DigestReporter(settings, "r1", "f")  # its publisher connects only when it sends
    run = _Following(runner, state, None, None, digests, Progress(0, 0), every_records, 3600.0, Release())
    due, called, acts = run._next_due(0), [], []
    masked = every_records >= CHECK_ALWAYS_BELOW
    for version in range(1, 120_000):
        if version >= due:
            called.append(version)
            due = run._next_due(version)
        if not masked or version % TEND_EVERY == 0 or version % SETTLE_EVERY == 0 or digests.due(version):
            acts.append(version)
    assert called == acts


_HOLD_THE_LOCK = """
import sqlite3, sys
lock = sqlite3.connect(sys.argv[1], isolation_level=None)
sys.stdin.readline()
lock.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
lock.execute("COMMIT")
"""


def test_the_stop_keeps_a_checkpoint_in_flight_when_the_final_one_cannot_follow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``finish`` lets go of a checkpoint still being written only once the index holds every
    record, so that the final one is sure to follow: with the database locked past the drain's
    time, the one in flight (its records indexed, its store waiting for the lock) is stored
    once the lock goes, where killing it at once left the store with no checkpoint at all."""
    monkeypatch.setattr(runner_module, "DRAIN_S", 1.0)
    records = [line.record for line in read_trace(TRACE)]  # a bad line too: a BadRecord
    half = len(records) // 2
    path = tmp_path / "cp.db"
    url = f"sqlite:///{path}"
    store = SqlCheckpointStore(url)
    runner = LogRunner(settings_from(), store, FoldConfig())
    runner._identity = LOG
    state = CacheState(FoldConfig())
    release = Release()
    feed = AuditFeed(url, LOG, 0, release)
    # the lock's holder is a process of its own: held by a connection of this process when the
    # checkpoint's child forks, the lock would stay held in the child's copy, for good
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_THE_LOCK, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        run = _Following(runner, state, feed, None, None, Progress(0, len(records)), 10**9, 3600.0, release)
        for offset, record in enumerate(records[:half]):
            run.apply(LogEntry(offset, offset, record))
        feed.drain(timeout_s=30.0)
        assert feed.indexed == half
        holder.stdin.write(b"lock\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == b"locked\n"  # the checkpoint's store and the index's writer now wait
        run.writer.start(state, feed.pipes())
        for offset, record in enumerate(records[half:], start=half):
            run.apply(LogEntry(offset, offset, record))
        threading.Timer(2.5, lambda: holder.communicate(b"commit\n")).start()  # after the drain's 1 s
        run.finish()
    finally:
        feed.close()
        holder.kill()
    assert half in [c.version for c in store.list(LOG)]
