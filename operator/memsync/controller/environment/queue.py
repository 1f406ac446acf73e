"""The environment's work queue and sessions, through the official ``anthropic`` SDK (the I/O edge).

Poll, acknowledge and stop use the environment key; the session is read, and the item heartbeated, with the
work item's sessions token (the credential the SDK's own worker uses), or with the environment key for an
item that carried no secret. Every answer comes back as plain JSON data; failures are :class:`QueueError`
with the HTTP status, the ``retry-after`` the server asked for and, for a refused heartbeat, the lease as
the server holds it; their messages never carry a credential. Like the SDK's helpers, every client sends
only its bearer credential: an ``X-Api-Key`` or ``Authorization`` in ``ANTHROPIC_CUSTOM_HEADERS`` is dropped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anthropic
import httpx
from anthropic.lib._scoped_client import keep_only_bearer_auth

from memsync.contracts import lease

POLL_BLOCK_MS: Final = 999
REQUEST_TIMEOUT_S: Final = 30.0


class QueueError(Exception):
    """A queue or session call failed: ``status`` is the HTTP status (None: no answer at all),
    ``retry_after`` the seconds the server asked to wait, ``lease`` the lease a 412 reported."""

    def __init__(
        self,
        status: int | None,
        message: str,
        *,
        retry_after: float | None = None,
        lease_state: lease.LeaseState | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.lease = lease_state

    @property
    def key_refused(self) -> bool:
        return self.status in (401, 403)

    @property
    def fatal(self) -> bool:
        """A 4xx that asking again will not change (the SDK's rule: all but 408, 409 and 429)."""
        return self.status is not None and 400 <= self.status < 500 and self.status not in (408, 409, 429)


#: Called before every request to the queue with what it is; it raises to stop it (the leadership fence).
Guard = Callable[[str], None]


def _client(base_url: str, credential: str, guard: Guard | None = None) -> anthropic.AsyncAnthropic:
    hooks: dict[str, list[Callable[[httpx.Request], Awaitable[None]]]] = {}
    if guard is not None:

        async def before(request: httpx.Request) -> None:
            guard(f"{request.method} {request.url.path}")

        hooks["request"] = [before]
    client = anthropic.AsyncAnthropic(
        base_url=base_url,
        auth_token=credential,
        max_retries=0,
        timeout=REQUEST_TIMEOUT_S,
        http_client=anthropic.DefaultAsyncHttpxClient(event_hooks=hooks) if hooks else None,
    )
    # only the bearer credential, even when ANTHROPIC_API_KEY or credential custom headers are set
    keep_only_bearer_auth(client)
    return client


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The wait a ``retry-after-ms`` or ``retry-after`` (seconds) header asks for; None without one."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if seconds >= 0:
            return seconds
    return None


def _error(exc: Exception, what: str) -> QueueError:
    if isinstance(exc, anthropic.APIStatusError):
        return QueueError(
            exc.status_code,
            f"{what}: HTTP {exc.status_code}: {exc.message}",
            retry_after=retry_after_seconds(exc.response.headers),
            lease_state=lease.refused_state(exc.body) if exc.status_code == 412 else None,
        )
    if isinstance(exc, anthropic.APIConnectionError | httpx.HTTPError):
        return QueueError(None, f"{what}: the API is unreachable ({type(exc).__name__})")
    return QueueError(None, f"{what}: {type(exc).__name__}")


class WorkQueue:
    """One environment's queue, authenticated with its environment key."""

    def __init__(
        self,
        base_url: str,
        environment_id: str,
        environment_key: str,
        worker_id: str,
        *,
        guard: Guard | None = None,
    ) -> None:
        self.base_url = base_url
        self.environment_id = environment_id
        self.worker_id = worker_id
        self.guard = guard
        self._client = _client(base_url, environment_key, guard)
        self._key = environment_key

    def uses_key(self, key: str) -> bool:
        return key == self._key

    async def aclose(self) -> None:
        await self._client.close()

    async def poll(self, block_ms: int | None = POLL_BLOCK_MS) -> dict[str, Any] | None:
        try:
            work = await self._client.beta.environments.work.poll(
                self.environment_id, block_ms=block_ms, anthropic_worker_id=self.worker_id
            )
        except Exception as exc:
            raise _error(exc, "poll") from None
        return None if work is None else work.model_dump(mode="json")

    async def ack(self, work_id: str) -> dict[str, Any]:
        """Acknowledge a polled item; the item as the answer has it (``acknowledged_at``)."""
        try:
            item = await self._client.beta.environments.work.ack(work_id, environment_id=self.environment_id)
        except Exception as exc:
            raise _error(exc, f"ack of {work_id}") from None
        data: dict[str, Any] = item.model_dump(mode="json")
        return data

    async def stop(self, work_id: str, *, force: bool = True) -> None:
        """Stop an item; an item already stopped (409) is fine."""
        try:
            await self._client.beta.environments.work.stop(
                work_id, environment_id=self.environment_id, force=force
            )
        except anthropic.APIStatusError as exc:
            if exc.status_code != 409:
                raise _error(exc, f"stop of {work_id}") from None
        except Exception as exc:
            raise _error(exc, f"stop of {work_id}") from None

    def item_client(self, sessions_token: str | None) -> anthropic.AsyncAnthropic:
        """A client for one held item's heartbeats: its sessions token (the environment key when there is
        none); the caller closes it."""
        return _client(self.base_url, sessions_token or self._key, self.guard)

    async def heartbeat(
        self, client: anthropic.AsyncAnthropic, work_id: str, expected: str
    ) -> dict[str, Any]:
        """One heartbeat of an item, through ``item_client``'s client."""
        try:
            beat = await client.beta.environments.work.heartbeat(
                work_id, environment_id=self.environment_id, expected_last_heartbeat=expected
            )
        except Exception as exc:
            raise _error(exc, f"heartbeat of {work_id}") from None
        data: dict[str, Any] = beat.model_dump(mode="json")
        return data

    async def session(self, session_id: str, sessions_token: str | None) -> dict[str, Any]:
        """``GET /v1/sessions/{id}`` with the sessions token (the environment key when there is none)."""
        client = (
            self._client if sessions_token is None else _client(self.base_url, sessions_token, self.guard)
        )
        try:
            data = (await client.beta.sessions.retrieve(session_id)).model_dump(mode="json")
        except Exception as exc:
            raise _error(exc, f"reading session {session_id}") from None
        finally:
            if client is not self._client:
                await client.close()
        if not isinstance(data, dict):
            raise QueueError(None, f"reading session {session_id}: the answer is not a JSON object")
        return data
