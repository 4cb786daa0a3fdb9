"""The cache log on the real broker: topics, round trips, bad messages, delivery errors."""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from prometheus_client import REGISTRY

from strata.errors import StrataError
from strata.log import readahead
from strata.log.cachelog import BIND_FIELDS, CacheLogReader, CacheLogWriter, DeliveryError, Publisher
from strata.log.config import Settings
from strata.log.metrics import BAD_MESSAGES
from strata.log.topics import FETCH_BYTES, TopicNames, ensure_topics, plan
from strata.schemas import BadRecord, Bind, BindSucceeded, WatchEvent, encode
from tests.schemas.test_codec import ONE_OF_EACH

pytestmark = pytest.mark.kafka
LOG_RECORDS = [r for r in ONE_OF_EACH if r.SCHEMA.startswith("strata.log.")]


def _describe(settings: Settings, topic: str) -> dict[str, str]:
    admin = AdminClient(settings.client_config())
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    return {name: entry.value for name, entry in configs.items()}


def test_topics_are_created_with_explicit_settings_and_idempotently(kafka: Settings):
    names = TopicNames(kafka.topic_prefix)
    metadata = AdminClient(kafka.client_config()).list_topics(timeout=10)
    for spec in plan(kafka):
        assert len(metadata.topics[spec.name].partitions) == spec.partitions
    assert len(metadata.topics[names.cache_log].partitions) == 1
    assert len(metadata.topics[names.retry("bind", 10)].partitions) == 2
    log_config = _describe(kafka, names.cache_log)
    assert log_config["cleanup.policy"] == "delete"
    assert log_config["retention.ms"] == "-1" and log_config["retention.bytes"] == "-1"
    assert log_config["message.timestamp.type"] == "LogAppendTime"
    assert log_config["min.insync.replicas"] == "1"
    assert _describe(kafka, names.quarantine)["cleanup.policy"] == "compact"
    assert set(ensure_topics(kafka).values()) == {"exists"}


def test_a_cache_log_with_two_partitions_is_refused(broker: Settings):
    settings = broker.with_(topic_prefix=f"test-two-{uuid.uuid4().hex[:8]}.")
    admin = AdminClient(settings.client_config())
    admin.create_topics([NewTopic(TopicNames(settings.topic_prefix).cache_log, 2, 1)])[
        TopicNames(settings.topic_prefix).cache_log
    ].result(timeout=10)
    with pytest.raises(StrataError, match="must have exactly one"):
        ensure_topics(settings)


def test_every_record_type_round_trips_through_the_broker(kafka: Settings):
    writer = CacheLogWriter(kafka)
    for record in LOG_RECORDS:
        writer.append(record)
    writer.flush()
    entries = list(CacheLogReader(kafka).read())
    assert [e.record for e in entries] == LOG_RECORDS
    assert [e.offset for e in entries] == list(range(len(LOG_RECORDS)))
    stamps = [e.timestamp_ms for e in entries]
    assert stamps == sorted(stamps) and stamps[0] > 0  # broker-assigned, never backwards


def test_a_record_larger_than_a_fetch_is_read_whole(kafka: Settings):
    """Consumers ask FETCH_BYTES per fetch, far below MAX_MESSAGE_BYTES: a record of several
    MiB (incompressible, so its batch stays larger than a fetch) still reads whole, in place."""
    import base64
    import dataclasses
    import os

    small = LOG_RECORDS[0]
    note = base64.b64encode(os.urandom(3 * FETCH_BYTES)).decode()
    big = dataclasses.replace(small, object=json.dumps({"note": note}).encode())
    writer = CacheLogWriter(kafka)
    for record in (small, big, small):
        writer.append(record)
    writer.flush()
    assert len(big.object) > 3 * FETCH_BYTES
    assert [e.record for e in CacheLogReader(kafka).read()] == [small, big, small]
    items = [item for batch in CacheLogReader(kafka).fold_items(start=1, end=3) for item in batch]
    assert [(offset, raw) for offset, _op, raw in items] == [(1, big.object), (2, small.object)]


def test_bad_messages_are_counted_quarantined_and_keep_their_place(kafka: Settings):
    names = TopicNames(kafka.topic_prefix)
    good = encode(LOG_RECORDS[2])
    unknown_fingerprint = good[:2] + bytes.fromhex("deadbeefdeadbeef") + good[10:]
    raw = Producer(kafka.client_config())
    values = [good, b"\x00garbage{", unknown_fingerprint, good[:-3], encode(ONE_OF_EACH[-1]), good]
    for value in values:
        raw.produce(names.cache_log, value)
    assert raw.flush(10) == 0

    def counted(reason: str) -> float:
        return BAD_MESSAGES.labels(names.cache_log, reason)._value.get()

    quarantine = Publisher(kafka)
    reader = CacheLogReader(kafka, quarantine=quarantine)
    entries = list(reader.read())
    assert [e.offset for e in entries] == list(range(6))
    assert entries[0].record == entries[5].record == LOG_RECORDS[2]
    kinds = [type(e.record).__name__ for e in entries]
    assert kinds == ["Bind", "BadRecord", "BadRecord", "BadRecord", "BadRecord", "Bind"]
    assert "unknown schema fingerprint deadbeefdeadbeef" in entries[2].record.error
    assert dict(reader.stats.bad) == {
        "not-single-object": 1,
        "unknown-fingerprint": 1,
        "malformed-body": 1,
        "not-a-log-record": 1,
    }
    assert reader.stats.records == 6
    assert counted("unknown-fingerprint") == 1 and counted("malformed-body") == 1
    assert all(isinstance(e.record, BadRecord) and e.record.raw == values[e.offset] for e in entries[1:5])

    consumer = Consumer(kafka.client_config(**{"group.id": "t", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(names.quarantine, 0, 0)])
    copies = consumer.consume(4, timeout=10)
    consumer.close()
    assert [m.value() for m in copies] == values[1:5]
    headers = dict(copies[1].headers())
    assert headers["strata.reason"] == b"unknown-fingerprint"
    assert headers["strata.origin.offset"] == b"2" and headers["strata.origin.topic"] == names.cache_log.encode()


def test_a_delivery_error_is_raised_not_dropped(kafka: Settings):
    topic = f"{kafka.topic_prefix}tiny"
    admin = AdminClient(kafka.client_config())  # kept referenced: a collected client cancels its futures
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "1024"})])[topic].result(timeout=10)
    publisher = Publisher(kafka, **{"compression.type": "none"})
    publisher.publish(topic, b"x" * 100)
    publisher.flush(30)  # alone in its batch: a batch is accepted or refused whole
    publisher.publish(topic, b"x" * 4096)
    with pytest.raises(DeliveryError, match=r"too large|MSG_SIZE_TOO_LARGE|larger"):
        publisher.flush(30)
    with pytest.raises(DeliveryError):
        publisher.publish(topic, b"y")  # the publisher stays failed: nothing after a lost record
    assert publisher.delivered[topic] == 1


def test_the_producer_is_idempotent(kafka: Settings):
    from strata.log.cachelog import producer_config

    config = producer_config(kafka)
    assert config["enable.idempotence"] is True and config["acks"] == "all"


@pytest.fixture(params=["in its thread", "read ahead"])
def feed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``CacheLogReader.feed``, or ``readahead.feed`` with a reader process for any read: called
    the same way, they keep the same contract (the tests below run on both)."""
    if request.param == "read ahead":
        monkeypatch.setattr(readahead, "AHEAD_FROM", 0)
        return readahead.feed
    return CacheLogReader.feed


def test_a_feed_hands_the_fold_what_read_gives(kafka: Settings, feed: Callable[..., None]):
    """``feed``: a WatchEvent as its op and object, every other record (a bad one too, counted)
    whole, at the offsets ``read`` gives them; a fold of either is the same state."""
    from strata.projector.fold.state import CacheState

    names = TopicNames(kafka.topic_prefix)
    watch = encode(LOG_RECORDS[0])
    values = [encode(r) for r in LOG_RECORDS] + [watch[:-1], b"\x00garbage{", watch]
    raw = Producer(kafka.client_config())
    for value in values:
        raw.produce(names.cache_log, value)
    assert raw.flush(10) == 0

    fed: list[tuple[int, object]] = []
    feeder = CacheLogReader(kafka)
    feed(feeder, lambda o, r: fed.append((o, r)), lambda o, op, obj: fed.append((o, (op, obj))), start=1)
    reader = CacheLogReader(kafka)
    read = [(e.offset, e.record) for e in reader.read(start=1)]
    assert [o for o, _ in fed] == [o for o, _ in read] == list(range(1, len(values)))
    for (_, got), (_, record) in zip(fed, read, strict=True):
        watched = isinstance(record, WatchEvent)
        assert got == ((record.op, record.object) if watched else record)
    assert isinstance(fed[-3][1], BadRecord) and isinstance(fed[-2][1], BadRecord)  # the cut and the garbage
    assert fed[-1][1] == (LOG_RECORDS[0].op, LOG_RECORDS[0].object)
    assert (feeder.stats.records, feeder.stats.bad) == (reader.stats.records, reader.stats.bad)

    fold, refold = CacheState(), CacheState()
    feed(CacheLogReader(kafka), fold.apply_at, fold.apply_object_at)
    for entry in CacheLogReader(kafka).read():
        refold.apply_at(entry.offset, entry.record)
    assert fold.version == refold.version == len(values)
    assert fold.snapshot().canonical_bytes() == refold.snapshot().canonical_bytes()


def test_a_feed_hands_binds_as_their_pod_and_node_when_asked(kafka: Settings, feed: Callable[..., None]):
    """``feed(apply_bind=...)``: each BIND as (offset, pod, node), every other record as
    without it, a BIND that is no longer one (cut short) whole as a ``BadRecord``;
    ``apply_succeeded``: each BIND_SUCCEEDED as (offset, pod). The fold is the same state."""
    from strata.projector.fold.state import CacheState

    names = TopicNames(kafka.topic_prefix)
    bind = next(r for r in LOG_RECORDS if isinstance(r, Bind))
    values = [encode(r) for r in LOG_RECORDS] + [encode(bind)[:-1], encode(bind)]
    raw = Producer(kafka.client_config())
    for value in values:
        raw.produce(names.cache_log, value)
    assert raw.flush(10) == 0

    binds: list[tuple[int, str, str]] = []
    others: list[int] = []
    feed(
        CacheLogReader(kafka),
        lambda o, r: others.append(o),
        lambda o, op, obj: others.append(o),
        apply_bind=lambda *b: binds.append(b),
    )
    at = [i for i, r in enumerate(LOG_RECORDS) if isinstance(r, Bind)] + [len(values) - 1]
    assert binds == [
        (i, bind.pod, bind.node) if i == len(values) - 1 else (i, LOG_RECORDS[i].pod, LOG_RECORDS[i].node) for i in at
    ]  # type: ignore[union-attr]
    assert sorted(others + [o for o, _, _ in binds]) == list(range(len(values)))

    succeeded: list[tuple[int, str]] = []
    feed(
        CacheLogReader(kafka),
        lambda o, r: None,
        lambda o, op, obj: None,
        apply_succeeded=lambda *s: succeeded.append(s),
    )
    assert succeeded == [(i, r.pod) for i, r in enumerate(LOG_RECORDS) if isinstance(r, BindSucceeded)]
    assert succeeded

    fold, refold = CacheState(), CacheState()
    feed(
        CacheLogReader(kafka),
        fold.apply_at,
        fold.apply_object_at,
        apply_bind=fold.bind_at,
        apply_succeeded=fold.succeeded_at,
    )
    for entry in CacheLogReader(kafka).read():
        refold.apply_at(entry.offset, entry.record)
    assert fold.version == refold.version == len(values)
    assert fold.snapshot().canonical_bytes() == refold.snapshot().canonical_bytes()


def test_a_feed_ends_at_the_logs_end_or_fails_saying_why(kafka: Settings, feed: Callable[..., None]):
    """A read to an end past the log's stops at the log's end (the fold's offset check finds the
    gap); a read of a topic that is not there raises, naming it, from a reader process too."""
    names = TopicNames(kafka.topic_prefix)
    raw = Producer(kafka.client_config())
    for record in LOG_RECORDS[:3]:
        raw.produce(names.cache_log, encode(record))
    assert raw.flush(10) == 0
    fed: list[int] = []
    feed(CacheLogReader(kafka), lambda o, r: fed.append(o), lambda o, op, obj: fed.append(o), end=5, timeout_s=5.0)
    assert fed == [0, 1, 2]
    missing = f"{kafka.topic_prefix}missing"
    with pytest.raises(StrataError, match=missing):
        feed(CacheLogReader(kafka, topic=missing), lambda o, r: None, lambda o, op, obj: None, end=5, timeout_s=2.0)


def test_a_fold_that_fails_leaves_no_reader_process_behind(kafka: Settings, monkeypatch: pytest.MonkeyPatch):
    names = TopicNames(kafka.topic_prefix)
    raw = Producer(kafka.client_config())
    for record in LOG_RECORDS:
        raw.produce(names.cache_log, encode(record))
    assert raw.flush(10) == 0
    monkeypatch.setattr(readahead, "AHEAD_FROM", 0)

    def fail(*_: object) -> None:
        assert _readers(), "no reader process read ahead"
        raise ValueError("the fold failed")

    with pytest.raises(ValueError, match="the fold failed"):
        readahead.feed(CacheLogReader(kafka), fail, fail)
    assert not _readers()


def test_a_read_from_0_fails_when_the_log_lost_its_first_records(kafka: Settings):
    """A read names its first offset, 0 included (the client's "beginning" cost every read from 0
    a lookup of half a second). A log whose first records are gone (deleted, retention) fails such
    a read, saying so, instead of silently starting at a later record."""
    names = TopicNames(kafka.topic_prefix)
    raw = Producer(kafka.client_config())
    for record in LOG_RECORDS * 10:
        raw.produce(names.cache_log, encode(record))
    assert raw.flush(10) == 0
    reader, fed = CacheLogReader(kafka), []
    reader.feed(lambda o, r: fed.append(o), lambda o, op, obj: fed.append(o), 0, len(LOG_RECORDS) * 10)
    assert fed == list(range(len(LOG_RECORDS) * 10))
    admin = AdminClient(kafka.client_config())  # held: its futures resolve only while it lives
    for future in admin.delete_records([TopicPartition(names.cache_log, 0, 5)]).values():
        future.result(timeout=10)
    with pytest.raises(StrataError, match="Offset out of range"):
        reader.feed(lambda o, r: None, lambda o, op, obj: None, 0, len(LOG_RECORDS) * 10, timeout_s=2.0)


def _restarts() -> float:
    return REGISTRY.get_sample_value("strata_child_restarts_total", {"process": "log_reader"}) or 0.0


@pytest.mark.parametrize("follows", [False, True], ids=["feed", "follow_feed"])
def test_a_reader_process_that_stops_is_replaced_where_it_stopped(
    kafka: Settings, monkeypatch: pytest.MonkeyPatch, follows: bool
):
    """A reader process killed mid-read: another reads on from the offset after the last item
    handed over, so the fold is given every record once, in order (the read goes on, counted),
    where before the read failed and the command with it."""
    import threading

    names = TopicNames(kafka.topic_prefix)
    raw = Producer(kafka.client_config())
    # more than the pipe holds (1 MB): the killed process cannot have handed over the whole log
    values = [encode(LOG_RECORDS[i % len(LOG_RECORDS)]) for i in range(30_000)]
    for value in values:
        raw.produce(names.cache_log, value)
    assert raw.flush(30) == 0
    monkeypatch.setattr(readahead, "AHEAD_FROM", 0)
    before, fed, stop = _restarts(), [], threading.Event()

    def note(offset: int, *_: object) -> None:
        if not fed:
            for pid in _readers():
                os.kill(pid, signal.SIGKILL)
        fed.append(offset)
        if len(fed) == len(values):
            stop.set()

    def entered(entry: object) -> None:
        if entry is not None:
            note(entry.offset)  # type: ignore[attr-defined]

    if follows:
        shortcuts = [(*BIND_FIELDS, note)]
        readahead.follow_feed(CacheLogReader(kafka), 0, stop, note, entered, tick_s=0.2, shortcuts=shortcuts)
    else:
        readahead.feed(CacheLogReader(kafka), note, note, apply_bind=note, apply_succeeded=note)
    assert fed == list(range(len(values)))
    assert _restarts() == before + 1
    assert not _readers()


def test_a_read_fails_once_reader_processes_stop_again_and_again(kafka: Settings, monkeypatch: pytest.MonkeyPatch):
    """Processes that stop before handing over anything: the read fails after STARTS_IN_A_ROW of
    them, saying so, and leaves none behind."""
    names = TopicNames(kafka.topic_prefix)
    raw = Producer(kafka.client_config())
    for record in LOG_RECORDS:
        raw.produce(names.cache_log, encode(record))
    assert raw.flush(10) == 0
    monkeypatch.setattr(readahead, "AHEAD_FROM", 0)
    monkeypatch.setattr(readahead, "COMMAND", (sys.executable, "-c", "pass"))
    before = _restarts()

    def fail(*_: object) -> None:
        raise AssertionError("no process read anything")

    with pytest.raises(StrataError, match=r"reader process stopped .*3 in a row"):
        readahead.feed(CacheLogReader(kafka), fail, fail)
    assert _restarts() == before + readahead.STARTS_IN_A_ROW - 1
    assert not _readers()


def _readers() -> list[int]:
    """This process's children that read the log ahead."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            ppid = next(line for line in status.read_text().splitlines() if line.startswith("PPid:"))
            cmdline = (status.parent / "cmdline").read_bytes()
        except (OSError, StopIteration):
            continue
        if int(ppid.split()[1]) == os.getpid() and b"strata.log.readahead" in cmdline:
            found.append(int(status.parent.name))
    return found


def test_a_reader_that_keeps_its_consumer_reads_any_stretch_as_a_new_one_does(kafka: Settings):
    """``keep_consumer``: stretches read in any order, backwards, overlapping, empty, through one
    consumer moved by ``assign``, each equal to what a reader of its own gives; a read left early
    closes the kept consumer (the next read takes a new one). Between reads it is assigned
    nothing: left assigned, it fetched ahead up to 64 MB after every read."""
    names = TopicNames(kafka.topic_prefix)
    raw = Producer(kafka.client_config())
    values = [encode(LOG_RECORDS[i % len(LOG_RECORDS)]) for i in range(60)]
    for value in values:
        raw.produce(names.cache_log, value)
    assert raw.flush(10) == 0

    def offsets(reader: CacheLogReader, start: int, end: int) -> list[int]:
        return [e.offset for e in reader.read(start=start, end=end)]

    kept = CacheLogReader(kafka, keep_consumer=True)
    stretches = [(40, 60), (0, 10), (5, 45), (30, 30), (59, 60), (0, 60), (12, 13)]
    first = None
    for start, end in stretches:
        assert offsets(kept, start, end) == offsets(CacheLogReader(kafka), start, end) == list(range(start, end))
        first = first or kept._kept
        assert kept._kept is first  # one consumer for all of them
        assert first is not None and first.assignment() == []  # between reads it fetches nothing
    left = kept.read(start=0, end=60)
    next(left)
    left.close()
    assert kept._kept is None
    assert offsets(kept, 20, 25) == list(range(20, 25))
    assert kept._kept is not None and kept._kept is not first
    kept.close()
    assert kept._kept is None


@pytest.fixture(params=["in its thread", "read ahead"])
def follow_feed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``CacheLogReader.follow_feed``, or ``readahead.follow_feed`` with a reader process."""
    if request.param == "read ahead":
        monkeypatch.setattr(readahead, "AHEAD_FROM", 0)
        return readahead.follow_feed
    return CacheLogReader.follow_feed


def test_a_followed_feed_hands_the_follower_what_follow_gives(kafka: Settings, follow_feed: Callable[..., None]):
    """``follow_feed``: a WatchEvent as its offset, stamp, message and kind, op and object, a
    BIND as its offset, stamp, message, pod and node, every other record (a bad one too,
    counted) as the entry ``follow`` gives, and None once idle; the end it heard of."""
    import threading

    names = TopicNames(kafka.topic_prefix)
    watch = encode(LOG_RECORDS[0])
    values = [encode(r) for r in LOG_RECORDS] + [watch[:-1], b"\x00garbage{", watch]
    raw = Producer(kafka.client_config())
    for value in values:
        raw.produce(names.cache_log, value)
    assert raw.flush(10) == 0

    stop = threading.Event()
    fed: list[tuple[int, int, bytes, object]] = []

    def watched(offset: int, stamp: int, value: bytes, kind: str, op: str, obj: bytes) -> None:
        fed.append((offset, stamp, value, (kind, op, obj)))

    def bound(offset: int, stamp: int, value: bytes, pod: str, node: str) -> None:
        fed.append((offset, stamp, value, ("BIND", pod, node)))

    heard: list[int | None] = []

    def entered(entry) -> None:
        if entry is None:
            heard.append(feeder.followed_end())
            if fed and fed[-1][0] == len(values) - 1:
                stop.set()
        else:
            fed.append((entry.offset, entry.timestamp_ms, entry.value, entry.record))

    feeder = CacheLogReader(kafka)
    follow_feed(feeder, 1, stop, watched, entered, tick_s=0.2, shortcuts=[(*BIND_FIELDS, bound)])
    reader, followed = CacheLogReader(kafka), []
    for entry in reader.follow(1, threading.Event(), tick_s=0.2):
        if entry is None:
            break
        followed.append(entry)
    assert [f[0] for f in fed] == [e.offset for e in followed] == list(range(1, len(values)))
    for (_, stamp, value, got), entry in zip(fed, followed, strict=True):
        record = entry.record
        assert (stamp, value) == (entry.timestamp_ms, entry.value)
        if isinstance(record, WatchEvent):
            assert got == (record.kind, record.op, record.object)
        else:
            assert got == (("BIND", record.pod, record.node) if isinstance(record, Bind) else record)
    assert any(isinstance(record, Bind) for _, _, _, record in fed) is False
    assert isinstance(fed[-3][3], BadRecord) and isinstance(fed[-2][3], BadRecord)  # the cut and the garbage
    assert (feeder.stats.records, feeder.stats.bad) == (reader.stats.records, reader.stats.bad)
    assert heard[-1] == len(values) and feeder.followed_end() is None  # nothing follows any more
