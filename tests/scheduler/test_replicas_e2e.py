"""Three scheduler replicas on one cache log, against the real kube-apiserver and broker: the
issue's acceptance test. 500 pending pods of 60 gangs; `strata ingest` watches the cluster,
`strata bind` carries out the binds, three `strata schedule` replicas race for the same nodes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from strata.kubeapi import KubeApi
from strata.log.cachelog import CacheLogReader
from strata.log.config import Settings
from strata.projector.fold.kinds import FoldConfig, node_allocatable
from strata.projector.fold.state import CacheState
from strata.schemas import Bind, BindFailed, BindGroup, BindSucceeded
from tests.cli.test_cli import STRATA
from tests.cli.test_log import env_of

pytestmark = [pytest.mark.kafka, pytest.mark.kube]
VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"
NODES, JOBS, PODS = 20, 60, 500


@pytest.fixture
def cluster(kubeconfig: str, kafka: Settings) -> Iterator[tuple[Settings, KubeApi, str]]:
    api = KubeApi(kubeconfig)
    ns = f"t-{uuid.uuid4().hex[:8]}"
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    yield kafka.with_(kubeconfig=kubeconfig), api, ns
    for i in range(NODES):
        api.request("DELETE", f"/api/v1/nodes/{ns}-n{i}")
    api.request("DELETE", f"{VOLCANO}/queues/{ns}")
    api.request("DELETE", f"/api/v1/namespaces/{ns}/pods", gracePeriodSeconds=0)
    api.request("DELETE", f"/api/v1/namespaces/{ns}")


def _create_cluster(api: KubeApi, ns: str) -> None:
    res = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    for i in range(NODES):
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{ns}-n{i}"}, "status": {"capacity": res}}
        created = api.request("POST", "/api/v1/nodes", node)
        created["status"] = {"capacity": res, "allocatable": res, "conditions": [{"type": "Ready", "status": "True"}]}
        api.request("PUT", f"/api/v1/nodes/{ns}-n{i}/status", created)
    api.request(
        "POST",
        f"{VOLCANO}/queues",
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": ns}, "spec": {}},
    )
    sizes = [9] * 20 + [8] * 40  # 60 gangs, 500 pods
    assert len(sizes) == JOBS and sum(sizes) == PODS
    pods = []
    for j, size in enumerate(sizes):
        pg = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": f"j{j}", "namespace": ns},
            "spec": {"minMember": size, "queue": ns},
        }
        api.request("POST", f"{VOLCANO}/namespaces/{ns}/podgroups", pg)
        pods += [_pod(ns, f"j{j}-p{i}", f"j{j}") for i in range(size)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda p: api.request("POST", f"/api/v1/namespaces/{ns}/pods", p), pods))


def _pod(ns: str, name: str, job: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": {"scheduling.k8s.io/group-name": job}},
        "spec": {
            "schedulerName": ns,  # only this test's pods are the cache's
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "250m"}}}],
        },
    }


def _start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([STRATA, *args], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return err


def test_three_replicas_bind_500_pods_exactly_once(cluster: tuple[Settings, KubeApi, str], tmp_path: Any):
    settings, api, ns = cluster
    _create_cluster(api, ns)
    env = {
        **os.environ,
        **env_of(settings),
        "KUBECONFIG": settings.kubeconfig or "",
        "STRATA_DB_URL": f"sqlite:///{tmp_path / 'c.db'}",
    }
    fold = ["--scheduler-name", ns]
    ingest = _start(env, "ingest")
    binder = _start(env, "bind", *fold)
    try:
        assert ingest.stderr is not None and ingest.stderr.readline().startswith("synced:")
        replicas = [
            _start(env, "schedule", "--replica", f"r{i}", "--exit-when-idle", "25", "--idle-wait", "0.2", *fold)
            for i in range(3)
        ]
        for r in replicas:
            _, err = r.communicate(timeout=300)
            assert r.returncode == 0, err
        deadline = time.monotonic() + 120
        while True:
            pods = api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
            unbound = [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")]
            if not unbound or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert unbound == []
        time.sleep(2)  # let the binds' watch events reach the log
    finally:
        _stop(binder)
        _stop(ingest)

    # the log, record by record
    state = CacheState(FoldConfig(scheduler_names=(ns,)))
    admitted: Counter[str] = Counter()
    rejected: list[str] = []
    succeeded: Counter[str] = Counter()
    by_replica: Counter[str] = Counter()
    placed: dict[str, str] = {}
    for entry in CacheLogReader(settings).read():
        outcome = state.apply(entry.record)
        record = entry.record
        binds = [(record.pod, record.node)] if isinstance(record, Bind) else []
        if isinstance(record, BindGroup):
            binds = [(b.pod, b.node) for b in record.binds]
        if binds and outcome.result == "applied":
            for pod, node in binds:
                admitted[pod] += 1
                placed[pod] = node
                by_replica[getattr(record, "replica", None) or ""] += 1
        elif binds:
            rejected.append(outcome.reason)
        elif isinstance(record, BindSucceeded):
            succeeded[record.pod] += 1
        assert not isinstance(record, BindFailed), record
        for name in set(placed.values()):  # the nodes the replicas bind onto
            used = state.node_used.get(name) or {}
            allocatable = node_allocatable(state.nodes[name], None)
            assert all(v <= allocatable.get(k, 0) for k, v in used.items()), (entry.offset, name, used)
    uids = {p["metadata"]["uid"] for p in pods}
    assert set(admitted) == uids and set(admitted.values()) == {1}, "every pod admitted exactly once"
    assert set(succeeded) == uids and set(succeeded.values()) == {1}, "every pod bound exactly once"
    # whole gangs go as one BIND_GROUP each: replicas may or may not collide in a given run
    tasks = [t for t in state.tasks.values() if t.namespace == ns]
    assert len(tasks) == PODS and {t.status for t in tasks} == {"Bound"}
    assert {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in pods} == placed, "bound where admitted"
    print(f"admitted by replica: {dict(by_replica)}; rejected: {Counter(rejected).most_common()}")
