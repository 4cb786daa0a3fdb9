import contextlib
import io
import json
from types import MappingProxyType

import avro.schema
import pytest
from fastavro import parse_schema, schemaless_writer

from strata.schemas import (
    BadRecord,
    Bind,
    BindCommand,
    BindFailed,
    BindGroup,
    BindSucceeded,
    Catalog,
    CodecError,
    Digest,
    EncodeError,
    Evict,
    EvictCommand,
    EvictFailed,
    EvictSucceeded,
    GroupBind,
    MalformedBody,
    NotSingleObject,
    Synced,
    UnknownFingerprint,
    WatchEvent,
    decode,
    default_catalog,
    encode,
)
from strata.schemas.catalog import load_version
from strata.schemas.codec import decode_datum
from strata.schemas.records import RECORD_CLASSES

ONE_OF_EACH = [
    WatchEvent(
        op="ADDED",
        api_version="v1",
        kind="Pod",
        name="p",
        namespace="ns",
        uid="u1",
        resource_version="7",
        observed_time_ms=1_700_000_000_000,
        source="watch/Pod",
        object=b'{"kind":"Pod"}',
    ),
    WatchEvent(op="DELETED", api_version="v1", kind="Node", name="n1", source="trace/x:3", object=b"{}"),
    Bind(pod="u1", node="n1", replica="r1"),
    Bind(pod="u1", node="n1"),
    BindGroup(binds=(GroupBind("u1", "n1"), GroupBind("u2", "n2", MappingProxyType({"k": "v"}))), replica="r1"),
    BindGroup(binds=(GroupBind("u1", "n1"),)),
    BindFailed(pod="u1", reason="node gone"),
    Evict(pod="u1", reason="preempted", replica="r2"),
    EvictFailed(pod="u1"),
    BindSucceeded(pod="u1", node="n1"),
    EvictSucceeded(pod="u1"),
    Synced(kind="PodGroup"),
    BadRecord(raw=b"\x00{", error="not JSON", source="trace/x:9"),
    BindCommand(
        command_id="cache-log@12",
        log_offset=12,
        pod_uid="u1",
        namespace="ns",
        name="p",
        node="n1",
        replica="r1",
        extensions=MappingProxyType({"k": "v"}),
    ),
    EvictCommand(command_id="cache-log@13", log_offset=13, pod_uid="u1", namespace="ns", name="p", reason="r"),
    Digest(version=100, digest="ab" * 32, replica="r1", fold="schedulerNames=volcano;defaultQueue=default"),
]


def test_every_schema_has_a_record_class_and_an_example():
    assert set(default_catalog().names()) == set(RECORD_CLASSES)
    assert {r.SCHEMA for r in ONE_OF_EACH} == set(RECORD_CLASSES)


@pytest.mark.parametrize("record", ONE_OF_EACH, ids=lambda r: type(r).__name__)
def test_round_trip(record):
    data = encode(record)
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == default_catalog().current(record.SCHEMA).fingerprint
    assert decode(data) == record


def _rabin(data: bytes) -> bytes:
    """CRC-64-AVRO exactly as the Avro specification's reference code computes it."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for b in data:
        fp = (fp >> 8) ^ table[(fp ^ b) & 0xFF]
    return fp.to_bytes(8, "little")


def test_fingerprints_match_the_specification_and_the_avro_package():
    from fastavro.schema import to_parsing_canonical_form

    assert _rabin(b"") == (0xC15D213AA4D7A795).to_bytes(8, "little")
    for version in default_catalog().all_versions():
        pcf = to_parsing_canonical_form(version.parsed)
        assert _rabin(pcf.encode()) == version.fingerprint, version.path.name
        # a second, independent implementation (the Apache avro package)
        assert avro.schema.parse(json.dumps(version.source)).fingerprint("CRC-64-AVRO") == version.fingerprint


def test_not_single_object():
    for data in (b"", b"\xc3", b"\xc3\x01\x00", b'{"type":"BIND"}', b"\x00\x00\x00\x00\x01abc" + bytes(8)):
        with pytest.raises(NotSingleObject):
            decode(data)


def test_unknown_fingerprint():
    body = encode(Bind(pod="u", node="n"))
    with pytest.raises(UnknownFingerprint) as info:
        decode(body[:2] + bytes(8) + body[10:])
    assert info.value.fingerprint == bytes(8)
    assert "0000000000000000" in str(info.value)


@pytest.mark.parametrize("record", ONE_OF_EACH, ids=lambda r: type(r).__name__)
def test_every_truncation_is_a_codec_error(record):
    data = encode(record)
    for cut in range(len(data)):
        with pytest.raises(CodecError):
            decode(data[:cut])


def test_trailing_bytes_are_malformed():
    with pytest.raises(MalformedBody, match="trailing"):
        decode(encode(Synced(kind="Pod")) + b"\x00")


def test_corrupt_bodies_raise_codec_errors_only():
    data = bytearray(encode(ONE_OF_EACH[0]))
    for i in range(10, len(data)):
        for flip in (0x01, 0x80, 0xFF):
            corrupt = bytearray(data)
            corrupt[i] ^= flip
            with contextlib.suppress(CodecError):  # any other exception fails the test
                decode(bytes(corrupt))


def test_encode_rejects_a_record_that_does_not_fit():
    with pytest.raises(EncodeError):
        encode(Bind(pod=12, node="n"))  # type: ignore[arg-type]
    with pytest.raises(EncodeError):
        encode(WatchEvent(op="PATCHED", api_version="v1", kind="Pod", name="p", source="s", object=b"{}"))


def test_old_writer_resolves_to_the_current_reader(tmp_path):
    """A message written under v1 decodes after v2 added a field with a default, and the
    v2 writer's messages are found by their own fingerprint."""
    v1 = default_catalog().current("strata.log.Synced")
    v2_source = json.loads(json.dumps(v1.source))
    v2_source["fields"].append({"name": "count", "type": "long", "default": 0})
    (tmp_path / "Synced.v1.avsc").write_text(json.dumps(v1.source))
    (tmp_path / "Synced.v2.avsc").write_text(json.dumps(v2_source))
    catalog = Catalog.load(tmp_path)
    assert catalog.current("strata.log.Synced").version == 2

    old = encode(Synced(kind="Pod"))  # the repo's catalog writes v1
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(v2_source), {"kind": "Node", "count": 3})
    new = b"\xc3\x01" + catalog.current("strata.log.Synced").fingerprint + buf.getvalue()

    assert decode_datum(old, catalog) == ("strata.log.Synced", {"kind": "Pod", "count": 0})
    assert decode_datum(new, catalog) == ("strata.log.Synced", {"kind": "Node", "count": 3})


def test_schema_file_names_must_match_their_schema(tmp_path):
    path = tmp_path / "Bind.v1.avsc"
    path.write_text(json.dumps({"type": "record", "name": "strata.log.Evict", "fields": []}))
    with pytest.raises(ValueError, match="holds schema"):
        load_version(path, 1)


def _fastavro_only(monkeypatch, fn, data):
    """``fn(data)`` with the generated readers switched off: fastavro's answer, or its error."""
    from strata.schemas import codec

    with monkeypatch.context() as m:
        m.setattr(codec, "_fast_reader", lambda data, catalog: None)
        return _outcome(fn, data)


def _outcome(fn, data):
    try:
        return "ok", fn(data)
    except CodecError as exc:
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("record", ONE_OF_EACH, ids=lambda r: type(r).__name__)
def test_every_current_schema_has_a_generated_reader(record):
    from strata.schemas import codec

    reader = codec._fast_reader(encode(record), default_catalog())
    if isinstance(record, BindGroup):
        # arrays of records are left to fastavro: a BIND_GROUP is one per gang, not per pod event
        assert reader is None and decode(encode(record)) == record
        return
    assert reader is not None and reader.record is not None
    assert reader.record(encode(record)) == record


def _irregular(record):
    """The record's message, truncated, corrupted and extended in every place."""
    data = encode(record)
    yield from (data[:cut] for cut in range(len(data)))
    for i in range(10, len(data)):
        for flip in (0x01, 0x02, 0x7F, 0x80, 0xFF):
            corrupt = bytearray(data)
            corrupt[i] ^= flip
            yield bytes(corrupt)
        yield data[:i] + b"\x80" + data[i:]
        yield data[:i] + data[i + 1 :]
    yield data + b"\x00"


@pytest.mark.parametrize("record", ONE_OF_EACH, ids=lambda r: type(r).__name__)
def test_the_generated_readers_read_what_fastavro_reads(monkeypatch, record):
    """Same record, or the same error, for every message: the generated readers give up on what
    they do not read and leave it to fastavro."""
    for data in _irregular(record):
        for fn in (decode, decode_datum):
            assert _outcome(fn, data) == _fastavro_only(monkeypatch, fn, data), data.hex()


def test_irregular_encodings_are_fastavros_to_read(monkeypatch):
    """A negative length, a union or enum index out of range, a ten-byte varint: legal or not,
    fastavro alone decides."""
    head = encode(EvictSucceeded(pod="u"))[:10]
    bodies = [
        b"\x02u\x02" + b"\xff" * 9 + b"\x01",  # evict_offset: a ten-byte varint
        b"\x02u\x01",  # union index -1
        b"\x02u\x04",  # union index 2
        b"\x03u\x00",  # a negative length
        b"\x80\x00\x00",  # a non-minimal varint for an empty pod
    ]
    watch = encode(ONE_OF_EACH[1])
    messages = [head + body for body in bodies] + [watch[:10] + b"\x06" + watch[11:], watch[:10] + b"\x01" + watch[11:]]
    for data in messages:
        for fn in (decode, decode_datum):
            assert _outcome(fn, data) == _fastavro_only(monkeypatch, fn, data), data.hex()


WATCH_HEAD = ("kind", "namespace", "name", "uid")


@pytest.mark.parametrize("record", ONE_OF_EACH, ids=lambda r: type(r).__name__)
def test_a_head_reader_reads_its_fields_where_a_message_begins(record):
    """A WatchEvent's leading fields as ``decode`` reads them, from inside a larger buffer;
    None for a message of any other schema."""
    from strata.schemas.codec import head_reader

    read = head_reader(WatchEvent.SCHEMA, WATCH_HEAD)
    data = encode(record)
    buffer = b"\x07" * 5 + data + encode(Synced(kind="Pod"))
    if isinstance(record, WatchEvent):
        assert read(buffer, 5) == tuple(getattr(record, name) for name in WATCH_HEAD)
        assert read(data, 0) == read(buffer, 5)
    else:
        assert read(buffer, 5) is None


def test_a_head_reader_gives_up_on_what_it_cannot_read():
    """A message cut inside the fields it reads, or an out-of-range union index: None, for the
    caller to ``decode`` (which says what is wrong); a cut after them is not its to see."""
    from strata.schemas.codec import head_reader

    read = head_reader(WatchEvent.SCHEMA, WATCH_HEAD)
    data = encode(ONE_OF_EACH[0])
    uid_end = data.index(b"u1") + 2
    assert [read(data[:cut], 0) for cut in range(uid_end)] == [None] * uid_end
    assert read(data[:uid_end], 0) == ("Pod", "ns", "p", "u1")
    bad_union = bytearray(data)
    bad_union[data.index(b"ns") - 2] = 0x06  # the namespace's union index: 3, of two branches
    assert read(bytes(bad_union), 0) is None


def _watch(size: int, observed: int | None = None) -> WatchEvent:
    return WatchEvent(
        op="MODIFIED", api_version="v1", kind="Pod", name="p", source="s", object=b"x" * size, observed_time_ms=observed
    )


# lengths and longs at the edges of one, two and three bytes of varint (zigzag: 63 | 64, 8191 | 8192)
WIDE = [_watch(n) for n in (63, 64, 200, 8191, 8192, 70_000)] + [
    _watch(0, t) for t in (-64, -65, 63, 64, -8192, -8193, 8191, 8192, 2**55, -(2**55) - 1)
]


@pytest.mark.parametrize("record", WIDE, ids=lambda r: f"{len(r.object)}-{r.observed_time_ms}")
def test_the_generated_readers_read_varints_of_every_width(record):
    from strata.schemas import codec

    data = encode(record)
    compiled = codec._fast_reader(data, default_catalog())
    assert compiled is not None and compiled.record is not None and compiled.record(data) == record
    assert decode(data) == record


def test_a_two_byte_length_cut_or_corrupted_is_read_as_fastavro_reads_it(monkeypatch):
    for data in _irregular(_watch(100)):
        for fn in (decode, decode_datum):
            assert _outcome(fn, data) == _fastavro_only(monkeypatch, fn, data), data.hex()


@pytest.mark.parametrize("record", ONE_OF_EACH + WIDE[:3], ids=lambda r: type(r).__name__)
def test_a_fields_reader_keeps_the_fields_named(record):
    """A WatchEvent's op and object, as ``decode`` reads them; None for a message of any other schema."""
    from strata.schemas.codec import fields_reader

    read = fields_reader(WatchEvent.SCHEMA, ("op", "object"))
    got = read(encode(record))
    assert got == ((record.op, record.object) if isinstance(record, WatchEvent) else None)


def test_a_fields_reader_reads_what_decode_reads_and_no_more():
    """For every cut, corrupted or extended message: None, or the fields of what ``decode``
    reads from it. It never reads a message that ``decode`` refuses."""
    from strata.schemas.codec import fields_reader

    read = fields_reader(WatchEvent.SCHEMA, ("op", "object"))
    read_some = 0
    for record in (ONE_OF_EACH[0], _watch(100)):
        for data in _irregular(record):
            got = read(data)
            if got is not None:
                decoded = decode(data)
                assert isinstance(decoded, WatchEvent) and got == (decoded.op, decoded.object), data.hex()
                read_some += 1
    assert read_some > 0
