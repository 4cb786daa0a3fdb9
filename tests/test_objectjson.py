import pytest

from strata.schemas.objectjson import NumberLiteral, dumps, loads


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
