"""Transactional producers and the error classes of librdkafka's transactional API.

Every call of the transactional API can fail three ways, and each asks for a different answer:
``retriable()`` (call it again), ``txn_requires_abort()`` (abort, rewind the input to the committed
offsets and redo the work) and anything else, which is fatal for the producer (a zombie fenced by
a newer instance with the same ``transactional.id``, or an internal error): make a new one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from strata.log.cachelog import Headers, producer_config
from strata.log.config import Settings

# past its own timeout, how long send_offsets_to_transaction is waited for (bounded)
OFFSETS_GRACE_S = 5.0
log = logging.getLogger("strata.binder")

T = TypeVar("T")
# An open transaction that touches the single-partition cache log holds back every
# read_committed reader of it (the last stable offset stops there): keep it short.
TRANSACTION_TIMEOUT_MS = 10_000


class Abort(Exception):
    """The transaction must be aborted and its input redone."""


class Fatal(Exception):
    """The producer is unusable: close it and make a new one (which fences the old one)."""


def transactional_producer(settings: Settings, transactional_id: str) -> Producer:
    producer = Producer(
        producer_config(
            settings,
            **{"transactional.id": transactional_id, "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS},
        )
    )
    # completes or aborts whatever a previous instance with this id left open, and fences it
    call(lambda: producer.init_transactions(30.0))
    return producer


def call(op: Callable[[], T], attempts: int = 5) -> T:
    """Run one transactional API call, retrying the retriable errors; raise Abort or Fatal."""
    for attempt in range(attempts):
        try:
            return op()
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.fatal():
                raise Fatal(err.str()) from exc
            if err.txn_requires_abort():
                raise Abort(err.str()) from exc
            if not err.retriable() or attempt == attempts - 1:
                raise Abort(err.str()) from exc  # abortable at least: redo rather than stop
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def produce(
    producer: Producer,
    topic: str,
    value: bytes,
    key: bytes | None = None,
    partition: int = -1,  # librdkafka's "unassigned": the partitioner chooses
    headers: Headers | None = None,
) -> None:
    """Queue one message inside the open transaction; waits while the local queue is full."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, partition=partition, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            raise (Fatal if err.fatal() else Abort)(err.str()) from exc


def safe_abort(producer: Producer | None) -> None:
    if producer is None:
        return
    # nothing open, or the producer is fenced: either way nothing of it commits
    with contextlib.suppress(KafkaException):
        producer.abort_transaction(10.0)


def committed(consumer: Consumer, partitions: list[TopicPartition], patience_s: float = 120.0) -> list[TopicPartition]:
    """The group's committed offsets; asked again while the coordinator is busy (a rebalance after
    a member was killed can outlast one request's timeout, and that is no reason to stop)."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            return consumer.committed(partitions, timeout=10.0)
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise
            log.warning(
                "committed offsets not available yet (%s); asking again", exc.args[0].str() if exc.args else exc
            )
            time.sleep(0.5)


def rewind(consumer: Consumer, partitions: list[TopicPartition]) -> None:
    """Seek every given partition back to the group's committed offset (the start when none)."""
    if not partitions:
        return
    for tp in committed(consumer, partitions):
        offset = tp.offset if tp.offset >= 0 else 0
        # not yet fetching: the fetch will start at the committed offset anyway
        with contextlib.suppress(KafkaException):
            consumer.seek(TopicPartition(tp.topic, tp.partition, offset))


def bounded(op: Callable[[], None], seconds: float, what: str) -> None:
    """``op`` on a thread of its own, waited for ``seconds`` at most. librdkafka's
    send_offsets_to_transaction can block past its own timeout once the group coordinator is gone
    (librdkafka #5456, #5511: after a broker loss), and a worker or dispatcher blocked there never polls: the
    group's rebalance then waits for it until max.poll.interval.ms (5 minutes), and every worker of
    the group with it. Past ``seconds`` the producer is given up for a new one (Fatal), whose
    init_transactions fences it; the call left behind ends when librdkafka lets it."""
    failed: list[BaseException] = []

    def call() -> None:
        try:
            op()
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=call, name=what, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise Fatal(f"{what} did not return in {seconds:g} s")
    if failed:
        raise failed[0]
