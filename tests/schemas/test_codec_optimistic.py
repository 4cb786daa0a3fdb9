"""The optimistic reader of whole messages (``schemas/optimistic.py``): what it returns is what the
full generated reader returns for the same bytes, and it reads the log's common messages itself."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strata.schemas import WatchEvent, default_catalog, encode
from strata.schemas.codec import HEADER_SIZE, _long, _named_fields, _returning, fields_reader
from strata.schemas.optimistic import FALLBACK, optimistic
from strata.schemas.trace import record_from_json
from tests.paths import CONFORMANCE

CONFORMANCE = CONFORMANCE
NAMES = ("kind", "op", "object")
Reader = Callable[[bytes], Any]


def _readers(names: tuple[str, ...] = NAMES) -> tuple[Reader, Reader]:
    """(the optimistic reader alone, the full generated reader alone) of a WatchEvent's ``names``."""
    fields = default_catalog().current(WatchEvent.SCHEMA).parsed["fields"]
    kept, tail = _returning(fields, names)
    fast = optimistic(fields, kept, (tail, {}), HEADER_SIZE, _long)
    assert fast is not None
    full, _ = _named_fields(WatchEvent.SCHEMA, names, None, whole=True)
    return fast, full


def _outcome(read: Reader, data: bytes) -> Any:
    try:
        return read(data)
    except Exception as exc:  # the full reader's refusal, as its kind
        return type(exc)


def conformance_messages() -> Iterator[bytes]:
    for trace in sorted(CONFORMANCE.glob("*.jsonl")):
        for line in trace.read_bytes().splitlines():
            try:
                record = record_from_json(json.loads(line), "watch/test")
            except ValueError:
                continue  # a bad line: no message to read
            if isinstance(record, WatchEvent):
                yield encode(record)


def _event(**changes: Any) -> WatchEvent:
    fields: dict[str, Any] = {
        "op": "MODIFIED",
        "api_version": "v1",
        "kind": "Pod",
        "namespace": "team-a",
        "name": "job-0-task-1",
        "uid": "0b5e7c7e-39f1-4c5b-9c1a-3f8d6f1e2a10",
        "resource_version": "81723",
        "observed_time_ms": 1_765_000_000_000,
        "source": "watch/Pod",
        "object": b'{"kind":"Pod","metadata":{"name":"job-0-task-1"}}',
    }
    fields.update(changes)
    return WatchEvent(**fields)


def test_every_conformance_message_is_read_optimistically_as_the_full_reader_reads_it() -> None:
    fast, full = _readers()
    messages = list(conformance_messages())
    assert len(messages) > 100
    for data in messages:
        assert fast(data) == full(data)


EDGES = [
    _event(name="n" * 63),  # the longest one-byte length
    _event(name="n" * 64),  # a two-byte length: the full reader's
    _event(source="s" * 5000),
    _event(namespace="équipe", name="tâche"),  # valid UTF-8, not ASCII
    _event(kind="Pödgroup"),  # a returned field not ASCII
    _event(namespace=None, uid=None, resource_version=None, observed_time_ms=None),
    _event(observed_time_ms=-1),
    _event(object=b""),
    _event(object=b"\xff" * 70_000),  # a bytes field may hold any byte
    _event(op="DELETED"),
]


@pytest.mark.parametrize("record", EDGES, ids=range(len(EDGES)))
def test_edges_read_as_the_full_reader_reads_them(record: WatchEvent) -> None:
    data = encode(record)
    assert fields_reader(WatchEvent.SCHEMA, NAMES)(data) == (record.kind, record.op, record.object)
    fast, full = _readers()
    got = _outcome(fast, data)
    assert got == full(data) or got in FALLBACK


def _mutations(data: bytes) -> Iterator[bytes]:
    """``data`` cut, corrupted and extended at every place (the UTF-8 lead byte 0xC3 and an
    unpaired continuation byte among the corruptions)."""
    yield from (data[:cut] for cut in range(len(data)))
    for i in range(HEADER_SIZE, len(data)):
        for value in (0x00, 0x01, 0x02, 0x3F, 0x7E, 0x7F, 0x80, 0x81, 0xC3, 0xFF):
            if data[i] != value:
                yield data[:i] + bytes([value]) + data[i + 1 :]
        yield data[:i] + b"\x80" + data[i:]
        yield data[:i] + data[i + 1 :]
    yield data + b"\x00"


@pytest.mark.parametrize("names", [NAMES, ("op", "object"), ("name", "uid")])
def test_for_every_mutation_it_returns_what_the_full_reader_returns_or_defers(names: tuple[str, ...]) -> None:
    """Never a value the full reader would not give: where the full reader refuses a message
    (invalid UTF-8 in a field not returned, a length past the end, bytes left over), the
    optimistic one must refuse it too."""
    fast, full = _readers(names)
    read = fields_reader(WatchEvent.SCHEMA, names)
    read_fast = deferred = refused = 0
    for data in _mutations(encode(_event(object=b'{"a":1}'))):
        got, want = _outcome(fast, data), _outcome(full, data)
        if got in FALLBACK:
            deferred += 1
        else:
            assert got == want, data.hex()
            read_fast += 1
        if isinstance(want, type):
            refused += 1
            assert read(data) is None, data.hex()
        else:
            assert read(data) == want, data.hex()
    assert read_fast > 0 and deferred > 0 and refused > 0


def test_invalid_utf8_in_a_field_not_returned_is_refused() -> None:
    data = encode(_event(namespace="ab"))
    at = data.index(b"ab")
    corrupt = data[:at] + b"\xc3(" + data[at + 2 :]  # a lead byte followed by no continuation
    fast, full = _readers()
    assert _outcome(full, corrupt) is UnicodeDecodeError
    assert _outcome(fast, corrupt) in FALLBACK
    assert fields_reader(WatchEvent.SCHEMA, NAMES)(corrupt) is None


def test_a_schema_it_has_no_form_for_gets_none() -> None:
    fields = [{"name": "sizes", "type": {"type": "array", "items": "long"}}]
    assert optimistic(fields, {0}, (["return f0"], {}), HEADER_SIZE, _long) is None


def test_a_varint_too_long_for_a_long_is_left_to_the_full_reader() -> None:
    """``_long`` refuses a varint of more than ten bytes: the optimistic reader passes that on."""
    from strata.schemas.codec import _Irregular

    data = encode(_event(observed_time_ms=7))
    assert data.count(b"\x02\x0e") == 1  # the union's branch, then the long 7
    at = data.index(b"\x02\x0e")
    overlong = data[: at + 1] + b"\xff" * 10 + b"\x01" + data[at + 2 :]
    fast, full = _readers()
    assert _outcome(full, overlong) is _Irregular and _outcome(fast, overlong) is _Irregular
    assert fields_reader(WatchEvent.SCHEMA, NAMES)(overlong) is None


def test_every_conformance_record_decodes_as_fastavro_decodes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scheduler records go through their optimistic readers first (an empty map of extensions
    is one byte); what ``decode`` gives is fastavro's record."""
    from strata.schemas import codec, decode

    messages = []
    for trace in sorted(CONFORMANCE.glob("*.jsonl")):
        for line in trace.read_bytes().splitlines():
            try:
                messages.append(encode(record_from_json(json.loads(line), "watch/test")))
            except ValueError:
                continue
    fast = [decode(data) for data in messages]
    with monkeypatch.context() as m:
        m.setattr(codec, "_fast_reader", lambda data, catalog: None)
        assert fast == [decode(data) for data in messages]
    assert len({type(r) for r in fast}) >= 4
