"""The audit block's deltas (``auditstore._delta``) are the bytes the first writer stored.

``reference`` is that writer's delta, which encoded every value of every entry to compare texts;
the one in use compares strings as themselves and encodes only other values. Blocks written by
either must be the same bytes, so old and new writers (and readers) agree.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from strata.projector import auditstore
from strata.projector.auditstore import _json
from strata.schemas.objectjson import NumberLiteral
from tests.jsonvalues import LITERALS, json_values

_STRING = json.encoder.encode_basestring


def _text(value: Any) -> str:
    if type(value) is str:
        return _STRING(value)
    return "null" if value is None else _json(value)


def _object(texts: dict[str, str]) -> str:
    return "{" + ",".join(f"{_STRING(k)}:{texts[k]}" for k in sorted(texts)) + "}"


def reference(last: dict[str, Any], key: str, summary: dict[str, Any]) -> str:
    texts = {k: _text(v) for k, v in summary.items() if k != "fields"}
    fields = summary.get("fields")
    field_texts = {f: _text(v) for f, v in fields.items()} if type(fields) is dict else None
    if field_texts is not None:
        texts["fields"] = _object(field_texts)
    elif "fields" in summary:
        texts["fields"] = _text(fields)
    before = last.get(key)
    last[key] = (texts, field_texts)
    if before is None:
        return _object(texts)
    then, then_fields = before
    changed = {k: t for k, t in texts.items() if k != "fields" and then.get(k) != t}
    gone = auditstore._SUMMARY(sorted(k for k in then if k not in texts)) if then.keys() - texts.keys() else "[]"
    if field_texts is not None and then_fields is not None and then_fields.keys() == field_texts.keys():
        moved = {f: t for f, t in field_texts.items() if then_fields[f] != t}
        return f"[{_object(changed)},{_object(moved)},{gone}]"
    if "fields" in texts and then.get("fields") != texts["fields"]:
        changed["fields"] = texts["fields"]
    return f"[{_object(changed)},null,{gone}]"


# Few names and few values, so that consecutive summaries share keys and values often: a value
# that stays, one that changes, a string and the number written as it, 1 and true, None and "null".
_NAMES = st.sampled_from(["op", "name", "phase", "node", "reason", "a"])
_SCALARS = st.sampled_from([None, "null", "x", "y", "0.5", NumberLiteral("0.5"), 1, True, 0, False, "1"])
_VALUES = _SCALARS | json_values(LITERALS)
_FIELDS = st.dictionaries(_NAMES, _VALUES, max_size=4) | _VALUES
summaries = st.dictionaries(_NAMES | st.just("fields"), _VALUES, max_size=5).flatmap(
    lambda s: st.builds(lambda f: {**s, "fields": f} if "fields" in s else s, _FIELDS)
)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["pod:a", "pod:b"]), summaries), min_size=1, max_size=8))
def test_deltas_are_the_first_writers_bytes(entries: list[tuple[str, dict[str, Any]]]) -> None:
    ours: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    for key, summary in entries:
        assert auditstore._delta(ours, key, summary) == reference(theirs, key, summary)


def test_the_cases_that_compare_by_text() -> None:
    cases: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"a": "0.5"}, {"a": NumberLiteral("0.5")}),  # the same text
        ({"a": 1}, {"a": True}),  # equal in Python, not in JSON
        ({"a": {"b": 1}}, {"a": {"b": True}}),
        ({"a": None}, {"a": "null"}),
        ({"fields": {"f": 1}}, {"fields": {"f": True}}),
        ({"fields": {"f": 1}}, {"fields": {"g": 1}}),
        ({"fields": [1]}, {"fields": {"f": 1}}),
    ]
    for first, second in cases:
        ours: dict[str, Any] = {}
        theirs: dict[str, Any] = {}
        for summary in (first, second, first):
            assert auditstore._delta(ours, "k", summary) == reference(theirs, "k", summary), summary
