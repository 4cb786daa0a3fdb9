"""What costs what changed: the state digest, the canonical JSON rendered from a checkpoint's
fragments, the MessagePack state codec. Each must give exactly what the full computation gives."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest
import zstandard

from strata.projector.fold import statecodec
from strata.projector.fold.snapshot import canonical_bytes
from strata.projector.fold.state import CacheState, FoldConfig
from strata.projector.fold.statedigest import DEFER_PER_VERSION, SETTLE_BUDGET, SETTLE_EVERY
from strata.projector.replay import fold_line, replay_bytes
from strata.schemas.trace import split_lines
from tests.paths import CONFORMANCE

CONFORMANCE = CONFORMANCE
TRACES = sorted(CONFORMANCE.glob("*.jsonl"))


def _lines(trace: Path) -> list[bytes]:
    return [line for _, line in split_lines(trace.read_bytes())]


def _restored_at(lines: list[bytes], cut: int) -> CacheState:
    """The fold of ``lines[:cut]`` through a checkpoint that keeps its fragments."""
    head, _ = replay_bytes(b"\n".join(lines[:cut]))
    snapshot = head.snapshot()
    snapshot.digest()
    return statecodec.decode(statecodec.encode(head, snapshot.fragments()))


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_rendering_from_a_checkpoints_fragments_equals_the_full_rendering(trace: Path):
    lines = _lines(trace)
    for cut in sorted({0, len(lines) // 3, len(lines) // 2, max(0, len(lines) - 1), len(lines)}):
        state = _restored_at(lines, cut)
        assert state.rendered is not None
        for line in lines[cut:]:
            fold_line(state, line)
        snapshot = state.snapshot()
        assert snapshot.canonical_bytes() == canonical_bytes(snapshot.to_json()), (trace.name, cut)


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_rendering_from_the_previous_checkpoints_fragments_equals_the_full_rendering(trace: Path):
    """A follower's next checkpoint renders from its last one's fragments, read back from the
    checkpoint's bytes for the snapshot it holds of that version."""
    lines = _lines(trace)
    state = CacheState(FoldConfig())
    previous = None
    for cut in sorted({len(lines) // 3, len(lines) // 2, max(0, len(lines) - 3), len(lines)}):
        while state.version < cut:
            fold_line(state, lines[state.version])
        base = None if previous is None else statecodec.fragments_of(*previous)
        assert (base is None) == (previous is None), (trace.name, cut)
        snapshot = state.snapshot(base)
        assert snapshot.canonical_bytes() == canonical_bytes(snapshot.to_json()), (trace.name, cut)
        previous = (statecodec.encode(state, snapshot.fragments()), snapshot)


def test_a_checkpoint_gives_fragments_only_for_its_own_version():
    state = replay_bytes((CONFORMANCE / "c04.jsonl").read_bytes())[0]
    snapshot = state.snapshot()
    blob = statecodec.encode(state, snapshot.fragments())
    assert statecodec.fragments_of(blob, snapshot) is not None
    state.informational()
    assert statecodec.fragments_of(blob, state.snapshot()) is None  # another version
    assert statecodec.fragments_of(statecodec.encode(state), state.snapshot()) is None  # none kept


def test_a_snapshot_without_fragments_renders_the_same_bytes_as_its_json():
    for trace in TRACES:
        snapshot = replay_bytes(trace.read_bytes())[0].snapshot()
        assert snapshot.canonical_bytes() == canonical_bytes(snapshot.to_json()), trace.name


def test_the_state_digest_equals_after_replay_restore_and_any_settling():
    lines = _lines(CONFORMANCE / "c06.jsonl")
    whole = replay_bytes(b"\n".join(lines))[0]
    want = whole.state_digest()
    for cut in (0, 1, 999, 2500):
        restored = _restored_at(lines, cut)
        restored.state_digest()  # settled midway: later changes are rehashed alone
        for i, line in enumerate(lines[cut:]):
            fold_line(restored, line)
            if i % 7 == 0:
                restored.hashes.settle(restored, budget=3)
            restored.hashes.tend(restored)
        assert restored.state_digest() == want, cut
    assert whole.state_digest() == want  # asking twice changes nothing


def test_the_state_digest_sees_a_single_differing_object():
    lines = _lines(CONFORMANCE / "c06.jsonl")
    state = replay_bytes(b"\n".join(lines))[0]
    before = state.state_digest()
    uid, task = next(iter(sorted(state.tasks.items())))
    state.tasks[uid] = task._replace(priority=task.priority + 1)
    changed = state.state_digest()
    assert changed != before
    state.tasks[uid] = task
    assert state.state_digest() == before
    name, used = next(iter(sorted(state.node_used.items())))
    state.node_used[name] = {**used, "cpu": used.get("cpu", 0) + 1}
    assert state.state_digest() != before


def test_the_state_digest_does_not_depend_on_the_hash_seed():
    code = (
        "import sys; from pathlib import Path; from strata.projector.replay import replay_file;"
        "print(replay_file(Path(sys.argv[1]))[0].state_digest())"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code, str(CONFORMANCE / "c05.jsonl")],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        ).stdout
        for seed in ("0", "7", "4242")
    }
    assert len(seen) == 1


def test_settling_in_slices_keeps_each_slice_bounded():
    state = replay_bytes((CONFORMANCE / "c06.jsonl").read_bytes())[0]
    assert state.hashes.pending(state) > 0
    assert state.hashes.settle(state, budget=10) == 10
    while state.version % SETTLE_EVERY:
        state.informational()
    pending = state.hashes.pending(state)
    state.hashes.tend(state)
    assert state.hashes.pending(state) < pending


def test_a_report_near_has_every_tend_settle_so_the_report_finds_little():
    """Within a slice's versions of the next report every tend settles; farther, only a slice's."""
    lines = [line for _, line in split_lines((CONFORMANCE / "c06.jsonl").read_bytes())]
    state = CacheState()
    for line in lines[:-40]:
        fold_line(state, line)
    state.hashes.settle(state)
    for line in lines[-40:]:
        fold_line(state, line)
    assert state.version % SETTLE_EVERY and state.hashes.pending(state) > 0
    pending = state.hashes.pending(state)
    state.hashes.tend(state)  # off a slice's version and no report: nothing settled
    state.hashes.tend(state, report_in=SETTLE_EVERY + 1)  # a report, but not near
    assert state.hashes.pending(state) == pending
    state.hashes.tend(state, report_in=SETTLE_EVERY)
    assert state.hashes.pending(state) == 0


def test_a_reporting_follower_defers_its_slices_until_the_changes_outnumber_the_versions_left():
    lines = [line for _, line in split_lines((CONFORMANCE / "c06.jsonl").read_bytes())]
    state = CacheState()
    for line in lines[: 3 * SETTLE_EVERY]:
        fold_line(state, line)
    while state.version % SETTLE_EVERY:
        state.informational()
    pending = state.hashes.pending(state)
    near = SETTLE_EVERY + 1  # not yet the last slice's versions before the report
    assert pending > near * DEFER_PER_VERSION
    state.hashes.tend(state, report_in=pending // DEFER_PER_VERSION)  # as many as allowed wait: deferred
    assert state.hashes.pending(state) == pending
    state.hashes.tend(state, report_in=near)  # more wait than allowed: a slice
    assert state.hashes.pending(state) == max(0, pending - SETTLE_BUDGET)
    state.hashes.tend(state)  # no reporter: a slice at every SETTLE_EVERY-th version, as before
    assert state.hashes.pending(state) == max(0, pending - 2 * SETTLE_BUDGET)


def test_a_deferring_followers_reports_are_settled_and_equal_a_replay():
    """Every report of a follower that tends with its reporter's distance is ready and is the
    digest of a fold of the same prefix settled at once."""
    lines = [line for _, line in split_lines((CONFORMANCE / "c06.jsonl").read_bytes())]
    every = 500
    state = CacheState()
    reports = 0
    for line in lines:
        fold_line(state, line)
        state.hashes.tend(state, -state.version % every)
        if state.version % every == 0:
            assert state.hashes.ready(state), state.version
            want = replay_bytes(b"\n".join(lines[: state.version]))[0].state_digest()
            assert state.state_digest() == want, state.version
            reports += 1
    assert reports >= 4


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_a_checkpoints_bytes_are_those_msgpack_writes(trace: Path, monkeypatch: pytest.MonkeyPatch):
    """msgspec packs the state (faster); the bytes stay those msgpack's packb wrote before."""
    state = replay_bytes(trace.read_bytes())[0]
    fragments = state.snapshot().fragments()
    packed = statecodec.encode(state, fragments)
    monkeypatch.setattr(statecodec, "_PACK", functools.partial(msgpack.packb, use_bin_type=True))
    assert statecodec.encode(state, fragments) == packed, trace.name


def test_json_states_of_format_1_are_still_read():
    state = replay_bytes((CONFORMANCE / "c04.jsonl").read_bytes())[0]
    doc = {"format": statecodec.JSON_FORMAT, **statecodec._document(state)}
    old = zstandard.ZstdCompressor().compress(json.dumps(doc).encode())
    assert statecodec.decode(old).snapshot().digest() == state.snapshot().digest()


def test_an_integer_beyond_64_bits_falls_back_to_json():
    state = replay_bytes((CONFORMANCE / "c04.jsonl").read_bytes())[0]
    name = next(iter(sorted(state.node_used.keys())))
    state.node_used[name] = {"cpu": 1 << 70}
    blob = statecodec.encode(state)
    assert zstandard.ZstdDecompressor().decompress(blob)[:1] == b"{"
    assert statecodec.decode(blob).snapshot().digest() == state.snapshot().digest()
    assert statecodec.decode(blob).state_digest() == state.state_digest()
    assert statecodec.fragments_of(blob, state.snapshot()) is None  # JSON keeps no fragments


def test_a_blob_of_another_format_is_a_clear_error():
    blob = zstandard.ZstdCompressor().compress(json.dumps({"format": 99}).encode())
    with pytest.raises(statecodec.StateFormatError, match="state format 99"):
        statecodec.decode(blob)


def test_a_restored_state_is_ready_to_report_once_its_backlog_is_hashed():
    lines = _lines(CONFORMANCE / "c06.jsonl")
    restored = _restored_at(lines, len(lines))
    backlog = restored.hashes.pending(restored)
    assert backlog > 0
    assert restored.hashes.ready(restored) == (backlog <= SETTLE_BUDGET)
    restored.hashes.settle(restored, budget=backlog - 1)
    assert restored.hashes.ready(restored)
