"""Watch adapters against the real kube-apiserver, into the real broker, folded by the projector."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from strata.ingest import watch
from strata.kubeapi import KubeApi
from strata.log.cachelog import CacheLogReader
from strata.log.config import Settings
from strata.projector.fold.state import CacheState
from strata.schemas import Synced, WatchEvent

pytestmark = [pytest.mark.kafka, pytest.mark.kube]


@pytest.fixture
def cluster(kubeconfig: str, kafka: Settings) -> Iterator[tuple[Settings, KubeApi, str]]:
    """Settings that point at the control plane, its API, and a fresh namespace."""
    api = KubeApi(kubeconfig)
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    api.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    yield kafka.with_(kubeconfig=kubeconfig), api, namespace


@pytest.fixture(autouse=True)
def quick_watches(monkeypatch: pytest.MonkeyPatch) -> None:
    # the server ends each watch after a few seconds, so a stopped adapter returns promptly
    monkeypatch.setattr(watch, "WATCH_SECONDS", 3)
    monkeypatch.setattr(watch, "READ_TIMEOUT", 10.0)


def _node(name: str, cpu: str = "8") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"rack": "r1"}},
        "status": {
            "capacity": {"cpu": cpu, "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(namespace: str, name: str, group: str | None, scheduler: str = "volcano", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if group:
        meta["annotations"] = {"scheduling.k8s.io/group-name": group}
    container = {
        "name": "c",
        "image": "busybox",
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
        "env": [{"name": "TOKEN", "value": "s3cr3t-env"}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"schedulerName": scheduler, "containers": [container], **spec},
    }


def _fold(settings: Settings) -> dict[str, Any]:
    state = CacheState()
    for entry in CacheLogReader(settings).read():
        state.apply(entry.record)
    return state.snapshot().to_json()


def _eventually(check: Any, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_the_log_follows_the_cluster(cluster: tuple[Settings, KubeApi, str]):
    settings, api, ns = cluster
    nodes = [f"{ns}-n1", f"{ns}-n2"]
    for name in nodes:
        api.request("POST", "/api/v1/nodes", _node(name))
    api.request(
        "POST",
        "/apis/scheduling.volcano.sh/v1beta1/queues",
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": ns},
            "spec": {"weight": 2},
        },
    )
    api.request(
        "POST",
        f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups",
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": ns},
            "spec": {"minMember": 2, "queue": ns},
        },
    )
    api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, "a", "pg"))
    api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, "other", None, scheduler="default-scheduler"))
    api.request(
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": ns}, "value": 7},
    )
    api.request(
        "POST",
        "/apis/storage.k8s.io/v1/csinodes",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {"name": nodes[0]},
            "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25}}]},
        },
    )
    api.request(
        "POST",
        "/apis/topology.volcano.sh/v1alpha1/hypernodes",
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": ns},
            "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": ns}}}]},
        },
    )

    ingest = watch.Ingest(settings)
    ingest.start()
    try:
        _eventually(lambda: _assert(ingest.synced() and not ingest.errors, ingest.errors))
        # changes after the initial list arrive through the watch
        api.request(
            "POST",
            f"/api/v1/namespaces/{ns}/pods",
            _pod(
                ns,
                "b",
                "pg",
                initContainers=[{"name": "i", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}],
            ),
        )
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "a", "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[0]},
        }
        api.request("POST", f"/api/v1/namespaces/{ns}/pods/a/binding", binding)
        api.request("DELETE", f"/api/v1/nodes/{nodes[1]}")
        # the RuntimeClass admission plugin copies the class's overhead into the pod
        runtime_class = {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": ns},
            "handler": "runc",
            "overhead": {"podFixed": {"cpu": "250m"}},
        }
        api.request("POST", "/apis/node.k8s.io/v1/runtimeclasses", runtime_class)
        api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, "heavy", "pg", runtimeClassName=ns))
        api.request("PATCH", f"/apis/scheduling.volcano.sh/v1beta1/queues/{ns}", {"spec": {"weight": 5}})

        def settled() -> dict[str, Any]:
            snap = _fold(settings)
            job = snap["jobs"].get(f"{ns}/pg")
            assert job is not None and set(t["name"] for t in job["tasks"].values()) == {"a", "b", "heavy"}
            assert snap["queues"][ns]["weight"] == 5
            assert nodes[1] not in snap["nodes"] and nodes[0] in snap["nodes"]
            assert snap["nodes"][nodes[0]]["used"] == {"cpu": 500, "memory": 2**30, "pods": 1}
            return snap

        snap = _eventually(settled)
    finally:
        ingest.close()
    assert not ingest.errors
    job = snap["jobs"][f"{ns}/pg"]
    tasks = {t["name"]: t for t in job["tasks"].values()}
    assert tasks["a"]["status"] == "Bound" and tasks["a"]["node"] == nodes[0]
    assert tasks["b"]["resreq"] == {"cpu": 2000, "memory": 2**30, "pods": 1}  # the init container's cpu wins
    assert tasks["heavy"]["resreq"] == {"cpu": 750, "memory": 2**30, "pods": 1}  # overhead added
    assert snap["nodes"][nodes[0]]["allocatable"] == {
        "cpu": 8000,
        "memory": 32 * 2**30,
        "pods": 110,
        "attachable-volumes-csi-ebs.csi.aws.com": 25,
    }
    assert snap["csiNodes"][nodes[0]] == {"ebs.csi.aws.com": True}
    assert snap["hyperNodes"][ns]["nodes"] == [nodes[0]]
    # and the log agrees with a fresh LIST of the whole cluster, kind for kind
    from strata.recovery.verify import cluster_snapshot, differences

    assert differences(snap, cluster_snapshot(api, CacheState().config)) == []
    records = [e.record for e in CacheLogReader(settings).read()]
    assert {r.kind for r in records if isinstance(r, Synced)} == set(watch.RESOURCES)
    for r in records:
        if isinstance(r, WatchEvent):
            assert b"s3cr3t-env" not in r.object and b"managedFields" not in r.object


def test_a_restarted_adapter_publishes_only_what_changed(cluster: tuple[Settings, KubeApi, str]):
    settings, api, ns = cluster
    api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, "keep", "pg"))
    api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, "gone", "pg"))
    api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, "changed", "pg"))

    def run_until_synced() -> list[WatchEvent]:
        before = CacheLogReader(settings).end_offset()
        ingest = watch.Ingest(settings, kinds=["Pod"])
        ingest.start()
        try:
            _eventually(lambda: _assert(ingest.synced(), ingest.errors))
        finally:
            ingest.close()
        assert not ingest.errors
        return [
            e.record
            for e in CacheLogReader(settings).read(start=before)
            if isinstance(e.record, WatchEvent) and e.record.namespace == ns
        ]

    first = run_until_synced()
    assert sorted(e.name for e in first) == ["changed", "gone", "keep"]
    # while no adapter runs: a deletion and an update
    api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/gone")
    api.request("PATCH", f"/api/v1/namespaces/{ns}/pods/changed", {"metadata": {"labels": {"x": "y"}}})
    second = run_until_synced()
    assert sorted((e.op, e.name) for e in second) == [("DELETED", "gone"), ("MODIFIED", "changed")]
    assert run_until_synced() == []  # nothing changed: nothing republished


def _assert(condition: bool, detail: Any = None) -> bool:
    assert condition, detail
    return True


def test_strata_ingest_watches_until_sigterm(cluster: tuple[Settings, KubeApi, str]):
    import os
    import signal
    import subprocess

    from tests.cli.test_cli import STRATA
    from tests.cli.test_log import env_of

    settings, api, ns = cluster
    api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, "p", "pg"))
    env = {**os.environ, **env_of(settings), "KUBECONFIG": settings.kubeconfig or ""}
    proc = subprocess.Popen([STRATA, "ingest", "--kinds", "Pod,Node"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith("synced: Pod, Node")
        _eventually(
            lambda: _assert(
                any(isinstance(e.record, WatchEvent) and e.record.name == "p" for e in CacheLogReader(settings).read())
            )
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "stopped; published" in err


def test_verify_against_the_cluster(cluster: tuple[Settings, KubeApi, str], tmp_path: Any):
    from strata.log.cachelog import CacheLogWriter
    from strata.schemas import Bind
    from tests.cli.test_cli import run
    from tests.cli.test_log import env_of

    settings, api, ns = cluster
    node = f"{ns}-n"
    api.request("POST", "/api/v1/nodes", _node(node))
    created = api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, "p", "pg"))
    ingest = watch.Ingest(settings)
    ingest.start()
    try:
        _eventually(lambda: _assert(ingest.synced(), ingest.errors))
    finally:
        ingest.close()
    env = {**env_of(settings), "KUBECONFIG": settings.kubeconfig or "", "STRATA_DB_URL": f"sqlite:///{tmp_path}/c.db"}
    agree = run("verify", "--against-cluster", env=env)
    assert agree.returncode == 0, agree.stdout + agree.stderr
    assert "0 difference(s)" in agree.stderr
    # a BIND the cluster has not seen yet: the log says Binding, the cluster says Pending
    writer = CacheLogWriter(settings)
    writer.append(Bind(created["metadata"]["uid"], node, "r1"))
    writer.flush()
    differ = run("verify", "--against-cluster", env=env)
    assert differ.returncode == 1
    uid = created["metadata"]["uid"]
    assert f"nodes.{node}.tasks: log ['{uid}'], cluster []" in differ.stdout.splitlines()


def test_a_watch_gap_is_bridged_by_a_relist(cluster: tuple[Settings, KubeApi, str]):
    """410 Gone (here: resuming a watch from before an API server restart, older than its new
    watch cache) makes the adapter list again, and the relist publishes exactly what changed in
    between, deletions included."""
    import threading
    from pathlib import Path

    from strata.dev.stack import Stack
    from strata.kubeapi import RESOURCES, Gone
    from strata.log.cachelog import CacheLogWriter

    settings, api, ns = cluster
    api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, "stays", "pg"))
    api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, "goes", "pg"))
    stop = threading.Event()
    adapter = watch.KindAdapter(RESOURCES["Pod"], api, CacheLogWriter(settings), {}, stop)
    listed_at = adapter.relist()
    before = CacheLogReader(settings).end_offset()
    api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/goes")
    api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, "new", "pg"))
    stack = Stack(Path(settings.kubeconfig or "").parent.parent)
    stack.apiserver.down()
    stack.up_kube()
    guard = threading.Timer(30, stop.set)  # a server that does answer 410 must not hang the test
    guard.start()
    try:
        with pytest.raises(Gone):
            adapter.watch(listed_at)
    finally:
        guard.cancel()
    adapter.relist()
    adapter.writer.flush()
    after = [e.record for e in CacheLogReader(settings).read(start=before)]
    events = sorted((r.op, r.name) for r in after if isinstance(r, WatchEvent) and r.namespace == ns)
    assert events == [("ADDED", "new"), ("DELETED", "goes")]
    assert any(isinstance(r, Synced) for r in after)


def test_an_apiserver_restart_is_survived(cluster: tuple[Settings, KubeApi, str]):
    from pathlib import Path

    from strata.dev.stack import Stack

    settings, api, ns = cluster
    stack = Stack(Path(settings.kubeconfig or "").parent.parent)  # <data dir>/kube/kubeconfig
    api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, "before", "pg"))
    ingest = watch.Ingest(settings, kinds=["Pod"])
    ingest.start()
    try:
        _eventually(lambda: _assert(ingest.synced(), ingest.errors))
        stack.apiserver.down()
        stack.up_kube()
        api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, "after", "pg"))
        api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/before")

        def caught_up() -> None:
            pods = {
                e.record.name: e.record.op
                for e in CacheLogReader(settings).read()
                if isinstance(e.record, WatchEvent) and e.record.namespace == ns
            }
            assert pods == {"before": "DELETED", "after": "ADDED"}, (pods, ingest.errors)

        _eventually(caught_up, timeout_s=60)
    finally:
        ingest.close()
    assert not ingest.errors
