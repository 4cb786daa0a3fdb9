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
* the projector's fold (`strata snapshot --digest`, a process of its own reading the log) equals
  the fold of what was written, the good records with a bad record in each poison's place
  (``CacheState.apply_bad``), computed without reading the log: one digest mismatch otherwise.

Negative controls: the same check with a good record lost, a poison not quarantined, a poison not
counted, and a reference fold that misses one bad record must report each.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from strata.dev.faults import FaultContext, FaultResult, Verdict
from strata.dev.faults.common import env_for, fresh_log, strata
from strata.log.cachelog import CacheLogReader, CacheLogWriter, Publisher, classify
from strata.log.config import Settings
from strata.log.topics import TopicNames
from strata.projector.fold.state import CacheState
from strata.schemas import BadRecord, BindCommand, Digest, LogRecord, default_catalog, encode
from strata.schemas.codec import MARKER
from strata.schemas.trace import read_trace

NAME = "poison"
REPO = Path(__file__).resolve().parents[3]
TRACE = REPO / "tests" / "conformance" / "c04.jsonl"
KINDS = ("truncated", "no-marker", "unknown-fingerprint", "bad-body", "trailing-bytes", "not-a-log-record")
# an offset's message as written: a good record, or a poison message's bytes (no record is bytes)
Written = LogRecord | bytes


def run(ctx: FaultContext) -> FaultResult:
    result = FaultResult(NAME)
    poison_count = 1_000 if ctx.quick else 10_000
    seed = uuid.uuid4().int & 0xFFFFFFFF
    with fresh_log(ctx.settings, NAME) as settings:
        _one_run(settings, poison_count, random.Random(seed), result, ctx)
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


def _one_run(settings: Settings, poison_count: int, rng: random.Random, result: FaultResult, ctx: FaultContext) -> None:
    good = [line.record for line in read_trace(TRACE)]
    poison = make_poison(rng, [encode(r) for r in good], poison_count)
    # positions: poison i goes before good record slots[i] (len(good): after the last)
    slots = sorted(rng.randrange(len(good) + 1) for _ in poison)
    sequence: list[Written] = []
    k = 0
    for i, record in enumerate([*good, None]):
        while k < len(slots) and slots[k] == i:
            sequence.append(poison[k][1])
            k += 1
        if record is not None:
            sequence.append(record)
    ctx.log(f"poison: {len(good)} good records, {len(poison)} malformed messages, {settings.topic_prefix}cache-log")

    publisher = Publisher(settings)
    writer = CacheLogWriter(settings, publisher)
    for item in sequence:
        if isinstance(item, bytes):
            publisher.publish(writer.topic, item)
        else:
            writer.append(item)
    writer.flush()

    quarantine = Publisher(settings)
    reader = CacheLogReader(settings, quarantine=quarantine)
    lost = 0
    read = 0
    poison_offsets: set[int] = set()
    folded = CacheState()
    for entry in reader.read():
        folded.apply_at(entry.offset, entry.record)  # no gap
        read += 1
        if entry.offset >= len(sequence):
            continue
        item = sequence[entry.offset]
        if isinstance(item, bytes):
            poison_offsets.add(entry.offset)
            if not isinstance(entry.record, BadRecord) or entry.record.raw != item:
                result.notes.append(f"offset {entry.offset}: poison read back as {type(entry.record).__name__}")
        elif entry.record != item:
            lost += 1
    lost += sum(1 for item in sequence[read:] if not isinstance(item, bytes))

    quarantined = _quarantined(settings, poison_offsets, {i: v for i, v in enumerate(sequence) if isinstance(v, bytes)})
    seen = Observed(
        offsets=len(sequence),
        poison=len(poison),
        read=read,
        reader_records=reader.stats.records,
        counted=sum(reader.stats.bad.values()),
        read_as_bad=len(poison_offsets),
        quarantined=quarantined,
        misread=tuple(n for n in result.notes if n.startswith("offset ")),
        lost=lost,
        projector=_snapshot_digest(settings),
        reference=_written_fold(sequence).snapshot().digest(),
    )
    verdict = check(seen)
    reasons = ", ".join(f"{r} {n}" for r, n in sorted(reader.stats.bad.items()))
    result.notes.append(
        f"{len(poison)} poison: {seen.counted} counted ({reasons}), {quarantined} quarantined; "
        f"{read} of {len(sequence)} offsets read"
    )
    ctx.log(f"poison: {result.notes[-1]}")
    result.count(verdict)
    missing_one = _written_fold(sequence, skip_poison=1).snapshot().digest()
    for name, broken in (
        ("a good record lost", replace(seen, lost=1)),
        ("a poison not quarantined", replace(seen, quarantined=seen.quarantined - 1)),
        ("a poison not counted", replace(seen, counted=seen.counted - 1)),
        ("a bad record missing from the fold", replace(seen, reference=missing_one)),
    ):
        result.control(name, check(broken))


@dataclass(frozen=True)
class Observed:
    offsets: int  # messages written (good and poison)
    poison: int
    read: int  # offsets the reader yielded
    reader_records: int
    counted: int  # bad messages the reader counted
    read_as_bad: int  # poison offsets read back as a BadRecord
    quarantined: int  # poison copies in the quarantine topic, with their origin and bytes
    misread: tuple[str, ...]  # poison read back as something else
    lost: int  # good records missing or changed
    projector: str  # `strata snapshot --digest` of the log
    reference: str  # the fold of what was written, poison as bad records


def check(seen: Observed) -> Verdict:
    verdict = Verdict(lost=seen.lost)
    checks = {
        "every offset read": seen.read == seen.offsets == seen.reader_records,
        "every poison counted": seen.counted == seen.poison,
        "every poison read as bad": seen.read_as_bad == seen.poison,
        "every poison quarantined": seen.quarantined == seen.poison,
        "no poison read back otherwise": not seen.misread,
    }
    failed = [name for name, held in checks.items() if not held]
    if failed:
        verdict.problem("failed: " + ", ".join(failed))
    if seen.projector != seen.reference:
        verdict.mismatches += 1
        verdict.problem(f"the projector's digest {seen.projector[:12]} is not the written fold's {seen.reference[:12]}")
    return verdict


def _written_fold(sequence: list[Written], skip_poison: int = 0) -> CacheState:
    """The fold of what was written, without reading the log (``skip_poison`` bad records left out)."""
    state = CacheState()
    for item in sequence:
        if not isinstance(item, bytes):
            state.apply(item)
        elif skip_poison:
            skip_poison -= 1
        else:
            state.apply_bad("poison")
    return state


def _snapshot_digest(settings: Settings) -> str:
    db = f"sqlite:///{settings.data_dir}/poison-{uuid.uuid4().hex[:8]}.db"
    out = strata("snapshot", "--digest", env=env_for(settings, STRATA_DB_URL=db))
    return out.stdout.strip() if out.returncode == 0 else f"(failed: {out.stderr.strip()[-200:]})"


def _quarantined(settings: Settings, offsets: set[int], raw: dict[int, bytes], timeout_s: float = 30.0) -> int:
    """Quarantined copies whose origin is a poison offset and whose bytes are that poison's."""
    quarantine = CacheLogReader(settings, topic=TopicNames(settings.topic_prefix).quarantine)
    found: set[int] = set()
    for msg in quarantine.messages(timeout_s=timeout_s):
        headers = dict(msg.headers() or [])
        origin = _origin(headers.get("strata.origin.offset"))
        if origin in offsets and (msg.value() or b"") == raw[origin] and headers.get("strata.reason"):
            found.add(origin)
    return len(found)


def _origin(header: str | bytes | None) -> int:
    """The origin offset a quarantined copy names; -1 when it names none."""
    return -1 if header is None else int(header)
