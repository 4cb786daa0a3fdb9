"""The local Kubernetes control plane: a real kube-apiserver on a real etcd, with Strata's CRDs,
through the official Python client. No controller, scheduler or kubelet runs: Nodes are plain API
objects with a status (as in Kubernetes' scheduler_perf), Pods are bound through the Binding
subresource and stay Pending."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.cli.test_cli import run

pytestmark = pytest.mark.kube

VOLCANO = "scheduling.volcano.sh"
TOPOLOGY = "topology.volcano.sh"
CAPACITY = {"cpu": "4", "memory": "32Gi", "pods": "110"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def api(kubeconfig: str) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=kubeconfig)
    yield api_client
    api_client.close()


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def namespace(core: client.CoreV1Api, custom: client.CustomObjectsApi) -> Iterator[str]:
    """A fresh namespace, emptied and removed afterwards."""
    name = unique("strata-test")
    core.create_namespace({"metadata": {"name": name}})
    yield name
    for pod in core.list_namespaced_pod(name).items:
        # bound pods wait for a kubelet to confirm a graceful delete; there is none
        core.delete_namespaced_pod(pod.metadata.name, name, grace_period_seconds=0)
    for pg in custom.list_namespaced_custom_object(VOLCANO, "v1beta1", name, "podgroups")["items"]:
        custom.delete_namespaced_custom_object(VOLCANO, "v1beta1", name, "podgroups", pg["metadata"]["name"])
    core.delete_namespace(name)
    # No namespace controller runs to remove the "kubernetes" finalizer; without this the
    # namespace would stay Terminating. (Where a controller does run, it may have won already.)
    try:
        ns = core.read_namespace(name)
        ns.spec.finalizers = []
        core.replace_namespace_finalize(name, ns)
    except ApiException as e:
        if e.status not in (404, 409):
            raise


@pytest.fixture
def node(core: client.CoreV1Api) -> Iterator[str]:
    """A Node object with capacity, allocatable and a Ready condition, the way a kubelet registers one."""
    name = unique("strata-test-node")
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "strata.test/fake": "true"}},
            "status": {
                "capacity": CAPACITY,
                "allocatable": CAPACITY,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake"}],
                "phase": "Running",
            },
        }
    )
    yield name
    core.delete_node(name)


def pod_body(name: str, node_name: str | None = None) -> dict:
    spec: dict = {
        "schedulerName": "volcano",
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
            }
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "strata-test"}},
        "spec": spec,
    }


def test_the_server_is_the_pinned_version_and_the_crds_are_served(api: client.ApiClient):
    version = client.VersionApi(api).get_code()
    assert version.git_version.startswith("v1.")
    groups = {g.name: [v.version for v in g.versions] for g in client.ApisApi(api).get_api_versions().groups}
    assert "v1beta1" in groups[VOLCANO]
    assert "v1alpha1" in groups[TOPOLOGY]


def test_a_node_keeps_the_status_it_was_created_with(core: client.CoreV1Api, node: str):
    read = core.read_node(node)
    assert read.status.capacity == CAPACITY
    assert read.status.allocatable == CAPACITY
    assert [(c.type, c.status) for c in read.status.conditions] == [("Ready", "True")]
    # TaintNodesByCondition is disabled: no not-ready taint that only a controller would remove
    assert not read.spec.taints
    assert node in [n.metadata.name for n in core.list_node(label_selector="strata.test/fake=true").items]


def test_volcano_objects_are_created_and_listed(custom: client.CustomObjectsApi, namespace: str, node: str):
    queue, hypernode = unique("strata-test-q"), unique("strata-test-hn")
    pg_spec = {
        "minMember": 2,
        "queue": queue,
        "minResources": {"cpu": "2", "memory": "4Gi"},
        "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
        "aFieldFromTheFuture": {"kept": [1, 2]},  # spec is open: what the cache reads passes through
    }
    custom.create_namespaced_custom_object(
        VOLCANO,
        "v1beta1",
        namespace,
        "podgroups",
        {"apiVersion": f"{VOLCANO}/v1beta1", "kind": "PodGroup", "metadata": {"name": "pg-1"}, "spec": pg_spec},
    )
    custom.create_cluster_custom_object(
        VOLCANO,
        "v1beta1",
        "queues",
        {
            "apiVersion": f"{VOLCANO}/v1beta1",
            "kind": "Queue",
            "metadata": {"name": queue},
            "spec": {"weight": 1, "reclaimable": True, "capability": {"cpu": "8"}},
        },
    )
    custom.create_cluster_custom_object(
        TOPOLOGY,
        "v1alpha1",
        "hypernodes",
        {
            "apiVersion": f"{TOPOLOGY}/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": hypernode},
            "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": node}}}]},
        },
    )
    try:
        # status is a subresource: written through /status, kept apart from spec
        custom.patch_cluster_custom_object_status(
            VOLCANO,
            "v1beta1",
            "queues",
            queue,
            {"status": {"state": "Open"}},
            _content_type="application/merge-patch+json",
        )
        pgs = custom.list_namespaced_custom_object(VOLCANO, "v1beta1", namespace, "podgroups")["items"]
        assert [(pg["metadata"]["name"], pg["spec"]) for pg in pgs] == [("pg-1", pg_spec)]
        queues = {
            q["metadata"]["name"]: q for q in custom.list_cluster_custom_object(VOLCANO, "v1beta1", "queues")["items"]
        }
        assert queues[queue]["spec"]["weight"] == 1
        assert queues[queue]["status"] == {"state": "Open"}
        hypernodes = custom.list_cluster_custom_object(TOPOLOGY, "v1alpha1", "hypernodes")["items"]
        [hn] = [h for h in hypernodes if h["metadata"]["name"] == hypernode]
        assert hn["spec"]["members"][0]["selector"]["exactMatch"]["name"] == node
    finally:
        custom.delete_cluster_custom_object(VOLCANO, "v1beta1", "queues", queue)
        custom.delete_cluster_custom_object(TOPOLOGY, "v1alpha1", "hypernodes", hypernode)


def test_a_pod_is_bound_through_the_binding_subresource(core: client.CoreV1Api, namespace: str, node: str):
    core.create_namespaced_pod(namespace, pod_body("p-1"))
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name="p-1"),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )
    # the server answers with a Status, which the client would try to read as a Binding
    resp = core.create_namespaced_pod_binding("p-1", namespace, binding, _preload_content=False)
    assert resp.status == 201
    assert json.loads(resp.data)["status"] == "Success"
    pod = core.read_namespaced_pod("p-1", namespace)
    assert pod.spec.node_name == node
    assert ("PodScheduled", "True") in [(c.type, c.status) for c in pod.status.conditions]
    assert pod.status.phase == "Pending"  # no kubelet runs it
    with pytest.raises(ApiException) as again:  # a bound pod cannot be bound twice
        core.create_namespaced_pod_binding("p-1", namespace, binding, _preload_content=False)
    assert again.value.status == 409


def test_a_watch_from_a_list_sees_added_then_modified(core: client.CoreV1Api, namespace: str):
    listed = core.list_namespaced_pod(namespace)
    assert listed.items == []
    core.create_namespaced_pod(namespace, pod_body("w-1"))
    core.patch_namespaced_pod("w-1", namespace, {"metadata": {"labels": {"phase": "two"}}})
    # the events after the list's resourceVersion, though they happened before the watch began
    seen = []
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_pod, namespace, resource_version=listed.metadata.resource_version, timeout_seconds=20
    ):
        seen.append((event["type"], event["object"].metadata.name, event["object"].metadata.labels.get("phase")))
        if len(seen) == 2:
            w.stop()
    assert seen == [("ADDED", "w-1", None), ("MODIFIED", "w-1", "two")]


def test_dev_up_kube_is_idempotent_and_status_tells(kubeconfig: str):
    data_dir = Path(kubeconfig).parent.parent  # <data dir>/kube/kubeconfig
    if not (data_dir / "kube" / "server.json").exists():
        pytest.skip("KUBECONFIG names another cluster; the local control plane is not the one under test")
    env = {"STRATA_DATA_DIR": str(data_dir)}
    statuses = []
    for _ in range(2):
        up = run("dev", "up", "--kube", env=env, timeout=180)
        assert up.returncode == 0, up.stderr
        assert f"export KUBECONFIG={kubeconfig}" in up.stdout.splitlines()
        # the fixture started both: every `dev up --kube` reuses them
        ours = [line for line in up.stderr.splitlines() if line.startswith(("etcd ", "kube-apiserver "))]
        assert len(ours) == 2 and all("already running" in line for line in ours), up.stderr
        status = run("dev", "status", env=env)
        assert status.returncode == 0, status.stdout
        statuses.append(status.stdout)
    lines = statuses[0].splitlines()
    assert [line.split(": ")[0] for line in lines if line.startswith(("etcd", "kube-apiserver"))] == [
        "etcd",
        "kube-apiserver",
    ]
    assert all(": running (pid " in line for line in lines if line.startswith(("etcd", "kube-apiserver")))
    assert statuses[1] == statuses[0]  # the same processes, reused
