import json
import random

import pytest

from strata.schemas import objectjson
from strata.schemas.objectjson import MAX_DEPTH, NumberLiteral, dumps, loads


def test_numbers_keep_their_literal_text():
    text = '{"a":1.50,"b":[1e3,2,-7,0.1234567890123456789,1E+400],"c":"é\\n\\u0000","d":null,"e":true,"f":false}'
    value = loads(text)
    assert value["a"] == NumberLiteral("1.50") and value["b"][1] == 2
    assert dumps(value).decode() == text.replace("\\u0000", "\\u0000")
    assert loads(dumps(value)) == value


def test_a_number_literal_is_not_a_string():
    assert not isinstance(loads("[1.5]")[0], str)


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", "[-Infinity]", "\ufeff{}", "{", "{'a':1}", "[1,]"])
def test_not_json(text):
    with pytest.raises(ValueError):
        loads(text)


def test_invalid_utf8():
    with pytest.raises(UnicodeDecodeError):
        loads(b'"\xff"')


def test_dumps_rejects_what_json_cannot_hold():
    with pytest.raises(TypeError):
        dumps({"a": object()})
    with pytest.raises(ValueError):
        dumps(float("nan"))


@pytest.mark.parametrize("sign", ["", "-"])
def test_integers_of_more_than_4300_digits_are_refused_with_one_reason(sign):
    assert loads(f"[{sign}{'9' * 4300}]") == [int(sign + "9" * 4300)]
    for text in (f"[{sign}{'9' * 4301}]", f'{{"a":{sign}{"1" * 100_000}}}'):
        with pytest.raises(ValueError) as info:
            loads(text)
        assert str(info.value) == "an integer of more than 4300 digits"


@pytest.mark.parametrize("n", [513, 700, 1000, 1024, 5000])
def test_unclosed_nesting_deeper_than_the_limit_is_refused_not_a_crash(n):
    """The scanner recurses before it finds a missing close: "[" * 1000 raised RecursionError."""
    for opener in ("[", '{"a":'):
        with pytest.raises(ValueError, match="nests deeper"):
            loads(opener * n)


def _depth(text: str) -> int:
    """How deep the brackets outside strings nest, closed or not."""
    depth = deepest = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (c == "\\", c != '"')
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "}]":
            depth -= 1
    return deepest


def _nesting(levels: list[str], rng: random.Random, close: bool) -> str:
    """Levels of arrays and objects, each as short as JSON lets it be (or longer), closed or cut."""
    text = ""
    for level in levels:
        key = '"' + "k" * rng.choice((0, 0, 1, 3)) + '"'
        space = " " * rng.choice((0, 0, 0, 1))
        text += "[" + space if level == "[" else "{" + key + space + ":"
    text += "{}" if rng.random() < 0.5 else "1"
    if close:
        text += "".join("]" if level == "[" else "}" for level in reversed(levels))
    return text


def test_the_length_bound_on_nesting_holds_for_any_text():
    """``_nests_at_most`` is never below how deep a text nests, valid or cut short: so a text
    it lets through to msgspec cannot reach the recursion limit, whoever calls."""
    rng = random.Random(7)
    for _ in range(3000):
        levels = [rng.choice("[{") for _ in range(rng.randint(0, 700))]
        text = _nesting(levels, rng, close=rng.random() < 0.7)
        if rng.random() < 0.3:
            text = f'{{"type":"ADDED","object":{text}' + ("}" if rng.random() < 0.5 else "")
        for form in (text, text.encode()):
            bound = objectjson._nests_at_most(len(form), form.count("[" if isinstance(form, str) else b"["))
            assert bound >= _depth(text), text[:80]
    # and it is the truth where objects nest as tightly as they can, cut short before the closers
    tight = '{"":' * 600 + "{}"
    assert objectjson._nests_at_most(len(tight), 0) == _depth(tight) == 601


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1])
def test_tight_nesting_around_the_limit_loads_as_the_stdlib_decides(depth):
    for text in ('{"":' * (depth - 1) + "{}" + "}" * (depth - 1), "[" * depth + "]" * depth):
        if depth <= MAX_DEPTH:
            assert loads(text) == json.loads(text)
        else:
            with pytest.raises(ValueError):
                loads(text)
