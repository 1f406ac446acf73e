"""The store browser's defences as headers, cookie attributes and request checks.

Everything the browser shows was written by an agent, so its pages are built to hold hostile text: every
value is escaped by the templates (``render.py``), and the headers here make a mistake there harmless:

- ``Content-Security-Policy``: scripts, styles and images from this origin only, no inline script or style,
  no plugin, no connection elsewhere, forms posted only here, no framing, no ``<base>``;
- ``X-Frame-Options: DENY`` (no clickjacking), ``Referrer-Policy: no-referrer`` (a page's URL, which names
  stores and memories, never leaves), ``X-Content-Type-Options: nosniff``;
- ``Cache-Control: no-store`` on pages (memory content never lands in a shared or disk cache).

A request that changes something (a POST) must come from one of this server's own pages: its ``Origin``, or
else its ``Sec-Fetch-Site``, must say so; the form's CSRF token is checked besides (``signin.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
#: Paths whose answers carry the headers: the browser, its assets, the API reference and its document.
BROWSER_PATHS: Final = ("/ui", "/docs", "/openapi.json")
STATIC_PREFIX: Final = "/ui/static/"
_HEADERS: Final = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode("ascii")),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
_NO_STORE: Final = (b"cache-control", b"no-store")


def is_browser_path(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in BROWSER_PATHS)


class BrowserHeadersMiddleware:
    """Adds the headers above to every answer under ``BROWSER_PATHS`` (errors and redirects included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not is_browser_path(path):
            await self.app(scope, receive, send)
            return
        extra = [*_HEADERS] if path.startswith(STATIC_PREFIX) else [*_HEADERS, _NO_STORE]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in extra}
                kept = [(n, v) for n, v in message.get("headers", []) if n.lower() not in names]
                message["headers"] = kept + extra
            await send(message)

        await self.app(scope, receive, send_with_headers)


def served_over_tls(scheme: str, forwarded_proto: str | None, public_url: str) -> bool:
    """Whether the session cookie gets ``Secure``: the request came over TLS, a proxy in front says it did
    (``X-Forwarded-Proto``: trusting it can only add the attribute), or the server's public URL is HTTPS."""
    return (
        scheme == "https"
        or (forwarded_proto or "").split(",")[0].strip().lower() == "https"
        or public_url.lower().startswith("https://")
    )


def same_origin(origin: str | None, fetch_site: str | None, host: str | None, scheme: str) -> bool:
    """Whether a POST comes from this server's own pages: by its ``Origin`` when it names one, else by
    ``Sec-Fetch-Site`` (under ``Referrer-Policy: no-referrer`` a browser sends ``Origin: null`` even from
    the same origin); a request with neither passes (not a current browser's), the CSRF token still
    applies."""
    if origin is not None and origin != "null":
        return host is not None and origin.lower() in (
            f"{scheme}://{host}".lower(),
            f"https://{host}".lower(),
        )
    if fetch_site is not None:
        return fetch_site in ("same-origin", "none")
    return True
