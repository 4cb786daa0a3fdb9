"""JSON for Kubernetes objects with every number kept at its literal text.

The fold reads quantities such as ``"cpu": 2.50`` at the number's literal text (the trace
format says so), and a float would round ``0.1234567890123456789``. So a non-integer number
loads as a ``NumberLiteral`` holding its text and dumps back as that text, unquoted;
integers are exact as Python ints. A WatchEvent's ``object`` bytes are written with ``dumps``.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring  # type: ignore[attr-defined]  # the C speedup, like json.dumps
from typing import Any


class NumberLiteral:
    """A JSON number with a fraction or exponent, as written (``2.50``, ``1e3``).

    Deliberately not a ``str``: a type check for a JSON string must not accept a number.
    """

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NumberLiteral) and other.text == self.text

    def __hash__(self) -> int:
        return hash(("NumberLiteral", self.text))

    def __repr__(self) -> str:
        return f"NumberLiteral({self.text!r})"


def _reject_constant(name: str) -> Any:
    # NaN, Infinity and -Infinity are Python's extensions, not RFC 8259 JSON.
    raise ValueError(f"{name} is not JSON")


_decoder = json.JSONDecoder(parse_float=NumberLiteral, parse_constant=_reject_constant)


_scan = _decoder.scan_once  # the C scanner; JSONDecoder.decode adds two regex calls around it
_WS = " \t\n\r"


def loads(text: str | bytes) -> Any:
    """Parse RFC 8259 JSON; raises ``ValueError`` (a ``json.JSONDecodeError`` for syntax)."""
    if type(text) is not str:
        text = text.decode("utf-8")  # strict: a bad byte is an error, not a replacement character
    start = 0
    if text[:1] in _WS and text:
        start = len(text) - len(text.lstrip(_WS))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise json.JSONDecodeError("Expecting value", text, exc.value) from None
    if end != len(text) and text[end:].strip(_WS):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON that ``loads`` reads back to an equal value, numbers to the letter."""
    parts: list[str] = []
    _dump(value, parts.append)
    return "".join(parts).encode("utf-8")


def _dump(value: Any, out: Any) -> None:
    if isinstance(value, NumberLiteral):
        out(value.text)
    elif isinstance(value, str):
        out(encode_basestring(value))
    elif value is None:
        out("null")
    elif value is True:
        out("true")
    elif value is False:
        out("false")
    elif isinstance(value, int):
        out(int.__repr__(value))
    elif isinstance(value, float):
        out(json.dumps(value, allow_nan=False))
    elif isinstance(value, dict):
        out("{")
        for i, (k, v) in enumerate(value.items()):
            if i:
                out(",")
            out(encode_basestring(k))
            out(":")
            _dump(v, out)
        out("}")
    elif isinstance(value, (list, tuple)):
        out("[")
        for i, v in enumerate(value):
            if i:
                out(",")
            _dump(v, out)
        out("]")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as JSON")
