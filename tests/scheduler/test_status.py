"""A replica's status writes against the real kube-apiserver (Volcano's StatusUpdater): the
PodGroup's status and placement annotation, the Queue's status subresource, Events; retried on
conflict."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from strata.kubeapi import KubeApi
from strata.scheduler.event_recorder import ApiEventRecorder, job_status_event
from strata.scheduler.interface import JobStatus, QueueStatus
from strata.scheduler.status_updater import ALLOCATED_HYPERNODE, VOLCANO, StatusUpdater

pytestmark = pytest.mark.kube


@pytest.fixture
def api(kubeconfig: str) -> KubeApi:
    return KubeApi(kubeconfig)


@pytest.fixture
def namespace(api: KubeApi) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    api.request("DELETE", f"/api/v1/namespaces/{name}")


def _podgroup(api: KubeApi, ns: str) -> dict[str, Any]:
    body = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": ns},
        "spec": {"minMember": 2, "queue": "default"},
    }
    return api.request("POST", f"{VOLCANO}/namespaces/{ns}/podgroups", body)


def test_update_job_status_writes_the_podgroup_and_an_event(api: KubeApi, namespace: str):
    _podgroup(api, namespace)
    updater, recorder = StatusUpdater(api), ApiEventRecorder(api, "strata-scheduler", "r1")
    unschedulable = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": "1/2 fit"}
    for job in (
        JobStatus(namespace, "pg", "Pending", conditions=[unschedulable], allocated_hypernode="rack-1"),
        JobStatus(namespace, "pg", "Running", running=2, allocated_hypernode="rack-1"),
    ):
        updater.update_pod_group(job)  # what LogCache.update_job_status does
        job_status_event(recorder, job)
    pg = api.request("GET", f"{VOLCANO}/namespaces/{namespace}/podgroups/pg")
    assert pg["status"]["phase"] == "Running" and pg["status"]["running"] == 2
    assert pg["status"]["conditions"][0]["reason"] == "NotEnoughResources"  # kept, as Volcano keeps them
    assert pg["metadata"]["annotations"][ALLOCATED_HYPERNODE] == "rack-1"
    events = api.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    assert sorted((e["type"], e["reason"]) for e in events) == [("Normal", "Running"), ("Warning", "Unschedulable")]
    assert {e["involvedObject"]["kind"] for e in events} == {"PodGroup"}


def test_concurrent_writers_retry_on_conflict(api: KubeApi, namespace: str):
    _podgroup(api, namespace)
    updater = StatusUpdater(api)
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            for _ in range(5):
                updater.update_pod_group(JobStatus(namespace, "pg", "Running", running=i))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert api.request("GET", f"{VOLCANO}/namespaces/{namespace}/podgroups/pg")["status"]["running"] in range(4)


def test_update_queue_status_writes_the_status_subresource(api: KubeApi):
    name = f"q-{uuid.uuid4().hex[:8]}"
    api.request(
        "POST",
        f"{VOLCANO}/queues",
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}, "spec": {}},
    )
    try:
        StatusUpdater(api).update_queue_status(QueueStatus(name, running=3, pending=1, allocated={"cpu": "1500m"}))
        status = api.request("GET", f"{VOLCANO}/queues/{name}")["status"]
        assert (status["state"], status["running"], status["pending"], status["allocated"]) == (
            "Open",
            3,
            1,
            {"cpu": "1500m"},
        )
    finally:
        api.request("DELETE", f"{VOLCANO}/queues/{name}")
