"""Kubernetes Events from a scheduler replica (``record.EventRecorder`` in client-go)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from strata.kubeapi import KubeApi
from strata.scheduler.interface import EventRecorder, JobStatus

_NAME_UNSAFE = re.compile(r"[^a-z0-9.-]")


class ApiEventRecorder:
    def __init__(self, api: KubeApi, component: str, replica: str) -> None:
        self.api = api
        self.component = component
        self.replica = replica
        self._seq = 0

    def event(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        # events of cluster-scoped objects (Queues) live in "default", as client-go puts them
        namespace = meta.get("namespace") or "default"
        self._seq += 1
        # The time only names and stamps the Event (an API object), never the cache's state.
        now = datetime.now(UTC)
        name = _NAME_UNSAFE.sub("-", f"{meta.get('name', 'object')}.{self.replica}.{now:%Y%m%d%H%M%S%f}.{self._seq}")
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name[:253], "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.replica,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self.api.request("POST", f"/api/v1/namespaces/{namespace}/events", body)


def job_status_event(recorder: EventRecorder, job: JobStatus) -> None:
    """Volcano's RecordJobStatusEvent: a Warning when the job is unschedulable, else its phase."""
    pg = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"namespace": job.namespace, "name": job.name},
    }
    unschedulable = [c for c in job.conditions if c.get("type") == "Unschedulable" and c.get("status") == "True"]
    if unschedulable:
        recorder.event(pg, "Warning", "Unschedulable", str(unschedulable[-1].get("message") or ""))
    else:
        recorder.event(pg, "Normal", job.phase, f"PodGroup is {job.phase}")
