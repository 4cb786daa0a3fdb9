"""The ASGI application: routes, templates, the package's static files, and the guard around them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
import msgspec
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from strata.projector.fold.explain import quantity
from strata.ui.routes import ROUTES
from strata.ui.security import Guard
from strata.ui.source import Source

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
PAGES = ("cluster", "job", "pod", "node", "replicas", "error")


def templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("strata.ui", "templates"),
        autoescape=True,  # every value from the log is text a cluster user wrote
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(seg=_segment, qty=_quantity, pct=_percent, shown=_shown)
    # ``tojson`` (the heat map's 5,000 rows at 5k nodes): msgspec's encoder instead of the
    # json module's, 10 ms of the event loop's time a page; Jinja escapes its output the same
    env.policies["json.dumps_function"] = _dumps
    env.globals.update(url=_url)
    for name in PAGES:  # compiled now rather than in the first request for each
        env.get_template(f"{name}.html")
    return Jinja2Templates(env=env)


def _dumps(value: Any, sort_keys: bool = True, **_: Any) -> str:
    return msgspec.json.encode(value, order="sorted" if sort_keys else None).decode()


def _segment(value: Any) -> str:
    """A name as one segment of a path (a pod's name may hold anything, slashes too)."""
    return quote(str(value), safe="")


def _shown(value: Any) -> str:
    """A field's value as text: strings as they are, anything else as JSON (escaped later)."""
    if value is None:
        return "-"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def _quantity(value: Any, resource: str) -> str:
    return quantity(resource, int(value)) if isinstance(value, int) else str(value)


def _percent(used: int, total: int) -> str:
    return f"{100 * used / total:.0f}%" if total else "-"


def _url(path: str, frame: dict[str, Any], **params: Any) -> str:
    """``path`` at the page's version (none when live), with ``params`` (empty ones left out)."""
    query: dict[str, Any] = {} if frame["live"] else {"v": frame["version"]}
    query.update({k: v for k, v in params.items() if v not in (None, "")})
    return path + (f"?{urlencode(query)}" if query else "")


def allowed_hosts(host: str) -> list[str]:
    """The Host headers to answer: the bound address and loopback's names. A page of another
    site whose name resolves to 127.0.0.1 (DNS rebinding) sends its own name and is refused."""
    if host in ("0.0.0.0", "::", ""):
        return ["*"]  # bound to every address: the operator chose exposure (and should set a token)
    return sorted({host, *LOOPBACK_NAMES})


def create_app(source: Source, token: str | None = None, hosts: Sequence[str] = ("*",)) -> Starlette:
    app = Starlette(
        routes=[*ROUTES, Mount("/static", StaticFiles(packages=[("strata.ui", "static")]), name="static")],
        middleware=[Middleware(Guard, token=token), Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))],
    )
    app.state.source = source
    app.state.templates = templates()
    return app
