"""The Kubernetes API edge: one client for the watch adapters (raw JSON LIST pages and WATCH
lines), the binder's and evictor's writes, status updates and verify.

The official client does the kubeconfig, TLS and credentials; the generated model layer is
skipped (it is slow, and its types would round floats and reject fields it does not know), so
objects arrive as JSON with their numbers kept to the letter (``schemas.objectjson``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from prometheus_client import Histogram

from strata.errors import StrataError
from strata.schemas import objectjson

API_SECONDS = Histogram(
    "strata_kube_api_request_duration_seconds",
    "Kubernetes API calls until the answer's headers, by verb (a WATCH: until the stream opens).",
    ["verb"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)


def _verb(method: str, query: dict[str, Any]) -> str:
    if method == "GET" and query.get("watch"):
        return "WATCH"
    if method == "GET" and "limit" in query:
        return "LIST"
    return method


@dataclass(frozen=True)
class Resource:
    """A kind the cache reads, and where the API serves it."""

    kind: str
    api_version: str
    path: str  # the collection across all namespaces


RESOURCES: dict[str, Resource] = {
    r.kind: r
    for r in (
        Resource("Pod", "v1", "/api/v1/pods"),
        Resource("Node", "v1", "/api/v1/nodes"),
        Resource("PodGroup", "scheduling.volcano.sh/v1beta1", "/apis/scheduling.volcano.sh/v1beta1/podgroups"),
        Resource("Queue", "scheduling.volcano.sh/v1beta1", "/apis/scheduling.volcano.sh/v1beta1/queues"),
        Resource("PriorityClass", "scheduling.k8s.io/v1", "/apis/scheduling.k8s.io/v1/priorityclasses"),
        Resource("CSINode", "storage.k8s.io/v1", "/apis/storage.k8s.io/v1/csinodes"),
        Resource("HyperNode", "topology.volcano.sh/v1alpha1", "/apis/topology.volcano.sh/v1alpha1/hypernodes"),
    )
}


class ApiError(StrataError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Kubernetes API {status}: {message}")
        self.status = status
        self.detail = message


class Gone(ApiError):
    """410: the resourceVersion is older than the server's watch history; relist."""


@dataclass(frozen=True)
class Answer:
    """An API answer whatever its status: callers that classify failures need the code and the Status."""

    status: int
    body: Any  # parsed JSON, or None when empty
    message: str  # the Status message (or the raw text) for status >= 400, else ""


class KubeApi:
    def __init__(self, kubeconfig: str | None = None, pool_size: int | None = None) -> None:
        configuration = client.Configuration()
        try:
            if kubeconfig is None and not os.environ.get("KUBECONFIG") and os.environ.get("KUBERNETES_SERVICE_HOST"):
                # in a pod with no kubeconfig: its ServiceAccount, whose rotated token the
                # in-cluster loader reads again as it changes
                config.load_incluster_config(client_configuration=configuration)
            else:
                config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        except Exception as exc:  # the loaders raise several types for a missing or bad file
            raise StrataError(f"cannot load kubeconfig {kubeconfig or '(default)'}: {exc}") from exc
        if pool_size is not None:
            # urllib3 keeps this many connections per host; the default (5 x CPUs) would make a
            # pool of concurrent binders open and close a connection per call beyond it
            configuration.connection_pool_maxsize = pool_size
        self.client = client.ApiClient(configuration)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = 30.0,
        content_type: str | None = None,
        **query: Any,
    ) -> Any:
        """One API call with a JSON body; the parsed JSON answer (for tests and operators' tools)."""
        if content_type is None:
            content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        response = self._request(path, query, timeout, method=method, body=body, content_type=content_type)
        data = response.read()
        return objectjson.loads(data) if data else None

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float | tuple[float, float] = 30.0,
        content_type: str = "application/json",
        **query: Any,
    ) -> Answer:
        """One API call that returns the status instead of raising on >= 400 (network errors still raise)."""
        try:
            response = self._request(path, query, timeout, method=method, body=body, content_type=content_type)
        except ApiError as exc:
            return Answer(exc.status, None, exc.detail)
        data = response.read()
        return Answer(response.status, objectjson.loads(data) if data else None, "")

    def _request(
        self,
        path: str,
        query: dict[str, Any],
        timeout: float | tuple[float, float],
        method: str = "GET",
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        method, url, headers, body, _ = self.client.param_serialize(
            method,
            path,
            query_params=[(k, v) for k, v in query.items() if v is not None],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        started = time.perf_counter()
        try:
            response = self.client.call_api(method, url, headers, body, _request_timeout=timeout)
        except client.ApiException as exc:
            raise _error(exc.status or 0, exc.body) from exc
        finally:
            API_SECONDS.labels(_verb(method, query)).observe(time.perf_counter() - started)
        if response.status >= 400:
            raise _error(response.status, response.read())
        return response

    def list_page(self, resource: Resource, limit: int, token: str | None, timeout: float = 60.0) -> dict[str, Any]:
        response = self._request(resource.path, {"limit": limit, "continue": token}, timeout)
        return objectjson.loads(response.read())

    def watch(self, resource: Resource, resource_version: str, timeout_s: int, read_timeout: float) -> Iterator[Any]:
        """Watch events (parsed) from ``resource_version``; ends when the server closes the stream."""
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_s,
        }
        response = self._request(resource.path, query, (10.0, read_timeout))
        raw = response.response  # the urllib3 response, not yet read
        try:
            for line in _lines(raw):
                if line.strip():
                    yield objectjson.loads(line)
        finally:
            raw.release_conn()


def _lines(raw: Any) -> Iterator[bytes]:
    pending = b""
    for chunk in raw.stream(65536, decode_content=True):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from lines
    if pending:
        yield pending


def _error(status: int, body: Any) -> ApiError:
    message = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
    with contextlib.suppress(ValueError, AttributeError):  # a Status object says it best; else the raw text
        message = json.loads(message).get("message", message)
    return (Gone if status == 410 else ApiError)(status, " ".join(str(message).split())[:300])
