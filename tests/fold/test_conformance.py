"""Every public conformance trace (copied byte-identical from the shared spec) replays to its
expected snapshot, compared as a JSON value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strata.projector.replay import replay_file
from tests.paths import CONFORMANCE, SHARED

CONFORMANCE = CONFORMANCE
CASES = sorted(p.name.removesuffix(".expected.json") for p in CONFORMANCE.glob("*.expected.json"))


def _trace_and_until(case: str) -> tuple[Path, int | None]:
    name, _, until = case.partition(".until-")
    return CONFORMANCE / f"{name}.jsonl", int(until) if until else None


@pytest.mark.parametrize("case", CASES)
def test_conformance(case: str):
    trace, until = _trace_and_until(case)
    state, _ = replay_file(trace, until=until)
    expected = json.loads((CONFORMANCE / f"{case}.expected.json").read_text(encoding="utf-8"))
    got = state.snapshot().to_json()
    assert got == expected, [k for k in expected if got.get(k) != expected[k]]


def test_the_traces_are_the_shared_ones_byte_for_byte():
    shared = SHARED / "conformance"
    if not shared.is_dir():
        pytest.skip("no ../shared next to this clone (a user's clone has none)")
    for path in shared.iterdir():
        assert (CONFORMANCE / path.name).read_bytes() == path.read_bytes(), path.name
