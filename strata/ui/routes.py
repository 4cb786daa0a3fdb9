"""The pages and their JSON twins under /api/, and the live feed (server-sent events).

Each page is a Jinja2 template over the same data its /api/ twin returns. The data is computed
in a worker thread (it may wait on the broker or the database, and the fold of a past version
holds the interpreter for a while), so the event loop keeps serving the live feed meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from strata.audit.history import story, subject_of
from strata.errors import StrataError
from strata.ui.source import At, Source
from strata.ui.timeline import NotReady
from strata.ui.views import JobFilter

EVENT_POLL_S = 0.25  # how often the live feed looks for a new version
EVENT_MIN_GAP_S = 0.5  # at most two events a second: a page refetches on each
KEEPALIVE_S = 15.0


def _source(request: Request) -> Source:
    source: Source = request.app.state.source
    return source


def _at(request: Request) -> At:
    return _source(request).at(request.query_params.get("v"), request.query_params.get("at"))


def _page(
    template: str, compute: Callable[[Request, At], dict[str, Any]], state: bool = True
) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        with _source(request).timeline.serving():  # the survey of the history waits meanwhile
            try:
                at = await run_in_threadpool(_at, request)
                data, timing = await run_in_threadpool(_timed, compute, request, at, state)
                frame = await run_in_threadpool(_source(request).frame, at)
            except NotReady as exc:
                return _error(request, 503, str(exc))
            except StrataError as exc:
                return _error(request, 400, str(exc))
            templates = request.app.state.templates
            context = {"data": data, "frame": frame, "source": _source(request), "page": template}
            started = time.perf_counter()
            response = templates.TemplateResponse(request, f"{template}.html", context)
            timing.step("render", started)
            response.headers.append("server-timing", timing.header())
            return response

    return endpoint


def _api(compute: Callable[[Request, At], Any], state: bool = True) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        with _source(request).timeline.serving():
            try:
                at = await run_in_threadpool(_at, request)
                data, timing = await run_in_threadpool(_timed, compute, request, at, state)
            except NotReady as exc:
                return JSONResponse({"error": str(exc)}, status_code=503)
            except StrataError as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            response = Response(_json(data), media_type="application/json")
            response.headers.append("server-timing", timing.header())
            return response

    return endpoint


class _Timing:
    """A request's steps for its Server-Timing header (beside the whole, ``app``, that the guard
    adds): the version's state, and how it came (``Timeline.how``); the page's data; its HTML."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    def step(self, name: str, since: float, desc: str = "") -> None:
        shown = desc.replace("\\", "").replace('"', "")
        step = f"{name};dur={(time.perf_counter() - since) * 1000:.1f}"
        self.steps.append(f'{step};desc="{shown}"' if desc else step)

    def header(self) -> str:
        return ", ".join(self.steps)


def _timed(compute: Callable[[Request, At], Any], request: Request, at: At, state: bool) -> tuple[Any, _Timing]:
    """``compute``, the version's state made first (one thread: ``how`` is this thread's)."""
    timing = _Timing()
    source = _source(request)
    if state:
        started = time.perf_counter()
        source.snapshot(at)  # kept: ``compute`` finds it cached
        timing.step("state", started, "live" if at.live else source.timeline.how())
    started = time.perf_counter()
    data = compute(request, at)
    timing.step("data", started)
    return data, timing


def _json(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, ensure_ascii=False).encode("utf-8")


def _error(request: Request, status: int, message: str) -> Response:
    templates = request.app.state.templates
    return templates.TemplateResponse(request, "error.html", {"message": message, "status": status}, status_code=status)


# ---------------------------------------------------------------------------------- the data
def _cluster(request: Request, at: At) -> dict[str, Any]:
    q = request.query_params
    page = q.get("page", "0")
    jobs = JobFilter(
        phase=q.get("phase", ""),
        queue=q.get("queue", ""),
        text=q.get("job", ""),
        page=int(page) if page.isdigit() else 0,
    )
    return _source(request).cluster(at, jobs, q.get("node", ""))


def _job(request: Request, at: At) -> dict[str, Any]:
    p = request.path_params
    subject_of("job", f"{p['namespace']}/{p['name']}")
    return _source(request).job(at, p["namespace"], p["name"])


def _pod(request: Request, at: At) -> dict[str, Any]:
    p = request.path_params
    subject_of("pod", f"{p['namespace']}/{p['name']}")
    return _source(request).pod(at, p["namespace"], p["name"])


def _node(request: Request, at: At) -> dict[str, Any]:
    return _source(request).node(at, request.path_params["name"])


def _replicas(request: Request, at: At) -> dict[str, Any]:
    return _source(request).replicas()


def _version(request: Request, at: At) -> dict[str, Any]:
    source = _source(request)
    stats = source.timeline.stats()
    survey = dataclasses.asdict(stats.survey)
    cache = {"snapshots": stats.snapshots, "anchors": stats.anchors, "bytes": stats.bytes, "survey": survey}
    return {**source.frame(at), "cache": cache}


def _history(request: Request, at: At) -> list[dict[str, Any]]:
    p = request.path_params
    return _source(request).history(p["kind"], p["name"], at)


def _story(request: Request, at: At) -> list[str]:
    p = request.path_params
    key = f"{p['namespace']}/{p['name']}"
    subject_of("job", key)
    return story(key, _source(request).history("job", key, at))


def _why(request: Request, at: At) -> dict[str, Any]:
    p = request.path_params
    if p["kind"] not in ("pod", "job"):
        raise StrataError(f"why covers pod and job, not {p['kind']!r}")
    subject_of(p["kind"], f"{p['namespace']}/{p['name']}")
    source = _source(request)
    return source.why(source.snapshot(at), p["kind"], p["namespace"], p["name"])


def _snapshot(request: Request, at: At) -> dict[str, Any]:
    return _source(request).canonical(at)


def _diff(request: Request, at: At) -> dict[str, Any]:
    source = _source(request)
    q = request.query_params
    if not q.get("a") or not q.get("b"):
        raise StrataError("diff wants ?a=WHEN&b=WHEN (each an offset or an ISO-8601 time)")
    return source.diff(source.at(None, q["a"]), source.at(None, q["b"]))


# -------------------------------------------------------------------------------- live feed
async def events(request: Request) -> Response:
    """Server-sent events: ``version`` with {"version", "time"} whenever the log's end moves."""
    source = _source(request)

    async def stream() -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        sent = -1
        quiet_since = loop.time()
        yield b"retry: 2000\n\n"
        while not await request.is_disconnected():
            try:
                version = source.timeline.live_version
            except NotReady:
                version = -1
            if version != sent and version >= 0:
                sent = version
                time_ms = source.timeline.live_time_ms
                payload = {"version": version, "time_ms": time_ms}
                yield f"event: version\ndata: {json.dumps(payload)}\n\n".encode()
                quiet_since = loop.time()
                await asyncio.sleep(EVENT_MIN_GAP_S)
                continue
            if loop.time() - quiet_since >= KEEPALIVE_S:
                yield b": keepalive\n\n"
                quiet_since = loop.time()
            await asyncio.sleep(EVENT_POLL_S)

    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


ROUTES = [
    Route("/", _page("cluster", _cluster), methods=["GET"]),
    Route("/job/{namespace}/{name:path}", _page("job", _job), methods=["GET"]),
    Route("/pod/{namespace}/{name:path}", _page("pod", _pod), methods=["GET"]),
    Route("/node/{name:path}", _page("node", _node), methods=["GET"]),
    Route("/replicas", _page("replicas", _replicas, state=False), methods=["GET"]),
    Route("/api/version", _api(_version, state=False), methods=["GET"]),
    Route("/api/cluster", _api(_cluster), methods=["GET"]),
    Route("/api/job/{namespace}/{name:path}", _api(_job), methods=["GET"]),
    Route("/api/pod/{namespace}/{name:path}", _api(_pod), methods=["GET"]),
    Route("/api/node/{name:path}", _api(_node), methods=["GET"]),
    Route("/api/replicas", _api(_replicas, state=False), methods=["GET"]),
    Route("/api/history/{kind}/{name:path}", _api(_history, state=False), methods=["GET"]),
    Route("/api/story/job/{namespace}/{name:path}", _api(_story, state=False), methods=["GET"]),
    Route("/api/why/{kind}/{namespace}/{name:path}", _api(_why), methods=["GET"]),
    Route("/api/snapshot", _api(_snapshot), methods=["GET"]),
    Route("/api/diff", _api(_diff, state=False), methods=["GET"]),
    Route("/api/events", events, methods=["GET"]),
]
