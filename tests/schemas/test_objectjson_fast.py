"""``objectjson.loads``'s msgspec fast path against its stdlib definition (``_loads_stdlib``), and
``dumps_parsed`` against ``dumps``.

Whatever the input, both must agree: the same value (types included: int, NumberLiteral, str)
or both refusing it with the same exception type and message.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.schemas import objectjson
from strata.schemas.objectjson import NumberLiteral, _loads_stdlib, dumps, dumps_parsed, loads
from tests.jsonvalues import FLOATS, LITERALS, json_values


def _outcome(parse: Any, text: str | bytes) -> tuple[str, Any]:
    try:
        return "ok", _typed(parse(text))
    except (ValueError, RecursionError) as exc:
        return type(exc).__name__, str(exc)


def _typed(value: Any) -> Any:
    """The value with each leaf's type beside it (1 == True, but not for a fold), as a flat list.

    Flat, by an explicit stack: recursing would take two frames a level, so a value of
    ``MAX_DEPTH`` levels would hit the recursion limit here, not in the parser under test, and a
    finalizer the collector runs at that depth would fail as an unraisable exception.
    """
    out: list[Any] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is dict:
            out.append(("dict", list(v)))
            stack.extend(reversed(list(v.values())))
        elif type(v) is list:
            out.append(("list", len(v)))
            stack.extend(reversed(v))
        else:
            out.append((type(v).__name__, v.text if type(v) is NumberLiteral else v))
    return out


def _same(text: str | bytes) -> None:
    assert _outcome(loads, text) == _outcome(_loads_stdlib, text), text


CASES = [
    b'{"a":1,"a":2,"b":3,"a":4}',
    b'\xef\xbb\xbf{"a":1}',
    b'{"a":"\\ud800"}',
    b'{"a":"\\ud800\\u0041"}',
    b'{"a":"\\udc00"}',
    b'{"a":"\\ud83d\\ude00"}',
    b' \t{"a":1} \r\n',
    b'{"a":1}\n\n',
    b'{"a":-0,"b":-0.0,"c":0e0,"d":1E+2,"e":2.50,"f":1e999,"g":-1e-999}',
    b'{"a":18446744073709551616,"b":-9223372036854775809}',
    b'{"a":"\x00"}',
    b'{"a":"\x7f\\/\\u00e9\\u0000"}',
    b'{"a":NaN}',
    b"[Infinity]",
    b'{"a":01}',
    b'{"a":1.}',
    b'{"a":.5}',
    b'{"a":-}',
    b'{"a":tru}',
    b'{"a":"\\x"}',
    b'{"a":1}\x00',
    b'{"a":1} {"b":2}',
    b'{"a":"\xff"}',
    b'{"a":"\xed\xa0\x80"}',
    b'{"a":1,}',
    b"[1,]",
    b'{"\\u0000":1}',
    b'"x"',
    b"1.5",
    b"",
    b" ",
    b'{"a" : [ 1 , 2.0 ] }',
    b"[" * 512 + b"]" * 512,
    b"[" * 513 + b"]" * 513,
    b"[" * 600,
    b'{"a":"' + b"[" * 600 + b'"}',
    b"[" + b"9" * 4300 + b"]",
    b"[-" + b"9" * 4300 + b"]",
    b"[" + b"9" * 4301 + b"]",
    b"[-" + b"9" * 4301 + b"]",
]


@pytest.mark.parametrize("text", CASES)
def test_fast_path_agrees_on_edge_cases(text: bytes) -> None:
    _same(text)
    try:
        as_str = text.decode("utf-8")
    except UnicodeDecodeError:
        return
    _same(as_str)


def test_a_str_with_a_lone_surrogate_still_loads_as_before() -> None:
    _same('{"a":"\ud800"}')


@settings(max_examples=400, deadline=None)
@given(json_values(FLOATS))
def test_fast_path_agrees_on_generated_json(value: Any) -> None:
    text = json.dumps(value)
    _same(text)
    _same(text.encode("utf-8"))
    _same(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=40))
def test_fast_path_agrees_on_arbitrary_bytes(data: bytes) -> None:
    _same(data)
    _same(b'{"a":' + data + b"}")


def test_the_fast_path_is_taken() -> None:
    """A record of no more than MAX_DEPTH brackets goes to msgspec (not merely falls back)."""
    calls: list[str] = []

    def hook(text: str) -> NumberLiteral:
        calls.append(text)
        return NumberLiteral(text)

    original = objectjson._fast_decode
    try:
        import msgspec

        objectjson._fast_decode = msgspec.json.Decoder(float_hook=hook).decode
        assert loads(b'{"cpu":2.50}') == {"cpu": NumberLiteral("2.50")}
    finally:
        objectjson._fast_decode = original
    assert calls == ["2.50"]


# ------------------------------------------------------------------ dumps_parsed against dumps
def _written(write: Any, value: Any) -> tuple[str, Any]:
    try:
        return "ok", write(value)
    except (TypeError, ValueError) as exc:
        return type(exc).__name__, str(exc)


def _same_bytes(value: Any) -> None:
    assert _written(dumps_parsed, value) == _written(dumps, value), value


@settings(max_examples=400, deadline=None)
@given(json_values(LITERALS, tuples=True))
def test_dumps_parsed_writes_what_dumps_writes(value: Any) -> None:
    """Any value of the kinds ``loads`` makes (tuples too): the same bytes, or the same refusal."""
    _same_bytes(value)


@pytest.mark.parametrize(
    "value",
    [
        {"s": "".join(map(chr, range(0x30))) + "\x7f\u00e9\u2028\u2029\ud7ff\ue000\U0001f600"},
        {"a": "\ud800"},  # a lone surrogate: both refuse it, in dumps's words
        {"big": 2**70, "small": -(2**63) - 1, "n": [NumberLiteral("2.50"), NumberLiteral("-1E+400")]},
        {"z": None, "t": True, "f": False, "nested": [[{"": []}], {}], "order": {"b": 1, "a": 2}},
        {"x": object()},
    ],
    ids=["control-and-unicode", "lone-surrogate", "numbers", "nesting-and-order", "no-json-type"],
)
def test_dumps_parsed_agrees_on_edge_cases(value: Any) -> None:
    _same_bytes(value)


def test_dumps_parsed_writes_every_object_of_a_history_as_dumps_does() -> None:
    """Every object of a generated history, as ingest writes it (parsed, then redacted)."""
    import io

    from strata.dev.gen import generate
    from strata.schemas.redaction import redact

    out = io.BytesIO()
    generate(out, nodes=30, pods=1500, seed=3)
    lines = out.getvalue().splitlines()
    objects = [redact(obj) for line in lines if isinstance(obj := loads(line).get("object"), dict)]
    assert len(objects) > 10_000
    assert [dumps_parsed(o) for o in objects] == [dumps(o) for o in objects]
