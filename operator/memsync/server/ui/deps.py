"""What every page of the store browser takes from a request: the signed-in browser (or a redirect to the
sign-in page), a posted form, and errors answered as pages rather than the API's JSON envelope."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from memsync.server.errors import ApiError, forbidden
from memsync.server.http.envelope import read_body
from memsync.server.ui.render import page
from memsync.server.ui.security import same_origin
from memsync.server.ui.signin import COOKIE, BrowserSessions, SignedIn

SIGN_IN_PATH = "/ui/signin"


class SignInRequired(Exception):
    """The request has no current session: answered with a redirect to the sign-in page."""

    def __init__(self, back_to: str) -> None:
        super().__init__("sign in first")
        self.back_to = back_to


def sessions_of(request: Request) -> BrowserSessions:
    sessions: BrowserSessions = request.app.state.browser_sessions
    return sessions


def signed_in_or_none(request: Request) -> SignedIn | None:
    return sessions_of(request).resolve(request.cookies.get(COOKIE))


def signed_in(request: Request) -> SignedIn:
    """The signed-in browser; a request without a current session is sent to sign in (and back after)."""
    found = signed_in_or_none(request)
    if found is None:
        raise SignInRequired(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
    return found


SignedInBrowser = Annotated[SignedIn, Depends(signed_in)]


def safe_next(value: str | None) -> str:
    """Where to go after signing in: a page of the browser, never another site (an open redirect)."""
    if value and value.startswith("/ui/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/ui/"


async def posted_form(request: Request) -> dict[str, str]:
    """A posted ``application/x-www-form-urlencoded`` form (its first value per field), from this server's
    own pages only (``security.same_origin``); refused with 403 otherwise."""
    headers = request.headers
    if not same_origin(
        headers.get("origin"), headers.get("sec-fetch-site"), headers.get("host"), request.url.scheme
    ):
        raise forbidden("a form of the store browser must be posted from its own pages")
    raw = await read_body(request)
    fields = parse_qs(raw.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}


Form = Annotated[dict[str, str], Depends(posted_form)]


class PageRoute(APIRoute):
    """A route of the browser: a refusal is a page (with the API's status and message), and a request
    without a session a redirect to the sign-in page."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInRequired as exc:
                return RedirectResponse(f"{SIGN_IN_PATH}?next={quote(exc.back_to, safe='')}", status_code=303)
            except ApiError as exc:
                return await run_in_threadpool(error_page, request, exc.status, exc.message)

        return handle


def error_page(request: Request, status: int, message: str) -> Response:
    """A refusal as a page (blocking: the session is read again)."""
    return page(
        "error.html",
        {"signed": signed_in_or_none(request), "status": status, "message": message, "title": "Error"},
        status=status,
    )
