"""Divergence detection: every reader of the cache log reports its digest at agreed versions.

Projectors and scheduler replicas fold the same records with the same pure fold, so at the same
version they must hold the same snapshot. Each publishes ``{version, digest, replica, fold}`` to
the compacted digests topic at every multiple of ``every`` records (versions all readers reach).
The digest is the state digest (``CacheState.state_digest``), which the fold keeps up to date as
objects change, so a report costs what changed since the last one, not a rendering of the cache.
``strata verify --replicas`` compares what several readers reported for the same version; a
reader that finds its own digest outvoted by the others says so loudly and in its metrics.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import Counter as MetricCounter
from prometheus_client import Gauge

from strata.log.cachelog import CacheLogReader, Publisher, offset_of
from strata.log.config import Settings
from strata.log.topics import TopicNames
from strata.schemas import CodecError, Digest, decode, encode

LOG = logging.getLogger("strata.log.digests")
DIVERGENT = Gauge("strata_divergent", "1 when this reader's digest was outvoted at some version", ["replica"])
REPORTED = MetricCounter("strata_digests_published", "digests this reader published", ["replica"])
DIVERGENCES = MetricCounter(
    "strata_divergences", "versions at which this reader's digest was outvoted by the others'", ["replica"]
)


@dataclass(frozen=True)
class Divergence:
    version: int
    fold: str
    majority: str | None  # the digest most readers reported (None on a tie)
    dissenters: tuple[str, ...]  # replicas that reported another digest (all of them on a tie)
    reports: dict[str, str]  # replica -> digest


def divergences(digests: Iterable[Digest]) -> list[Divergence]:
    """Versions at which readers of the same fold reported different digests."""
    by_version: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
    for d in digests:
        by_version[(d.fold, d.version)][d.replica] = d.digest  # the latest word of each replica
    found = []
    for (fold, version), reports in sorted(by_version.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        counts = Counter(reports.values())
        if len(counts) < 2:
            continue
        (top, n), (_, m) = counts.most_common(2)
        majority = top if n > m else None
        dissenters = tuple(sorted(r for r, d in reports.items() if d != majority))
        found.append(Divergence(version, fold, majority, dissenters, dict(sorted(reports.items()))))
    return found


def compared_versions(digests: Iterable[Digest]) -> int:
    """How many (fold, version) pairs at least two readers reported."""
    replicas: dict[tuple[str, int], set[str]] = defaultdict(set)
    for d in digests:
        replicas[(d.fold, d.version)].add(d.replica)
    return sum(1 for r in replicas.values() if len(r) >= 2)


def read_digests(settings: Settings, timeout_s: float = 10.0) -> list[Digest]:
    """Every digest on the topic (what compaction left), in topic order."""
    return [digest for _, digest in digests_from(settings, 0, timeout_s)]


def digests_from(settings: Settings, start: int, timeout_s: float = 10.0) -> Iterator[tuple[int, Digest]]:
    """(offset, digest) of the digests topic from ``start`` to its end now."""
    reader = CacheLogReader(settings, topic=TopicNames(settings.topic_prefix).digests)
    for msg in reader.messages(start, timeout_s=timeout_s):
        offset = offset_of(msg)
        try:
            record = decode(msg.value() or b"")
        except CodecError as exc:
            LOG.warning("digests topic, offset %d: %s", offset, exc)
            continue
        if isinstance(record, Digest):
            yield offset, record


class DigestReporter:
    """Publishes one reader's digests in the background (publishing and checking wait for the broker)."""

    def __init__(self, settings: Settings, replica: str, fold: str) -> None:
        self.settings = settings
        self.replica = replica
        self.fold = fold
        self.every = settings.digest_every
        self.topic = TopicNames(settings.topic_prefix).digests
        self._publisher = Publisher(settings)
        self._queue: list[tuple[int, str]] = []
        self._ready = threading.Condition()
        self._outstanding = 0  # offered, not yet published and checked
        self._last_version = -1  # the newest version offered: none is sent twice
        self._read_to = 0  # the digests topic is read up to here for check(): only what is new each time
        self._seen: dict[tuple[str, int, str], Digest] = {}  # (fold, version, replica) -> its latest word
        self._outvoted: set[int] = set()  # versions already counted in DIVERGENCES
        DIVERGENCES.labels(replica)  # exported at 0 from the start, for rate() and dashboards
        DIVERGENT.labels(replica).set(0)
        self._thread = threading.Thread(target=self._run, name=f"digests-{replica}", daemon=True)
        self._thread.start()

    def due(self, version: int) -> bool:
        return self.every > 0 and version > 0 and version % self.every == 0

    def until_due(self, version: int) -> int | None:
        """Versions from ``version`` to the next report's (0 at one); None when none is reported."""
        return -version % self.every if self.every > 0 else None

    def offer(self, version: int, digest: str) -> None:
        """Report the state digest at ``version``, one that is ``due`` (the caller asks first so as
        not to compute a digest for every record)."""
        with self._ready:
            if version == self._last_version:
                return
            self._last_version = version
            self._queue.append((version, digest))
            self._outstanding += 1
            self._ready.notify_all()

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._queue:
                    self._ready.wait()
                version, digest = self._queue.pop(0)
            record = Digest(version=version, digest=digest, replica=self.replica, fold=self.fold)
            self._publisher.publish(self.topic, encode(record), key=f"{version:020d}/{self.replica}".encode())
            self._publisher.flush()
            REPORTED.labels(self.replica).inc()
            try:
                self.check()
            finally:
                with self._ready:
                    self._outstanding -= 1
                    self._ready.notify_all()

    def drain(self, timeout_s: float = 60.0) -> None:
        """Wait until everything offered is published and checked (a clean stop, tests)."""
        with self._ready:
            self._ready.wait_for(lambda: self._outstanding == 0, timeout=timeout_s)

    def check(self) -> list[Divergence]:
        """Compare this reader's digests with everyone's (reading only what arrived since the last
        check); loud when outvoted."""
        for offset, digest in digests_from(self.settings, self._read_to):
            self._seen[(digest.fold, digest.version, digest.replica)] = digest
            self._read_to = offset + 1
        mine = [d for d in divergences(self._seen.values()) if self.replica in d.dissenters]
        outvoted = [d for d in mine if d.majority is not None and d.fold == self.fold]
        for d in outvoted:
            LOG.error(
                "DIVERGENCE: replica %s has digest %s at version %d; %d other reader(s) agree on %s",
                self.replica,
                d.reports[self.replica][:12],
                d.version,
                sum(1 for v in d.reports.values() if v == d.majority),
                (d.majority or "")[:12],
            )
        DIVERGENT.labels(self.replica).set(1 if outvoted else 0)
        for d in outvoted:
            if d.version not in self._outvoted:
                self._outvoted.add(d.version)
                DIVERGENCES.labels(self.replica).inc()
        return outvoted
