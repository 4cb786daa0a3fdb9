"""The contract of Strata's logs: Avro schemas, the records they describe, and the codec.

This package imports nothing else of Strata's, so any tool can read the log with it alone.
"""

from strata.schemas import objectjson
from strata.schemas.catalog import Catalog, SchemaVersion, default_catalog
from strata.schemas.codec import (
    CodecError,
    EncodeError,
    MalformedBody,
    NotSingleObject,
    UnknownFingerprint,
    decode,
    encode,
)
from strata.schemas.records import (
    BadRecord,
    Bind,
    BindCommand,
    BindFailed,
    BindGroup,
    BindSucceeded,
    Digest,
    Evict,
    EvictCommand,
    EvictFailed,
    EvictSucceeded,
    GroupBind,
    LogRecord,
    Synced,
    WatchEvent,
)

__all__ = [
    "BadRecord",
    "Bind",
    "BindCommand",
    "BindFailed",
    "BindGroup",
    "BindSucceeded",
    "Catalog",
    "CodecError",
    "Digest",
    "EncodeError",
    "Evict",
    "EvictCommand",
    "EvictFailed",
    "EvictSucceeded",
    "GroupBind",
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
