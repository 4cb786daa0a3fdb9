"""The audit index's JSON from msgspec is ``_SUMMARY``'s, character for character, so blocks are
the same bytes as before (and as any other writer's)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from strata.projector.auditindex import store as auditstore
from tests.jsonvalues import LITERALS, json_values


def test_every_character_is_escaped_alike() -> None:
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    assert auditstore._json({text: [text]}) == auditstore._SUMMARY({text: [text]})


values = json_values(LITERALS)


@settings(max_examples=300, deadline=None)
@given(values)
def test_generated_summaries_encode_alike(value: Any) -> None:
    assert auditstore._json(value) == auditstore._SUMMARY(value)


@pytest.mark.parametrize("value", [{"a": "\ud800"}, {2: "a", 1: "b"}])
def test_what_msgspec_refuses_goes_to_the_stdlib_encoder(value: Any) -> None:
    assert auditstore._json(value) == auditstore._SUMMARY(value)
