"""The sidecar of a `strata-volcano` replica: Strata's fold beside Volcano's actions and plugins.

`strata-volcano` (the Go program in `strata-volcano/`) keeps the full Kubernetes objects of the
cache log and builds Volcano's ``ClusterInfo`` from them; what only the fold knows it asks this
sidecar on localhost, a ``LogCache`` following the same log under the replica's own id:

    GET /v1/state?min_version=V&timeout=S     {"version", "reason", "overlays": [{pod, status, node}]}
        once the fold has applied at least V records: its version, why it is not ready (null once
        it is), and the tasks it has in Binding (an admitted BIND or BIND_GROUP) or Releasing (an
        applied EVICT), each with its node. Read under the fold's lock: all at one version.
    GET /v1/outcomes?offsets=O1,O2&timeout=S  {"outcomes": {"O1": {"result", "reason"}, ...}}
        once the fold has passed every offset: its verdict on each of this replica's records
        there (applied, rejected, ignored, bad), each given once.
    GET /healthz, /readyz                     200, or 503 with the reason

The replica reads the log to the version the state names and no further before it builds its
snapshot, so objects and overlays are of one version. Being a ``LogCache``, the sidecar also
publishes the replica's digests at agreed versions (``strata verify --replicas``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from strata.errors import StrataError
from strata.scheduler.cache import LogCache

LOG = logging.getLogger("strata.sidecar")
MAX_WAIT_S = 300.0  # the longest a request may ask to wait


@dataclass(frozen=True)
class Overlay:
    pod: str  # uid
    status: str  # Binding | Releasing
    node: str


@dataclass(frozen=True)
class FoldState:
    version: int
    reason: str | None  # why the fold is not fit to schedule from yet; None once it is
    overlays: tuple[Overlay, ...]


class SidecarCache(LogCache):
    """A ``LogCache`` that answers a Go replica: the fold's state and verdicts by offset."""

    def state(self, min_version: int = 0, timeout_s: float = 60.0) -> FoldState:
        """The fold at a version >= ``min_version``: version, readiness and overlays, read at once."""
        self._wait(lambda: self._state is not None and self._state.version >= min_version, timeout_s=timeout_s)
        with self._changed:
            state = self._state
            assert state is not None  # the wait above saw it
            overlays = tuple(
                Overlay(uid, str(status), state.tasks[uid].node)
                for uid, (status, _) in sorted(state.overlays.items())
                if uid in state.tasks
            )
            return FoldState(state.version, self.sync_reason(), overlays)

    def outcomes(self, offsets: Iterable[int], timeout_s: float = 60.0) -> dict[int, tuple[str, str] | None]:
        """The fold's verdict on this replica's record at each offset, once it has passed them all
        (None for an offset that holds no record of this replica's, or one already asked for)."""
        wanted = sorted(set(offsets))
        if not wanted:
            return {}
        last = wanted[-1]
        self._wait(lambda: self._state is not None and self._state.version > last, timeout_s=timeout_s)
        with self._changed:
            found = {o: self._outcomes.pop(o, None) for o in wanted}
        return {o: (None if v is None else (v.result, v.reason)) for o, v in found.items()}


def _number(query: dict[str, list[str]], name: str, default: float, cap: float | None = None) -> float:
    values = query.get(name)
    if not values:
        return default
    try:
        value = float(values[0])
    except ValueError:
        raise ValueError(f"{name} is not a number: {values[0]!r}") from None
    if value < 0:
        raise ValueError(f"{name} is negative")
    return min(value, cap) if cap is not None else value


class _Handler(BaseHTTPRequestHandler):
    cache: SidecarCache  # set on the subclass Sidecar makes

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the replica asks several times a second

    def _send(self, status: HTTPStatus, body: Any) -> None:
        data = (json.dumps(body) if not isinstance(body, str) else body + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        # the replica may have stopped waiting (its own deadline): it asks again
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        routes: dict[str, Callable[[dict[str, list[str]]], tuple[HTTPStatus, Any]]] = {
            "/v1/state": self._state,
            "/v1/outcomes": self._outcomes,
            "/healthz": self._healthz,
            "/readyz": self._readyz,
        }
        route = routes.get(url.path)
        if route is None:
            self._send(HTTPStatus.NOT_FOUND, "not found: /v1/state, /v1/outcomes, /healthz, /readyz")
            return
        try:
            status, body = route(query)
        except ValueError as exc:
            status, body = HTTPStatus.BAD_REQUEST, str(exc)
        except StrataError as exc:  # a wait that timed out, or a fold that stopped
            status, body = HTTPStatus.SERVICE_UNAVAILABLE, str(exc)
        self._send(status, body)

    def _state(self, query: dict[str, list[str]]) -> tuple[HTTPStatus, Any]:
        min_version = int(_number(query, "min_version", 0))
        state = self.cache.state(min_version, _number(query, "timeout", 60.0, MAX_WAIT_S))
        return HTTPStatus.OK, {
            "version": state.version,
            "reason": state.reason,
            "overlays": [{"pod": o.pod, "status": o.status, "node": o.node} for o in state.overlays],
        }

    def _outcomes(self, query: dict[str, list[str]]) -> tuple[HTTPStatus, Any]:
        text = (query.get("offsets") or [""])[0]
        try:
            offsets = [int(o) for o in text.split(",") if o]
        except ValueError:
            raise ValueError(f"offsets are not integers: {text!r}") from None
        found = self.cache.outcomes(offsets, _number(query, "timeout", 60.0, MAX_WAIT_S))
        missing = [o for o, v in found.items() if v is None]
        if missing:
            return HTTPStatus.NOT_FOUND, f"no record of replica {self.cache.replica} awaits a verdict at {missing}"
        return HTTPStatus.OK, {
            "outcomes": {str(o): {"result": v[0], "reason": v[1]} for o, v in found.items() if v is not None}
        }

    def _healthz(self, query: dict[str, list[str]]) -> tuple[HTTPStatus, Any]:
        failure = self.cache._failure
        if failure is not None:
            return HTTPStatus.SERVICE_UNAVAILABLE, f"the fold stopped following the log: {failure}"
        return HTTPStatus.OK, "ok"

    def _readyz(self, query: dict[str, list[str]]) -> tuple[HTTPStatus, Any]:
        reason = self.cache.sync_reason()
        return (HTTPStatus.OK, "ready") if reason is None else (HTTPStatus.SERVICE_UNAVAILABLE, reason)


class Sidecar:
    """The fold of one replica and its HTTP answers, on daemon threads until ``close``."""

    def __init__(self, cache: SidecarCache, stop: threading.Event, host: str = "127.0.0.1", port: int = 0) -> None:
        self.cache = cache
        cache.run(stop)
        handler = type("SidecarHandler", (_Handler,), {"cache": cache})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.host, self.port = host, int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="strata-sidecar", daemon=True)
        self._thread.start()
        LOG.info("sidecar of replica %s on http://%s:%d", cache.replica, self.host, self.port)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
