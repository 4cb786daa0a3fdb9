"""poison: malformed messages in the cache log are counted, quarantined, and disturb nothing.

Against the real broker, in a fresh topic prefix: the records of a conformance trace are
published in order with raw malformed messages between them (10,000; 1,000 quick), produced
straight to the cache log by the same idempotent producer, so the order is the one written:
truncated messages, bytes without the single-object marker, unknown fingerprints, bodies that
do not decode, trailing bytes, command records that do not belong in the cache log, a few of
a megabyte. Then ``CacheLogReader`` with a quarantine publisher reads the log back and the
records are folded. What must hold (docs/log.md, "Bad input"):

* every poison message is counted (``reader.stats.bad``) and copied to the quarantine topic,
  with the headers that name its origin offset and its bytes unchanged;
* the reader yields every offset once (no gap), a ``BadRecord`` at each poison's offset and
  each good record unchanged at its own (a good record missing or changed is a record lost);
* the fold equals the fold of the good records with a bad record in each poison's place
  (``CacheState.apply_bad``): one digest mismatch otherwise.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from ingest.trace import read_trace
from projector.state import CacheState
from schemas import BindCommand, Digest, default_catalog, encode
from schemas.codec import MARKER
from strata.cachelog import CacheLogReader, CacheLogWriter, Publisher, check_contiguous, classify
from strata.config import Settings
from strata.faults import FaultContext, FaultResult
from strata.faults.common import fresh_log
from strata.topics import TopicNames

NAME = "poison"
REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "tests" / "conformance" / "c04.jsonl"
KINDS = ("truncated", "no-marker", "unknown-fingerprint", "bad-body", "trailing-bytes", "not-a-log-record")


def run(ctx: FaultContext) -> FaultResult:
    result = FaultResult(NAME, runs=1)
    poison_count = 1_000 if ctx.quick else 10_000
    seed = uuid.uuid4().int & 0xFFFFFFFF
    with fresh_log(ctx.settings, NAME) as settings:
        ok = _one_run(settings, poison_count, random.Random(seed), result, ctx)
    result.passed = 1 if ok else 0
    result.notes.insert(0, f"seed {seed}")
    return result


def make_poison(rng: random.Random, good: list[bytes], n: int) -> list[tuple[str, bytes]]:
    """``n`` messages that no reader can take as a record of the cache log, of every kind."""
    catalog = default_catalog()
    versions = catalog.all_versions()
    fingerprints = {v.fingerprint for v in versions}
    foreign = [
        encode(BindCommand(command_id="c", log_offset=1, pod_uid="u", namespace="ns", name="p", node="n")),
        encode(Digest(version=1, digest="d" * 64, replica="r", fold="f")),
    ]
    out: list[tuple[str, bytes]] = []
    while len(out) < n:
        kind = KINDS[len(out) % len(KINDS)]
        if kind == "truncated":
            message = rng.choice(good)
            value = message[: rng.randrange(len(message))]
        elif kind == "no-marker":
            value = rng.randbytes(rng.randrange(0, 200))
            if value[:2] == MARKER:
                continue
        elif kind == "unknown-fingerprint":
            fp = rng.randbytes(8)
            if fp in fingerprints:
                continue
            value = MARKER + fp + rng.randbytes(rng.randrange(0, 200))
        elif kind == "bad-body":
            value = MARKER + rng.choice(versions).fingerprint + rng.randbytes(rng.randrange(0, 200))
        elif kind == "trailing-bytes":
            value = rng.choice(good) + rng.randbytes(rng.randrange(1, 50))
        else:
            value = rng.choice(foreign)
        if len(out) % 2000 == 1999:  # now and then a big one: a megabyte of noise
            value = rng.randbytes(1 << 20)
        if classify(value)[0] is not None:
            continue  # random bytes that happen to be a valid message are no poison
        out.append((kind, value))
    return out


def _one_run(settings: Settings, poison_count: int, rng: random.Random, result: FaultResult, ctx: FaultContext) -> bool:
    good = [line.record for line in read_trace(TRACE)]
    poison = make_poison(rng, [encode(r) for r in good], poison_count)
    # positions: poison i goes before good record slots[i] (len(good): after the last)
    slots = sorted(rng.randrange(len(good) + 1) for _ in poison)
    sequence: list[tuple[str, object]] = []
    k = 0
    for i, record in enumerate([*good, None]):
        while k < len(slots) and slots[k] == i:
            sequence.append(("poison", poison[k][1]))
            k += 1
        if record is not None:
            sequence.append(("good", record))
    ctx.log(f"poison: {len(good)} good records, {len(poison)} malformed messages, {settings.topic_prefix}cache-log")

    publisher = Publisher(settings)
    writer = CacheLogWriter(settings, publisher)
    for what, item in sequence:
        if what == "good":
            writer.append(item)  # type: ignore[arg-type]
        else:
            publisher.publish(writer.topic, item)  # type: ignore[arg-type]
    writer.flush()

    quarantine = Publisher(settings)
    reader = CacheLogReader(settings, quarantine=quarantine)
    folded, reference = CacheState(), CacheState()
    lost = 0
    read = 0
    poison_offsets: set[int] = set()
    for entry in reader.read():
        check_contiguous(reader.topic, entry.offset, folded.version)
        read += 1
        folded.apply(entry.record)
        if entry.offset >= len(sequence):
            continue
        what, item = sequence[entry.offset]
        if what == "poison":
            poison_offsets.add(entry.offset)
            reference.apply_bad("poison")
            if type(entry.record).__name__ != "BadRecord" or entry.record.raw != item:  # type: ignore[union-attr]
                result.notes.append(f"offset {entry.offset}: poison read back as {type(entry.record).__name__}")
        else:
            reference.apply(item)  # type: ignore[arg-type]
            if entry.record != item:
                lost += 1
    lost += sum(1 for what, _ in sequence[read:] if what == "good")
    result.records_lost = lost

    bad = sum(reader.stats.bad.values())
    quarantined = _quarantined(settings, poison_offsets, {i: v for i, (w, v) in enumerate(sequence) if w == "poison"})
    same = folded.snapshot().digest() == reference.snapshot().digest() and folded.version == len(sequence)
    result.digest_mismatches = 0 if same else 1
    reasons = ", ".join(f"{r} {n}" for r, n in sorted(reader.stats.bad.items()))
    result.notes.append(
        f"{len(poison)} poison: {bad} counted ({reasons}), {quarantined} quarantined; "
        f"{read} of {len(sequence)} offsets read"
    )
    checks = {
        "every offset read": read == len(sequence) == reader.stats.records,
        "every poison counted": bad == len(poison),
        "every poison read as bad": len(poison_offsets) == len(poison),
        "every poison quarantined": quarantined == len(poison),
        "no poison read back otherwise": not any(n.startswith("offset ") for n in result.notes),
    }
    failed = [name for name, held in checks.items() if not held]
    if failed:
        result.notes.append("failed: " + ", ".join(failed))
    ctx.log(f"poison: {result.notes[-1]}")
    return not failed and not lost and same


def _quarantined(settings: Settings, offsets: set[int], raw: dict[int, bytes], timeout_s: float = 30.0) -> int:
    """Quarantined copies whose origin is a poison offset and whose bytes are that poison's."""
    topic = TopicNames(settings.topic_prefix).quarantine
    consumer = Consumer(
        settings.client_config(
            **{
                "group.id": f"{settings.topic_prefix}poison-check",
                "enable.auto.commit": False,
                "fetch.message.max.bytes": 16 << 20,
            }
        )
    )
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)[1]
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        found: Counter[int] = Counter()
        seen = 0
        deadline = time.monotonic() + timeout_s
        while seen < end and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=1.0):
                if msg.error() is not None:
                    continue
                seen = msg.offset() + 1
                headers = dict(msg.headers() or [])
                origin = int(headers.get("strata.origin.offset", b"-1"))
                if origin in offsets and (msg.value() or b"") == raw[origin] and headers.get("strata.reason"):
                    found[origin] += 1
        return sum(1 for n in found.values() if n >= 1)
    finally:
        consumer.close()
