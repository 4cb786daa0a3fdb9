"""The dispatcher: admitted BINDs and applied EVICTs of the cache log become commands.

Only the fold knows whether a BIND is admitted (it compares it with everything before it), so the
dispatcher folds the log itself. It is a member of the consumer group ``{prefix}dispatcher`` on the
single-partition cache log: one member is active, the others stand by and take over on a
rebalance. On assignment it finds the group's committed offset C, builds the fold state at C
(from a checkpoint plus the tail), and from there on folds every record and produces a command
for every admitted BIND and applied EVICT.

Exactly once across restarts: commands and the cache-log offset go out in one transaction
(``transactional.id = {prefix}dispatcher``, one id because there is one input partition; a new
active member fences the old one). Offsets committed = commands committed, and the fold at C is a
pure function of the records before C, so a successor produces exactly the commands that are
missing. The committed offset is *last record read + 1*: transaction markers take offsets in the
log too, and C must be an offset that the log reader can read up to.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from strata.binder import metrics, txn
from strata.log.cachelog import is_log_record, offset_of
from strata.log.config import Settings
from strata.log.metrics import FOLLOWING
from strata.log.topics import FETCH_BYTES, TopicNames
from strata.projector.fold.state import CacheState, FoldConfig
from strata.schemas import (
    BadRecord,
    Bind,
    BindCommand,
    BindGroup,
    CodecError,
    Evict,
    EvictCommand,
    LogRecord,
    decode,
    encode,
)

OFFSETS_TIMEOUT_S = 30.0  # the dispatcher's one partition: no rebalance of many to wait out
log = logging.getLogger("strata.binder.dispatcher")
StateAt = Callable[[int], CacheState]


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        fold: FoldConfig,
        stop: threading.Event,
        instance: str,
        state_at: StateAt | None = None,
        commit_interval_s: float = 0.05,
        commit_records: int = 1000,
    ) -> None:
        self.settings = settings
        self.fold = fold
        self.stop = stop
        self.instance = instance
        names = TopicNames(settings.topic_prefix)
        self.cache_log = names.cache_log
        self.bind_topic = names.commands("bind")
        self.evict_topic = names.commands("evict")
        self.transactional_id = f"{settings.topic_prefix}dispatcher"
        self.state_at = state_at or self._state_at_from_checkpoints
        self.commit_interval_s = commit_interval_s
        self.commit_records = commit_records
        self.assigned = False
        self.state: CacheState | None = None  # None: to be rebuilt at the committed offset
        self.next_offset = 0
        self.dispatched = 0
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._open = False  # a transaction is open
        self._pending = 0  # records read in the open transaction
        self._opened_at = 0.0
        self.end_at_assign: int | None = None  # the log's end when this dispatcher took the log over

    def _state_at_from_checkpoints(self, offset: int) -> CacheState:
        from strata.projector.checkpoints.sql import SqlCheckpointStore
        from strata.projector.runner import LogRunner

        runner = LogRunner(self.settings, SqlCheckpointStore(self.settings.checkpoint_url), self.fold)
        return runner.state_at(offset)

    # -------------------------------------------------------------------------------- loop
    def run(self) -> None:
        consumer = self._consumer = Consumer(
            self.settings.client_config(
                **{
                    "group.id": f"{self.settings.topic_prefix}dispatcher",
                    "group.instance.id": f"dispatcher-{self.instance}",
                    "session.timeout.ms": 10_000,
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "isolation.level": "read_committed",  # never act on a record that may be aborted
                    "fetch.message.max.bytes": FETCH_BYTES,
                    "fetch.wait.max.ms": 20,
                }
            )
        )
        consumer.subscribe([self.cache_log], on_assign=self._on_assign, on_revoke=self._on_revoke)
        try:
            while not self.stop.is_set():
                self.step()
            self._finish()  # clean shutdown: what was read is committed, not redone
        finally:
            if self._open:
                txn.safe_abort(self._producer)
            consumer.close()

    def not_ready(self) -> str | None:
        """Why this dispatcher is not ready (None: it is). One not holding the cache log is a
        ready standby: another instance dispatches."""
        if not self.assigned:
            return None
        if self.state is None or self.end_at_assign is None:
            return "the dispatcher is rebuilding its state"
        if self.next_offset < self.end_at_assign:
            return f"the dispatcher is catching up: offset {self.next_offset} of {self.end_at_assign}"
        return None

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned = bool(partitions)
        self.state = None

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # finish what was read while still the owner; a failure leaves it to the successor
        try:
            self._finish()
        except (txn.Abort, txn.Fatal):
            txn.safe_abort(self._producer)
        self._open = False
        self.assigned = False
        self.state = None
        self._drop_producer()

    def step(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        msgs = consumer.consume(1000, timeout=0.05)
        if not self.assigned:
            return
        end = consumer.get_watermark_offsets(TopicPartition(self.cache_log, 0), cached=True)[1]
        FOLLOWING.end = max(end, self.next_offset)
        try:
            if self.state is None:
                self._rebuild(consumer)
            for msg in msgs:
                self._on_message(msg)
            due = self._open and (
                self._pending >= self.commit_records or time.monotonic() - self._opened_at >= self.commit_interval_s
            )
            if due:
                self._finish()
        except txn.Abort as exc:
            log.warning("dispatcher: transaction aborted (%s); rebuilding at the committed offset", exc)
            metrics.ABORTS.labels("dispatcher").inc()
            txn.safe_abort(self._producer)
            self._open = False
            self.state = None
        except txn.Fatal as exc:
            log.warning("dispatcher: producer unusable (%s); making a new one", exc)
            metrics.ABORTS.labels("dispatcher").inc()
            self._drop_producer()
            self._open = False
            self.state = None

    def _rebuild(self, consumer: Consumer) -> None:
        committed = txn.committed(consumer, [TopicPartition(self.cache_log, 0)])[0].offset
        start = max(committed, 0)
        if self._producer is None:
            # created only when active: init_transactions fences the previous owner
            self._producer = txn.transactional_producer(self.settings, self.transactional_id)
        self.state = self.state_at(start)
        self.next_offset = start
        try:
            self.end_at_assign = consumer.get_watermark_offsets(TopicPartition(self.cache_log, 0), timeout=10.0)[1]
        except KafkaException:  # readiness is no reason to stop dispatching: ready once at the start
            self.end_at_assign = start
        txn.rewind(consumer, [TopicPartition(self.cache_log, 0)])

    def _on_message(self, msg: Message) -> None:
        err = msg.error()
        if err is not None and (err.fatal() or err.code() == KafkaError._FATAL):
            # the consumer is unusable for good (a static member fenced): as a worker does, stop,
            # so that the process exits and its orchestrator starts it again
            raise KafkaException(err)
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("dispatcher: %s", err.str())
            return
        offset = offset_of(msg)
        if offset < self.next_offset:
            return  # fetched before a rewind
        assert self.state is not None
        record = _decode(msg.value() or b"", offset)
        outcome = self.state.apply_at(offset, record)
        FOLLOWING.applied_entry(offset, msg.timestamp()[1], record)
        self._begin()
        if outcome.result == "applied" and isinstance(record, (Bind, Evict)):
            self._dispatch(record, offset)
        elif outcome.result == "applied" and isinstance(record, BindGroup):
            for bind in record.binds:  # one command per pod, each answered by its own outcome record
                self._dispatch(Bind(bind.pod, bind.node, record.replica, bind.extensions), offset, in_group=True)
        self.next_offset = offset + 1
        self._pending += 1

    def _dispatch(self, record: Bind | Evict, offset: int, in_group: bool = False) -> None:
        assert self.state is not None and self._producer is not None
        namespace, name = self.state.pod_uids[record.pod]
        if isinstance(record, Bind):
            command: BindCommand | EvictCommand = BindCommand(
                command_id=f"bind@{offset}/{record.pod}" if in_group else f"bind@{offset}",
                log_offset=offset,
                pod_uid=record.pod,
                namespace=namespace,
                name=name,
                node=record.node,
                replica=record.replica,
                extensions=record.extensions,
            )
            topic, work = self.bind_topic, "bind"
        else:
            command = EvictCommand(
                command_id=f"evict@{offset}",
                log_offset=offset,
                pod_uid=record.pod,
                namespace=namespace,
                name=name,
                reason=record.reason,
                replica=record.replica,
            )
            topic, work = self.evict_topic, "evict"
        # keyed by pod uid: all commands of one pod on one partition, in log order
        txn.produce(self._producer, topic, encode(command), key=record.pod.encode())
        metrics.DISPATCHED.labels(work).inc()
        self.dispatched += 1

    # ------------------------------------------------------------------------ transactions
    def _begin(self) -> None:
        if not self._open:
            assert self._producer is not None
            txn.call(self._producer.begin_transaction)
            self._open, self._pending, self._opened_at = True, 0, time.monotonic()

    def _finish(self) -> None:
        if not self._open or self._producer is None or self._consumer is None:
            return
        producer, consumer = self._producer, self._consumer
        offsets = [TopicPartition(self.cache_log, 0, self.next_offset)]
        group = consumer.consumer_group_metadata()
        txn.call(
            lambda: txn.bounded(
                lambda: producer.send_offsets_to_transaction(offsets, group, OFFSETS_TIMEOUT_S),
                OFFSETS_TIMEOUT_S + txn.OFFSETS_GRACE_S,
                "send_offsets_to_transaction",
            )
        )
        txn.call(lambda: producer.commit_transaction(30.0))
        self._open = False

    def _drop_producer(self) -> None:
        if self._producer is not None:
            self._producer.flush(1.0)
            self._producer = None


def _decode(value: bytes, offset: int) -> LogRecord:
    """As the log reader decodes, without quarantining (readers of the log do that)."""
    try:
        record = decode(value)
    except CodecError as exc:
        return BadRecord(raw=value, error=f"offset {offset}: {exc}", source="dispatcher")
    if is_log_record(record):
        return record
    return BadRecord(raw=value, error=f"offset {offset}: {record.SCHEMA} in the cache log", source="dispatcher")
