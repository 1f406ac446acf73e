"""The store client's core: credentials, the pooled connection, retries, error mapping and pagination.

Every call has a timeout, sends the version and beta headers and ``?beta=true``, is retried on transient
failures (see ``memsync.client.retry``) and turns a non-2xx answer into a typed error
(``memsync.client.errors``). Credentials never appear in ``repr()``, logs or error text. The endpoint groups
(``stores``, ``memories``, ``versions``, ``sessions``) build on this class.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TypedDict, TypeVar, Unpack
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from memsync import __version__
from memsync.api.constants import ANTHROPIC_VERSION, DEFAULT_BASE_URL, MEMORY_BETA
from memsync.api.models import Page
from memsync.client import errors
from memsync.client.retry import retry_delay
from memsync.client.transport import PooledClient

__all__ = ["ClientCore", "PageCursors", "Params", "Sleep", "rfc3339", "seg"]

logger = logging.getLogger("memsync.client")

Sleep = Callable[[float], Awaitable[None]]
Params = Sequence[tuple[str, str]]
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
_Query = list[tuple[str, str | int | float | bool | None]]  # the query string as sent

# Failures with no HTTP response that are worth another attempt. Others (an unsupported scheme, a bad
# proxy setting, a malformed request) are programming or configuration errors and fail at once.
_RETRYABLE_TRANSPORT_ERRORS: Final = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


def seg(value: str) -> str:
    """One path segment: an id is quoted whole, so it can never add or climb a path segment.

    '.' and '..' are refused, not quoted: percent-encoding leaves them as they are, and the URL they would
    go into is normalised (RFC 3986 removes dot segments), so ``..`` would climb one. The refusal never
    repeats the value: it may be a credential pasted where an id belongs."""
    if value in ("", ".", ".."):
        raise ValueError("an id in the request path must not be empty, '.' or '..'")
    try:
        return quote(value, safe="")
    except UnicodeEncodeError as exc:  # a lone surrogate: no URL can carry it
        raise ValueError(
            f"an id in the request path must be valid Unicode (a lone surrogate at position {exc.start + 1})"
        ) from None


def rfc3339(name: str, value: datetime) -> str:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime (RFC 3339 needs an offset)")
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _display_url(url: httpx.URL) -> str:
    """The base URL without any userinfo, for repr and logs."""
    port = f":{url.port}" if url.port is not None else ""
    return f"{url.scheme}://{url.host}{port}{url.path.rstrip('/')}"


def _is_answer(response: httpx.Response, if_none_match: str | None) -> bool:
    """A 2xx, or the 304 that answers a conditional request."""
    return response.is_success or (if_none_match is not None and response.status_code == 304)


def _is_transient(exc: httpx.RequestError) -> bool:
    """A transport failure worth another attempt: a timeout, a dropped connection or a broken answer. A host
    name that does not resolve is not one (it names no server now and will not in half a second)."""
    if not isinstance(exc, _RETRYABLE_TRANSPORT_ERRORS):
        return False
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, socket.gaierror):
            return False
        cause = cause.__cause__ or cause.__context__
    return True


def _log_retry(method: str, path: str, outcome: httpx.Response | httpx.RequestError, delay: float) -> None:
    """One INFO line per retry, with what went wrong and the wait in milliseconds' precision."""
    fields: dict[str, Any] = {"method": method, "path": path, "delay_s": round(delay, 3)}
    if isinstance(outcome, httpx.Response):
        fields["status"] = outcome.status_code
        logger.info("retrying store request", extra=fields)
    else:
        fields["error"] = type(outcome).__name__
        logger.info("retrying store request after a transport error", extra=fields)


class ClientHooks(TypedDict, total=False):
    """What tests and embedders may put in place of the defaults: the HTTP transport, and the sleep between
    retries."""

    transport: httpx.AsyncBaseTransport | None
    sleep: Sleep | None


class PageCursors:
    """The cursors of one listing walk. Each ``next_page`` is followed once: a server that hands one out again
    (at once, or after others) would have the walk go round for ever, so the listing fails instead of being
    cut short or repeated (a listing read as complete when it is not could look like deleted memories)."""

    def __init__(self) -> None:
        self._followed: set[str] = set()

    def follow(self, next_page: str | None) -> str | None:
        """The page to read next (None: the listing is complete), or ``InvalidResponse``."""
        if not next_page:
            return None
        if next_page in self._followed:
            raise errors.InvalidResponse(
                200,
                "invalid_response",
                "the server returned a page cursor it had returned before; stopping the listing",
            )
        self._followed.add(next_page)
        return next_page


class ClientCore:
    """Credentials, the pooled HTTP client and the request/retry/parse machinery shared by every endpoint
    group of ``StoreClient``."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        bearer_token: str | None = None,
        workspace_id: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        max_connections: int = 64,
        **hooks: Unpack[ClientHooks],
    ) -> None:
        if api_key is not None and bearer_token is not None:
            raise ValueError("pass api_key or bearer_token, not both: exactly one credential goes out")
        if api_key is not None and not api_key.strip():
            raise ValueError("api_key is empty")
        if bearer_token is not None and not bearer_token.strip():
            raise ValueError("bearer_token is empty")
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}")
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections!r}")
        url = httpx.URL(base_url or DEFAULT_BASE_URL)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url must be an absolute http(s) URL, got {_display_url(url)!r}")

        self.base_url = _display_url(url)
        self.max_retries = max_retries
        self.timeout = timeout
        self.request_count = 0
        self._auth_kind = (
            "api_key" if api_key is not None else "bearer" if bearer_token is not None else "none"
        )
        self._secrets = tuple(s for s in (api_key, bearer_token) if s)
        sleep, transport = hooks.get("sleep"), hooks.get("transport")
        self._sleep: Sleep = sleep if sleep is not None else asyncio.sleep

        headers = {
            "anthropic-version": ANTHROPIC_VERSION,
            "anthropic-beta": MEMORY_BETA,
            "accept": "application/json",
            "user-agent": f"memsync/{__version__}",
        }
        if api_key is not None:
            headers["x-api-key"] = api_key
        if bearer_token is not None:
            headers["authorization"] = f"Bearer {bearer_token}"
        if workspace_id is not None:
            headers["anthropic-workspace-id"] = workspace_id
        common: dict[str, Any] = {
            "base_url": url,
            "headers": headers,
            "timeout": httpx.Timeout(timeout),
            "follow_redirects": False,
        }
        # A given transport (tests, benchmarks) is used as is; otherwise pooled routes that honour the
        # environment's proxy and CA settings.
        self._http = (
            httpx.AsyncClient(transport=transport, trust_env=False, **common)
            if transport is not None
            else PooledClient(max_connections=max_connections, **common)
        )

    # --- transport ------------------------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "<redacted>")
        return text

    def _scrubbed(self, error: errors.StoreError) -> errors.StoreError:
        """``error`` with this client's credentials out of every text the server chose: the message, the
        error type and the request id (a proxy may echo a request's headers in any of them)."""
        error.message = self._scrub(error.message)
        error.error_type = self._scrub(error.error_type)
        if error.request_id is not None:
            error.request_id = self._scrub(error.request_id)
        error.args = (error.status, error.error_type, error.message, error.request_id)
        return error

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Params = (),
        body: Mapping[str, Any] | None = None,
        beta: str = MEMORY_BETA,
        if_none_match: str | None = None,
    ) -> httpx.Response:
        """Send one API call with retries; return the 2xx response (or a 304 to a conditional request) or
        raise a typed error."""
        query: _Query = [("beta", "true"), *params]
        headers = {"anthropic-beta": beta} if beta != MEMORY_BETA else {}
        if if_none_match is not None:
            headers["if-none-match"] = if_none_match
        retries = 0
        while True:
            outcome = await self._send_once(method, path, query, body, headers)
            if isinstance(outcome, httpx.Response) and _is_answer(outcome, if_none_match):
                return outcome
            delay = self._retry_delay(outcome, retries)
            if delay is None:
                raise self._failure(method, path, query, outcome, retries + 1)
            _log_retry(method, path, outcome, delay)
            await self._sleep(delay)
            retries += 1

    async def _send_once(
        self,
        method: str,
        path: str,
        query: _Query,
        body: Mapping[str, Any] | None,
        headers: Mapping[str, str],
    ) -> httpx.Response | httpx.RequestError:
        """One attempt: the response, whatever its status, or the transport error that stood in for it."""
        self.request_count += 1
        try:
            return await self._http.request(method, path, params=query, json=body, headers=headers)
        except httpx.RequestError as exc:
            return exc

    def _retry_delay(self, outcome: httpx.Response | httpx.RequestError, retries_done: int) -> float | None:
        """Seconds to wait before another attempt, or None when ``outcome`` is the call's result."""
        jitter = random.random()  # noqa: S311 - spreading retries, not a secret
        if isinstance(outcome, httpx.Response):
            return retry_delay(
                outcome.status_code,
                outcome.headers,
                retries_done,
                self.max_retries,
                now=time.time(),
                jitter=jitter,
            )
        if not _is_transient(outcome):
            return None
        return retry_delay(None, {}, retries_done, self.max_retries, now=time.time(), jitter=jitter)

    def _failure(
        self,
        method: str,
        path: str,
        query: _Query,
        outcome: httpx.Response | httpx.RequestError,
        attempts: int,
    ) -> errors.StoreError:
        """The typed error a failed call raises: the status's error, or a transport error naming the method,
        the URL and the attempts. Never a credential (the httpx exception, which holds the request with its
        headers, is not chained)."""
        if isinstance(outcome, httpx.Response):
            return self._scrubbed(
                errors.error_from_response(
                    outcome.status_code, outcome.content, outcome.headers, reason=outcome.reason_phrase
                )
            )
        kind = "timeout" if isinstance(outcome, httpx.TimeoutException) else "connection_error"
        detail = self._scrub(str(outcome)) or type(outcome).__name__
        url = self._scrub(str(httpx.URL(self.base_url + path, params=query)))
        return errors.TransportError(
            0, kind, f"{method} {url}: {detail} ({type(outcome).__name__}, {attempts} attempt(s))"
        )

    def _parse(self, model: type[M], response: httpx.Response) -> M:
        try:
            return model.model_validate_json(response.content)
        except ValidationError as exc:
            raise self._invalid(response, model.__name__, exc) from None

    def _invalid(
        self, response: httpx.Response, what: str, exc: ValidationError | ValueError
    ) -> errors.StoreError:
        if isinstance(exc, ValidationError):
            first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
            loc = ".".join(str(p) for p in first.get("loc", ())) or "(body)"
            why = f"{loc}: {first.get('msg', '')}"
        else:
            why = str(exc)
        return self._scrubbed(
            errors.InvalidResponse(
                response.status_code,
                "invalid_response",
                f"{response.request.method} {response.request.url.path}: "
                f"the response is not a valid {what} ({why})",
                response.headers.get("request-id"),
            )
        )

    async def _call(
        self,
        model: type[M],
        method: str,
        path: str,
        *,
        params: Params = (),
        body: Mapping[str, Any] | None = None,
    ) -> M:
        return self._parse(model, await self._request(method, path, params=params, body=body))

    @classmethod
    async def _paginate(cls, fetch_page: Callable[..., Awaitable[Page[T]]]) -> AsyncIterator[T]:
        """Every item of a listing: ``fetch_page(page=...)`` from the first page, following ``next_page``."""
        cursors = PageCursors()
        page: str | None = None
        while True:
            result = await fetch_page(page=page)
            for item in result.data:
                yield item
            page = cursors.follow(result.next_page)
            if page is None:
                return
