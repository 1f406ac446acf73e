"""The environment's work queue and sessions, through the official ``anthropic`` SDK (the I/O edge).

Poll, acknowledge and stop use the environment key; the session is read with the work item's sessions token
(the source the SDK's own worker reads), or with the environment key for an item that carried no secret.
Every answer comes back as plain JSON data; failures are :class:`QueueError` with the HTTP status, and
their messages never carry a credential.
"""

from __future__ import annotations

from typing import Any, Final

import anthropic
import httpx

POLL_BLOCK_MS: Final = 999
REQUEST_TIMEOUT_S: Final = 30.0


class QueueError(Exception):
    """A queue or session call failed: ``status`` is the HTTP status (None: no answer at all)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status

    @property
    def key_refused(self) -> bool:
        return self.status in (401, 403)


def _client(base_url: str, credential: str) -> anthropic.AsyncAnthropic:
    client = anthropic.AsyncAnthropic(
        base_url=base_url,
        auth_token=credential,
        max_retries=0,
        timeout=REQUEST_TIMEOUT_S,
    )
    client.api_key = None  # only the bearer credential, even when ANTHROPIC_API_KEY is set
    return client


def _error(exc: Exception, what: str) -> QueueError:
    if isinstance(exc, anthropic.APIStatusError):
        return QueueError(exc.status_code, f"{what}: HTTP {exc.status_code}: {exc.message}")
    if isinstance(exc, anthropic.APIConnectionError | httpx.HTTPError):
        return QueueError(None, f"{what}: the API is unreachable ({type(exc).__name__})")
    return QueueError(None, f"{what}: {type(exc).__name__}")


class WorkQueue:
    """One environment's queue, authenticated with its environment key."""

    def __init__(self, base_url: str, environment_id: str, environment_key: str, worker_id: str) -> None:
        self.base_url = base_url
        self.environment_id = environment_id
        self.worker_id = worker_id
        self._client = _client(base_url, environment_key)
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

    async def ack(self, work_id: str) -> None:
        try:
            await self._client.beta.environments.work.ack(work_id, environment_id=self.environment_id)
        except Exception as exc:
            raise _error(exc, f"ack of {work_id}") from None

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

    async def session(self, session_id: str, sessions_token: str | None) -> dict[str, Any]:
        """``GET /v1/sessions/{id}`` with the sessions token (the environment key when there is none)."""
        client = self._client if sessions_token is None else _client(self.base_url, sessions_token)
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
