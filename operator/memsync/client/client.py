"""The async store client: all 14 memory store endpoints, sessions, and memsync's mint call.

One pooled ``httpx.AsyncClient`` per instance; every call has a timeout, sends the version and beta headers
and ``?beta=true``, is retried on transient failures (see ``memsync.client.retry``) and turns a non-2xx answer
into a typed error (``memsync.client.errors``). Credentials never appear in ``repr()``, logs or error text.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from memsync import __version__
from memsync.api.constants import ANTHROPIC_VERSION, DEFAULT_BASE_URL, MEMORY_BETA, SESSIONS_BETA
from memsync.api.models import (
    ContentSha256Precondition,
    CreateMemoryRequest,
    CreateStoreRequest,
    Memory,
    MemoryDeleted,
    MemoryListItem,
    MemoryPrefix,
    MemoryStore,
    MemoryStoreDeleted,
    MemoryStoreResource,
    MemoryVersion,
    Operation,
    Page,
    Session,
    UpdateMemoryRequest,
    UpdateStoreRequest,
    View,
    WireModel,
)
from memsync.api.secret import decode_work_secret
from memsync.client import errors
from memsync.client.retry import retry_delay
from memsync.client.transport import PooledClient

__all__ = ["Sleep", "StoreClient"]

logger = logging.getLogger("memsync.client")

Sleep = Callable[[float], Awaitable[None]]
Params = Sequence[tuple[str, str]]
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

MEMSYNC_SESSIONS_PATH: Final = "/v1/memsync/sessions"
MEMSYNC_ADMIN_KEYS_PATH: Final = "/v1/memsync/admin_keys"

# Failures with no HTTP response that are worth another attempt. Others (an unsupported scheme, a bad
# proxy setting, a malformed request) are programming or configuration errors and fail at once.
_RETRYABLE_TRANSPORT_ERRORS: Final = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


_MEMORY_PAGE: type[Page[Memory | MemoryPrefix]] = Page[MemoryListItem]


@dataclass(frozen=True)
class ListingProbe:
    """The answer to ``probe_memories``: the store listing's current ETag (None: the server has none) and
    whether it still matches the one asked about."""

    etag: str | None
    not_modified: bool


class _MintedSession(WireModel):
    session: Session
    work_secret: str


def _seg(value: str) -> str:
    """One path segment: an id is quoted whole, so it can never add or climb a path segment."""
    if not value:
        raise ValueError("an id in the request path must not be empty")
    return quote(value, safe="")


def _rfc3339(name: str, value: datetime) -> str:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime (RFC 3339 needs an offset)")
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _session_from_json(data: Any) -> Session:
    """A Session, keeping only its ``memory_store`` resources (a hosted session may carry other kinds)."""
    if isinstance(data, dict) and isinstance(data.get("resources"), list):
        data = {
            **data,
            "resources": [
                r
                for r in data["resources"]
                if isinstance(r, dict) and r.get("type", "memory_store") == "memory_store"
            ],
        }
    return Session.model_validate(data)


def _display_url(url: httpx.URL) -> str:
    """The base URL without any userinfo, for repr and logs."""
    port = f":{url.port}" if url.port is not None else ""
    return f"{url.scheme}://{url.host}{port}{url.path.rstrip('/')}"


class StoreClient:
    """Async client for the memory store API. Use as ``async with StoreClient(...) as client:``.

    Authenticate with ``api_key`` (sent as ``x-api-key``) or ``bearer_token`` (``Authorization: Bearer``),
    never both. ``from_work_secret`` builds a Bearer client from a work-item secret. ``request_count`` counts
    every HTTP attempt, retries included.
    """

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
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep | None = None,
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

    @classmethod
    def from_work_secret(cls, secret: str, *, base_url: str | None = None, **kw: Any) -> StoreClient:
        """A Bearer client from a work-item secret (base64url JSON carrying ``sessions_token``).

        The base URL is the secret's ``api_base_url`` when it carries one, else ``base_url``, else the hosted
        API. Raises ``memsync.api.secret.WorkSecretError`` (never echoing the secret) when it does not decode.
        """
        decoded = decode_work_secret(secret)
        url = decoded.api_base_url or base_url or DEFAULT_BASE_URL
        return cls(url, bearer_token=decoded.sessions_token, **kw)

    def __repr__(self) -> str:
        auth = self._auth_kind
        return f"StoreClient(base_url={self.base_url!r}, auth={auth!r}, max_retries={self.max_retries})"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> StoreClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- transport ------------------------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "<redacted>")
        return text

    def _scrubbed(self, error: errors.StoreError) -> errors.StoreError:
        error.message = self._scrub(error.message)
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
        query: list[tuple[str, str | int | float | bool | None]] = [("beta", "true"), *params]
        headers = {"anthropic-beta": beta} if beta != MEMORY_BETA else {}
        if if_none_match is not None:
            headers["if-none-match"] = if_none_match
        retries = 0
        while True:
            self.request_count += 1
            try:
                response = await self._http.request(method, path, params=query, json=body, headers=headers)
            except httpx.RequestError as exc:
                delay = None
                if isinstance(exc, _RETRYABLE_TRANSPORT_ERRORS):
                    delay = retry_delay(
                        None,
                        {},
                        retries,
                        self.max_retries,
                        now=time.time(),
                        jitter=random.random(),  # noqa: S311
                    )
                kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection_error"
                if delay is None:
                    detail = self._scrub(str(exc)) or type(exc).__name__
                    raise errors.TransportError(
                        0,
                        kind,
                        f"{method} {path}: {detail} ({type(exc).__name__}, {retries + 1} attempt(s))",
                    ) from None  # the httpx exception holds the request, credentials included
                logger.info(
                    "retrying store request after a transport error",
                    extra={"method": method, "path": path, "error": type(exc).__name__, "delay_s": delay},
                )
                await self._sleep(delay)
                retries += 1
                continue
            if response.is_success or (if_none_match is not None and response.status_code == 304):
                return response
            delay = retry_delay(
                response.status_code,
                response.headers,
                retries,
                self.max_retries,
                now=time.time(),
                jitter=random.random(),  # noqa: S311
            )
            if delay is None:
                raise self._scrubbed(
                    errors.error_from_response(
                        response.status_code,
                        response.content,
                        response.headers,
                        reason=response.reason_phrase,
                    )
                )
            logger.info(
                "retrying store request",
                extra={"method": method, "path": path, "status": response.status_code, "delay_s": delay},
            )
            await self._sleep(delay)
            retries += 1

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

    # --- stores (S1-S6) -------------------------------------------------------------------------------------

    async def create_store(
        self, name: str, *, description: str | None = None, metadata: dict[str, str] | None = None
    ) -> MemoryStore:
        request = CreateStoreRequest(name=name, description=description, metadata=metadata)
        body = request.model_dump(exclude_none=True)
        return await self._call(MemoryStore, "POST", "/v1/memory_stores", body=body)

    async def list_stores_page(
        self,
        *,
        include_archived: bool = False,
        limit: int | None = None,
        page: str | None = None,
        created_at_gte: datetime | None = None,
        created_at_lte: datetime | None = None,
    ) -> Page[MemoryStore]:
        params: list[tuple[str, str]] = []
        if limit is not None:
            params.append(("limit", str(limit)))
        if page is not None:
            params.append(("page", page))
        if include_archived:
            params.append(("include_archived", "true"))
        if created_at_gte is not None:
            params.append(("created_at[gte]", _rfc3339("created_at_gte", created_at_gte)))
        if created_at_lte is not None:
            params.append(("created_at[lte]", _rfc3339("created_at_lte", created_at_lte)))
        return await self._call(Page[MemoryStore], "GET", "/v1/memory_stores", params=params)

    def list_stores(
        self,
        *,
        include_archived: bool = False,
        limit: int | None = None,
        created_at_gte: datetime | None = None,
        created_at_lte: datetime | None = None,
    ) -> AsyncIterator[MemoryStore]:
        return self._paginate(
            functools.partial(
                self.list_stores_page,
                include_archived=include_archived,
                limit=limit,
                created_at_gte=created_at_gte,
                created_at_lte=created_at_lte,
            )
        )

    async def get_store(self, store_id: str) -> MemoryStore:
        return await self._call(MemoryStore, "GET", f"/v1/memory_stores/{_seg(store_id)}")

    async def update_store(
        self,
        store_id: str,
        *,
        name: str | None = None,
        description: str | None = None,
        metadata: dict[str, str | None] | None = None,
    ) -> MemoryStore:
        fields: dict[str, Any] = {}
        if name is not None:
            fields["name"] = name
        if description is not None:
            fields["description"] = description
        if metadata is not None:
            fields["metadata"] = metadata
        # exclude_unset (not exclude_none): a None metadata value means "delete this key" and must go out.
        body = UpdateStoreRequest(**fields).model_dump(exclude_unset=True)
        return await self._call(MemoryStore, "POST", f"/v1/memory_stores/{_seg(store_id)}", body=body)

    async def delete_store(self, store_id: str) -> MemoryStoreDeleted:
        return await self._call(MemoryStoreDeleted, "DELETE", f"/v1/memory_stores/{_seg(store_id)}")

    async def archive_store(self, store_id: str) -> MemoryStore:
        return await self._call(MemoryStore, "POST", f"/v1/memory_stores/{_seg(store_id)}/archive")

    # --- memories (M1-M5) -----------------------------------------------------------------------------------

    async def create_memory(
        self, store_id: str, path: str, content: str, *, view: View | None = None
    ) -> Memory:
        body = CreateMemoryRequest(path=path, content=content).model_dump()
        params = [("view", view)] if view is not None else []
        return await self._call(
            Memory, "POST", f"/v1/memory_stores/{_seg(store_id)}/memories", params=params, body=body
        )

    async def list_memories_page(
        self,
        store_id: str,
        *,
        view: View = "basic",
        limit: int | None = None,
        page: str | None = None,
        path_prefix: str | None = None,
        depth: int | None = None,
    ) -> Page[Memory | MemoryPrefix]:
        params: list[tuple[str, str]] = [("view", view)]
        if limit is not None:
            params.append(("limit", str(limit)))
        if page is not None:
            params.append(("page", page))
        if path_prefix is not None:
            params.append(("path_prefix", path_prefix))
        if depth is not None:
            params.append(("depth", str(depth)))
        return await self._call(
            _MEMORY_PAGE, "GET", f"/v1/memory_stores/{_seg(store_id)}/memories", params=params
        )

    async def probe_memories(self, store_id: str, *, if_none_match: str | None) -> ListingProbe:
        """memsync extension (conditional listing): has any memory of the store changed since the listing
        whose ETag is ``if_none_match``? One request (a one-item page, basic view). ``etag`` is None when the
        server offers no ETag (the hosted API): the caller must list in full."""
        response = await self._request(
            "GET",
            f"/v1/memory_stores/{_seg(store_id)}/memories",
            params=[("view", "basic"), ("limit", "1")],
            if_none_match=if_none_match,
        )
        return ListingProbe(etag=response.headers.get("etag"), not_modified=response.status_code == 304)

    def list_memories(
        self,
        store_id: str,
        *,
        view: View = "basic",
        limit: int | None = None,
        path_prefix: str | None = None,
        depth: int | None = None,
    ) -> AsyncIterator[Memory | MemoryPrefix]:
        return self._paginate(
            functools.partial(
                self.list_memories_page,
                store_id,
                view=view,
                limit=limit,
                path_prefix=path_prefix,
                depth=depth,
            )
        )

    async def get_memory(self, store_id: str, memory_id: str, *, view: View = "full") -> Memory:
        return await self._call(
            Memory,
            "GET",
            f"/v1/memory_stores/{_seg(store_id)}/memories/{_seg(memory_id)}",
            params=[("view", view)],
        )

    async def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        content: str | None = None,
        path: str | None = None,
        expected_sha256: str | None = None,
        view: View | None = None,
    ) -> Memory:
        """Change content and/or path; with ``expected_sha256`` only if the stored content has that hash."""
        if content is None and path is None:
            raise ValueError(
                "update_memory needs content and/or path (a rename-only update passes just path)"
            )
        fields: dict[str, Any] = {}
        if content is not None:
            fields["content"] = content
        if path is not None:
            fields["path"] = path
        if expected_sha256 is not None:
            fields["precondition"] = ContentSha256Precondition(content_sha256=expected_sha256)
        body = UpdateMemoryRequest(**fields).model_dump(exclude_unset=True)
        if "precondition" in body:
            body["precondition"] = {"type": "content_sha256", "content_sha256": expected_sha256}
        params = [("view", view)] if view is not None else []
        return await self._call(
            Memory,
            "POST",
            f"/v1/memory_stores/{_seg(store_id)}/memories/{_seg(memory_id)}",
            params=params,
            body=body,
        )

    async def delete_memory(
        self, store_id: str, memory_id: str, *, expected_sha256: str | None = None
    ) -> MemoryDeleted:
        params = [("expected_content_sha256", expected_sha256)] if expected_sha256 is not None else []
        return await self._call(
            MemoryDeleted,
            "DELETE",
            f"/v1/memory_stores/{_seg(store_id)}/memories/{_seg(memory_id)}",
            params=params,
        )

    # --- versions (V1-V3) -----------------------------------------------------------------------------------

    async def list_versions_page(
        self,
        store_id: str,
        *,
        memory_id: str | None = None,
        operation: Operation | None = None,
        session_id: str | None = None,
        api_key_id: str | None = None,
        service_account_id: str | None = None,
        created_at_gte: datetime | None = None,
        created_at_lte: datetime | None = None,
        view: View | None = None,
        limit: int | None = None,
        page: str | None = None,
    ) -> Page[MemoryVersion]:
        params: list[tuple[str, str]] = []
        for name, value in (
            ("memory_id", memory_id),
            ("operation", operation),
            ("session_id", session_id),
            ("api_key_id", api_key_id),
            ("service_account_id", service_account_id),
            ("view", view),
        ):
            if value is not None:
                params.append((name, value))
        if created_at_gte is not None:
            params.append(("created_at[gte]", _rfc3339("created_at_gte", created_at_gte)))
        if created_at_lte is not None:
            params.append(("created_at[lte]", _rfc3339("created_at_lte", created_at_lte)))
        if limit is not None:
            params.append(("limit", str(limit)))
        if page is not None:
            params.append(("page", page))
        return await self._call(
            Page[MemoryVersion], "GET", f"/v1/memory_stores/{_seg(store_id)}/memory_versions", params=params
        )

    def list_versions(
        self,
        store_id: str,
        *,
        memory_id: str | None = None,
        operation: Operation | None = None,
        session_id: str | None = None,
        api_key_id: str | None = None,
        service_account_id: str | None = None,
        created_at_gte: datetime | None = None,
        created_at_lte: datetime | None = None,
        view: View | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[MemoryVersion]:
        return self._paginate(
            functools.partial(
                self.list_versions_page,
                store_id,
                memory_id=memory_id,
                operation=operation,
                session_id=session_id,
                api_key_id=api_key_id,
                service_account_id=service_account_id,
                created_at_gte=created_at_gte,
                created_at_lte=created_at_lte,
                view=view,
                limit=limit,
            )
        )

    async def get_version(self, store_id: str, version_id: str, *, view: View | None = None) -> MemoryVersion:
        params = [("view", view)] if view is not None else []
        return await self._call(
            MemoryVersion,
            "GET",
            f"/v1/memory_stores/{_seg(store_id)}/memory_versions/{_seg(version_id)}",
            params=params,
        )

    async def redact_version(self, store_id: str, version_id: str) -> MemoryVersion:
        return await self._call(
            MemoryVersion,
            "POST",
            f"/v1/memory_stores/{_seg(store_id)}/memory_versions/{_seg(version_id)}/redact",
        )

    # --- sessions -------------------------------------------------------------------------------------------

    async def get_session(self, session_id: str) -> Session:
        """The session with its ``memory_store`` resources (other resource kinds are dropped).

        Session endpoints take the managed-agents beta header, not the memory one.
        """
        response = await self._request("GET", f"/v1/sessions/{_seg(session_id)}", beta=SESSIONS_BETA)
        try:
            return _session_from_json(json.loads(response.content))
        except (ValidationError, ValueError) as exc:
            raise self._invalid(response, "Session", exc) from None

    async def mint_session(
        self,
        resources: list[MemoryStoreResource],
        *,
        session_id: str | None = None,
        token_ttl_seconds: int | None = None,
    ) -> tuple[Session, str]:
        """memsync server extension (admin key only): create a session with these stores attached.

        Returns the session and its work-item secret (base64url JSON with ``sessions_token`` and
        ``api_base_url``). Treat the secret as a credential.
        """
        body: dict[str, Any] = {
            "resources": [
                {
                    "type": "memory_store",
                    "memory_store_id": r.memory_store_id,
                    "access": r.access or "read_write",
                }
                for r in resources
            ]
        }
        if session_id is not None:
            body["session_id"] = session_id
        if token_ttl_seconds is not None:
            body["token_ttl_seconds"] = token_ttl_seconds
        response = await self._request("POST", MEMSYNC_SESSIONS_PATH, body=body)
        try:
            data = json.loads(response.content)
            minted = _MintedSession(
                session=_session_from_json(data["session"]), work_secret=data["work_secret"]
            )
        except ValueError as exc:  # pydantic's ValidationError is a ValueError too
            raise self._invalid(response, "minted session", exc) from None
        except (KeyError, TypeError) as exc:
            raise self._invalid(
                response, "minted session", ValueError(f"unexpected shape: {type(exc).__name__} {exc}")
            ) from None
        return minted.session, minted.work_secret

    # --- helpers --------------------------------------------------------------------------------------------

    async def delete_session(self, session_id: str) -> None:
        """Delete a session on a memsync store server (admin key): its sessions token is revoked at once."""
        await self._request("DELETE", f"/v1/sessions/{_seg(session_id)}", beta=SESSIONS_BETA)

    async def admin_keys(self, method: str, path: str = "", body: Mapping[str, Any] | None = None) -> Any:
        """memsync store server extension: ``/v1/memsync/admin_keys[path]`` (create, list, revoke); the JSON
        answer."""
        response = await self._request(method, MEMSYNC_ADMIN_KEYS_PATH + path, body=body)
        try:
            return json.loads(response.content)
        except ValueError as exc:
            raise self._invalid(response, "admin key answer", exc) from None

    @classmethod
    async def _paginate(cls, fetch_page: Callable[..., Awaitable[Page[T]]]) -> AsyncIterator[T]:
        """Every item of a listing: ``fetch_page(page=...)`` from the first page, following ``next_page``."""
        page: str | None = None
        while True:
            result = await fetch_page(page=page)
            for item in result.data:
                yield item
            page = cls._next(page, result.next_page)
            if page is None:
                return

    @staticmethod
    def _next(current: str | None, next_page: str | None) -> str | None:
        if not next_page:
            return None
        if next_page == current:
            raise errors.InvalidResponse(
                200,
                "invalid_response",
                "the server returned the same page cursor again; stopping the listing",
            )
        return next_page
