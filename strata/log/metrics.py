"""Prometheus counters of the edges (the fold itself counts nothing: it is pure)."""

from prometheus_client import Counter

BAD_MESSAGES = Counter(
    "strata_bad_messages",
    "Messages that did not decode into a record, by topic and reason; each is quarantined.",
    ["topic", "reason"],
)
PUBLISHED = Counter("strata_published_records", "Records delivered to a topic.", ["topic"])
