"""A long read of the cache log, read ahead of the fold by a process of its own.

A fold from the broker spent about 1.35 us of its thread on each message before the fold saw
it: the Kafka client's ``consume`` (0.55 us: a ``Message`` made for each record) and the Avro
reader (0.8 us). For a read of AHEAD_FROM records or more, ``feed`` hands both to a reader
process on the other core, which sends each batch it consumes as one MessagePack frame of what
the fold reads of each record; the fold's thread takes a frame apart in about 0.23 us a record.
The fold is the same: its callbacks get the same values in the same order as from
``CacheLogReader.feed`` (tests/test_kafka_log.py runs ``feed``'s tests on both), and a message
the reader process does not read (a record of another type, a bad one) reaches the fold's side
as its bytes, which ``CacheLogReader.entry_at`` reads as ``read`` would (counted, quarantined).

    fold (feed)  <--frames--  python -m strata.log.readahead  (consume, read the fields)

Its stdin carries one frame, the read's settings (never its command line, where ``ps`` would
show a SASL password); its stdout frames of items ``(tag, offset, time_ms, a, b)``: WATCH (op,
object's bytes), BIND (pod, node), SUCCEEDED (pod, None), OTHER (None, the message's bytes),
and last none (the read's end) or the text of the error that ended it. A frame is a 4-byte little-endian length,
then MessagePack. The process dies with its parent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import IO, Any

import msgspec
from confluent_kafka import Message

from strata.log.cachelog import BIND_FIELDS, SUCCEEDED_FIELDS, CacheLogReader
from strata.log.children import die_with, widen
from strata.log.config import Settings
from strata.log.errors import StrataError
from strata.schemas import LogRecord, WatchEvent
from strata.schemas.codec import fields_reader

# A reader process starts in about 0.15 s and saves about 1.1 us a record: shorter reads
# (a cold start's tail above all) stay in the fold's thread.
AHEAD_FROM = 200_000
WATCH, BIND, SUCCEEDED, OTHER = range(4)
_LENGTH = 4
Item = tuple[
    int, int, int, Any, Any
]  # a and b: str, bytes or None by tag (one union of msgspec holds one of str and bytes)
_encode = msgspec.msgpack.Encoder().encode
_read_items = msgspec.msgpack.Decoder(list[Item] | str).decode


def feed(
    reader: CacheLogReader,
    apply: Callable[[int, LogRecord], object],
    apply_object: Callable[[int, str, bytes], object],
    start: int = 0,
    end: int | None = None,
    timeout_s: float = 10.0,
    apply_bind: Callable[[int, str, str], object] | None = None,
    apply_succeeded: Callable[[int, str], object] | None = None,
) -> None:
    """``reader.feed``, read ahead by a reader process when the read is AHEAD_FROM records or
    longer (``end`` defaults to the log's end now)."""
    if end is None:
        end = reader.end_offset(timeout_s)
    if end - start < AHEAD_FROM:
        reader.feed(apply, apply_object, start, end, timeout_s, apply_bind, apply_succeeded)
        return
    stats = reader.stats
    try:
        for items in _frames(reader, start, end, timeout_s, apply_bind is not None, apply_succeeded is not None):
            others = 0
            for tag, offset, time_ms, a, b in items:
                if tag == WATCH:
                    apply_object(offset, a, b)
                elif tag == BIND:
                    apply_bind(offset, a, b)  # type: ignore[misc]  # asked for: not None
                elif tag == SUCCEEDED:
                    apply_succeeded(offset, a)  # type: ignore[misc]
                else:
                    others += 1  # counted by entry_at
                    apply(offset, reader.entry_at(offset, time_ms, b).record)
            stats.records += len(items) - others
    finally:
        reader.flush_quarantine()


def _frames(
    reader: CacheLogReader, start: int, end: int, timeout_s: float, binds: bool, succeeded: bool
) -> Iterator[list[Item]]:
    """The reader process's frames of items, until the one of offset ``end - 1``; its error, raised."""
    process = subprocess.Popen(
        [sys.executable, "-m", "strata.log.readahead"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        widen(process.stdout.fileno())
        settings = reader.settings
        hello = {
            "parent": os.getpid(),
            "bootstrap": settings.bootstrap,
            "prefix": settings.topic_prefix,
            "kafka": dict(settings.kafka),
            "topic": reader.topic,
            "start": start,
            "end": end,
            "timeout_s": timeout_s,
            "binds": binds,
            "succeeded": succeeded,
        }
        _write(process.stdin, _encode(hello))
        process.stdin.close()
        next_offset = start
        while next_offset < end:
            frame = _read(process.stdout)
            if frame is None:
                code = process.wait()
                raise StrataError(f"the log's reader process stopped at offset {next_offset} (exit code {code})")
            items = _read_items(frame)
            if isinstance(items, str):
                raise StrataError(items)
            if not items:
                return  # the read ended early (the partition's end), as it does in the fold's thread
            next_offset = items[-1][1] + 1
            yield items
    finally:
        process.kill()
        process.wait()
        process.stdout.close()


def _write(out: IO[bytes], frame: bytes) -> None:
    out.write(len(frame).to_bytes(_LENGTH, "little"))
    out.write(frame)
    out.flush()  # a small frame would wait in the buffer for the next


def _read(source: IO[bytes]) -> bytes | None:
    """The next frame, or None at the end of input."""
    head = source.read(_LENGTH)
    if len(head) < _LENGTH:
        return None
    size = int.from_bytes(head, "little")
    frame = source.read(size)
    return frame if len(frame) == size else None


# ------------------------------------------------------------------------------ the reader
def _items(hello: dict[str, Any]) -> Iterator[list[Item]]:
    """Each batch the read consumes, as the items the fold's side dispatches."""
    settings = Settings(
        bootstrap=hello["bootstrap"], topic_prefix=hello["prefix"], kafka=MappingProxyType(hello["kafka"])
    )
    reader = CacheLogReader(settings, topic=hello["topic"])
    watch = fields_reader(WatchEvent.SCHEMA, ("op", "object"))
    shortcuts: list[tuple[Callable[[bytes], tuple[Any, ...] | None], int]] = []
    if hello["binds"]:
        shortcuts.append((fields_reader(BIND_FIELDS[0].SCHEMA, BIND_FIELDS[1]), BIND))
    if hello["succeeded"]:
        shortcuts.append((fields_reader(SUCCEEDED_FIELDS[0].SCHEMA, SUCCEEDED_FIELDS[1]), SUCCEEDED))
    for batch in reader.batches(hello["start"], hello["end"], hello["timeout_s"]):
        yield [_item(msg, watch, shortcuts) for msg in batch]


def _item(
    msg: Message,
    watch: Callable[[bytes], tuple[Any, ...] | None],
    shortcuts: list[tuple[Callable[[bytes], tuple[Any, ...] | None], int]],
) -> Item:
    offset, value, time_ms = msg.offset(), msg.value(), msg.timestamp()[1]
    assert offset is not None  # batches() hands over messages, not events
    if value is not None:
        head = watch(value)
        if head is not None:
            return (WATCH, offset, time_ms, *head)
        for read, tag in shortcuts:
            fields = read(value)
            if fields is not None:
                return (tag, offset, time_ms, fields[0], fields[1] if len(fields) > 1 else None)
    return (OTHER, offset, time_ms, None, value or b"")


def main() -> None:
    hello = _read(sys.stdin.buffer)
    if hello is None:
        return  # the fold stopped before it said anything
    settings = msgspec.msgpack.decode(hello)
    die_with(settings["parent"])
    out = sys.stdout.buffer
    try:
        for items in _items(settings):
            _write(out, _encode(items))
        _write(out, _encode([]))
    except Exception as exc:  # the fold's side raises it as the read's error
        _write(out, _encode(str(exc) if isinstance(exc, StrataError) else f"{type(exc).__name__}: {exc}"))


if __name__ == "__main__":
    main()
