"""Command workers through a rebalance and an aborted batch, on the real broker and the real
kube-apiserver (the faults retry-repause and binder-broker-loss found both).

A retry tier: a worker that holds back both partitions of its tier (their heads are not due) meets
a second worker joining. librdkafka keeps a partition paused across an eager rebalance (revoked,
then assigned again to the same consumer) while the worker forgets its pauses on revoke: before
the fix nothing ever resumed the partition the first worker kept, and its commands waited for the
next restart. What must hold: each worker holds what it is assigned until due, and then carries
it out; no command before its delay, none lost, none twice (counted at the API server's audit log).

An aborted batch: a worker's producer is fenced while its batch's Bindings fail (500, a webhook
that is not there). The batch is redone by the same worker; before the fix the redo read each pod,
found it unbound and called the API again (a second refused or failed call: a command done twice).
Now it reuses what each command came to: one call per pod, one forward each to the retry tier."""
# ruff: noqa: F811 - pytest fixtures imported from tests.binder.support are parameters here

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from strata.binder import txn
from strata.binder.actions import Result
from strata.binder.bind import BindAction
from strata.binder.service import BIND
from strata.binder.worker import CommandWorker, stages
from strata.dev.faults.common import api_writes
from strata.dev.faults.workload import Namespace, read_topic
from strata.log.config import Settings
from strata.log.topics import TopicNames, ensure_topics
from strata.schemas import BindCommand, encode
from tests.binder.support import Env, check, env, eventually, quick_watches  # noqa: F401 - fixtures

pytestmark = [pytest.mark.kafka, pytest.mark.kube]
DELAY = 6  # long enough for the second worker to join while the heads are held
PODS = 12


class TimedBind(BindAction):
    """The real bind action, noting when each command was carried out (the API call itself)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ran: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def run(self, command: Any) -> Result:
        with self._lock:
            self.ran.setdefault(command.name, []).append(time.time())
        return super().run(command)


@contextmanager
def worker(
    settings: Settings, action: TimedBind, instance: str, stage: int = 1, raised: list[BaseException] | None = None
) -> Iterator[CommandWorker]:
    """A worker running on a thread of its own; what its run raised goes to ``raised``."""
    stop = threading.Event()
    part = CommandWorker(settings, BIND, stages(settings, BIND)[stage], action, POOL, instance, stop, None, 100)

    def run() -> None:
        try:
            part.run()
        except BaseException as exc:
            (raised if raised is not None else []).append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield part
    finally:
        stop.set()
        thread.join(30)


POOL = ThreadPoolExecutor(8, thread_name_prefix="rebalance-call")


def _forwarded(env: Env, settings: Settings, node: str, tier: str, pods: int = PODS) -> dict[str, float]:
    """One command per pod in the topic (in a tier: as a failed first attempt forwards it): pod ->
    when it is due."""
    producer = Producer(settings.client_config())
    sent = {}
    for i in range(pods):
        pod = env.pod(f"p{i:02d}")
        command = BindCommand(
            command_id=f"bind@{i}",
            log_offset=i,
            pod_uid=pod["metadata"]["uid"],
            namespace=env.ns,
            name=f"p{i:02d}",
            node=node,
            replica="test",
        )
        # before the record is stamped: never later than the tier's own due time
        sent[f"p{i:02d}"] = time.time() + DELAY
        producer.produce(tier, encode(command), key=pod["metadata"]["uid"].encode(), partition=i % 2)
    assert producer.flush(10) == 0
    return sent


def test_a_partition_kept_through_a_rebalance_is_held_again_and_carried_out(env: Env):
    settings = env.settings.with_(retry_delays_s=(DELAY,))
    ensure_topics(settings)
    node = env.node("n1")
    action = TimedBind(env.api)
    due = _forwarded(env, settings, node, stages(settings, BIND)[1].topic)
    with worker(settings, action, "a") as first:
        eventually(lambda: check(len(first._paused) == 2, first._paused), timeout_s=DELAY - 1, every_s=0.05)
        with worker(settings, action, "b") as second:
            # the second one is assigned a partition the first held: it must hold it too
            eventually(lambda: check(len(second._paused) == 1, second._paused), timeout_s=DELAY, every_s=0.05)
            bound = lambda: {n for n, p in env.pods().items() if p["spec"].get("nodeName") == node}  # noqa: E731
            eventually(lambda: check(len(bound()) == PODS, sorted(set(due) - bound())), timeout_s=DELAY + 20)
    early = {name: round(times[0] - due[name], 3) for name, times in action.ran.items() if times[0] < due[name]}
    assert early == {}, "carried out before the tier's delay"
    assert {name: len(times) for name, times in action.ran.items()} == dict.fromkeys(due, 1)
    writes = eventually(lambda: check_writes(settings, env.ns, set(due)))
    assert writes == {("binding", name): (201,) for name in due}, "one Binding per pod at the API server"


class FencingBind(TimedBind):
    """The real bind action; its first command fences the worker's transactional producer (a new
    producer of the same transactional.id), so the batch being carried out cannot commit."""

    def __init__(self, api: Any, settings: Settings) -> None:
        super().__init__(api)
        self.settings = settings
        self.fence = ""  # the transactional.id to fence, once

    def run(self, command: Any) -> Result:
        with self._lock:
            fence, self.fence = self.fence, ""
        if fence:
            txn.transactional_producer(self.settings, fence)
        return super().run(command)


def test_an_aborted_batch_is_redone_from_what_it_came_to(env: Env, caplog: pytest.LogCaptureFixture):
    settings = env.settings.with_(retry_delays_s=(60,))  # the retry stays in its tier meanwhile
    ensure_topics(settings)
    tier = TopicNames(settings.topic_prefix).retry("bind", 60)
    ns = Namespace(env.api, env.ns, nodes=1)
    ns.fail_bindings()
    try:
        action = FencingBind(env.api, settings)
        with worker(settings, action, "fenced", stage=0) as part:
            action.fence = part.transactional_id
            pods = _forwarded(env, settings, ns.node(0), stages(settings, BIND)[0].topic, pods=6)
            eventually(lambda: check(len(read_topic(settings, tier, timeout_s=5)) >= len(pods)), timeout_s=30)
    finally:
        ns.allow_bindings()
    aborted = [
        r.getMessage() for r in caplog.records if "making a new one" in r.getMessage() or "aborted" in r.getMessage()
    ]
    assert aborted, "the batch was not aborted"
    assert {name: len(times) for name, times in action.ran.items()} == dict.fromkeys(pods, 1)
    assert len(read_topic(settings, tier, timeout_s=5)) == len(pods), "one forward per command"
    writes = eventually(lambda: check_writes(settings, env.ns, set(pods)))
    assert writes == {("binding", name): (500,) for name in pods}, "one (failed) Binding call per pod"


def check_writes(settings: Settings, ns: str, pods: set[str]) -> dict[tuple[str, str], tuple[int, ...]]:
    """The audited writes for these pods, once there is one for each (events come as requests end)."""
    writes = {key: codes for key, codes in api_writes(settings, ns).items() if key[1] in pods}
    assert {name for _, name in writes} == pods, writes
    return writes


def test_a_fenced_static_member_stops_instead_of_idling(env: Env):
    """A consumer fenced as a static member (another process of the same --instance; librdkafka's
    own rejoin after a broker loss does it too) is unusable for good: the worker must stop, so the
    process exits and is started again, rather than hold its partitions and do nothing."""
    action = TimedBind(env.api)
    raised: list[BaseException] = []
    with worker(env.settings, action, "same", stage=0, raised=raised) as first:
        eventually(lambda: check(first._inherited), timeout_s=20)  # assigned
        with worker(env.settings, action, "same", stage=0):  # the same group.instance.id
            eventually(lambda: check(raised, "the fenced worker is still running"), timeout_s=20)
    assert isinstance(raised[0], KafkaException) and raised[0].args[0].code() == KafkaError._FATAL, raised
