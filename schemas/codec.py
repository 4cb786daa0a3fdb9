"""Avro single-object encoding of Strata's records.

A message is ``C3 01`` (format marker), the 8-byte little-endian CRC-64-AVRO fingerprint of the
writer schema, then the Avro binary body (Avro specification, "Single-object encoding"). Decoding
looks the fingerprint up in the in-repo catalog and resolves that writer version to the current
reader version of the same schema, so old messages stay readable after a compatible change. No
schema registry is involved: an archive or a replay needs nothing but this package.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from types import MappingProxyType
from typing import Any, cast

from fastavro import schemaless_reader, schemaless_writer

from strata.schemas.catalog import Catalog, default_catalog
from strata.schemas.optimistic import FALLBACK, Guard, optimistic, varint_lines
from strata.schemas.records import RECORD_CLASSES, BindGroup, GroupBind, Record

MARKER = b"\xc3\x01"
HEADER_SIZE = len(MARKER) + 8


class CodecError(ValueError):
    """A message that cannot become a record (or a record that cannot become a message)."""

    reason = "codec-error"


class NotSingleObject(CodecError):
    """The bytes do not start with the single-object marker: not an Avro message of ours."""

    reason = "not-single-object"


class UnknownFingerprint(CodecError):
    """The writer schema's fingerprint is in no released version of the catalog."""

    reason = "unknown-fingerprint"

    def __init__(self, fp: bytes) -> None:
        super().__init__(f"unknown schema fingerprint {fp.hex()}")
        self.fingerprint = fp


class MalformedBody(CodecError):
    """The body does not decode under the writer schema the fingerprint names (truncated, corrupt)."""

    reason = "malformed-body"


class EncodeError(CodecError):
    """The record does not fit its schema."""

    reason = "encode-error"


def encode(record: Record, catalog: Catalog | None = None) -> bytes:
    """The single-object encoding of ``record`` under the current version of its schema."""
    catalog = catalog or default_catalog()
    version = catalog.current(record.SCHEMA)
    buf = io.BytesIO()
    buf.write(MARKER)
    buf.write(version.fingerprint)
    try:
        schemaless_writer(buf, version.parsed, _as_datum(record), strict=True)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise EncodeError(f"{record.SCHEMA}: {exc}") from exc
    return buf.getvalue()


def decode(data: bytes, catalog: Catalog | None = None) -> Record:
    """The record in ``data``; raises a ``CodecError`` subclass saying what is wrong."""
    catalog = catalog or default_catalog()
    reader = _fast_reader(data, catalog)
    if reader is not None and reader.record is not None:
        record = _record(reader, data)
        if record is not None:
            return record
    return _as_record(*decode_datum(data, catalog))


def record_reader(catalog: Catalog | None = None) -> Callable[[bytes], Record | None]:
    """``decode``'s fast path as a function of its own, for a loop over many messages: the record
    when the generated reader of the message's writer schema reads it, else None (the message is
    then ``decode``'s to read or refuse). It saves a reader of the cache log the calls around it,
    about a tenth of what a message costs to read."""
    readers = _compiled.setdefault(catalog or default_catalog(), {})

    def read(data: bytes) -> Record | None:
        if type(data) is bytes and data[:2] == MARKER:
            compiled = readers.get(data[2:HEADER_SIZE])  # None as well until ``decode`` has seen it
            if compiled is not None and compiled.record is not None:
                return _record(compiled, data)
        return None

    return read


def _record(compiled: _Compiled, data: bytes) -> Record | None:
    """The record the generated readers read (the optimistic one first), or None: fastavro's."""
    if compiled.first is not None:
        try:
            return cast(Record, compiled.first(data))
        except _DEFERRED:
            pass
    assert compiled.record is not None
    try:
        return cast(Record, compiled.record(data))
    except _IRREGULAR:
        return None


def head_reader(
    full_name: str, names: tuple[str, ...], catalog: Catalog | None = None
) -> Callable[[bytes, int], tuple[Any, ...] | None]:
    """A reader of a few leading fields of ``full_name``'s current version: given a buffer and
    where a message of it begins, the values of ``names`` (fields the schema puts before any it
    does not read past), or None for a message of any other schema or version, or one it cannot
    read (``decode`` is then the caller's to use). It reads no further than the last field
    named, so a WatchEvent's kind, namespace, name and uid cost no copy of its object: the
    audit index's writer spells a record's subjects from those alone.

    It trusts what it reads as far as it reads (no trailing-bytes check): it serves messages
    the fold has decoded already."""
    read_at, header = _named_fields(full_name, names, catalog, whole=False)
    fields_at: Callable[[bytes, int], tuple[Any, ...]] = read_at

    def read(data: bytes, start: int) -> tuple[Any, ...] | None:
        if data.startswith(header, start):
            try:
                return fields_at(data, start)
            except _IRREGULAR:
                pass
        return None

    return read


def fields_reader(
    full_name: str, names: tuple[str, ...], catalog: Catalog | None = None
) -> Callable[[bytes], tuple[Any, ...] | None]:
    """A reader of whole messages of ``full_name``'s current version that keeps only the values of
    ``names``: None for a message of any other schema or version, or one the record reader would
    not read (the same generated code checks every field and the message's end), so ``decode``
    decides about those. A fold that needs a WatchEvent's op and object alone saves building the
    record: a third of reading one."""
    full, header = _named_fields(full_name, names, catalog, whole=True)
    fields = (catalog or default_catalog()).current(full_name).parsed["fields"]
    kept, tail = _returning(fields, names)
    # typed here, not cast per message: cast(tuple[Any, ...], ...) builds the alias every call
    fields_of: Callable[[bytes], tuple[Any, ...]] = full

    def read(data: bytes) -> tuple[Any, ...] | None:
        if type(data) is bytes and data.startswith(header):
            try:
                return fields_of(data)
            except _IRREGULAR:
                pass
        return None

    guarded = optimistic(fields, kept, (tail, {}), HEADER_SIZE, _long, Guard(header, read, _DEFERRED))
    return cast(Callable[[bytes], tuple[Any, ...] | None], guarded) if guarded is not None else read


def _named_fields(
    full_name: str, names: tuple[str, ...], catalog: Catalog | None, whole: bool
) -> tuple[Callable[..., Any], bytes]:
    """The generated reader of ``names``' values from a message of ``full_name``'s current version
    (``_generate``'s: the whole message, or up to the last field named, where it begins in a
    buffer), and the header such a message begins with."""
    version = (catalog or default_catalog()).current(full_name)
    fields: list[dict[str, Any]] = version.parsed["fields"]
    kept, tail = _returning(fields, names)
    upto = len(fields) if whole else max(kept) + 1
    return _generate(fields[:upto], tail, {}, whole=whole), MARKER + version.fingerprint


def _returning(fields: list[dict[str, Any]], names: tuple[str, ...]) -> tuple[set[int], list[str]]:
    """The indexes of the fields ``names`` name, and the statement returning their locals."""
    order = [f["name"] for f in fields]
    at = [order.index(n) for n in names]
    return set(at), [f"return ({', '.join(f'f{i}' for i in at)},)"]


def decode_datum(data: bytes, catalog: Catalog | None = None) -> tuple[str, dict[str, Any]]:
    """(schema full name, datum under the current reader version) of the message ``data``."""
    catalog = catalog or default_catalog()
    reader = _fast_reader(data, catalog)
    if reader is not None:
        try:
            return reader.full_name, reader.datum(data)
        except _IRREGULAR:
            pass
    if len(data) < HEADER_SIZE or data[:2] != MARKER:
        raise NotSingleObject(
            f"not an Avro single-object message ({len(data)} bytes, starts {data[:2].hex() or 'empty'})"
        )
    fp = bytes(data[2:HEADER_SIZE])
    writer = catalog.by_fingerprint(fp)
    if writer is None:
        raise UnknownFingerprint(fp)
    reader_version = catalog.current(writer.full_name)
    buf = io.BytesIO(data)
    buf.seek(HEADER_SIZE)
    try:
        datum = schemaless_reader(
            buf, writer.parsed, None if reader_version.fingerprint == writer.fingerprint else reader_version.parsed
        )
    except Exception as exc:  # fastavro raises EOFError, IndexError, UnicodeDecodeError, ... on bad bytes
        raise MalformedBody(f"{writer.full_name} v{writer.version}: {type(exc).__name__}: {exc}") from exc
    if buf.tell() != len(data):
        raise MalformedBody(f"{writer.full_name} v{writer.version}: {len(data) - buf.tell()} trailing bytes")
    # Every catalog schema is named (load_version checks it) and every named schema of ours is a
    # record, which fastavro reads as a dict.
    return writer.full_name, cast(dict[str, Any], datum)


# ------------------------------------------------------------------------ the fast reader
# fastavro's schemaless_reader costs about 5.6 us for a WatchEvent, most of it per call and per
# field, not per byte: more than all the rest of reading a message from the cache log. So each
# writer schema that is its own reader (no resolution) also gets a reader generated from its
# parsed form, straight-line code for the types Strata's schemas use (a 3 times faster
# WatchEvent). It reads the well-formed encoding only: anything else (a truncated body, a
# negative length, an out-of-range enum or union index, a varint of ten bytes or more, bad
# UTF-8, trailing bytes) makes it give up, and fastavro decodes the message again, so a bad
# message fails with fastavro's own error and a good one reads the same.


class _Irregular(Exception):
    """Bytes the fast reader leaves to fastavro."""


def _long(data: bytes, pos: int) -> tuple[int, int]:
    n = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 56:  # a tenth byte: beyond 63 bits, where fastavro's C integer wraps
            raise _Irregular


def _string(data: bytes, pos: int) -> tuple[str, int]:
    n, pos = _long(data, pos)
    end = pos + n
    if n < 0 or end > len(data):
        raise _Irregular
    return data[pos:end].decode("utf-8"), end


def _map_of_strings(data: bytes, pos: int) -> tuple[dict[str, str], int]:
    out: dict[str, str] = {}
    while True:
        count, pos = _long(data, pos)
        if count == 0:
            return out, pos
        if count < 0:  # a block with its size: legal, but not what fastavro writes
            raise _Irregular
        for _ in range(count):
            key, pos = _string(data, pos)
            out[key], pos = _string(data, pos)


class _Source:
    """Python source that reads one field after another into the locals f0, f1, ..."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}

    def emit(self, target: str, schema: Any, indent: str) -> None:
        if isinstance(schema, dict) and len(schema) == 1:
            schema = schema["type"]  # {"type": "string"} is "string"
        kind = schema.get("type") if isinstance(schema, dict) and "logicalType" not in schema else schema
        add = self.lines.append
        if kind == "null":
            add(f"{indent}{target} = None")
        elif kind == "long":
            self._varint(target, indent)
        elif kind in ("string", "bytes"):
            self._varint("n", indent)
            add(f"{indent}end = pos + n")
            add(f"{indent}if n < 0 or end > size:")
            add(f"{indent}    raise _Irregular")
            add(f"{indent}{target} = data[pos:end]{'.decode()' if kind == 'string' else ''}")  # strict UTF-8
            add(f"{indent}pos = end")
        elif kind == "enum":
            symbols = f"symbols{len(self.constants)}"
            self.constants[symbols] = tuple(schema["symbols"])
            self._varint("n", indent)
            add(f"{indent}if not 0 <= n < {len(schema['symbols'])}:")
            add(f"{indent}    raise _Irregular")
            add(f"{indent}{target} = {symbols}[n]")
        elif kind == "map" and schema.get("values") == "string":
            add(f"{indent}{target}, pos = _map_of_strings(data, pos)")
        elif isinstance(schema, list) and 0 < len(schema) <= 63:
            add(f"{indent}b = data[pos]")
            add(f"{indent}pos += 1")
            for i, branch in enumerate(schema):
                add(f"{indent}{'if' if i == 0 else 'elif'} b == {2 * i}:")  # the index, zigzag, one byte
                self.emit(target, branch, indent + "    ")
            add(f"{indent}else:")
            add(f"{indent}    raise _Irregular")
        else:
            raise _Irregular  # a type Strata's schemas do not use (int, a logical type, ...): fastavro's

    def _varint(self, target: str, indent: str) -> None:
        self.lines += varint_lines(target, indent)


_Reader = Callable[[bytes], Any]


def _generate(
    fields: list[dict[str, Any]], tail: list[str], constants: dict[str, Any], whole: bool = True
) -> Callable[..., Any]:
    """A function of the message's bytes that reads the fields into f0, f1, ... and ends with the
    statements ``tail`` (which return what it makes of them). ``whole``: the bytes are one
    message, read to its end; else ``read(data, pos)`` reads the leading ``fields`` of a message
    that begins at ``pos`` of a larger buffer, and nothing after them."""
    source = _Source()
    source.constants.update(constants)
    for i, f in enumerate(fields):
        source.emit(f"f{i}", f["type"], "    ")
    if whole:
        lines = ["def read(data):", "    size = len(data)", f"    pos = {HEADER_SIZE}", *source.lines]
        lines += ["    if pos != size:", "        raise _Irregular"]
    else:
        lines = ["def read(data, pos):", "    size = len(data)", f"    pos += {HEADER_SIZE}", *source.lines]
    lines += [f"    {line}" for line in tail]
    namespace: dict[str, Any] = {
        "_Irregular": _Irregular,
        "_long": _long,
        "_map_of_strings": _map_of_strings,
        **source.constants,
    }
    exec(compile("\n".join(lines) + "\n", "<strata.schemas.codec reader>", "exec"), namespace)
    return cast(Callable[..., Any], namespace["read"])


@dataclasses.dataclass(frozen=True)
class _Compiled:
    full_name: str
    datum: _Reader  # -> the fields' values in the schema's order
    record: _Reader | None  # -> the record, when a class mirrors the schema
    first: _Reader | None = None  # ``record``'s optimistic form (raises _DEFERRED), if it has one


_IRREGULAR = (_Irregular, IndexError, UnicodeDecodeError)
_DEFERRED = (*FALLBACK, _Irregular)  # what an optimistic reader leaves to the full one (``_long``'s too)
# catalog -> writer fingerprint -> its reader (None: fastavro's alone). Only fingerprints the
# catalog knows are kept: a stream of garbage messages does not grow it.
_compiled: dict[Catalog, dict[bytes, _Compiled | None]] = {}


def _fast_reader(data: bytes, catalog: Catalog) -> _Compiled | None:
    """The generated reader of the message's writer schema, if it has one (a single-object message
    of bytes, a known writer that is the current version of its schema, types it reads)."""
    if type(data) is not bytes or data[:2] != MARKER:
        return None
    fp = data[2:HEADER_SIZE]
    readers = _compiled.get(catalog)
    if readers is None:
        readers = _compiled[catalog] = {}
    elif fp in readers:
        return readers[fp]
    if catalog.by_fingerprint(fp) is None:
        return None
    compiled = readers[fp] = _compile(catalog, fp)
    return compiled


def _compile(catalog: Catalog, fp: bytes) -> _Compiled | None:
    writer = catalog.by_fingerprint(fp)
    if writer is None or catalog.current(writer.full_name).fingerprint != writer.fingerprint:
        return None
    fields: list[dict[str, Any]] = writer.parsed["fields"]
    names = [f["name"] for f in fields]
    locals_ = [f"f{i}" for i in range(len(fields))]
    try:
        datum = _generate(fields, [f"return ({', '.join(locals_)},)"], {})
        record = first = None
        cls = RECORD_CLASSES.get(writer.full_name)
        if cls is not None and sorted(f.name for f in dataclasses.fields(cls)) == sorted(names):
            construction = _construction(cls, names, locals_)
            record = _generate(fields, *construction)
            first = optimistic(fields, set(range(len(fields))), construction, HEADER_SIZE, _long)
    except _Irregular:
        return None
    names_ = tuple(names)
    return _Compiled(writer.full_name, lambda data: dict(zip(names_, datum(data), strict=True)), record, first)


def _construction(cls: type[Record], names: list[str], values: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Statements that return a ``cls`` of the values (locals named in ``values``, one for each
    of the schema's ``names``), and the names they use.

    A frozen dataclass's ``__init__`` stores each field through ``object.__setattr__``: 1.4 us of
    the 3 us a WatchEvent takes to decode. A class with slots and nothing to run after its fields
    are set is filled through its slots' descriptors instead, the same stores without the calls.
    """
    value_of = dict(zip(names, values, strict=True))
    if "extensions" in value_of:
        value_of["extensions"] = f"_frozen({value_of['extensions']})"  # as _as_record does
    order = [f.name for f in dataclasses.fields(cls)]
    constants: dict[str, Any] = {"_cls": cls, "_frozen": MappingProxyType, "_new": object.__new__}
    if hasattr(cls, "__post_init__") or sorted(getattr(cls, "__slots__", ())) != sorted(order):
        return [f"return _cls({', '.join(value_of[name] for name in order)})"], constants
    lines = ["record = _new(_cls)"]
    for i, name in enumerate(order):
        constants[f"_set{i}"] = cls.__dict__[name].__set__
        lines.append(f"_set{i}(record, {value_of[name]})")
    return [*lines, "return record"], constants


def _as_datum(record: Record) -> dict[str, Any]:
    datum = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    if isinstance(record, BindGroup):  # nested records are dicts to fastavro
        datum["binds"] = [{"pod": b.pod, "node": b.node, "extensions": b.extensions} for b in record.binds]
    return datum


def _as_record(full_name: str, datum: dict[str, Any]) -> Record:
    cls = RECORD_CLASSES[full_name]
    if "extensions" in datum:
        datum["extensions"] = MappingProxyType(datum["extensions"])
    if cls is BindGroup:
        datum["binds"] = tuple(
            GroupBind(b["pod"], b["node"], MappingProxyType(b["extensions"])) for b in datum["binds"]
        )
    return cls(**datum)
