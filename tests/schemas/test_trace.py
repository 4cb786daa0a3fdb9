import pytest

from strata.schemas import BadRecord, Bind, BindFailed, Evict, Synced, WatchEvent, objectjson
from strata.schemas.trace import parse_line, read_trace, split_lines


def test_line_splitting():
    data = b"a\r\n\r\n \t\r\nb\rc\n\x0c\n\n  x  \r\r\nlast"
    assert list(split_lines(data)) == [(1, b"a"), (4, b"b\rc"), (5, b"\x0c"), (7, b"  x  \r"), (8, b"last")]


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (b'{"type":"BIND","pod":"u"', "JSONDecodeError"),
        (b"[1,2]", "not a JSON object"),
        (b'{"type":"PATCHED"}', "unknown record type 'PATCHED'"),
        (b'{"type":"BIND","pod":"u"}', "BIND lacks node"),
        (b'{"type":"BIND","pod":"u","node":null}', "BIND lacks node"),
        (b'{"type":"BIND","pod":5,"node":"n"}', "pod is int"),
        (b'{"type":"EVICT","pod":"u","reason":7}', "reason is int"),
        (b'{"type":"ADDED"}', "ADDED without an object"),
        (b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"p"}}}', "lacks apiVersion"),
        (
            b'{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","uid":"u"}}}',
            "lacks namespace",
        ),
        (
            b'{"type":"DELETED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"n"}}}',
            "lacks uid",
        ),
        (b'{"type":"SYNCED","kind":NaN}', "NaN is not JSON"),
        (b'\xef\xbb\xbf{"type":"SYNCED","kind":"Pod"}', "JSONDecodeError"),
        (b'{"type":"SYNCED","kind":"\xff"}', "UnicodeDecodeError"),
    ],
)
def test_bad_lines(line, error):
    record = parse_line(line, "trace/t:1")
    assert isinstance(record, BadRecord)
    assert error in record.error
    assert record.raw == line and record.source == "trace/t:1"


def test_good_lines():
    assert parse_line(b'{"type":"BIND","pod":"u","node":"n","replica":"r","type":"BIND"}', "s") == Bind("u", "n", "r")
    assert parse_line(b'{"type":"BIND_FAILED","pod":"u","reason":null}', "s") == BindFailed("u")
    assert parse_line(b'{"type":"EVICT","pod":"u","reason":"x"}', "s") == Evict("u", "x")
    assert parse_line(b'{"type":"SYNCED","kind":"Queue"}', "s") == Synced("Queue")
    event = parse_line(
        b'{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"Node","metadata":{"name":"n","resourceVersion":"9"},'
        b'"status":{"allocatable":{"cpu":1.50,"memory":1e3}}}}',
        "s",
    )
    assert isinstance(event, WatchEvent)
    assert (event.op, event.kind, event.name, event.namespace, event.resource_version) == (
        "MODIFIED",
        "Node",
        "n",
        None,
        "9",
    )
    assert b'"cpu":1.50,"memory":1e3' in event.object  # numbers travel at their literal text
    assert objectjson.loads(event.object)["status"]["allocatable"]["cpu"] == objectjson.NumberLiteral("1.50")


def test_an_unknown_kind_is_a_record_not_a_bad_one():
    event = parse_line(
        b'{"type":"ADDED","object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"}}}', "s"
    )
    assert isinstance(event, WatchEvent) and event.kind == "Deployment"


def test_read_trace_numbers_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'\n{"type":"SYNCED","kind":"Pod"}\n\nnope\n')
    lines = list(read_trace(path))
    assert [(t.number, type(t.record).__name__) for t in lines] == [(2, "Synced"), (4, "BadRecord")]
    assert lines[1].record.source == "trace/t.jsonl:4"


def test_missing_trace_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="cannot read trace"):
        list(read_trace(tmp_path / "nope.jsonl"))
