"""The contract of Strata's logs: Avro schemas, the records they describe, and the codec.

This package imports nothing else of Strata's, so any tool can read the log with it alone.
"""

from schemas import objectjson
from schemas.catalog import Catalog, SchemaVersion, default_catalog
from schemas.codec import (
    CodecError,
    EncodeError,
    MalformedBody,
    NotSingleObject,
    UnknownFingerprint,
    decode,
    encode,
)
from schemas.records import (
    BadRecord,
    Bind,
    BindCommand,
    BindFailed,
    BindSucceeded,
    Digest,
    Evict,
    EvictCommand,
    EvictFailed,
    EvictSucceeded,
    LogRecord,
    Synced,
    WatchEvent,
)

__all__ = [
    "BadRecord",
    "Bind",
    "BindCommand",
    "BindFailed",
    "BindSucceeded",
    "Catalog",
    "CodecError",
    "Digest",
    "EncodeError",
    "Evict",
    "EvictCommand",
    "EvictFailed",
    "EvictSucceeded",
    "LogRecord",
    "MalformedBody",
    "NotSingleObject",
    "SchemaVersion",
    "Synced",
    "UnknownFingerprint",
    "WatchEvent",
    "decode",
    "default_catalog",
    "encode",
    "objectjson",
]
