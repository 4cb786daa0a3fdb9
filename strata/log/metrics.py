"""Prometheus counters of the edges (the fold itself counts nothing: it is pure)."""

import collections
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

BAD_MESSAGES = Counter(
    "strata_bad_messages",
    "Messages that did not decode into a record, by topic and reason; each is quarantined.",
    ["topic", "reason"],
)
PUBLISHED = Counter("strata_published_records", "Records delivered to a topic.", ["topic"])
CHILD_RESTARTS = Counter(
    "strata_child_restarts",
    "Helper processes (the log's reader, the audit index's writer) started again after one stopped.",
    ["process"],
)


class Following:
    """How far a process that folds the cache log has come, exported when scraped.

    The fold's loop only sets plain fields and bumps a dict: a labelled Counter takes a lock per
    increment, which at a million records costs the fold more than some records do. One per
    process (``FOLLOWING``); a projector, a replica's cache and a dispatcher each fold one log.
    """

    def __init__(self) -> None:
        self.end = 0  # the log's end as last seen
        self.version = 0  # the next offset to apply
        self.appended_ms: int | None = None  # LogAppendTime of the newest applied record
        self.applied: collections.Counter[tuple[str, str]] = collections.Counter()  # (type, kind)

    def applied_entry(self, offset: int, timestamp_ms: int, record: Any) -> None:
        self.applied[record.TYPE, getattr(record, "kind", "Pod")] += 1
        self.version = offset + 1
        self.appended_ms = timestamp_ms

    def applied_watch(self, offset: int, timestamp_ms: int, op: str, kind: str) -> None:
        """``applied_entry`` of a WatchEvent given its op and kind, or of another record given its
        type and "Pod" (the record was not built)."""
        self.applied[op, kind] += 1
        self.version = offset + 1
        self.appended_ms = timestamp_ms

    def lag_seconds(self, now_ms: int) -> float:
        """How long ago the newest applied record was appended, while records wait; else 0."""
        if self.version >= self.end or self.appended_ms is None:
            return 0.0
        return max(0.0, (now_ms - self.appended_ms) / 1000.0)

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("strata_log_end_offset", "The cache log's end as last seen.", value=self.end)
        yield GaugeMetricFamily("strata_applied_version", "The version the fold has reached.", value=self.version)
        lag = max(0, self.end - self.version)
        yield GaugeMetricFamily("strata_lag_records", "Records of the cache log not applied yet.", value=lag)
        yield GaugeMetricFamily(
            "strata_lag_seconds",
            "How old the newest applied record is (LogAppendTime) while records wait; 0 when caught up.",
            value=self.lag_seconds(int(time.time() * 1000)),
        )
        applied = CounterMetricFamily(
            "strata_records_applied", "Records the fold applied, by record type and kind.", labels=["type", "kind"]
        )
        for (type_, kind), n in sorted(self.applied.copy().items()):
            applied.add_metric([type_, kind], n)
        yield applied


FOLLOWING = Following()
REGISTRY.register(FOLLOWING)
