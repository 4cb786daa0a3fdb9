"""Topic names and their creation with explicit configurations.

The cache log is the truth: ONE partition (a total order), never compacted, kept forever, and
stamped by the broker (LogAppendTime) so that its timestamps never go backwards and a time maps
to an offset. Everything else carries work: commands for binders and evictors are spread over
partitions, each with fixed-delay retry tiers and a dead-letter topic of as many partitions, so
a retried or dead-lettered command keeps its partition.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic, TopicMetadata

from strata.errors import MissingTopicError, StrataError
from strata.log.config import ClientConfig, Settings

Work = Literal["bind", "evict"]
WORKS: tuple[Work, ...] = ("bind", "evict")
MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # etcd's object limit is 1.5 MiB; JSON of one object stays well below
# Bytes a consumer asks per partition and fetch. Not MAX_MESSAGE_BYTES: the broker returns a
# larger first batch whole anyway (KIP-74), and large fetches made reads slow on a 2-core machine
# (200,000 records in a row: 1.38 s at 8 MiB, 0.22 s at 1 MiB, 0.25 s at 256 KiB; 1,024 records
# after a seek with a new consumer: 130-250 ms, 47-64 ms, 21-26 ms).
FETCH_BYTES = 256 * 1024
# How long a consumer whose queue of fetched messages is full waits before it fetches again.
# librdkafka's default, 1 s, starved a fold that drains the queue's 64 MB in less: the pure fold
# of 1.7M records took 23.4-23.7 s with it, 19.1-21.0 s with this (docs/projector.md, run U).
QUEUE_BACKOFF_MS = 100
FOREVER = "-1"
WEEK_MS = str(7 * 24 * 3600 * 1000)
# How long a client waits for the brokers' metadata before it leaves the question of a missing
# topic open: a broker that does not answer in this time is unreachable (for now), not missing.
METADATA_TIMEOUT_S = 5.0
# A topic just created reaches every broker's metadata a moment later: one that lacks it is asked
# again for this long before the topic is called missing.
PROPAGATION_S = 2.0


@dataclass(frozen=True)
class TopicNames:
    prefix: str

    @property
    def cache_log(self) -> str:
        return f"{self.prefix}cache-log"

    @property
    def quarantine(self) -> str:
        return f"{self.prefix}quarantine"

    @property
    def digests(self) -> str:
        return f"{self.prefix}digests"

    def commands(self, work: Work) -> str:
        return f"{self.prefix}{work}-commands"

    def retry(self, work: Work, delay_s: int) -> str:
        return f"{self.commands(work)}-retry-{delay_s}s"

    def dead_letter(self, work: Work) -> str:
        return f"{self.commands(work)}-dlt"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]
    exact_partitions: bool = False  # the cache log must have exactly one
    source: str | None = None  # a retry tier or dead-letter topic needs at least its source's partitions


def plan(settings: Settings) -> list[TopicSpec]:
    names = TopicNames(settings.topic_prefix)
    replicated = {"min.insync.replicas": str(settings.min_insync_replicas), "unclean.leader.election.enable": "false"}
    specs = [
        TopicSpec(
            names.cache_log,
            1,
            {
                "cleanup.policy": "delete",
                "retention.ms": FOREVER,
                "retention.bytes": FOREVER,
                "message.timestamp.type": "LogAppendTime",
                "max.message.bytes": str(MAX_MESSAGE_BYTES),
                **replicated,
            },
            exact_partitions=True,
        ),
        TopicSpec(
            names.quarantine,
            1,
            # keyed by the origin's topic/partition/offset: a message quarantined again by another
            # reader of the same log collapses into one copy
            {"cleanup.policy": "compact", "max.message.bytes": str(MAX_MESSAGE_BYTES), **replicated},
        ),
        TopicSpec(
            names.digests,
            1,
            # keyed by version/replica: compaction keeps each replica's latest word on each version
            {"cleanup.policy": "compact", **replicated},
        ),
    ]
    work_config = {"cleanup.policy": "delete", "retention.ms": WEEK_MS, **replicated}
    for work in WORKS:
        source = names.commands(work)
        specs.append(TopicSpec(source, settings.command_partitions, work_config))
        specs += [
            TopicSpec(names.retry(work, d), settings.command_partitions, work_config, source=source)
            for d in settings.retry_delays_s
        ]
        dead_letter_config = {**work_config, "retention.ms": FOREVER}
        specs.append(TopicSpec(names.dead_letter(work), settings.command_partitions, dead_letter_config, source=source))
    return specs


def admin_client(settings: Settings) -> AdminClient:
    return AdminClient(settings.client_config())


def drop_topics(settings: Settings, config: ClientConfig | None = None, timeout_s: float = 60.0) -> list[str]:
    """Delete every topic whose name starts with the settings' prefix (a test's, a benchmark's or a
    fault scenario's own prefix); ``config`` replaces the settings' client configuration."""
    admin = AdminClient(config if config is not None else settings.client_config())
    names = sorted(t for t in admin.list_topics(timeout=10).topics if t.startswith(settings.topic_prefix))
    if names:
        for future in admin.delete_topics(names, operation_timeout=timeout_s).values():
            future.result()
    return names


def ensure_topics(settings: Settings, timeout_s: float = 30.0) -> dict[str, str]:
    """Create every topic of the plan that is missing; check the ones that exist.

    Returns topic -> "created" or "exists". Raises ``StrataError`` when an existing topic has a
    shape the design forbids (a cache log with more than one partition, a retry tier or
    dead-letter topic with fewer partitions than its source).
    """
    admin = admin_client(settings)
    specs = plan(settings)
    futures = admin.create_topics(
        [
            NewTopic(
                s.name, num_partitions=s.partitions, replication_factor=settings.replication_factor, config=s.config
            )
            for s in specs
        ],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    outcome = {}
    for name, future in futures.items():
        try:
            future.result()
            outcome[name] = "created"
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise StrataError(f"cannot create topic {name}: {err.str()}") from exc
            outcome[name] = "exists"
    _check_shapes(admin, specs, timeout_s)
    return outcome


def _check_shapes(admin: AdminClient, specs: list[TopicSpec], timeout_s: float) -> None:
    # A created topic reaches the brokers' metadata a moment after CreateTopics returns.
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = admin.list_topics(timeout=timeout_s)
        missing = [s.name for s in specs if _unavailable(metadata.topics.get(s.name))]
        if not missing:
            break
        if time.monotonic() > deadline:
            raise StrataError(f"topic {missing[0]} is not available after {timeout_s:g} s")
        time.sleep(0.1)
    for spec in specs:
        topic = metadata.topics[spec.name]
        have = len(topic.partitions)
        if spec.exact_partitions and have != spec.partitions:
            raise StrataError(f"topic {spec.name} has {have} partitions; the cache log must have exactly one")
        if spec.source is not None and have < len(metadata.topics[spec.source].partitions):
            raise StrataError(
                f"topic {spec.name} has {have} partitions, fewer than its source {spec.source}; "
                "a retried command must keep its partition"
            )


def _unavailable(topic: TopicMetadata | None) -> bool:
    return topic is None or topic.error is not None or any(p.leader < 0 for p in topic.partitions.values())


def work_topics(settings: Settings, work: Work) -> list[str]:
    """The topics a binder or an evictor reads and writes: the cache log, its command topic, the
    retry tiers and the dead-letter topic."""
    names = TopicNames(settings.topic_prefix)
    retries = [names.retry(work, d) for d in settings.retry_delays_s]
    return [names.cache_log, names.commands(work), *retries, names.dead_letter(work)]


def require_topics(
    settings: Settings,
    names: Collection[str],
    client: Producer | Consumer | AdminClient | None = None,
    timeout_s: float = METADATA_TIMEOUT_S,
) -> ClusterMetadata | None:
    """Raise ``MissingTopicError`` when the brokers' metadata lacks any of ``names``.

    A Kafka client waits for a topic it does not know, as it would for one just created (a
    producer 30 s, ``topic.metadata.propagation.max.ms``), then fails with "Unknown topic or
    partition"; the metadata says at once that it is missing. The request lists every topic, which
    never auto-creates one (a request naming a topic may, on a broker that allows it). ``client``,
    the caller's own, saves a connection. A broker that does not answer within ``timeout_s`` gives
    no verdict: None, and the caller goes on as before (it waits for the broker and reports that).
    """
    client = client or AdminClient(settings.client_config())
    deadline = time.monotonic() + PROPAGATION_S
    while True:
        try:
            metadata = client.list_topics(timeout=timeout_s)
        except KafkaException:
            return None
        if all(name in metadata.topics for name in names) or time.monotonic() > deadline:
            check_present(settings, metadata, names)
            return metadata
        time.sleep(0.25)


def check_present(settings: Settings, metadata: ClusterMetadata, names: Collection[str]) -> None:
    """Raise ``MissingTopicError``, naming the command that creates them, when ``metadata`` lacks
    any of ``names``."""
    missing = [name for name in names if name not in metadata.topics]
    if not missing:
        return
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    verb = "does" if len(missing) == 1 else "do"
    prefix = settings.topic_prefix
    raise MissingTopicError(
        f"topic{'s' if len(missing) > 1 else ''} {shown} {verb} not exist on "
        f"{settings.client_config()['bootstrap.servers']}; create the topics of prefix {prefix!r} "
        f"with `strata topics create --topic-prefix {prefix}`"
    )
