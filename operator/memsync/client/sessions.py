"""Session endpoints of the store client, and the memsync store server's extensions: minting and deleting
sessions, admin keys and viewer keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from memsync.api import json_text
from memsync.api.constants import SESSIONS_BETA
from memsync.api.models import MemoryStoreResource, Session, WireModel
from memsync.client.core import ClientCore, seg

__all__ = ["SessionEndpoints"]

MEMSYNC_SESSIONS_PATH: Final = "/v1/memsync/sessions"
#: The memsync store server's named keys: ``admin_keys`` and ``viewer_keys`` under this path.
MEMSYNC_KEYS_PATH: Final = "/v1/memsync/"


class _MintedSession(WireModel):
    session: Session
    work_secret: str


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


class SessionEndpoints(ClientCore):
    """Sessions (get) and the memsync server extensions (mint and delete sessions, admin keys)."""

    async def get_session(self, session_id: str) -> Session:
        """The session with its ``memory_store`` resources (other resource kinds are dropped).

        Session endpoints take the managed-agents beta header, not the memory one.
        """
        response = await self._request("GET", f"/v1/sessions/{seg(session_id)}", beta=SESSIONS_BETA)
        try:
            return _session_from_json(json_text.loads(response.content))
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
            data = json_text.loads(response.content)
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

    async def delete_session(self, session_id: str) -> None:
        """Delete a session on a memsync store server (admin key): its sessions token is revoked at once."""
        await self._request("DELETE", f"/v1/sessions/{seg(session_id)}", beta=SESSIONS_BETA)

    async def named_keys(
        self, collection: str, method: str, path: str = "", body: Mapping[str, Any] | None = None
    ) -> Any:
        """memsync store server extension: ``/v1/memsync/{collection}[path]`` (``admin_keys`` or
        ``viewer_keys``: create, list, revoke); the JSON answer."""
        response = await self._request(method, MEMSYNC_KEYS_PATH + collection + path, body=body)
        try:
            return json_text.loads(response.content)
        except ValueError as exc:
            raise self._invalid(response, "admin key answer", exc) from None
