"""Rows to wire JSON (the objects of docs/store-api.md). Pure; the shapes match ``memsync.api.models``."""

from __future__ import annotations

from typing import Any

from memsync.server.storage.database import MemoryRow, StoreRow, VersionRow


def store_json(row: StoreRow) -> dict[str, Any]:
    return {
        "type": "memory_store",
        "id": row.id,
        "name": row.name,
        "description": row.description,
        "metadata": dict(row.metadata),
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "archived_at": row.archived_at,
    }


def memory_json(row: MemoryRow, view: str) -> dict[str, Any]:
    return {
        "type": "memory",
        "id": row.id,
        "memory_store_id": row.store_id,
        "path": row.path,
        "content": row.content if view == "full" else None,
        "content_sha256": row.sha256,
        "content_size_bytes": row.size,
        "memory_version_id": row.version_id,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def prefix_json(path: str) -> dict[str, Any]:
    return {"type": "memory_prefix", "path": path}


_ACTOR_ID_FIELD = {
    "session_actor": "session_id",
    "api_actor": "api_key_id",
    "user_actor": "user_id",
    "service_account_actor": "service_account_id",
}


def actor_json(actor_type: str | None, actor_id: str | None) -> dict[str, Any] | None:
    if actor_type is None or actor_id is None:
        return None
    return {"type": actor_type, _ACTOR_ID_FIELD[actor_type]: actor_id}


def version_json(row: VersionRow, view: str) -> dict[str, Any]:
    return {
        "type": "memory_version",
        "id": row.id,
        "memory_id": row.memory_id,
        "memory_store_id": row.store_id,
        "operation": row.operation,
        "content": row.content if view == "full" else None,
        "content_sha256": row.sha256,
        "content_size_bytes": row.size,
        "path": row.path,
        "created_at": row.created_at,
        "created_by": actor_json(row.actor_type, row.actor_id),
        "redacted_at": row.redacted_at,
        "redacted_by": actor_json(row.redactor_type, row.redactor_id),
    }


def page_json(data: list[dict[str, Any]], next_page: str | None) -> dict[str, Any]:
    return {"data": data, "next_page": next_page}
