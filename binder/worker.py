"""A command worker: consume commands, carry them out, write their consequences, then commit.

One worker per (work, stage): the command topic (``role`` w0, w1, ...) or one retry tier. Per
batch (up to ``batch_max`` commands or ``window_s`` of waiting):

1. decode; a message that does not decode goes to the dead-letter topic (no retry can fix bytes);
2. carry out the commands concurrently on a thread pool, the commands of one pod in order;
3. append the outcome records to the cache log (idempotent producer, flushed);
4. in ONE transaction on the work topics: forwards to the next retry tier or the DLT, and the
   consumer offsets (KIP-447: ``consumer_group_metadata``).

The cache log takes no transactions: a transaction's markers would take offsets there (and a
snapshot's version is its offset + 1), and an open transaction would hold back every
read_committed reader of the single partition until it ends. So an outcome is written at least
once: a crash between steps 3 and 4 redelivers the batch, the actions are idempotent (a bind
already done answers 409 with the same node, which is success), and the outcome is written
again. That is harmless by construction: each outcome names the offset of its BIND or EVICT, and
the fold reverts only the overlay that record laid, so a repeated BIND_FAILED cannot undo a later
bind of the same pod; successes change no state.

The API call itself is not repeated: a command that an earlier attempt may have carried out is
*suspect*, and the action first reads the pod (``Action.done_already``) and calls the API only
if the pod says it was not done. Suspect are the commands of an aborted batch; after a partition
is assigned, its first ``batch_max`` commands that were already in it (a predecessor commits each
batch before it takes the next, so what it may have done without committing lies there); and
every command of a retry tier (the failure that sent it there may have taken effect). A batch
whose transaction aborted is redone by the same worker, most often (a broker lost, a rebalance):
it keeps what each of its commands came to and reuses it, with no read and no call (a refusal or
a 5xx leaves nothing on the pod to read), and writes no outcome a second time.

A retry tier holds commands back for its delay: it pauses a partition whose head is not due yet
(record timestamp + delay), seeks back to it and keeps polling; it resumes once due.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from strata.binder import metrics, txn
from strata.binder.actions import Action, Result
from strata.log.cachelog import Headers, Publisher, offset_of, record_key, where
from strata.log.config import Settings
from strata.log.topics import TopicNames, Work
from strata.schemas import CodecError, LogRecord, decode, encode

log = logging.getLogger("strata.binder")

# headers of a forwarded command (the first hop's origin is kept; the error is the latest)
ATTEMPT = "strata.attempt"
ORIGINAL_TOPIC = "strata.original.topic"
ORIGINAL_PARTITION = "strata.original.partition"
ORIGINAL_OFFSET = "strata.original.offset"
ERROR = "strata.error"
DUE_MS = "strata.due_ms"
REASON = "strata.reason"
OFFSETS_TIMEOUT_S = 5.0
STOP_REDO_S = 15.0  # how long a stopping worker keeps redoing an aborted batch


@dataclass(frozen=True)
class WorkSpec:
    """What differs between binding and evicting."""

    work: Work
    group: str  # consumer group stem: binder | evictor
    command_type: type
    succeeded: Callable[[Any], LogRecord]
    failed: Callable[[Any, str], LogRecord]


@dataclass(frozen=True)
class Stage:
    role: str  # w0.. for the command topic, retry-10s for a tier
    topic: str
    group: str
    delay_s: int  # 0 for the command topic
    next_topic: str  # the next tier, or the DLT after the last
    last: bool  # a transient failure here goes to the DLT


def stages(settings: Settings, spec: WorkSpec) -> list[Stage]:
    """The command topic and its retry tiers, each with where its failures go next."""
    names = TopicNames(settings.topic_prefix)
    prefix = settings.topic_prefix
    topics = [(names.commands(spec.work), f"{prefix}{spec.group}", 0)] + [
        (names.retry(spec.work, d), f"{prefix}{spec.group}-retry-{d}s", d) for d in settings.retry_delays_s
    ]
    out = []
    for i, (topic, group, delay) in enumerate(topics):
        last = i == len(topics) - 1
        nxt = names.dead_letter(spec.work) if last else topics[i + 1][0]
        out.append(Stage(f"retry-{delay}s" if delay else "w", topic, group, delay, nxt, last))
    return out


@dataclass
class _Item:
    msg: Message
    command: Any = None
    bad: str | None = None  # why the message did not decode
    result: Result | None = None
    suspect: bool = False  # an earlier attempt may have carried it out
    recorded: bool = False  # its outcome record is published already


@dataclass(frozen=True)
class _Done:
    """What a command of an aborted batch came to, kept for the batch's redo in this worker."""

    result: Result
    recorded: bool


Partition = tuple[str, int]
Position = tuple[str, int, int]  # topic, partition, offset of one command


class CommandWorker:
    def __init__(
        self,
        settings: Settings,
        spec: WorkSpec,
        stage: Stage,
        action: Action,
        pool: Executor,
        instance: str,
        stop: threading.Event,
        role: str | None = None,
        batch_max: int = 500,
        window_s: float = 0.02,
    ) -> None:
        self.settings = settings
        self.spec = spec
        self.stage = stage
        self.action = action
        self.pool = pool
        self.stop = stop
        self.role = role or stage.role
        self.batch_max = batch_max
        self.window_s = window_s
        self.cache_log = TopicNames(settings.topic_prefix).cache_log
        self.dead_letter = TopicNames(settings.topic_prefix).dead_letter(spec.work)
        # a stable instance lets a restarted process fence its predecessor's open transaction
        # and take over its static group membership at once, without waiting for a timeout
        self.transactional_id = f"{settings.topic_prefix}{spec.work}-{instance}-{self.role}"
        self.group_instance_id = f"{spec.work}-{instance}-{self.role}"
        self._paused: dict[Partition, int] = {}  # partition -> due (ms) of its held-back head
        # partition -> (its end when assigned, None when unknown; the commands of a predecessor's
        # possible batch not yet read, counted in messages: transaction markers take offsets too)
        self._inherited: dict[Partition, tuple[int | None, int]] = {}
        self._suspect_below: dict[Partition, int] = {}  # an aborted batch: below this offset
        self._done: dict[Position, _Done] = {}  # aborted batches' commands, until committed past
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._outcomes = Publisher(settings)  # into the cache log: idempotent, never transactional
        self._redo = False  # the last batch was aborted and is not done yet
        self.processed = 0

    # -------------------------------------------------------------------------------- loop
    def run(self) -> None:
        self._producer = txn.transactional_producer(self.settings, self.transactional_id)
        consumer = self._consumer = Consumer(
            self.settings.client_config(
                **{
                    "group.id": self.stage.group,
                    "group.instance.id": self.group_instance_id,
                    "session.timeout.ms": 10_000,
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "isolation.level": "read_committed",
                    "fetch.wait.max.ms": 20,
                }
            )
        )
        consumer.subscribe([self.stage.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        try:
            while not self.stop.is_set():
                self.step()
            # A batch aborted just before the stop has had its effect on the API server but has
            # no outcome in the log yet: redo it now rather than leave that to the next binder.
            deadline = time.monotonic() + STOP_REDO_S
            while self._redo and time.monotonic() < deadline:
                try:
                    self.step()
                except KafkaException as exc:  # fenced as it stops: the batch's next owner redoes it
                    log.warning("%s: stopping with the batch not redone (%s)", self.transactional_id, exc)
                    break
        finally:
            # no transaction is open between steps: every step commits or aborts its own
            consumer.close()
            self._producer.flush(5.0)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # librdkafka keeps a partition paused across a rebalance (revoked, then assigned again),
        # but _on_revoke forgot why, so nothing would ever resume it: its commands would wait for
        # the next restart. Resume what this worker does not hold back (its head is fetched and
        # held again when not due yet); pause what it does.
        held = [tp for tp in partitions if (tp.topic, tp.partition) in self._paused]
        free = [tp for tp in partitions if (tp.topic, tp.partition) not in self._paused]
        if free:
            consumer.resume(free)
        if held:
            consumer.pause(held)
        # at INFO (the operator fault scenarios read it): which rebalance met which held head
        log.info("%s: assigned %s", self.group_instance_id, ",".join(str(tp.partition) for tp in partitions))
        for tp in partitions:
            self._inherited[(tp.topic, tp.partition)] = (_end(consumer, tp), self.batch_max)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._redo = False  # whoever is assigned the partitions now redoes what was aborted
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self._paused.pop(key, None)
            self._inherited.pop(key, None)
            self._suspect_below.pop(key, None)

    def step(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        self._resume_due(consumer)
        msgs = consumer.consume(self.batch_max, timeout=self.window_s)
        items = self._admit(consumer, msgs)
        if not items:
            return
        self._carry_out(items)
        self._redo = True
        try:
            committed = self._commit(consumer, items)
            self._redo = False
            self._forget_done(committed)
        except txn.Abort as exc:
            log.warning("%s: transaction aborted (%s); redoing the batch", self.transactional_id, exc)
            metrics.ABORTS.labels(self.transactional_id).inc()
            txn.safe_abort(self._producer)
            self._rewind(consumer, items)
        except txn.Fatal as exc:
            log.warning("%s: producer unusable (%s); making a new one", self.transactional_id, exc)
            self._redo = False  # fenced, most likely: the instance that fenced us redoes the batch
            metrics.ABORTS.labels(self.transactional_id).inc()
            self._producer = txn.transactional_producer(self.settings, self.transactional_id)
            self._rewind(consumer, items)

    # ------------------------------------------------------------------------------- admit
    def _admit(self, consumer: Consumer, msgs: list[Message]) -> list[_Item]:
        items: list[_Item] = []
        held: set[Partition] = set()
        now_ms = int(time.time() * 1000)
        for msg in msgs:
            err = msg.error()
            # (the event's code is _FATAL; its fatal() flag is not set)
            if err is not None and (err.fatal() or err.code() == KafkaError._FATAL):
                # The consumer is unusable for good (a static member fenced: another process of
                # this --instance, or, after a broker loss, librdkafka's own rejoin). Left running,
                # the worker would hold its partitions and do nothing; stopping lets the process
                # exit and its orchestrator start it again, which fences any zombie.
                raise KafkaException(err)
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("%s: %s", self.stage.topic, err.str())
                continue
            tp = where(msg)
            if tp in held or tp in self._paused:
                continue  # fetched before the pause took effect; read again once due
            if self.stage.delay_s:
                due = msg.timestamp()[1] + self.stage.delay_s * 1000
                if due > now_ms:
                    held.add(tp)
                    self._hold(consumer, msg, due)
                    continue
            item = self._decoded(msg)
            # a retried command may have taken effect (a timeout, a 504): it is always suspect
            item.suspect = self._suspect(tp, offset_of(msg)) or self.stage.delay_s > 0
            items.append(item)
        return items

    def _suspect(self, tp: Partition, offset: int) -> bool:
        """Whether an earlier attempt may have carried out this command: one of an aborted batch,
        or one of the first ``batch_max`` commands that were in a partition when it was assigned."""
        if offset < self._suspect_below.get(tp, 0):
            return True
        end, left = self._inherited.get(tp, (None, 0))
        if left and (end is None or offset < end):
            self._inherited[tp] = (end, left - 1)
            return True
        self._inherited.pop(tp, None)  # past what a predecessor may have done: the rest is ours
        return False

    def _hold(self, consumer: Consumer, msg: Message, due_ms: int) -> None:
        topic, partition = where(msg)
        tp = TopicPartition(topic, partition, offset_of(msg))
        consumer.pause([tp])
        consumer.seek(tp)  # the head is read again after the resume
        self._paused[(topic, partition)] = due_ms
        log.info("%s: holding partition %d at offset %d until %d", self.group_instance_id, partition, tp.offset, due_ms)

    def _resume_due(self, consumer: Consumer) -> None:
        if not self._paused:
            return
        now_ms = int(time.time() * 1000)
        due = [tp for tp, at in self._paused.items() if at <= now_ms]
        if due:
            consumer.resume([TopicPartition(t, p) for t, p in due])
            for tp in due:
                del self._paused[tp]

    def _decoded(self, msg: Message) -> _Item:
        try:
            command = decode(msg.value() or b"")
        except CodecError as exc:
            return _Item(msg, bad=f"{exc.reason}: {exc}")
        if not isinstance(command, self.spec.command_type):
            return _Item(msg, bad=f"not-a-command: {command.SCHEMA} is no {self.spec.command_type.__name__}")
        return _Item(msg, command)

    # --------------------------------------------------------------------------- carry out
    def _carry_out(self, items: list[_Item]) -> None:
        """Run the commands concurrently; the commands of one pod (one key) one after another."""
        by_pod: dict[bytes, list[_Item]] = defaultdict(list)
        for item in items:
            if item.command is not None:
                by_pod[item.msg.key() or b""].append(item)
        futures = [self.pool.submit(self._run_in_order, group) for group in by_pod.values()]
        for future in futures:
            future.result()

    def _run_in_order(self, group: list[_Item]) -> None:
        for item in group:
            done = self._done.get(_position(item.msg))
            if done is not None:  # carried out here before its batch aborted: that stands
                item.result, item.recorded = done.result, done.recorded
                continue
            result = self.action.done_already(item.command) if item.suspect else None
            if result is not None:
                metrics.FOUND_DONE.labels(self.spec.work).inc()
            else:
                result = self.action.run(item.command)
            if result.kind == "terminal" or (result.kind == "transient" and self.stage.last):
                self.action.give_up(item.command, result.reason)
            item.result = result

    # ------------------------------------------------------------------------------ commit
    def _commit(self, consumer: Consumer, items: list[_Item]) -> dict[Partition, int]:
        """Carry the batch's consequences out in one transaction; the offsets committed."""
        producer = self._producer
        assert producer is not None
        offsets: dict[tuple[str, int], int] = {}
        for item in items:
            offsets[where(item.msg)] = offset_of(item.msg) + 1
        txn.call(producer.begin_transaction)
        # Offsets first, records after. The offset commit can wait on a rebalance (which this
        # consumer joins only when it polls again): it must not do so while the transaction holds
        # forwarded records, which read_committed tier workers could not read past meanwhile. It
        # gets one short try; a failure aborts and the batch is redone after the rebalance.
        positions = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        group = consumer.consumer_group_metadata()
        txn.call(
            lambda: txn.bounded(
                lambda: producer.send_offsets_to_transaction(positions, group, OFFSETS_TIMEOUT_S),
                OFFSETS_TIMEOUT_S + txn.OFFSETS_GRACE_S,
                "send_offsets_to_transaction",
            ),
            attempts=1,
        )
        counts: list[tuple[Any, ...]] = []
        for item in items:
            counts += self._route(producer, item)
        self._outcomes.flush()  # every outcome is in the cache log before the batch counts as done
        txn.call(lambda: producer.commit_transaction(30.0))
        # counted only once committed: an aborted batch is redone and would count twice
        for counter, *labels in counts:
            counter.labels(*labels).inc()
        self.processed += len(items)
        return offsets

    def _forget_done(self, committed: dict[Partition, int]) -> None:
        """What aborted batches came to, below offsets now committed: never read again here. Kept
        through a rebalance otherwise: a partition that comes back (after a broker loss, most
        often to the same worker) is redone from it."""
        if self._done:
            self._done = {p: d for p, d in self._done.items() if p[2] >= committed.get(p[:2], -1)}

    def _route(self, producer: Producer, item: _Item) -> list[tuple[Any, ...]]:
        """Produce what one command comes to; returns the counters (and labels) to count it by."""
        work = self.spec.work
        if item.bad is not None:
            self._forward(producer, item.msg, self.dead_letter, item.bad, reason="malformed")
            return [(metrics.BAD_COMMANDS, item.msg.topic()), (metrics.DEAD_LETTERS, work, "malformed")]
        result = item.result
        assert result is not None
        if result.kind == "ok":
            self._outcome(item, self.spec.succeeded(item.command))
            return [(metrics.OUTCOMES, work, "succeeded")]
        if result.kind == "transient" and not self.stage.last:
            self._forward(producer, item.msg, self.stage.next_topic, result.reason)
            return [(metrics.RETRIES, work, self.stage.next_topic)]
        cause = "terminal" if result.kind == "terminal" else "exhausted"
        self._forward(producer, item.msg, self.dead_letter, result.reason, reason=cause)
        self._outcome(item, self.spec.failed(item.command, result.reason))
        return [(metrics.DEAD_LETTERS, work, cause), (metrics.OUTCOMES, work, "failed")]

    def _outcome(self, item: _Item, record: LogRecord) -> None:
        # once queued, the idempotent producer delivers it whatever the transaction does (or the
        # publisher raises on its next use): a redo must not write it again
        if not item.recorded:
            self._outcomes.publish(self.cache_log, encode(record), key=record_key(record))
            item.recorded = True

    def _forward(self, producer: Producer, msg: Message, topic: str, error: str, reason: str = "") -> None:
        old = dict(msg.headers() or [])
        source, partition = where(msg)
        attempt = int(old.get(ATTEMPT, b"0") or 0) + 1
        delay = 0
        if topic != self.dead_letter:
            delay = self.settings.retry_delays_s[self._tier_index(topic)]
        headers: Headers = [
            (ATTEMPT, str(attempt).encode()),
            (ORIGINAL_TOPIC, old.get(ORIGINAL_TOPIC) or source.encode()),
            (ORIGINAL_PARTITION, old.get(ORIGINAL_PARTITION) or str(partition).encode()),
            (ORIGINAL_OFFSET, old.get(ORIGINAL_OFFSET) or str(offset_of(msg)).encode()),
            (ERROR, error.encode()[:2000]),
            (DUE_MS, str(int(time.time() * 1000) + delay * 1000).encode()),
        ]
        if reason:
            headers.append((REASON, reason.encode()))
        # the same partition as the source: a pod's commands stay together (the tiers have as many)
        txn.produce(producer, topic, msg.value() or b"", key=msg.key(), partition=partition, headers=headers)

    def _tier_index(self, topic: str) -> int:
        names = TopicNames(self.settings.topic_prefix)
        return [names.retry(self.spec.work, d) for d in self.settings.retry_delays_s].index(topic)

    def _rewind(self, consumer: Consumer, done: list[_Item]) -> None:
        """Back to the committed offsets; the batch just carried out is suspect when read again."""
        for item in done:
            tp = where(item.msg)
            self._suspect_below[tp] = max(self._suspect_below.get(tp, 0), offset_of(item.msg) + 1)
            if item.result is not None:
                self._done[_position(item.msg)] = _Done(item.result, item.recorded)
        self._paused.clear()
        assignment = consumer.assignment()
        if assignment:
            consumer.resume(assignment)
        txn.rewind(consumer, assignment)


def _position(msg: Message) -> Position:
    return (*where(msg), offset_of(msg))


def _end(consumer: Consumer, tp: TopicPartition) -> int | None:
    """The partition's end offset now, or None when the broker does not say in time."""
    try:
        return consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=OFFSETS_TIMEOUT_S)[1]
    except KafkaException:
        return None
