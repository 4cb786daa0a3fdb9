"""A long read of the cache log, read ahead of the fold by a process of its own.

A fold from the broker spent about 1.35 us of its thread on each message before the fold saw
it: the Kafka client's ``consume`` (0.55 us: a ``Message`` made for each record) and the Avro
reader (0.8 us). For a read of AHEAD_FROM records or more (``feed``), or a follower that starts
that far behind the log's end (``follow_feed``), both move to a reader process on the other
core, which sends each batch it consumes as one MessagePack frame of what the fold reads of each
record; the fold's thread takes a frame apart in about 0.25 us a record. The fold is the same:
its callbacks get the same values in the same order as from ``CacheLogReader.feed`` and
``follow_feed`` (tests/log/test_cachelog.py runs their tests on both), and a message the reader
process does not read (a record of another type, a bad one) reaches the fold's side as its
bytes, which ``CacheLogReader.entry_at`` reads as ``read`` would (counted, quarantined).

    fold (feed, follow_feed)  <--frames--  python -m strata.log.readahead  (consume, read fields)

Its stdin carries one frame, the read's settings (never its command line, where ``ps`` would
show a SASL password); its stdout frames ``(heard, items)``: the log's end as its consumer last
heard it (-1: not yet) and the items of one batch, each ``(tag, offset, time_ms, message,
fields)``: WATCH (a read's op and object; a follower's kind, op and where the object begins in
the message, which a follower is given too), a shortcut's (``SHORTCUT + i``: the fields of the
i-th shortcut's record), OTHER (the message alone). A follower's idle tick is a frame of no
items; a read's end is one of no items, its error a frame of the error's text. A frame is a
4-byte little-endian length, then MessagePack. The process dies with its parent, and leaves a
signal to its group to the fold, which stops it.

A reader process that ends without a word (killed, out of memory, crashed) is replaced by
another that reads from the offset after the last item handed over (``_restarted``): the fold,
which has applied exactly those, goes on as if nothing happened, instead of the whole command
failing and its next start restoring a checkpoint and reading the log again. Only when
STARTS_IN_A_ROW processes in a row stop before they hand over anything does the read fail.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from types import MappingProxyType
from typing import IO, Any

import msgspec
from confluent_kafka import Message

from strata.children import die_with, widen
from strata.errors import StrataError
from strata.log.cachelog import FOLLOWED_FIELDS, CacheLogReader, LogEntry, Shortcut, fold_shortcuts
from strata.log.config import Settings
from strata.log.metrics import CHILD_RESTARTS
from strata.schemas import LogRecord, WatchEvent
from strata.schemas.catalog import default_catalog
from strata.schemas.codec import fields_reader

# A reader process starts in about 0.15 s and saves about 1.1 us a record: shorter reads (a cold
# start's tail above all) stay in the fold's thread.
AHEAD_FROM = 200_000
STARTS_IN_A_ROW = 3  # reader processes that stop before handing over an item, before the read fails
COMMAND = (sys.executable, "-m", "strata.log.readahead")
LOG = logging.getLogger("strata.log")
RESTARTS = CHILD_RESTARTS.labels("log_reader")  # exported from the start, at 0 (a series to plot)
WATCH, OTHER, SHORTCUT = 0, 1, 2
_LENGTH = 4
# (tag, offset, time_ms, the message or None, the fields read or None)
Item = tuple[int, int, int, bytes | None, Any]
_encode = msgspec.msgpack.Encoder().encode
_read_frame = msgspec.msgpack.Decoder(tuple[int, list[Item]] | str).decode
# A follower is given where a WatchEvent's object begins: the last field, it ends the message.
assert default_catalog().current(WatchEvent.SCHEMA).parsed["fields"][-1]["name"] == FOLLOWED_FIELDS[-1] == "object"


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
    shortcuts = fold_shortcuts(apply_bind, apply_succeeded)
    callbacks = [callback for _, _, callback in shortcuts]
    stats = reader.stats
    frames = _restarted(reader, {"start": start, "end": end, "timeout_s": timeout_s}, shortcuts)
    try:
        for _, items in frames:
            others = 0
            for tag, offset, time_ms, value, fields in items:
                if tag == WATCH:
                    apply_object(offset, *fields)
                elif tag == OTHER:
                    others += 1  # counted by entry_at
                    apply(offset, reader.entry_at(offset, time_ms, value).record)  # type: ignore[arg-type]
                else:
                    callbacks[tag - SHORTCUT](offset, time_ms, value, *fields)
            stats.records += len(items) - others
    finally:
        frames.close()  # the process, now
        reader.flush_quarantine()


def follow_feed(
    reader: CacheLogReader,
    start: int,
    stop: threading.Event,
    watched: Callable[..., object],
    entered: Callable[[LogEntry | None], object],
    tick_s: float = 0.5,
    shortcuts: Sequence[Shortcut] = (),
    end: int | None = None,
) -> None:
    """``reader.follow_feed``, read ahead by a reader process when the log's end (``end``, when
    the caller has just asked for it) is AHEAD_FROM records or more past ``start`` (a follower
    catching up); its followed end is the process's."""
    if (reader.end_offset() if end is None else end) - start < AHEAD_FROM:
        reader.follow_feed(start, stop, watched, entered, tick_s, shortcuts)
        return
    callbacks = [callback for _, _, callback in shortcuts]
    stats = reader.stats
    frames = _restarted(reader, {"start": start, "tick_s": tick_s}, shortcuts)
    try:
        while not stop.is_set():
            heard, items = next(frames)
            reader.heard_end = heard if heard >= 0 else None
            if not items:
                entered(None)
                continue
            others = 0
            for tag, offset, time_ms, value, fields in items:
                if tag == WATCH:
                    kind, op, at = fields
                    watched(offset, time_ms, value, kind, op, value[at:])  # type: ignore[index]
                elif tag == OTHER:
                    others += 1
                    entered(reader.entry_at(offset, time_ms, value))  # type: ignore[arg-type]
                else:
                    callbacks[tag - SHORTCUT](offset, time_ms, value, *fields)
            stats.records += len(items) - others
    finally:
        frames.close()  # the process, now
        reader.heard_end = None
        reader.flush_quarantine()


class ReaderStopped(StrataError):
    """The reader process ended without a word (killed, crashed): another can take over."""


Frames = Generator[tuple[int, list[Item]], None, None]


def _restarted(reader: CacheLogReader, hello: dict[str, Any], shortcuts: Sequence[Shortcut]) -> Frames:
    """``_frames`` from ``hello["start"]`` on; when the process stops, another's from the offset
    after the last item handed over. A frame is handed over whole and its process's end shows
    only at the next one, so the caller has applied every item before that offset and none after."""
    start, stopped = hello["start"], 0
    while True:
        frames = _frames(reader, {**hello, "start": start}, shortcuts)
        try:
            for frame in frames:
                if frame[1]:
                    start, stopped = frame[1][-1][1] + 1, 0
                yield frame
            return
        except ReaderStopped as exc:
            stopped += 1
            if stopped >= STARTS_IN_A_ROW:
                raise ReaderStopped(f"{exc}, {stopped} in a row before handing over a record") from exc
            LOG.error("%s; starting another from offset %d", exc, start)
            RESTARTS.inc()
        finally:
            frames.close()


def _frames(reader: CacheLogReader, hello: dict[str, Any], shortcuts: Sequence[Shortcut]) -> Frames:
    """The reader process's frames, up to a bounded read's end (a frame of no items, not
    yielded: the read may end early, at the partition's end, as in the fold's thread); its
    error, raised. The process is killed when the generator is closed."""
    process = subprocess.Popen(list(COMMAND), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    try:
        widen(process.stdout.fileno())
        settings = reader.settings
        hello = {
            **hello,
            "parent": os.getpid(),
            "bootstrap": settings.bootstrap,
            "prefix": settings.topic_prefix,
            "kafka": dict(settings.kafka),
            "topic": reader.topic,
            "shortcuts": [(cls.SCHEMA, list(names)) for cls, names, _ in shortcuts],
        }
        _write(process.stdin, _encode(hello))
        process.stdin.close()
        while True:
            frame = _read(process.stdout)
            if frame is None:
                raise ReaderStopped(f"the log's reader process stopped (exit code {process.wait()})")
            decoded = _read_frame(frame)
            if isinstance(decoded, str):
                raise StrataError(decoded)
            if not decoded[1] and "end" in hello:
                return
            yield decoded
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
Reader = Callable[[bytes], tuple[Any, ...] | None]


class _Items:
    """What the reader process makes of a consumed message: an item."""

    def __init__(self, hello: dict[str, Any]) -> None:
        self.follows = "end" not in hello
        self.watch = fields_reader(WatchEvent.SCHEMA, FOLLOWED_FIELDS if self.follows else ("op", "object"))
        self.shortcuts: list[tuple[Reader, int]] = [
            (fields_reader(schema, tuple(names)), SHORTCUT + i) for i, (schema, names) in enumerate(hello["shortcuts"])
        ]

    def of(self, msg: Message) -> Item:
        offset, value, time_ms = msg.offset(), msg.value(), msg.timestamp()[1]
        assert offset is not None  # batches() and followed() hand over messages, not events
        kept = value if self.follows else None
        if value is not None:
            head = self.watch(value)
            if head is not None:
                if self.follows:
                    kind, op, obj = head
                    return (WATCH, offset, time_ms, kept, (kind, op, len(value) - len(obj)))
                return (WATCH, offset, time_ms, None, head)
            for read, tag in self.shortcuts:
                fields = read(value)
                if fields is not None:
                    return (tag, offset, time_ms, kept, fields)
        return (OTHER, offset, time_ms, value or b"", None)


def _batches(hello: dict[str, Any]) -> Iterator[tuple[int, list[Item]]]:
    """Each batch the read consumes, as items, with the end its consumer heard of."""
    settings = Settings(
        bootstrap=hello["bootstrap"], topic_prefix=hello["prefix"], kafka=MappingProxyType(hello["kafka"])
    )
    reader = CacheLogReader(settings, topic=hello["topic"])
    items = _Items(hello)
    if items.follows:
        stop = threading.Event()  # never set: the fold's side kills this process
        for batch in reader.followed(hello["start"], stop, hello["tick_s"]):
            heard = reader.followed_end()
            yield (-1 if heard is None else heard), [items.of(msg) for msg in batch]
    else:
        for batch in reader.batches(hello["start"], hello["end"], hello["timeout_s"]):
            yield -1, [items.of(msg) for msg in batch]
        yield -1, []


def main() -> None:
    # Ctrl-C and a signal to the process group reach this process too: the fold stops it
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    hello = _read(sys.stdin.buffer)
    if hello is None:
        return  # the fold stopped before it said anything
    settings = msgspec.msgpack.decode(hello)
    die_with(settings["parent"])
    out = sys.stdout.buffer
    try:
        for frame in _batches(settings):
            _write(out, _encode(frame))
    except Exception as exc:  # the fold's side raises it as the read's error
        _write(out, _encode(str(exc) if isinstance(exc, StrataError) else f"{type(exc).__name__}: {exc}"))


if __name__ == "__main__":
    main()
