"""The state digest's per-object hash from msgspec is the stdlib encoder's, byte for byte."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.projector.fold import statedigest
from strata.projector.replay import replay_file
from tests.jsonvalues import LITERALS, json_values
from tests.paths import CONFORMANCE

CONFORMANCE = CONFORMANCE


def _stdlib_hash(name: str, key: Any, value: Any) -> int:
    text = statedigest._ENCODE([name, key, value])
    return int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")


@pytest.mark.parametrize("trace", sorted(CONFORMANCE.glob("*.jsonl")), ids=lambda p: p.stem)
def test_every_object_of_a_conformance_fold_hashes_alike(trace: Path) -> None:
    state, _ = replay_file(trace)
    for name in statedigest.MAPS:
        for key, value in getattr(state, name).items():
            assert statedigest.object_hash(name, key, value) == _stdlib_hash(name, key, value), (name, key)


values = json_values(LITERALS, tuples=True)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=8), values)
def test_generated_objects_hash_alike(key: str, value: Any) -> None:
    assert statedigest.object_hash("tasks", key, value) == _stdlib_hash("tasks", key, value)


def test_what_neither_encodes_is_refused_alike() -> None:
    for hash_of in (statedigest.object_hash, _stdlib_hash):
        with pytest.raises(UnicodeEncodeError):
            hash_of("tasks", "k", {"a": "\ud800"})
    with pytest.raises(TypeError):
        statedigest.object_hash("tasks", "k", {"a": object()})
