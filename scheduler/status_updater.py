"""Status writes straight from a replica to the API server, as Volcano's ``defaultStatusUpdater``.

They do not go through the cache log: a PodGroup's or Queue's status is the scheduler's report
to users, and the fold learns it back through the watch like any other change. Each write reads
the latest object and retries on a conflict (client-go's ``RetryOnConflict``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from strata.kubeapi import ApiError, KubeApi
from strata.scheduler.interface import JobStatus, QueueStatus

VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"
ALLOCATED_HYPERNODE = "volcano.sh/job-allocated-hypernode"
CONFLICT_RETRIES = 5


def retry_on_conflict(write: Callable[[], Any], retries: int = CONFLICT_RETRIES) -> Any:
    for attempt in range(retries + 1):
        try:
            return write()
        except ApiError as exc:
            if exc.status != 409 or attempt == retries:
                raise
            time.sleep(0.01 * 2**attempt)
    return None


class StatusUpdater:
    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def update_pod_group(self, job: JobStatus) -> dict[str, Any]:
        # Volcano's PodGroup CRD has no status subresource: the whole object is written.
        path = f"{VOLCANO}/namespaces/{job.namespace}/podgroups/{job.name}"

        def write() -> dict[str, Any]:
            pg = self.api.request("GET", path)
            status = dict(pg.get("status") or {})
            status.update(phase=job.phase, running=job.running, succeeded=job.succeeded, failed=job.failed)
            if job.conditions:
                status["conditions"] = [dict(c) for c in job.conditions]
            pg["status"] = status
            annotations = pg.setdefault("metadata", {}).setdefault("annotations", {}) or {}
            if job.allocated_hypernode:
                annotations[ALLOCATED_HYPERNODE] = job.allocated_hypernode
            pg["metadata"]["annotations"] = annotations
            return self.api.request("PUT", path, pg)  # carries resourceVersion: a conflict is a 409

        return retry_on_conflict(write)

    def update_queue_status(self, queue: QueueStatus) -> dict[str, Any]:
        path = f"{VOLCANO}/queues/{queue.name}/status"

        def write() -> dict[str, Any]:
            q = self.api.request("GET", path)
            status = dict(q.get("status") or {})
            status.update(
                state=queue.state,
                pending=queue.pending,
                running=queue.running,
                inqueue=queue.inqueue,
                completed=queue.completed,
            )
            if queue.allocated:
                status["allocated"] = dict(queue.allocated)
            q["status"] = status
            return self.api.request("PUT", path, q)

        return retry_on_conflict(write)
