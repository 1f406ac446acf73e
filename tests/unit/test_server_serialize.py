"""Rows serialise to exactly the shared wire models (so client and server can never disagree on a field)."""

from __future__ import annotations

from memsync.api.models import Memory, MemoryPrefix, MemoryStore, MemoryVersion, Session
from memsync.server.access import session_json
from memsync.server.ids import api_key_id, format_ts, new_id, now_ts, token_hash
from memsync.server.storage.database import MemoryRow, ResourceRow, SessionRow, StoreRow, VersionRow
from memsync.server.stores.serialize import memory_json, prefix_json, store_json, version_json

TS = "2026-11-29T12:00:00.000001Z"


def test_store_json_is_a_memory_store() -> None:
    row = StoreRow(1, "memstore_x", "Notes", "", {"a": "b"}, TS, TS, None)
    store = MemoryStore.model_validate(store_json(row))
    assert store.id == "memstore_x"
    assert store.metadata == {"a": "b"}
    assert store.archived_at is None


def test_memory_json_views() -> None:
    row = MemoryRow("mem_1", "memstore_x", "/a.md", "hi", "f" * 64, 2, "memver_1", TS, TS)
    basic = Memory.model_validate(memory_json(row, "basic"))
    full = Memory.model_validate(memory_json(row, "full"))
    assert basic.content is None
    assert full.content == "hi"
    assert basic.content_sha256 == full.content_sha256 == "f" * 64
    assert basic.content_size_bytes == 2
    assert MemoryPrefix.model_validate(prefix_json("/a/")).path == "/a/"


def test_version_json_actors_and_redaction() -> None:
    live = VersionRow(
        1, "memver_1", "memstore_x", "mem_1", "created", "hi", "f" * 64, 2, "/a", TS,
        "session_actor", "sesn_1", None, None, None,
    )  # fmt: skip
    version = MemoryVersion.model_validate(version_json(live, "full"))
    assert version.content == "hi"
    assert version.created_by is not None
    assert version.created_by.type == "session_actor"
    assert MemoryVersion.model_validate(version_json(live, "basic")).content is None
    redacted = VersionRow(
        2, "memver_2", "memstore_x", "mem_1", "modified", None, None, None, None, TS, "api_actor", "apikey_1",
        TS, "api_actor", "apikey_1",
    )  # fmt: skip
    version = MemoryVersion.model_validate(version_json(redacted, "full"))
    assert version.path is None
    assert version.redacted_by is not None
    assert version.redacted_by.type == "api_actor"


def test_session_json() -> None:
    row = SessionRow(
        "sesn_1",
        TS,
        (ResourceRow("memstore_x", "User Prefs", "", "/mnt/memory/user-prefs", "read_only", None),),
    )
    session = Session.model_validate(session_json(row))
    assert session.resources[0].mount_path == "/mnt/memory/user-prefs"
    assert session.resources[0].access == "read_only"


def test_ids_and_timestamps() -> None:
    ids = {new_id("mem_") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(i.startswith("mem_") and len(i) == 28 for i in ids)
    ts = now_ts()
    assert ts.endswith("Z")
    assert len(ts) == len(TS)
    assert api_key_id("k") == api_key_id("k") != api_key_id("k2")
    assert api_key_id("secret-key").startswith("apikey_")
    assert "secret-key" not in api_key_id("secret-key")
    assert token_hash("t") != "t"
    from datetime import UTC, datetime, timedelta, timezone

    moment = datetime(2026, 1, 1, 14, tzinfo=timezone(timedelta(hours=2)))
    assert format_ts(moment) == format_ts(moment.astimezone(UTC)) == "2026-01-01T12:00:00.000000Z"
