"""Evictions on the real apiserver: the Eviction API under a PodDisruptionBudget, and Volcano's mode."""
# ruff: noqa: F811 - pytest fixtures imported from tests.binder.support are parameters here

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from strata.binder.service import Service
from strata.log.cachelog import CacheLogWriter
from strata.log.topics import TopicNames
from strata.schemas import Evict, EvictFailed, EvictSucceeded
from tests.binder.support import (  # noqa: F401 - fixtures
    Env,
    check,
    env,
    eventually,
    headers,
    ingest,
    quick_watches,
    read_topic,
)

pytestmark = [pytest.mark.kafka, pytest.mark.kube]


def _running_pods(env: Env, names: list[str], node: str) -> dict[str, str]:
    """Pods placed on a node and made Running and Ready (no kubelet here: through their status)."""
    uids = {}
    for name in names:
        uids[name] = env.pod(name, labels={"app": "x"}, nodeName=node)["metadata"]["uid"]
        status = {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            }
        }
        env.api.request("PATCH", f"/api/v1/namespaces/{env.ns}/pods/{name}/status", status)
    eventually(lambda: check(all(env.log.tasks(env.ns).get(n, {}).get("status") == "Running" for n in names)))
    eventually(lambda: check(f"{env.ns}/pg" in env.log.state.podgroups))
    return uids


def _budget(env: Env, allowed: int, healthy: int) -> None:
    """The disruption controller's part: write the PDB's status (nothing else would here)."""
    path = f"/apis/policy/v1/namespaces/{env.ns}/poddisruptionbudgets/pdb"
    if env.api.call("GET", path).status == 404:
        env.api.request(
            "POST",
            f"/apis/policy/v1/namespaces/{env.ns}/poddisruptionbudgets",
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "pdb"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "x"}}},
            },
        )
    generation = env.api.request("GET", path)["metadata"]["generation"]
    status = {
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": healthy - allowed,
        "expectedPods": healthy,
        "observedGeneration": generation,
    }
    env.api.request("PATCH", path + "/status", {"status": status})


def _evicted(env: Env) -> set[str]:
    return {n for n, p in env.pods().items() if p["metadata"].get("deletionTimestamp")}


def _service(env: Env, mode: str) -> Service:
    service = Service(env.settings, "evict", workers=1, instance=f"t-{uuid.uuid4().hex[:6]}", mode=mode, threads=4)
    service.start()
    return service


def _publish(env: Env, uids: dict[str, str]) -> None:
    writer = CacheLogWriter(env.settings)
    for uid in uids.values():
        writer.append(Evict(pod=uid, reason="preempted", replica="r1"))
    writer.flush()


def test_evictions_respect_the_disruption_budget(env: Env, ingest):
    node = env.node("n1")
    uids = _running_pods(env, ["e1", "e2", "e3"], node)
    _budget(env, allowed=1, healthy=3)
    names = TopicNames(env.settings.topic_prefix)
    service = _service(env, "eviction")
    try:
        _publish(env, uids)
        eventually(lambda: check(len(_evicted(env)) == 1))
        # the two others were refused (429) and wait in the first retry tier
        eventually(lambda: check(len(read_topic(env.settings, names.retry("evict", 2))) == 2))
        assert len(_evicted(env)) == 1 and len(env.log.records(EvictSucceeded)) == 1
        hop: Any = read_topic(env.settings, names.retry("evict", 2))[0]
        assert headers(hop)["strata.attempt"] == "1" and "429" in headers(hop)["strata.error"]
        time.sleep(1.0)
        assert len(_evicted(env)) == 1  # the budget holds
        _budget(env, allowed=1, healthy=2)  # room for one more
        eventually(lambda: check(len(env.log.records(EvictSucceeded, EvictFailed)) == 3), timeout_s=30)
    finally:
        service.close()
    assert not service.errors
    assert len(_evicted(env)) == 2
    outcomes = env.log.records(EvictSucceeded, EvictFailed)
    assert sorted(type(r).__name__ for r in outcomes) == ["EvictFailed", "EvictSucceeded", "EvictSucceeded"]
    failed = next(r for r in outcomes if isinstance(r, EvictFailed))
    assert "429" in (failed.reason or "")
    # the refused pod's task is back from Releasing to what its pod says
    left = next(n for n, u in uids.items() if u == failed.pod)
    assert env.log.tasks(env.ns)[left]["status"] == "Running"
    dead = read_topic(env.settings, names.dead_letter("evict"))
    assert len(dead) == 1 and headers(dead[0])["strata.reason"] == "exhausted"


def test_volcano_mode_deletes_past_the_budget(env: Env, ingest):
    node = env.node("n1")
    uids = _running_pods(env, ["v1"], node)
    _budget(env, allowed=0, healthy=1)  # the Eviction API would refuse
    service = _service(env, "volcano")
    try:
        _publish(env, uids)
        eventually(lambda: check(env.log.records(EvictSucceeded)))
    finally:
        service.close()
    assert not service.errors
    pod = env.get_pod("v1")
    assert pod is None or pod["metadata"].get("deletionTimestamp")
    if pod is not None:
        ready = {c["type"]: c for c in pod["status"]["conditions"]}["Ready"]
        assert ready["status"] == "False" and ready["reason"] == "Evict"
    assert [type(r).__name__ for r in env.log.records(EvictSucceeded, EvictFailed)] == ["EvictSucceeded"]
