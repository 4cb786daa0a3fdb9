"""The Kafka edge of the cache log: publish records in order, read them back with their offsets.

Publishing is idempotent (``enable.idempotence``, ``acks=all``) so a retried produce neither
duplicates nor reorders; a delivery error is raised, never dropped. Reading decodes every
message; one that does not decode is counted, copied to the quarantine topic with headers that
say where it came from and why, and still yields its place in the order as a ``BadRecord``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from strata.errors import StrataError
from strata.log.config import ClientConfig, Settings
from strata.log.metrics import BAD_MESSAGES, PUBLISHED
from strata.log.topics import (
    FETCH_BYTES,
    MAX_MESSAGE_BYTES,
    QUEUE_BACKOFF_MS,
    TopicNames,
    check_present,
    require_topics,
)
from strata.schemas import BadRecord, CodecError, LogRecord, decode, encode
from strata.schemas.codec import fields_reader, record_reader
from strata.schemas.records import RECORD_CLASSES, Bind, BindSucceeded, Record, WatchEvent

Headers = list[tuple[str, str | bytes | None]]  # as the producer takes them; Strata's are bytes
_NOT_YET = frozenset(  # answers about a topic that a broker does not fully know yet
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        # a leader just elected (a whole cluster restarted) whose high watermark has not caught up
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)
_TRANSIENT = frozenset({KafkaError._PARTITION_EOF, KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART})
_UNKNOWN = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART})  # missing, or not there yet


class DeliveryError(StrataError):
    """A message the broker did not take. The publisher stops rather than skip it."""


def producer_config(settings: Settings, **overrides: object) -> ClientConfig:
    return settings.client_config(
        **{
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": "zstd",
            "linger.ms": 5,
            "message.max.bytes": MAX_MESSAGE_BYTES + 65536,
            **overrides,
        }
    )


class Publisher:
    """An idempotent producer that keeps every delivery report."""

    def __init__(self, settings: Settings, **overrides: object) -> None:
        self._settings = settings
        self._producer = Producer(producer_config(settings, **overrides))
        self._lock = threading.Lock()
        self._errors: list[str] = []
        self.delivered: Counter[str] = Counter()
        self.last_offset: dict[tuple[str, int], int] = {}
        # PUBLISHED's child per topic: labels() per message was 4 % of ingest's time
        self._published: dict[str, Any] = {}

    def publish(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        headers: Headers | None = None,
        on_offset: Callable[[int], None] | None = None,
    ) -> None:
        """Queue one message; ``on_offset`` hears its offset once the broker has it."""
        self._raise_on_failure()
        report = self._on_delivery
        if on_offset is not None:

            def report(err: KafkaError | None, msg: Message) -> None:
                self._on_delivery(err, msg)
                if err is None and msg.offset() is not None:
                    on_offset(offset_of(msg))

        while True:
            try:
                self._producer.produce(topic, value=value, key=key, headers=headers, on_delivery=report)
                break
            except BufferError:  # local queue full: wait for deliveries, then go on
                self._producer.poll(0.1)
            except KafkaException as exc:
                raise DeliveryError(f"cannot publish to {topic}: {exc.args[0].str()}") from exc
        self._producer.poll(0)

    def require(self, *topics: str) -> None:
        """Raise ``MissingTopicError`` now if a topic does not exist: a message to a missing topic
        would fail only after the producer has waited 30 s for it to appear."""
        require_topics(self._settings, topics, self._producer)

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until every message is delivered; raise if any was not."""
        remaining = self._producer.flush(timeout_s)
        self._raise_on_failure()
        if remaining:
            raise DeliveryError(f"{remaining} message(s) still undelivered after {timeout_s:g} s")

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        with self._lock:
            if err is not None:
                self._errors.append(f"{msg.topic()}: {err.str()}")
            else:
                topic, partition = where(msg)
                self.delivered[topic] += 1
                # Right after a whole cluster restarts, a broker that already had the batch may
                # confirm it without an offset: delivered all the same (a caller waiting for
                # the offset says so itself); raising here would kill the producer's callback.
                if msg.offset() is not None:
                    self.last_offset[(topic, partition)] = offset_of(msg)
                counted = self._published.get(topic)
                if counted is None:
                    counted = self._published[topic] = PUBLISHED.labels(topic)
                counted.inc()

    def _raise_on_failure(self) -> None:
        with self._lock:
            if self._errors:
                raise DeliveryError(f"delivery failed: {self._errors[0]}")


class CacheLogWriter:
    """Appends records to the cache log, in the order given."""

    def __init__(self, settings: Settings, publisher: Publisher | None = None) -> None:
        self.topic = TopicNames(settings.topic_prefix).cache_log
        self.publisher = publisher or Publisher(settings)
        self._required = False

    def require(self, *also: str) -> None:
        """Raise ``MissingTopicError`` if the cache log (or a topic of ``also``) does not exist.
        The first append asks by itself; a caller asks earlier to fail before other work."""
        self.publisher.require(self.topic, *also)
        self._required = True

    def append(
        self, record: LogRecord, key: bytes | None = None, on_offset: Callable[[int], None] | None = None
    ) -> None:
        if not self._required:
            self.require()
        key = key if key is not None else record_key(record)
        self.publisher.publish(self.topic, encode(record), key=key, on_offset=on_offset)

    def flush(self, timeout_s: float = 60.0) -> None:
        self.publisher.flush(timeout_s)


def record_key(record: LogRecord) -> bytes | None:
    """The identity a record is about, for tools that look at keys (ordering never depends on it)."""
    match record:
        case BadRecord():
            return None
        case _ if hasattr(record, "kind") and hasattr(record, "name"):
            ns = getattr(record, "namespace", None)
            return f"{record.kind}/{ns}/{record.name}".encode() if ns else f"{record.kind}/{record.name}".encode()
        case _ if hasattr(record, "pod"):
            return f"pod-uid/{record.pod}".encode()
    return None


@dataclass(frozen=True, slots=True)
class LogEntry:
    offset: int
    timestamp_ms: int
    record: LogRecord
    value: bytes = b""  # the message as the log holds it (the audit index keeps it so); b"": not read from a log


# A record as a fold that keeps what it read takes it: a WatchEvent as (offset, op, its object's
# bytes), which spares building its record (a third of reading one), any other as its entry.
FoldItem = tuple[int, str, bytes] | LogEntry


def item_offset(item: FoldItem) -> int:
    return item[0] if type(item) is tuple else cast(LogEntry, item).offset


# LogEntry(...) stores each field through object.__setattr__ (frozen): the same stores through
# the slots' descriptors cost a third of that, on every record read
_new_entry = object.__new__
_set_offset = LogEntry.__dict__["offset"].__set__
_set_timestamp = LogEntry.__dict__["timestamp_ms"].__set__
_set_record = LogEntry.__dict__["record"].__set__
_set_value = LogEntry.__dict__["value"].__set__


def _log_entry(offset: int, timestamp_ms: int, record: LogRecord, value: bytes) -> LogEntry:
    """``LogEntry(offset, timestamp_ms, record, value)``, sooner."""
    e = _new_entry(LogEntry)
    _set_offset(e, offset)
    _set_timestamp(e, timestamp_ms)
    _set_record(e, record)
    _set_value(e, value)
    return e


@dataclass
class ReadStats:
    records: int = 0
    bad: Counter[str] = field(default_factory=Counter)


class CacheLogReader:
    """Reads the cache log from an offset up to the end as of the call (or a given end)."""

    def __init__(
        self,
        settings: Settings,
        quarantine: Publisher | None = None,
        topic: str | None = None,
        keep_consumer: bool = False,
    ) -> None:
        self.settings = settings
        # One consumer for every bounded read, moved by ``assign`` (a reader that many short reads
        # go through, one at a time: the UI's past folds): a new one costs its connection and a
        # close: a 1,024-record read took 6-7 ms instead of 13 here.
        self._keep_consumer = keep_consumer
        self._kept: Consumer | None = None
        names = TopicNames(settings.topic_prefix)
        self.topic = topic or names.cache_log  # another single-partition topic (the digests) reads the same way
        self.quarantine_topic = names.quarantine
        self._quarantine = quarantine
        self._following: Consumer | None = None
        self._exists = False  # the broker has shown that the topic exists
        self.stats = ReadStats()
        self.heard_end: int | None = None  # ``followed_end`` as a reader process following for this one heard it

    def end_offset(self, timeout_s: float = 10.0) -> int:
        consumer = self._consumer()
        try:
            return self._high_watermark(consumer, timeout_s)
        finally:
            consumer.close()

    def _high_watermark(self, consumer: Consumer, timeout_s: float) -> int:
        # Right after a topic is created a broker may still answer "not leader": ask again.
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                end = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=timeout_s)[1]
                self._exists = True
                return end
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() in _UNKNOWN:
                    self._require(consumer)  # missing, or just created: the metadata tells which
                if not (err.retriable() or err.code() in _NOT_YET) or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _require(self, consumer: Consumer) -> None:
        """Raise ``MissingTopicError`` if the topic does not exist (asked once per reader).

        A consumer assigned to a missing topic waits silently for it, as for one being created."""
        if not self._exists:
            self._exists = require_topics(self.settings, [self.topic], consumer) is not None

    def version_at_time(self, time_ms: int, timeout_s: float = 10.0) -> int:
        """Records stamped at or before ``time_ms``: the version of the cache at that moment.

        Kafka's offsets-for-times answers the first offset stamped at or after a time; the broker
        stamps the cache log (LogAppendTime), so stamps never go backwards along the offsets.
        """
        consumer = self._consumer()
        try:
            end = self._high_watermark(consumer, timeout_s)
            (found,) = consumer.offsets_for_times([TopicPartition(self.topic, 0, time_ms + 1)], timeout=timeout_s)
            if found.error is not None:
                raise StrataError(f"offsets for times on {self.topic}: {found.error}")
            return end if found.offset < 0 else found.offset  # -1: nothing stamped after the time
        finally:
            consumer.close()

    def cluster_id(self, timeout_s: float = 10.0) -> str:
        metadata = AdminClient(self.settings.client_config()).list_topics(timeout=timeout_s)
        check_present(self.settings, metadata, [self.topic])
        self._exists = True
        return metadata.cluster_id or ""

    def read(self, start: int = 0, end: int | None = None, timeout_s: float = 10.0) -> Iterator[LogEntry]:
        """Entries with offsets in [start, end); ``end`` defaults to the log's end now."""
        entries = self._entries
        try:
            for batch in self.batches(start, end, timeout_s):  # one generator, not one per message
                yield from entries(batch)
        finally:
            self.flush_quarantine()

    def feed(
        self,
        apply: Callable[[int, LogRecord], object],
        apply_object: Callable[[int, str, bytes], object],
        start: int = 0,
        end: int | None = None,
        timeout_s: float = 10.0,
        apply_bind: Callable[[int, str, str], object] | None = None,
        apply_succeeded: Callable[[int, str], object] | None = None,
    ) -> None:
        """Hand the records with offsets in [start, end) to a fold, in order: a WatchEvent as its
        op and object's bytes (``apply_object``), any other record whole (``apply``), a bad
        message as ``read`` does (counted, quarantined, a ``BadRecord``). A fold that needs no
        more than that is spared the record, the entry and a generator step per record: a sixth
        of reading the log. With ``apply_bind``, a BIND goes to it as its pod and node alone
        (all the fold reads of one), and with ``apply_succeeded`` a BIND_SUCCEEDED as its pod:
        together a third of the log's records, spared theirs too."""
        watch = fields_reader(WatchEvent.SCHEMA, ("op", "object"))
        readers = _readers(fold_shortcuts(apply_bind, apply_succeeded))

        def watched(offset: int, _stamp: int, _value: bytes, op: str, raw: bytes) -> None:
            apply_object(offset, op, raw)

        def entered(entry: LogEntry) -> None:
            apply(entry.offset, entry.record)

        try:
            for batch in self.batches(start, end, timeout_s):
                self._fed(batch, watch, watched, entered, readers)
        finally:
            self.flush_quarantine()

    def fold_items(self, start: int = 0, end: int | None = None, timeout_s: float = 10.0) -> Iterator[list[FoldItem]]:
        """The records with offsets in [start, end), a batch at a time, as ``feed`` hands them to
        a fold: a WatchEvent as (offset, op, object's bytes), any other record as its entry. For a
        reader that keeps them to fold more than once."""
        watch = fields_reader(WatchEvent.SCHEMA, ("op", "object"))
        try:
            for batch in self.batches(start, end, timeout_s):
                items: list[FoldItem] = []
                add = items.append
                self._fed(batch, watch, lambda offset, _stamp, _value, op, raw, add=add: add((offset, op, raw)), add)
                yield items
        finally:
            self.flush_quarantine()

    def follow_feed(
        self,
        start: int,
        stop: threading.Event,
        watched: Callable[..., object],
        entered: Callable[[LogEntry | None], object],
        tick_s: float = 0.5,
        shortcuts: Sequence[Shortcut] = (),
    ) -> None:
        """``follow`` handing the records to a fold as ``feed`` does, until ``stop`` is set: a
        WatchEvent to ``watched(offset, time_ms, the message's bytes, kind, op, object)``, a
        record of a class ``shortcuts`` names to its callback as ``(offset, time_ms, the
        message's bytes, *values of its names)``, any other record (or a bad message) as an
        entry to ``entered``, and None to ``entered`` when idle for a tick. A follower that needs
        no more of a record is spared the record and entry."""
        watch = fields_reader(WatchEvent.SCHEMA, FOLLOWED_FIELDS)
        readers = _readers(shortcuts)
        batches = self.followed(start, stop, tick_s)
        try:
            for batch in batches:
                if batch:
                    self._fed(batch, watch, watched, entered, readers)
                else:
                    entered(None)
        finally:
            batches.close()  # the consumer, now
            self.flush_quarantine()

    def _fed(
        self,
        batch: list[Message],
        watch: Callable[[bytes], tuple[Any, ...] | None],
        watched: Callable[..., object],
        entered: Callable[[LogEntry], object],
        shortcuts: Sequence[tuple[Callable[[bytes], tuple[Any, ...] | None], Callable[..., object]]] = (),
    ) -> None:
        """Each message of ``batch`` to ``watched`` (a WatchEvent ``watch`` reads), to the
        callback of the first of ``shortcuts`` whose reader reads it, or to ``entered`` (counted,
        a bad one quarantined), as ``_entries`` reads them: with its common cases inlined, since
        this loop runs per record."""
        fast = record_reader()
        stats = self.stats
        for msg in batch:
            offset, value = msg.offset(), msg.value()
            if offset is not None and value is not None:
                head = watch(value)
                if head is not None:
                    stats.records += 1
                    watched(offset, msg.timestamp()[1], value, *head)
                    continue
                taken = False
                for read, apply in shortcuts:
                    fields = read(value)
                    if fields is not None:
                        stats.records += 1
                        apply(offset, msg.timestamp()[1], value, *fields)
                        taken = True
                        break
                if taken:
                    continue
                record = fast(value)
                if record is not None and type(record) in _LOG_CLASSES:
                    stats.records += 1
                    entered(_log_entry(offset, msg.timestamp()[1], cast(LogRecord, record), value))
                    continue
            entered(self.entry(msg))

    def messages(self, start: int = 0, end: int | None = None, timeout_s: float = 10.0) -> Iterator[Message]:
        """The messages with offsets in [start, end) as the broker has them, not decoded."""
        for batch in self.batches(start, end, timeout_s):
            yield from batch

    def batches(self, start: int, end: int | None, timeout_s: float) -> Iterator[list[Message]]:
        """``messages``, a consumed batch at a time."""
        consumer = self._kept if self._kept is not None else self._consumer()
        done = False
        try:
            if end is None:
                end = self._high_watermark(consumer, timeout_s)
            if start >= end:
                done = True
                return
            self._require(consumer)
            consumer.assign([TopicPartition(self.topic, 0, start)])
            next_offset = start
            while next_offset < end:
                # consume() returns early once it has num_messages, so ask for no more than remain
                batch = consumer.consume(num_messages=min(1000, end - next_offset), timeout=timeout_s)
                if not batch:
                    raise StrataError(f"no message from {self.topic} for {timeout_s:g} s at offset {next_offset}")
                valid, failure = self._valid(batch)
                if valid and offset_of(valid[-1]) >= end:
                    valid = [msg for msg in valid if offset_of(msg) < end]
                    failure = None  # the read ends before the error, as it did one message at a time
                if valid:
                    next_offset = offset_of(valid[-1]) + 1
                    yield valid
                if failure is not None:
                    raise failure
                # The end of the partition before ``end``: what is left are offsets no message
                # holds (a transaction's marker), which Strata's gap check then reports.
                if len(valid) < len(batch) and any(_is_eof(m) for m in batch):
                    break
            done = True
        finally:
            if done and self._keep_consumer:
                consumer.unassign()  # else it goes on fetching ahead, up to 64 MB, for nobody
                self._kept = consumer
            else:  # a read that failed or was left early: its consumer is not trusted again
                self._kept = None
                consumer.close()

    def close(self) -> None:
        """Close the consumer kept for bounded reads (``keep_consumer``), if any."""
        kept, self._kept = self._kept, None
        if kept is not None:
            kept.close()

    def follow(self, start: int, stop: threading.Event, tick_s: float = 0.5) -> Iterator[LogEntry | None]:
        """Entries from ``start`` on, as they arrive, until ``stop`` is set; None when idle for a tick."""
        batches = self.followed(start, stop, tick_s)
        try:
            for batch in batches:
                if batch:
                    yield from self._entries(batch)
                else:
                    yield None
        finally:
            batches.close()  # the consumer, now
            self.flush_quarantine()

    def followed(self, start: int, stop: threading.Event, tick_s: float) -> Generator[list[Message], None, None]:
        """The messages from ``start`` on, a consumed batch at a time (an empty one: none came for
        a tick), until ``stop`` is set; an error that is one is raised after the messages before it."""
        consumer = self._consumer()
        self._following = consumer
        try:
            self._require(consumer)
            consumer.assign([TopicPartition(self.topic, 0, start)])
            while not stop.is_set():
                # consume() waits out its whole timeout unless the batch fills: take what is
                # there at once, and block (up to a tick) only for the first of the next ones.
                batch = consumer.consume(num_messages=1000, timeout=0) or consumer.consume(1, timeout=tick_s)
                valid, failure = self._valid(batch)
                yield valid
                if failure is not None:
                    raise failure
        finally:
            self._following = None
            consumer.close()

    def followed_end(self) -> int | None:
        """The log's end as the following consumer last heard it from the broker (with its
        fetches, no request of its own), or None when nothing follows or it has not heard yet."""
        consumer = self._following
        if consumer is None:
            return self.heard_end
        end = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), cached=True)[1]
        return end if end >= 0 else None

    def _entries(self, batch: list[Message]) -> Iterator[LogEntry]:
        """``entry`` of each message in turn (a message is counted, or quarantined, only once it is
        read), with its common case inlined (a log record that the generated reader reads): this
        loop runs per record, and the calls cost a tenth of reading one."""
        fast = record_reader()
        stats = self.stats
        for msg in batch:
            offset, value = msg.offset(), msg.value()
            if offset is not None and value is not None:
                record = fast(value)
                if record is not None and type(record) in _LOG_CLASSES:
                    stats.records += 1
                    yield _log_entry(offset, msg.timestamp()[1], cast(LogRecord, record), value)
                    continue
            yield self.entry(msg)

    def entry(self, msg: Message) -> LogEntry:
        """A message of the cache log as an entry (a bad one counted and quarantined)."""
        offset = msg.offset()
        if offset is None:
            offset = offset_of(msg)  # raises, saying so
        return self.entry_at(offset, msg.timestamp()[1], msg.value() or b"")

    def entry_at(self, offset: int, timestamp_ms: int, value: bytes) -> LogEntry:
        """``entry`` of a message given as its offset, stamp and bytes (a reader process's)."""
        self.stats.records += 1
        record, reason, message = classify(value)
        if record is None:
            record = self._bad(value, offset, reason, message)
        return LogEntry(offset, timestamp_ms, record, value)

    def flush_quarantine(self) -> None:
        """Wait until the bad messages read so far are in the quarantine topic (a read's end)."""
        if self._quarantine is not None:
            self._quarantine.flush()

    def _valid(self, batch: list[Message]) -> tuple[list[Message], StrataError | None]:
        """The batch's messages without its events, up to an error that is one (and that error)."""
        for msg in batch:
            if msg.error() is not None:
                break
        else:
            return batch, None  # the common case: messages only, no list to build
        valid: list[Message] = []
        for msg in batch:
            err = msg.error()
            if err is not None:
                # The end of the partition is news, not an error; right after a topic is created
                # the partition can be "unknown" for a moment. A real outage still ends the read
                # through its timeout.
                if err.code() in _TRANSIENT or err.retriable():
                    continue
                return valid, StrataError(f"reading {self.topic}: {err.str()}")
            valid.append(msg)
        return valid, None

    def _bad(self, value: bytes, offset: int, reason: str, message: str) -> BadRecord:
        self.stats.bad[reason] += 1
        BAD_MESSAGES.labels(self.topic, reason).inc()
        if self._quarantine is not None:
            self._quarantine.publish(
                self.quarantine_topic,
                value,
                key=f"{self.topic}/0/{offset}".encode(),
                headers=[
                    ("strata.error", message.encode()),
                    ("strata.reason", reason.encode()),
                    ("strata.origin.topic", self.topic.encode()),
                    ("strata.origin.partition", b"0"),
                    ("strata.origin.offset", str(offset).encode()),
                ],
            )
        return bad_record(value, offset, self.topic, message)

    def _consumer(self) -> Consumer:
        return Consumer(
            self.settings.client_config(
                **{
                    "group.id": f"{self.settings.topic_prefix}reader",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "enable.partition.eof": True,
                    "fetch.message.max.bytes": FETCH_BYTES,
                    # Once its queue is full the client stops fetching for this long (1 s by
                    # default): a fold reading the log drains a full queue in less, then waits
                    # for the next fetch (topics.QUEUE_BACKOFF_MS).
                    "fetch.queue.backoff.ms": QUEUE_BACKOFF_MS,
                    # a follower at the end of the log waits for new records this long per fetch
                    "fetch.wait.max.ms": 100,
                    # A read starts at the offset it names, 0 included: asked for the log's
                    # beginning instead (OFFSET_BEGINNING), the client looked that up first and
                    # every read from 0 took 0.5 s more (each `strata snapshot` of a short log,
                    # each replica's first start). An offset the log no longer holds is an error
                    # (the read fails saying so), never a silent jump to its end ("latest").
                    "auto.offset.reset": "error",
                }
            )
        )


def classify(value: bytes) -> tuple[LogRecord | None, str, str]:
    """A cache-log message's record, or (None, reason, message) when it is no log record."""
    try:
        record = decode(value)
    except CodecError as exc:
        return None, exc.reason, str(exc)
    if type(record) in _LOG_CLASSES or isinstance(record, BadRecord) or is_log_record(record):
        return cast(LogRecord, record), "", ""
    return None, "not-a-log-record", f"{record.SCHEMA} does not belong in the cache log"


def bad_record(value: bytes, offset: int, topic: str, message: str) -> BadRecord:
    return BadRecord(raw=value, error=f"offset {offset}: {message}", source=f"kafka:{topic}@{offset}")


def _is_eof(msg: Message) -> bool:
    err = msg.error()
    return err is not None and err.code() == KafkaError._PARTITION_EOF


def is_log_record(record: Record) -> TypeGuard[LogRecord]:
    """Whether a decoded record belongs in the cache log (commands and digests do not)."""
    return record.SCHEMA.startswith("strata.log.")


# is_log_record's answer for each record class: a set lookup per message instead of a call
# A record class a fold reads as a few of its fields, the fields' names, and the callback given
# (offset, time_ms, the message's bytes, *their values) instead of an entry (``feed``, ``follow_feed``).
Shortcut = tuple[type[Record], tuple[str, ...], Callable[..., object]]
FOLLOWED_FIELDS = ("kind", "op", "object")  # what a follower reads of a WatchEvent (``follow_feed``)
BIND_FIELDS = (Bind, ("pod", "node"))  # all a fold reads of a BIND
SUCCEEDED_FIELDS = (BindSucceeded, ("pod",))  # of a BIND_SUCCEEDED, what its audit needs


def fold_shortcuts(
    apply_bind: Callable[[int, str, str], object] | None, apply_succeeded: Callable[[int, str], object] | None
) -> list[Shortcut]:
    """``feed``'s shortcuts: a BIND to ``apply_bind(offset, pod, node)``, a BIND_SUCCEEDED to
    ``apply_succeeded(offset, pod)``, each one asked for (not None)."""
    shortcuts: list[Shortcut] = []
    if apply_bind is not None:
        shortcuts.append((*BIND_FIELDS, lambda offset, _stamp, _value, pod, node: apply_bind(offset, pod, node)))
    if apply_succeeded is not None:
        shortcuts.append((*SUCCEEDED_FIELDS, lambda offset, _stamp, _value, pod: apply_succeeded(offset, pod)))
    return shortcuts


def _readers(
    shortcuts: Sequence[Shortcut],
) -> list[tuple[Callable[[bytes], tuple[Any, ...] | None], Callable[..., object]]]:
    return [(fields_reader(cls.SCHEMA, names), apply) for cls, names, apply in shortcuts]


_LOG_CLASSES = frozenset(cls for cls in RECORD_CLASSES.values() if cls.SCHEMA.startswith("strata.log."))


def offset_of(msg: Message) -> int:
    """The offset of a message read from a partition or delivered to one (only an error event has none)."""
    offset = msg.offset()
    if offset is None:
        raise StrataError(f"a message of {msg.topic()} without an offset")
    return offset


def where(msg: Message) -> tuple[str, int]:
    """The topic and partition of a message read or delivered (only an error event has none)."""
    topic, partition = msg.topic(), msg.partition()
    if topic is None or partition is None:
        raise StrataError("a message without its topic and partition")
    return topic, partition
