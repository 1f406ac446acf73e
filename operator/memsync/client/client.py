"""The async store client: all 14 memory store endpoints, sessions, and memsync's mint call.

One pooled ``httpx.AsyncClient`` per instance; every call has a timeout, sends the version and beta headers
and ``?beta=true``, is retried on transient failures (see ``memsync.client.retry``) and turns a non-2xx answer
into a typed error (``memsync.client.errors``). Credentials never appear in ``repr()``, logs or error text.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from memsync.api.constants import DEFAULT_BASE_URL
from memsync.api.secret import decode_work_secret
from memsync.client.core import ClientCore, Sleep
from memsync.client.memories import ListingProbe, MemoryEndpoints
from memsync.client.sessions import SessionEndpoints
from memsync.client.stores import StoreEndpoints
from memsync.client.versions import VersionEndpoints

__all__ = ["ListingProbe", "Sleep", "StoreClient"]


class StoreClient(StoreEndpoints, MemoryEndpoints, VersionEndpoints, SessionEndpoints, ClientCore):
    """Async client for the memory store API. Use as ``async with StoreClient(...) as client:``.

    Authenticate with ``api_key`` (sent as ``x-api-key``) or ``bearer_token`` (``Authorization: Bearer``),
    never both. ``from_work_secret`` builds a Bearer client from a work-item secret. ``request_count`` counts
    every HTTP attempt, retries included.
    """

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
