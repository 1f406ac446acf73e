"""The rows the store database hands out, one frozen dataclass per table, and the error for a taken key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AdminKeyRow",
    "DuplicateKeyError",
    "MemoryRow",
    "ResourceRow",
    "Row",
    "SessionRow",
    "StoreRow",
    "VersionRow",
]

Row = Mapping[str, Any]


class DuplicateKeyError(Exception):
    """A write hit a unique key (a session id that already exists, say)."""


class WouldWait(Exception):
    """A read that must not wait (``Database.read_now``) would have had to: the caller takes its ordinary
    path, off the event loop."""


@dataclass(frozen=True)
class StoreRow:
    seq: int
    id: str
    name: str
    description: str
    metadata: dict[str, str]
    created_at: str
    updated_at: str
    archived_at: str | None
    change_seq: int = 0  # bumped by every memory write in the store (conditional listing)
    change_id: str = ""  # the version id of the latest memory write ("" before the first)


@dataclass(frozen=True)
class MemoryRow:
    id: str
    store_id: str
    path: str
    content: str | None  # None when the query did not load it
    sha256: str
    size: int
    version_id: str
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class VersionRow:
    seq: int
    id: str
    store_id: str
    memory_id: str
    operation: str
    content: str | None
    sha256: str | None
    size: int | None
    path: str | None
    created_at: str
    actor_type: str | None
    actor_id: str | None
    redacted_at: str | None
    redactor_type: str | None
    redactor_id: str | None


@dataclass(frozen=True)
class ResourceRow:
    store_id: str
    name: str | None
    description: str | None
    mount_path: str | None
    access: str
    instructions: str | None


@dataclass(frozen=True)
class SessionRow:
    id: str
    created_at: str
    resources: tuple[ResourceRow, ...]
    expires_at: str | None = None
    revoked_at: str | None = None


@dataclass(frozen=True)
class AdminKeyRow:
    id: str
    name: str
    created_at: str
    revoked_at: str | None
