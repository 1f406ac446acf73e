"""The store client against the real store server (``python -m memsync store serve`` on loopback).

Every test creates its own stores in the shared server, so tests do not see each other's data.
"""

from __future__ import annotations

import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from memsync.api.hashing import content_sha256
from memsync.api.models import ApiActor, Memory, MemoryPrefix, MemoryStore, MemoryStoreResource, SessionActor
from memsync.api.paths import default_mount_path
from memsync.api.secret import decode_work_secret
from memsync.client import StoreClient, errors

pytestmark = pytest.mark.both_backends

if TYPE_CHECKING:
    from conftest import RunningStoreServer


class NoSleep:
    """Retries happen at once (a server that is down stays down for the whole budget)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def new_store(client: StoreClient, name: str = "client-test") -> MemoryStore:
    return await client.create_store(unique(name))


# --- stores ---------------------------------------------------------------------------------------------


async def test_store_crud_archive_and_listing(store_server: RunningStoreServer) -> None:
    async with store_server.admin_client() as client:
        created = await client.create_store(
            unique("crud"), description="team notes", metadata={"team": "a", "x": "1"}
        )
        assert created.id.startswith("memstore_")
        assert created.description == "team notes"
        assert created.metadata == {"team": "a", "x": "1"}
        assert created.archived_at is None

        fetched = await client.get_store(created.id)
        assert fetched == created

        renamed = await client.update_store(
            created.id, name=created.name + "-v2", metadata={"x": None, "new": "2"}
        )
        assert renamed.name == created.name + "-v2"
        assert renamed.description == "team notes"
        assert renamed.metadata == {"team": "a", "new": "2"}
        cleared = await client.update_store(created.id, description="")
        assert cleared.description == ""
        assert cleared.name == renamed.name

        others = [await new_store(client, "list") for _ in range(3)]
        mine = {created.id, *(s.id for s in others)}
        since = created.created_at - timedelta(seconds=1)
        listed = [s.id async for s in client.list_stores(limit=2, created_at_gte=since)]
        assert mine <= set(listed)
        assert len(listed) == len(set(listed))
        before = [s.id async for s in client.list_stores(created_at_lte=since)]
        assert not (mine & set(before))

        archived = await client.archive_store(others[0].id)
        assert archived.archived_at is not None
        assert (await client.archive_store(others[0].id)).archived_at == archived.archived_at
        assert others[0].id not in [s.id async for s in client.list_stores(created_at_gte=since)]
        assert others[0].id in [
            s.id async for s in client.list_stores(include_archived=True, created_at_gte=since)
        ]
        with pytest.raises(errors.Conflict) as caught:
            await client.create_memory(others[0].id, "/x.md", "x")
        assert "archived" in caught.value.message
        assert caught.value.request_id is not None

        deleted = await client.delete_store(created.id)
        assert (deleted.type, deleted.id) == ("memory_store_deleted", created.id)
        with pytest.raises(errors.NotFound) as missing:
            await client.get_store(created.id)
        assert created.id in missing.value.message
        assert missing.value.request_id is not None
        assert missing.value.request_id.startswith("req_")


async def test_wrong_credential_is_authentication_failed(store_server: RunningStoreServer) -> None:
    async with StoreClient(store_server.url, api_key="sk-ant-wrong-key-1234567890") as client:
        with pytest.raises(errors.AuthenticationFailed) as caught:
            await client.create_store("nope")
        assert client.request_count == 1  # 401 is not retried
    assert "sk-ant-wrong-key-1234567890" not in str(caught.value)
    assert store_server.admin_key not in str(caught.value)


# --- memories -------------------------------------------------------------------------------------------


async def test_memory_listing_views_pages_prefix_and_depth(store_server: RunningStoreServer) -> None:
    async with store_server.admin_client() as client:
        store = await new_store(client)
        paths = sorted(
            [f"/notes/n{i:02d}.md" for i in range(12)]
            + [f"/notes/deep/d{i}.md" for i in range(3)]
            + [f"/other/o{i}.md" for i in range(4)]
            + ["/top.md", "/notes-archive/x.md"]
        )
        for path in paths:
            await client.create_memory(store.id, path, f"content of {path}\n")

        before = client.request_count
        basic = [m async for m in client.list_memories(store.id, limit=7)]
        assert client.request_count - before >= 3  # 21 items, 7 a page
        assert all(isinstance(m, Memory) for m in basic)
        assert [m.path for m in basic] == paths
        for m in basic:
            assert isinstance(m, Memory)
            assert m.content is None
            assert m.content_sha256 == content_sha256(f"content of {m.path}\n")

        page = await client.list_memories_page(store.id, limit=5)
        assert len(page.data) == 5
        assert page.next_page is not None
        assert page.next_page.startswith("page_")
        second = await client.list_memories_page(store.id, limit=5, page=page.next_page)
        assert [m.path for m in page.data + second.data] == paths[:10]

        full = [m async for m in client.list_memories(store.id, view="full", limit=6)]
        assert [m.path for m in full] == paths
        for m in full:
            assert isinstance(m, Memory)
            assert m.content == f"content of {m.path}\n"

        notes = [m.path async for m in client.list_memories(store.id, path_prefix="/notes/", limit=4)]
        assert notes == [p for p in paths if p.startswith("/notes/")]

        root = [(type(i), i.path) async for i in client.list_memories(store.id, depth=1)]
        assert root == sorted(
            [
                (MemoryPrefix, "/notes/"),
                (MemoryPrefix, "/notes-archive/"),
                (MemoryPrefix, "/other/"),
                (Memory, "/top.md"),
            ],
            key=lambda item: item[1],
        )
        under_notes = [
            i async for i in client.list_memories(store.id, path_prefix="/notes/", depth=1, limit=5)
        ]
        assert [i.path for i in under_notes if isinstance(i, MemoryPrefix)] == ["/notes/deep/"]
        assert len([i for i in under_notes if isinstance(i, Memory)]) == 12

        with pytest.raises(errors.BadRequest) as caught:
            await client.list_memories_page(store.id, depth=2)
        assert caught.value.is_refusal
        assert "depth" in caught.value.message


async def test_create_get_update_with_precondition_and_delete(store_server: RunningStoreServer) -> None:
    async with store_server.admin_client() as client:
        store = await new_store(client)
        text = "héllo wörld\r\n"
        created = await client.create_memory(store.id, "/docs/a.md", text)
        assert created.content is None
        assert created.content_sha256 == content_sha256(text)
        assert created.content_size_bytes == len(text.encode())
        full_create = await client.create_memory(store.id, "/docs/b.md", "", view="full")
        assert full_create.content == ""

        got = await client.get_memory(store.id, created.id)
        assert got.content == text
        assert (await client.get_memory(store.id, created.id, view="basic")).content is None

        updated = await client.update_memory(
            store.id, created.id, content="v2", expected_sha256=created.content_sha256, view="full"
        )
        assert updated.content == "v2"
        assert updated.memory_version_id != created.memory_version_id

        # the same request again (a retry whose answer was lost): state already matches -> 200, no version
        again = await client.update_memory(
            store.id, created.id, content="v2", expected_sha256=created.content_sha256
        )
        assert again.content_sha256 == content_sha256("v2")
        assert again.memory_version_id == updated.memory_version_id

        with pytest.raises(errors.PreconditionFailed) as stale:
            await client.update_memory(
                store.id, created.id, content="v3", expected_sha256=created.content_sha256
            )
        assert stale.value.status == 409
        assert stale.value.error_type == "memory_precondition_failed_error"
        assert (await client.get_memory(store.id, created.id)).content == "v2"

        renamed = await client.update_memory(store.id, created.id, path="/docs/renamed.md")
        assert (renamed.id, renamed.path) == (created.id, "/docs/renamed.md")

        with pytest.raises(errors.PathConflict) as taken:
            await client.create_memory(store.id, "/docs/renamed.md", "other")
        assert taken.value.conflicting_memory_id == created.id
        assert taken.value.conflicting_path == "/docs/renamed.md"
        with pytest.raises(errors.PathConflict) as under:
            await client.create_memory(store.id, "/docs/renamed.md/child", "other")
        assert under.value.conflicting_memory_id == created.id

        with pytest.raises(errors.BadRequest) as bad_path:
            await client.create_memory(store.id, "/docs/../etc", "x")
        assert bad_path.value.is_refusal
        assert "'..'" in bad_path.value.message

        with pytest.raises(errors.PreconditionFailed):
            await client.delete_memory(store.id, created.id, expected_sha256=content_sha256("not it"))
        assert (await client.get_memory(store.id, created.id)).content == "v2"

        deleted = await client.delete_memory(store.id, created.id, expected_sha256=content_sha256("v2"))
        assert (deleted.type, deleted.id) == ("memory_deleted", created.id)
        with pytest.raises(errors.NotFound):
            await client.get_memory(store.id, created.id)
        await client.delete_memory(store.id, full_create.id)
        assert [m async for m in client.list_memories(store.id)] == []


# --- versions -------------------------------------------------------------------------------------------


async def test_versions_list_filter_get_and_redact(store_server: RunningStoreServer) -> None:
    async with store_server.admin_client() as client:
        store = await new_store(client)
        memory = await client.create_memory(store.id, "/v.md", "one")
        await client.update_memory(store.id, memory.id, content="two")
        await client.update_memory(store.id, memory.id, content="three")
        other = await client.create_memory(store.id, "/w.md", "w")

        versions = [v async for v in client.list_versions(store.id, memory_id=memory.id, limit=1)]
        assert [v.operation for v in versions] == ["modified", "modified", "created"]  # newest first
        assert all(v.content is None for v in versions)
        assert versions[0].id == (await client.get_memory(store.id, memory.id)).memory_version_id
        actor = versions[0].created_by
        assert isinstance(actor, ApiActor)

        everything = [v async for v in client.list_versions(store.id, view="full")]
        assert {v.memory_id for v in everything} == {memory.id, other.id}
        assert {v.content for v in everything} == {"one", "two", "three", "w"}
        modified = [v async for v in client.list_versions(store.id, operation="modified")]
        assert [v.content_sha256 for v in modified] == [content_sha256("three"), content_sha256("two")]
        by_key = [v async for v in client.list_versions(store.id, api_key_id=actor.api_key_id)]
        assert len(by_key) == 4
        oldest = versions[-1].created_at
        since = [v async for v in client.list_versions(store.id, created_at_gte=oldest, memory_id=memory.id)]
        assert len(since) == 3
        until = [
            v async for v in client.list_versions(store.id, created_at_lte=oldest - timedelta(seconds=1))
        ]
        assert until == []

        first = await client.get_version(store.id, versions[-1].id)
        assert (first.operation, first.content, first.path) == ("created", "one", "/v.md")
        assert (await client.get_version(store.id, versions[-1].id, view="basic")).content is None

        redacted = await client.redact_version(store.id, first.id)
        assert redacted.redacted_at is not None
        assert (redacted.content, redacted.path, redacted.content_sha256) == (None, None, None)
        assert isinstance(redacted.redacted_by, ApiActor)
        again = await client.get_version(store.id, first.id)
        assert again.redacted_at == redacted.redacted_at
        assert again.created_by == first.created_by

        with pytest.raises(errors.StoreError) as head:
            await client.redact_version(store.id, versions[0].id)
        assert 400 <= head.value.status < 500
        assert head.value.message

        await client.delete_memory(store.id, memory.id)
        after = [v async for v in client.list_versions(store.id, memory_id=memory.id)]
        assert [v.operation for v in after] == ["deleted", "modified", "modified", "created"]


# --- sessions and the work-item secret ------------------------------------------------------------------


async def test_mint_session_from_work_secret_and_get_session(store_server: RunningStoreServer) -> None:
    async with store_server.admin_client() as admin:
        writable = await admin.create_store(unique("Team Notes"))
        readable = await admin.create_store(unique("reference"))
        private = await new_store(admin, "private")
        await admin.create_memory(readable.id, "/ref.md", "read me")
        session_id = f"sesn_{uuid.uuid4().hex}"
        session, secret = await admin.mint_session(
            [
                MemoryStoreResource(memory_store_id=writable.id, access="read_write"),
                MemoryStoreResource(memory_store_id=readable.id, access="read_only"),
            ],
            session_id=session_id,
        )
        assert session.id == session_id
        assert decode_work_secret(secret).api_base_url == store_server.url

    async with StoreClient.from_work_secret(secret, base_url="http://127.0.0.1:1") as worker:
        assert worker.base_url == store_server.url
        assert decode_work_secret(secret).sessions_token not in repr(worker)
        fetched = await worker.get_session(session_id)
        resources = {r.memory_store_id: r for r in fetched.resources}
        assert set(resources) == {writable.id, readable.id}
        assert resources[readable.id].access == "read_only"
        assert resources[writable.id].access == "read_write"
        assert resources[writable.id].name == writable.name
        assert resources[writable.id].mount_path == default_mount_path(writable.name, writable.id)
        assert resources[writable.id].mount_path.startswith("/mnt/memory/team-notes-")

        written = await worker.create_memory(writable.id, "/by-agent.md", "agent note")
        versions = [v async for v in worker.list_versions(writable.id, memory_id=written.id)]
        assert isinstance(versions[0].created_by, SessionActor)
        assert versions[0].created_by.session_id == session_id
        by_session = [v async for v in worker.list_versions(writable.id, session_id=session_id)]
        assert [v.id for v in by_session] == [versions[0].id]

        assert [m.path async for m in worker.list_memories(readable.id)] == ["/ref.md"]
        with pytest.raises(errors.PermissionDenied) as denied:
            await worker.create_memory(readable.id, "/nope.md", "x")
        assert "read_only" in denied.value.message
        with pytest.raises(errors.NotFound):
            await worker.get_store(private.id)
        with pytest.raises(errors.StoreError) as not_admin:
            await worker.mint_session([MemoryStoreResource(memory_store_id=private.id)])
        assert not_admin.value.status in (401, 403)

    # the conftest helper mints the same kind of secret
    helper_secret = await store_server.mint_secret([(writable.id, "read_only")])
    async with StoreClient.from_work_secret(helper_secret) as worker:
        assert [m.path async for m in worker.list_memories(writable.id)] == ["/by-agent.md"]
        with pytest.raises(errors.PermissionDenied):
            await worker.update_memory(writable.id, written.id, content="changed")


# --- transport: a proxy in the path, a server that goes away and comes back -----------------------------


async def test_through_the_latency_proxy_every_request_is_counted(store_server: RunningStoreServer) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from latency_proxy import LatencyProxy

    async with (
        LatencyProxy(store_server.url, delay_s=0.001) as proxy,
        StoreClient(proxy.url, api_key=store_server.admin_key) as client,
    ):
        store = await new_store(client)
        for i in range(5):
            await client.create_memory(store.id, f"/p{i}.md", str(i))
        assert len([m async for m in client.list_memories(store.id, limit=2)]) == 5
        assert client.request_count == proxy.request_count
        assert proxy.request_count >= 1 + 5 + 3  # create store, 5 creates, 3 pages of 2


async def test_server_down_then_back(fresh_store_server: RunningStoreServer) -> None:
    sleep = NoSleep()
    async with fresh_store_server.admin_client(sleep=sleep, max_retries=2, timeout=5.0) as client:
        store = await new_store(client)
        fresh_store_server.stop()
        with pytest.raises(errors.TransportError) as down:
            await client.get_store(store.id)
        assert down.value.status == 0
        assert len(sleep.delays) == 2
        assert fresh_store_server.admin_key not in str(down.value)
        fresh_store_server.start()
        assert (await client.get_store(store.id)).id == store.id  # the pool recovers; the data survived
