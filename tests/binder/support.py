"""Shared helpers of the binder tests (no tests here): a deployment with short retry tiers, a
namespace on the real kube-apiserver, the real watch adapters, and readers of topics."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from strata.ingest import watch
from strata.kubeapi import KubeApi
from strata.log.cachelog import CacheLogReader, LogEntry
from strata.log.config import Settings
from strata.log.topics import drop_topics, ensure_topics
from strata.projector.fold.state import CacheState
from strata.schemas import Bind, Evict, decode

DELAYS = (2, 4)  # retry tiers short enough for tests, long enough to act between attempts
# Not TEST_PREFIX: another test session on the same broker deletes every topic under it when it
# ends, which would pull the topics from under a running binder test. Each test drops its own.
PREFIX = "tbind-"


@dataclass
class Env:
    settings: Settings
    api: KubeApi
    ns: str

    @cached_property
    def log(self) -> LogView:
        return LogView(self.settings)

    def node(self, suffix: str, cpu: str = "32") -> str:
        name = f"{self.ns}-{suffix}"
        self.api.request(
            "POST",
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name},
                "status": {
                    "capacity": {"cpu": cpu, "memory": "256Gi", "pods": "1000"},
                    "allocatable": {"cpu": cpu, "memory": "256Gi", "pods": "1000"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )
        return name

    def pod(self, name: str, group: str = "pg", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
        body = pod_body(self.ns, name, group, labels, **spec)
        return self.api.request("POST", f"/api/v1/namespaces/{self.ns}/pods", body)

    def get_pod(self, name: str) -> dict[str, Any] | None:
        answer = self.api.call("GET", f"/api/v1/namespaces/{self.ns}/pods/{name}")
        return answer.body if answer.status == 200 else None

    def pods(self) -> dict[str, dict[str, Any]]:
        items = self.api.request("GET", f"/api/v1/namespaces/{self.ns}/pods")["items"]
        return {p["metadata"]["name"]: p for p in items}


def pod_body(ns: str, name: str, group: str = "pg", labels: dict[str, str] | None = None, **spec: Any) -> dict:
    container = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
    meta: dict[str, Any] = {"name": name, "namespace": ns, "annotations": {"scheduling.k8s.io/group-name": group}}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"schedulerName": "volcano", "containers": [container], **spec},
    }


@pytest.fixture(autouse=True)
def quick_watches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "WATCH_SECONDS", 30)
    monkeypatch.setattr(watch, "READ_TIMEOUT", 10.0)


@pytest.fixture
def env(broker: Settings, kubeconfig: str) -> Iterator[Env]:
    """Topics of a fresh prefix with retry tiers of DELAYS, and a fresh namespace (both deleted after)."""
    settings = broker.with_(
        topic_prefix=f"{PREFIX}{uuid.uuid4().hex[:12]}.",
        command_partitions=2,
        retry_delays_s=DELAYS,
        kubeconfig=kubeconfig,
    )
    ensure_topics(settings)
    api = KubeApi(kubeconfig)
    ns = f"b-{uuid.uuid4().hex[:8]}"
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    api.request(  # the pods' job: an EVICT is applied only to a task whose PodGroup is stored
        "POST",
        f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups",
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": ns},
            "spec": {"minMember": 1},
        },
    )
    env_ = Env(settings, api, ns)
    try:
        yield env_
    finally:
        # no namespace controller runs here: delete the pods themselves
        api.call("DELETE", f"/api/v1/namespaces/{ns}/pods", gracePeriodSeconds=0)
        api.call("DELETE", f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups/pg")
        api.call("DELETE", f"/api/v1/namespaces/{ns}")
        for node in api.request("GET", "/api/v1/nodes")["items"]:
            if node["metadata"]["name"].startswith(f"{ns}-"):
                api.call("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")
        if "log" in vars(env_):
            env_.log.close()
        drop_topics(settings)


@pytest.fixture
def ingest(env: Env) -> Iterator[watch.Ingest]:
    """The real watch adapters (Pod, Node, PodGroup) publishing into the test's cache log."""
    adapters = watch.Ingest(env.settings, kinds=["Pod", "Node", "PodGroup"])
    adapters.start()
    eventually(lambda: check(adapters.synced() and not adapters.errors, adapters.errors))
    yield adapters
    adapters.close()
    assert not adapters.errors


def eventually(probe: Callable[[], Any], timeout_s: float = 30.0, every_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return probe()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(every_s)


def check(condition: Any, detail: Any = None) -> bool:
    assert condition, detail
    return True


class LogView:
    """The cache log read_committed and folded, kept up to date incrementally (the log of a shared
    control plane can hold tens of thousands of records: reading it whole per probe is slow).

    Not ``CacheLogReader.read()``: it reads up to the high watermark and waits for an offset that
    never comes when the log ends with a transaction marker (which takes an offset but is never
    delivered), as it does after every transactional write of a binder."""

    def __init__(self, settings: Settings) -> None:
        self.reader = CacheLogReader(settings)
        self.consumer = self.reader._consumer()
        self.consumer.assign([TopicPartition(self.reader.topic, 0, OFFSET_BEGINNING)])
        self.entries: list[LogEntry] = []
        self.state = CacheState()
        self.admitted: list[LogEntry] = []  # BINDs and EVICTs the fold admitted, in order

    def refresh(self) -> LogView:
        while True:
            # the end-of-partition event comes once per arrival at the end: afterwards, a moment
            # of silence is the end
            batch = self.consumer.consume(1000, timeout=0.3)
            at_end = not batch
            for msg in batch:
                err = msg.error()
                if err is not None:
                    at_end = at_end or err.code() == KafkaError._PARTITION_EOF
                    continue
                entry = self.reader.entry(msg)
                self.entries.append(entry)
                if self.state.apply(entry.record).result == "applied" and isinstance(entry.record, (Bind, Evict)):
                    self.admitted.append(entry)
            if at_end:
                return self

    def records(self, *types: type) -> list[Any]:
        self.refresh()
        return [e.record for e in self.entries if isinstance(e.record, types)]

    def tasks(self, ns: str) -> dict[str, dict[str, Any]]:
        self.refresh()
        return tasks_by_name(self.state, ns)

    def close(self) -> None:
        self.consumer.close()


def tasks_by_name(state: CacheState, ns: str) -> dict[str, dict[str, Any]]:
    """The fold's tasks of one namespace by pod name: status and node."""
    return {t.name: {"status": t.status, "node": t.node} for t in state.tasks.values() if t.namespace == ns}


def read_topic(settings: Settings, topic: str, timeout_s: float = 10.0) -> list[Any]:
    """Every committed message of a topic (all partitions), read to its end now."""
    consumer = Consumer(
        settings.client_config(
            **{
                "group.id": f"{settings.topic_prefix}test-reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
    )
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        parts = [TopicPartition(topic, p, 0) for p in meta.partitions]
        ends = {}
        for tp in parts:
            ends[tp.partition] = consumer.get_watermark_offsets(tp, timeout=timeout_s)[1]
        consumer.assign(parts)
        out: list[Any] = []
        open_parts = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout_s
        while open_parts and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        open_parts.discard(msg.partition())
                    continue
                out.append(msg)
                if msg.offset() + 1 >= ends[msg.partition()]:
                    open_parts.discard(msg.partition())
        return out
    finally:
        consumer.close()


def decoded(messages: list[Any]) -> list[Any]:
    return [decode(m.value()) for m in messages]


def headers(msg: Any) -> dict[str, str]:
    return {k: v.decode() for k, v in (msg.headers() or [])}
