"""The snapshot's canonical JSON from msgspec is the stdlib encoder's, character for character."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from strata.projector.fold import snapshot
from strata.schemas.objectjson import NumberLiteral
from tests.jsonvalues import json_values


def test_every_character_is_escaped_alike() -> None:
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    assert snapshot._dumps([text, {text: text}]) == snapshot._dumps_stdlib([text, {text: text}])


values = json_values()


@settings(max_examples=300, deadline=None)
@given(values)
def test_generated_values_render_alike(value: Any) -> None:
    assert snapshot._dumps(value) == snapshot._dumps_stdlib(value)


@pytest.mark.parametrize("value", [{"a": "\ud800"}, {2: "a", 1: "b"}, (1, "x")])
def test_what_msgspec_refuses_goes_to_the_stdlib_encoder(value: Any) -> None:
    assert snapshot._dumps(value) == snapshot._dumps_stdlib(value)


def test_what_neither_encodes_is_still_refused() -> None:
    with pytest.raises(TypeError):
        snapshot._dumps({"a": NumberLiteral("1.5")})
