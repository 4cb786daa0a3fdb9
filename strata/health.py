"""Health and metrics of a long-running command: `/healthz`, `/readyz` and `/metrics` over HTTP.

Every long-running command (`ingest`, `project`, `bind`, `evict`, `schedule`) builds one
``Health``, tells it what "ready" means for it, beats it from its main loop, and serves it with
``--http-port``. Kubernetes probes the first two; Prometheus scrapes the third.

    liveness   200 while the loop has beaten within STALL_AFTER_S (or has not started yet:
               a restore of a large checkpoint is not a hang), else 503 "no progress for N s"
    readiness  200 once every condition the command set holds, else 503 with the first one's
               reason. Readiness only goes up: a replica that has once caught up keeps serving
               through a burst of lag (Kubernetes would otherwise pull every replica at once).

The server is the standard library's WSGI server on its own thread, with prometheus-client's WSGI
application for `/metrics`; it binds to loopback unless told otherwise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import Gauge, Info, make_wsgi_app

from strata import __version__

STALL_AFTER_S = 120.0  # a loop that has not come round for this long is stuck (a pass is seconds at most)

READY = Gauge("strata_ready", "1 once the component is ready (its /readyz answers 200), else 0.", ["component"])
BUILD = Info("strata_build", "The component and Strata's version.")

# A condition answers None when it holds, else why not (one line, shown by /readyz).
Condition = Callable[[], str | None]


class Health:
    """What the probes of one process see. Thread-safe: the loop beats, the server reads."""

    def __init__(self, component: str, stall_after_s: float = STALL_AFTER_S) -> None:
        self.component = component
        self.stall_after_s = stall_after_s
        self._conditions: list[Condition] = []
        self._beat: float | None = None
        self._ready = False
        self._lock = threading.Lock()
        BUILD.info({"component": component, "version": __version__})
        READY.labels(component).set_function(lambda: 1.0 if self.ready()[0] else 0.0)

    def require(self, condition: Condition) -> None:
        """One more thing that must hold before the process is ready (checked in order)."""
        self._conditions.append(condition)

    def beat(self) -> None:
        self._beat = time.monotonic()

    def live(self) -> tuple[bool, str]:
        beat = self._beat
        if beat is None:
            return True, "ok (starting)"
        silent = time.monotonic() - beat
        if silent > self.stall_after_s:
            return False, f"{self.component}: no progress for {silent:.0f} s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        with self._lock:
            if self._ready:
                return True, "ready"
            if not self._conditions:
                return False, f"{self.component}: starting"
            for condition in self._conditions:
                reason = condition()
                if reason is not None:
                    return False, f"{self.component}: {reason}"
            self._ready = True
            return True, "ready"


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a probe every few seconds would drown the command's own lines


def application(health: Health) -> Callable[..., Iterable[bytes]]:
    metrics = make_wsgi_app()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)
        if path in ("/healthz", "/livez"):
            ok, text = health.live()
        elif path == "/readyz":
            ok, text = health.ready()
        else:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: /metrics, /healthz, /readyz\n"]
        status = "200 OK" if ok else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [text.encode() + b"\n"]

    return app


class HealthServer:
    """The HTTP endpoints of one process, on a daemon thread until ``close``."""

    def __init__(self, health: Health, port: int, host: str = "127.0.0.1") -> None:
        self.httpd = make_server(host, port, application(health), server_class=_Server, handler_class=_QuietHandler)
        self.port = self.httpd.server_port
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="strata-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
