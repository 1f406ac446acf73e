"""Store rows written through the store service itself (as the HTTP routes write them), for tests that work
on a ``Database`` directly, on either backend."""

from __future__ import annotations

from memsync.server.access import Principal
from memsync.server.storage.database import Database
from memsync.server.stores.service import StoreService

ADMIN = Principal("api_actor", "key_test")


def new_store(db: Database) -> str:
    store_id: str = StoreService(db).create_store(ADMIN, b'{"name": "Notes"}')["id"]
    return store_id


def write_memory(db: Database, store_id: str, path: str) -> None:
    StoreService(db).create_memory(ADMIN, store_id, f'{{"path": "{path}", "content": "x"}}'.encode(), None)
