"""What every request goes through: read-only methods, the token, the security headers, timing.

Pod names, labels and annotations are written by the cluster's users, so every page is served
with a Content-Security-Policy that runs no inline script and loads nothing from elsewhere
(templates escape every value besides). With a token, a request must carry it: as a header
(``Authorization: Bearer T`` or ``X-Strata-Token: T``) or as the cookie that ``?token=T`` sets
once (HttpOnly, SameSite=Strict) before redirecting to the same address without it.
"""

from __future__ import annotations

import hmac
import time
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "strata_ui_token"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
READ_ONLY = frozenset({"GET", "HEAD"})


class Guard:
    """The ASGI middleware around the whole application."""

    def __init__(self, app: ASGIApp, token: str | None = None) -> None:
        self.app = app
        self.token = token or None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += HEADERS
                elapsed_ms = (time.perf_counter() - started) * 1000
                headers.append((b"server-timing", f"app;dur={elapsed_ms:.1f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        if scope["method"] not in READ_ONLY:
            await _plain(send_with_headers, 405, "the UI is read-only: GET only", [(b"allow", b"GET, HEAD")])
            return
        if self.token is not None:
            refusal = _login(scope, self.token)
            if refusal is not None:
                status, text, headers = refusal
                await _plain(send_with_headers, status, text, headers)
                return
        await self.app(scope, receive, send_with_headers)


def _login(scope: Scope, token: str) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
    """None when the request may go on; else the answer: a redirect that sets the cookie after
    ``?token=``, or 401."""
    query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    given = [v for k, v in query if k == "token"]
    if given:
        if not _same(given[-1], token):
            return 401, "wrong token", []
        rest = urlencode([(k, v) for k, v in query if k != "token"])
        location = scope.get("root_path", "") + scope["path"] + (f"?{rest}" if rest else "")
        cookie = f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
        return 303, "logged in", [(b"location", location.encode()), (b"set-cookie", cookie.encode())]
    if _same(_presented(scope), token):
        return None
    return 401, "this UI wants its token: open it once with ?token=TOKEN, or send Authorization: Bearer TOKEN", []


def _presented(scope: Scope) -> str:
    headers: dict[bytes, bytes] = {}
    for name, value in scope.get("headers", []):
        headers.setdefault(name.lower(), value)
    auth = headers.get(b"authorization", b"").decode("latin-1")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    if b"x-strata-token" in headers:
        return headers[b"x-strata-token"].decode("latin-1")
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(headers.get(b"cookie", b"").decode("latin-1"))
    except Exception:  # a malformed cookie header is no token
        return ""
    morsel = cookie.get(COOKIE)
    return morsel.value if morsel is not None else ""


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


async def _plain(send: Any, status: int, text: str, headers: list[tuple[bytes, bytes]]) -> None:
    body = text.encode() + b"\n"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
