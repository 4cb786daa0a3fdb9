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
from types import MappingProxyType
from typing import Any, cast

from fastavro import schemaless_reader, schemaless_writer

from strata.schemas.catalog import Catalog, default_catalog
from strata.schemas.records import RECORD_CLASSES, Record

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
    return _as_record(*decode_datum(data, catalog))


def decode_datum(data: bytes, catalog: Catalog | None = None) -> tuple[str, dict[str, Any]]:
    """(schema full name, datum under the current reader version) of the message ``data``."""
    catalog = catalog or default_catalog()
    if len(data) < HEADER_SIZE or data[:2] != MARKER:
        raise NotSingleObject(
            f"not an Avro single-object message ({len(data)} bytes, starts {data[:2].hex() or 'empty'})"
        )
    fp = bytes(data[2:HEADER_SIZE])
    writer = catalog.by_fingerprint(fp)
    if writer is None:
        raise UnknownFingerprint(fp)
    reader = catalog.current(writer.full_name)
    buf = io.BytesIO(data)
    buf.seek(HEADER_SIZE)
    try:
        datum = schemaless_reader(
            buf, writer.parsed, None if reader.fingerprint == writer.fingerprint else reader.parsed
        )
    except Exception as exc:  # fastavro raises EOFError, IndexError, UnicodeDecodeError, ... on bad bytes
        raise MalformedBody(f"{writer.full_name} v{writer.version}: {type(exc).__name__}: {exc}") from exc
    if buf.tell() != len(data):
        raise MalformedBody(f"{writer.full_name} v{writer.version}: {len(data) - buf.tell()} trailing bytes")
    # Every catalog schema is named (load_version checks it) and every named schema of ours is a
    # record, which fastavro reads as a dict.
    return writer.full_name, cast(dict[str, Any], datum)


def _as_datum(record: Record) -> dict[str, Any]:
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def _as_record(full_name: str, datum: dict[str, Any]) -> Record:
    cls = RECORD_CLASSES[full_name]
    if "extensions" in datum:
        datum["extensions"] = MappingProxyType(datum["extensions"])
    return cls(**datum)
