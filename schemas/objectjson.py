"""JSON for Kubernetes objects with every number kept at its literal text.

The fold reads quantities such as ``"cpu": 2.50`` at the number's literal text (the trace
format says so), and a float would round ``0.1234567890123456789``. So a non-integer number
loads as a ``NumberLiteral`` holding its text and dumps back as that text, unquoted;
integers are exact as Python ints. A WatchEvent's ``object`` bytes are written with ``dumps``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from json.encoder import encode_basestring  # the C speedup, like json.dumps
from typing import Any, cast

import msgspec


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


# CPython refuses int <-> str conversions of more digits than sys.get_int_max_str_digits(),
# which PYTHONINTMAXSTRDIGITS sets per process (0: no limit; 640 at the least). Which records are
# bad must not depend on a reader's environment, so the limit is set to MAX_INT_DIGITS in every
# process: an integer literal of more digits is refused by PyLong itself, and every integer that
# loads also converts back (snapshots and checkpoints render them). A ``parse_int`` callback
# could check the length instead, but the C scanner then calls into Python for every integer of
# every record, a fifth of the fold's parsing time; with ``int`` it converts in C.
MAX_INT_DIGITS = 4300
sys.set_int_max_str_digits(MAX_INT_DIGITS)
_TOO_MANY_DIGITS = "Exceeds the limit"  # how CPython's ValueError for that limit begins


class _Decoder(json.JSONDecoder):
    """``json.JSONDecoder`` with the attribute its ``__init__`` sets and typeshed leaves out."""

    scan_once: Callable[[str, int], tuple[Any, int]]


_decoder = _Decoder(parse_float=NumberLiteral, parse_constant=_reject_constant)


_scan = _decoder.scan_once  # the C scanner; JSONDecoder.decode adds two regex calls around it
_WS = " \t\n\r"

# The deepest nesting of arrays and objects that ``loads`` accepts. The C scanner recurses once
# per level and raises RecursionError (not a ValueError) at a depth that depends on how deep the
# caller's own stack is: the same record would then crash one reader and parse in another. A
# fixed limit makes deeper JSON bad everywhere alike, far above any Kubernetes object's depth
# and far below Python's recursion limit (``dumps`` recurses per level too).
MAX_DEPTH = 512
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def _check_depth(text: str) -> None:
    depth = 0
    for m in _STRING_OR_BRACKET.finditer(text):
        c = m.group()
        if c == "[" or c == "{":
            depth += 1
            if depth > MAX_DEPTH:
                raise ValueError(f"JSON nests deeper than {MAX_DEPTH} levels")
        elif c == "]" or c == "}":
            depth -= 1


# The fast path: msgspec's C decoder hands every number with a fraction or exponent to
# ``float_hook`` as its literal text, and reads integers exactly, so for every input it accepts it
# builds the value the stdlib scanner below builds (``tests/schemas/test_objectjson_fast.py``), in a third
# of the time (the scanner costs the fold about 5 µs a record, most of a replay's parsing). It
# refuses a superset of what the stdlib path refuses (lone surrogates, integers of 4,300 digits
# with a sign, a UTF-8 BOM): anything it refuses goes to the stdlib path, which decides whether
# the input is bad and says why in the words bad-record reports have always used.
_fast_decode = msgspec.json.Decoder(float_hook=NumberLiteral).decode


def _nests_at_most(size: int, square: int) -> int:
    """How deep a text of ``size`` characters with ``square`` "[" among them can nest, for the
    scanner that reads it, valid JSON or not: an array level takes a "[" of its own, an object
    level a "{", a key's two quotes and a colon before the value that nests in it (the innermost
    container, "{}", two). So a 1.4 KB pod line, with its two "[", cannot reach MAX_DEPTH, and
    one count of "[" (0.5 us) spares counting both brackets (1.1 us) in most records."""
    return square + (size - square) // 4 + 1


def loads(text: str | bytes) -> Any:
    """Parse RFC 8259 JSON; raises ``ValueError`` (a ``json.JSONDecodeError`` for syntax; deeper
    nesting than ``MAX_DEPTH`` is refused too)."""
    # Deeper nesting than MAX_DEPTH needs more brackets than MAX_DEPTH: such input takes the
    # stdlib path, whose depth check makes it bad everywhere alike.
    if type(text) is bytes:
        shallow = len(text) <= MAX_DEPTH or _nests_at_most(len(text), text.count(b"[")) <= MAX_DEPTH
        if not shallow:  # one pass that drops both brackets, where two counts took half as long again
            shallow = len(text) - len(text.translate(None, b"{[")) <= MAX_DEPTH
    elif type(text) is str:
        shallow = len(text) <= MAX_DEPTH or _nests_at_most(len(text), text.count("[")) <= MAX_DEPTH
        if not shallow:
            shallow = text.count("{") + text.count("[") <= MAX_DEPTH
    else:
        shallow = False  # a bytearray or memoryview: rare enough for the stdlib path
    if shallow:
        try:
            return _fast_decode(text)
        except (msgspec.DecodeError, ValueError):  # ValueError: a str holding a lone surrogate
            pass  # bad, or beyond what msgspec reads: the stdlib path below decides
    return _loads_stdlib(text)


def _loads_stdlib(text: str | bytes) -> Any:
    """``loads`` by the stdlib's C scanner: the definition of what is bad, and why."""
    if type(text) is bytes:
        text = text.decode("utf-8")  # strict: a bad byte is an error, not a replacement character
    elif type(text) is not str:
        text = cast(bytes, text).decode("utf-8")
    # Nesting deeper than MAX_DEPTH needs more than MAX_DEPTH characters and brackets (opened:
    # the scanner recurses before it finds a missing close): two C-speed tests keep the exact
    # check off every ordinary record.
    if len(text) > MAX_DEPTH and text.count("{") + text.count("[") > MAX_DEPTH:
        _check_depth(text)
    start = 0
    if text[:1] in _WS and text:
        start = len(text) - len(text.lstrip(_WS))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise json.JSONDecodeError("Expecting value", text, exc.value) from None
    except ValueError as exc:
        if type(exc) is ValueError and str(exc).startswith(_TOO_MANY_DIGITS):
            # one short reason, the same for every record, as bad-record reports show it
            raise ValueError(f"an integer of more than {MAX_INT_DIGITS} digits") from None
        raise
    if end != len(text) and text[end:] != "\n" and text[end:].strip(_WS):  # a trace line ends in LF
        raise json.JSONDecodeError("Extra data", text, end)
    # Only an escape makes a lone surrogate from UTF-8 input; a one-character search (memchr)
    # keeps the two slower ones off the records that have no backslash at all.
    if "\\" in text and ("\\ud" in text or "\\uD" in text):
        _check_surrogates(value)
    return value


def _check_surrogates(value: Any) -> None:
    """Refuse a string with a lone surrogate escape ("\\ud800" without its pair).

    RFC 8259 leaves such strings' meaning open and no UTF-8 can hold them: a trace line with one
    was applied by ``strata replay`` but could not be published (the WatchEvent's object bytes and
    Avro strings are UTF-8; ``strata ingest --from`` stopped with an EncodeError on a BIND's pod).
    Bad everywhere alike keeps replay and the log in step. Iterative: depth is bounded, not free.
    """
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is str:
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError("a string holds a lone surrogate (\\ud800-\\udfff): not Unicode text") from None
        elif type(v) is dict:
            stack.extend(v)
            stack.extend(v.values())
        elif type(v) is list:
            stack.extend(v)


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON that ``loads`` reads back to an equal value, numbers to the letter."""
    parts: list[str] = []
    _dump(value, parts.append)
    return "".join(parts).encode("utf-8")


def dumps_parsed(value: Any) -> bytes:
    """``dumps`` of a value ``loads`` made (or one made of the same: keys that are strings, a
    ``NumberLiteral`` where a float would be), by msgspec's C encoder, a NumberLiteral written as
    its text: the same bytes (``tests/schemas/test_objectjson_fast.py``), a tenth of the time. Ingest
    writes every object it publishes so (``dumps`` was a third of `strata ingest --from`'s time).
    What the encoder refuses (a lone surrogate, a type JSON has not) goes to ``dumps``, which
    refuses it in its own words. Not for a float or a key that is no string, which ``loads``
    never makes: the encoder writes those as ``dumps`` does not (NaN as null, a key 1 as "1")."""
    try:
        return _encode_parsed(value)
    except (TypeError, ValueError, OverflowError):
        return dumps(value)


def _raw_literal(value: object) -> msgspec.Raw:
    """The encoder's hook: a NumberLiteral's text, inserted as it is (a JSON number)."""
    if isinstance(value, NumberLiteral):
        return msgspec.Raw(value.text.encode())
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


_encode_parsed = msgspec.json.Encoder(enc_hook=_raw_literal).encode


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


def number_text(value: object) -> str:
    """An encoder's hook for a ``NumberLiteral``: its text, written as a JSON string."""
    if isinstance(value, NumberLiteral):
        return value.text
    raise TypeError(f"{type(value).__name__} is not JSON")


class SortedJson:
    """Compact JSON with sorted keys and UTF-8 unescaped, as ``json.JSONEncoder(sort_keys=True,
    separators=(",", ":"), ensure_ascii=False, default=default)`` writes it (``stdlib``), from
    msgspec's C encoder, several times sooner: the stdlib encoder builds its C encoder anew on
    every call. The two write the same text for strings, ints, bools, null, lists, tuples,
    NamedTuples, StrEnums and str-keyed dicts; they differ only in how they spell a float (1e16,
    not 1e+16), and Strata's JSON holds none (objectjson never loads one). What msgspec refuses (a
    lone surrogate, a key that is no string, an object of no JSON type) goes to ``stdlib``, which
    accepts or refuses it as it always has. Each user holds the two to the same text in a test."""

    def __init__(self, default: Callable[[Any], Any] | None = None) -> None:
        self.stdlib = json.JSONEncoder(
            sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=default
        ).encode
        self._fast = msgspec.json.Encoder(enc_hook=default, order="sorted").encode

    def text(self, value: Any) -> str:
        try:
            return self._fast(value).decode()
        except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
            return self.stdlib(value)

    def bytes(self, value: Any) -> bytes:
        """UTF-8 (strict: a lone surrogate the stdlib encoder wrote is refused here)."""
        try:
            return self._fast(value)
        except (TypeError, ValueError):
            return self.stdlib(value).encode()
