"""The shapes of the store server's answers that ``memsync.api.models`` does not hold (pages by name, the
memsync extensions' objects), for its OpenAPI document (``openapi.py``) only: the services render these
objects as plain JSON. The environment routes' request bodies are the models their services parse
(``environments/events.py``, ``environments/work.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict

from memsync.api.models import (
    MemoryListItem,
    MemoryStore,
    MemoryVersion,
    Page,
    Session,
    WireModel,
)


class MemoryStorePage(Page[MemoryStore]):
    """A page of memory stores, newest first."""


class MemoryListPage(Page[MemoryListItem]):
    """A page of memories (and, with ``depth=1``, the folders below the prefix), in path order."""


class MemoryVersionPage(Page[MemoryVersion]):
    """A page of memory versions, newest first."""


class MintedSession(WireModel):
    """A minted session and its work-item secret (the only time the secret is answered)."""

    # ``work_id`` is sent only with ``environment_id``: the one field the server may leave out
    model_config = ConfigDict(extra="ignore", json_schema_serialization_defaults_required=False)

    session: Session
    work_secret: str
    work_id: str | None = None  # with ``environment_id``: the work item queued for the session


class NamedKey(WireModel):
    """An admin key or a viewer key (never the key itself)."""

    type: Literal["admin_key", "viewer_key"]
    id: str
    name: str
    created_at: str
    revoked_at: str | None


class CreatedKey(NamedKey):
    """A new admin key or viewer key, with the key itself (answered this once)."""

    key: str


class NamedKeyPage(Page[NamedKey]):
    """Every admin key (or viewer key), current and revoked."""


class EnvironmentKey(WireModel):
    """A new environment key, with the key itself (answered this once)."""

    type: Literal["environment_key"] = "environment_key"
    id: str
    environment_id: str
    key: str
    created_at: str


class EnvironmentKeyRevoked(WireModel):
    type: Literal["environment_key"] = "environment_key"
    id: str
    environment_id: str
    revoked: bool
