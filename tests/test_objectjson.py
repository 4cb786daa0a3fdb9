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
