"""``StateDelta``: a fork of a state with the deltas since written into it is the later state."""

from __future__ import annotations

import random
from typing import Any

import pytest

from strata.projector.fold.state import CacheState
from strata.projector.fold.statedelta import StateDelta, apply, take, track
from strata.projector.replay import fold_line
from strata.schemas.trace import split_lines
from tests.paths import CONFORMANCE

CONFORMANCE = CONFORMANCE
EVERY = 37  # records between deltas: off every round number the trace's events fall on


def _kept(state: CacheState) -> tuple[Any, ...]:
    """Everything the fold goes on from: the snapshot and the plain dicts beside it."""
    return (
        state.snapshot().canonical_bytes(),
        dict(state.pods.items()),
        dict(state.pod_uids.items()),
        dict(state.overlays.items()),
        set(state.synced),
        state.next_node_seq,
        state.default_priority,
    )


@pytest.mark.parametrize("trace", ["c04.jsonl", "c06.jsonl", "edge-20-uid-change-same-name.jsonl"])
def test_a_fork_with_the_deltas_since_written_into_it_is_the_later_state(trace: str) -> None:
    """States forked along a trace (c06: 4,000 records, 202 deletions, 85 failed binds), and the
    deltas taken every EVERY records of a tracked fold of it: from any of them, writing the
    deltas up to a later version (merged, or one at a time) gives that version's state, which
    folds on to the trace's end as the trace does."""
    lines = [line for _, line in split_lines((CONFORMANCE / trace).read_bytes())]
    state = CacheState()
    forks: dict[int, CacheState] = {0: state.fork()}
    track(state)
    expected: dict[int, tuple[Any, ...]] = {0: _kept(forks[0])}
    deltas: list[StateDelta] = []
    for line in lines:
        fold_line(state, line)
        if state.version % EVERY == 0 or state.version == len(lines):
            deltas.append(take(state))
            expected[state.version] = _kept(state)
            forks[state.version] = state.fork()
            track(state)  # forking made its dicts layered: tracked again, with their content
    versions = sorted(expected)
    rng = random.Random(5)
    for _ in range(12):
        a, b = sorted(rng.sample(versions, 2))
        between = [d for d in deltas if a < d.version <= b]
        merged, stepwise = forks[a].fork(), forks[a].fork()
        apply(merged, between)
        for delta in between:
            apply(stepwise, [delta])
        assert _kept(merged) == _kept(stepwise) == expected[b], (a, b)
        for line in lines[b:]:
            fold_line(merged, line)
        assert _kept(merged) == expected[versions[-1]], (a, b)


def test_deltas_taken_from_a_state_not_tracked_are_refused() -> None:
    state = CacheState()
    state.fork()  # its pods' dicts are now layered: their writes cannot be told from the base's
    with pytest.raises(TypeError, match="track"):
        take(state)
