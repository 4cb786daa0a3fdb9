"""What a follower lets go of (a replaced checkpoint base, the restored fragments) is freed a few
parts a pause, never all at once: dropping such a snapshot paused the fold 50-100 ms under load."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.projector.checkpoints.writer import Writer
from strata.projector.fold.snapshot import Snapshot
from strata.projector.fold.state import CacheState
from strata.projector.fold.statedigest import MAPS
from strata.projector.release import PARTS_PER_TEND, Release, parts_of
from strata.projector.replay import fold_line, replay_file
from tests.contracts import LOG
from tests.paths import CONFORMANCE

TRACE = CONFORMANCE / "c01.jsonl"


def _replaced_task() -> tuple[Snapshot, CacheState, str]:
    """A snapshot, a state folded past it, and a task whose view only the snapshot still holds."""
    state, _ = replay_file(TRACE)
    snapshot = state.snapshot()
    for line in reversed(TRACE.read_bytes().splitlines()):
        event = json.loads(line)
        uid = (event.get("object") or {}).get("metadata", {}).get("uid")
        if event["object"].get("kind") == "Pod" and uid in snapshot.tasks:
            event["type"] = "DELETED"
            assert fold_line(state, json.dumps(event).encode()).result == "applied"
            assert uid not in state.tasks
            return snapshot, state, uid
    raise AssertionError("no pod of the trace is in its final state")


def test_the_parts_of_a_snapshot_are_its_maps_shards() -> None:
    state, _ = replay_file(TRACE)
    snapshot = state.snapshot()
    shards = [id(s) for name in MAPS for s in getattr(snapshot, name).shards()]
    assert [id(p) for p in parts_of(snapshot)] == shards


def test_a_handed_snapshot_is_freed_a_few_parts_a_tend() -> None:
    snapshot, _state, uid = _replaced_task()
    view = snapshot.tasks[uid]
    held = sys.getrefcount(view)
    release = Release()
    release.hand(snapshot)
    parts = len(release)
    del snapshot
    assert sys.getrefcount(view) == held, "the snapshot's shard is held by the release, not freed at once"
    for _ in range(-(-parts // PARTS_PER_TEND)):
        before = len(release)
        release.tend()
        assert before - len(release) == min(PARTS_PER_TEND, before), "a tend lets go of a few parts"
    assert len(release) == 0
    assert sys.getrefcount(view) == held - 1, "once every part is let go of, the replaced view is freed"


def test_a_writer_hands_its_replaced_base_to_the_release(tmp_path: Path) -> None:
    state, _ = replay_file(TRACE)
    release = Release()
    writer = Writer(SqlCheckpointStore(f"sqlite:///{tmp_path / 'cp.db'}"), LOG, release=release)
    writer.start(state)
    assert writer.wait()[1] and len(release) == 0  # the first base replaces none
    first = writer.base
    fold_line(state, b'{"type":"SYNCED","kind":"Pod"}')  # a record: the next checkpoint is of a later version
    writer.start(state)
    assert writer.wait()[1]
    assert writer.base is not first
    assert first is not None and len(release) == len(parts_of(first))
