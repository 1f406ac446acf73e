"""The official ``anthropic`` Python SDK, unchanged (only ``base_url`` set), against our store server."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import anthropic
import pytest

from conftest import RunningStoreServer

pytestmark = pytest.mark.both_backends


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture
def sdk(store_server: RunningStoreServer) -> Iterator[anthropic.Anthropic]:
    client = anthropic.Anthropic(api_key=store_server.admin_key, base_url=store_server.url)
    try:
        yield client
    finally:
        client.close()


def test_the_sdk_signatures_we_rely_on() -> None:
    ms = anthropic.Anthropic(api_key="unused", base_url="http://127.0.0.1:9").beta.memory_stores
    update = inspect.signature(ms.memories.update).parameters
    assert {"memory_id", "memory_store_id", "content", "path", "precondition", "view"} <= set(update)
    assert "expected_content_sha256" in inspect.signature(ms.memories.delete).parameters
    assert {"depth", "limit", "page", "path_prefix", "view"} <= set(
        inspect.signature(ms.memories.list).parameters
    )
    assert {"memory_id", "operation", "created_at_gte", "view"} <= set(
        inspect.signature(ms.memory_versions.list).parameters
    )
    assert "memory_store_id" in inspect.signature(ms.memory_versions.redact).parameters


def test_memory_stores(sdk: anthropic.Anthropic) -> None:
    stores = sdk.beta.memory_stores
    created = stores.create(name="SDK Store", description="made by the SDK", metadata={"by": "sdk"})
    assert created.id.startswith("memstore_")
    assert created.name == "SDK Store"
    assert created.metadata == {"by": "sdk"}
    assert stores.retrieve(created.id).id == created.id
    updated = stores.update(created.id, name="SDK Store 2", metadata={"by": None, "tier": "gold"})
    assert updated.name == "SDK Store 2"
    assert updated.metadata == {"tier": "gold"}
    extra = [stores.create(name=f"SDK page {i}") for i in range(3)]
    listed = [s.id for s in stores.list(limit=2, created_at_gte=datetime.now(UTC) - timedelta(minutes=5))]
    assert {created.id, *(s.id for s in extra)} <= set(listed)
    assert len(listed) == len(set(listed))
    archived = stores.archive(created.id)
    assert archived.archived_at is not None
    assert created.id not in [s.id for s in stores.list(limit=100)]
    assert created.id in [s.id for s in stores.list(limit=100, include_archived=True)]
    deleted = stores.delete(created.id)
    assert deleted.id == created.id
    with pytest.raises(anthropic.NotFoundError) as exc:
        stores.retrieve(created.id)
    assert exc.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    assert (exc.value.request_id or "").startswith("req_")


def test_memories(sdk: anthropic.Anthropic) -> None:
    store = sdk.beta.memory_stores.create(name="SDK Memories").id
    memories = sdk.beta.memory_stores.memories
    made = {}
    for i in range(25):
        path = f"/notes/{i:02d}.md" if i % 2 else f"/top-{i:02d}.md"
        made[path] = memories.create(store, path=path, content=f"memory {i} é")
    first = made["/notes/01.md"]
    assert first.id.startswith("mem_")
    assert first.content is None
    assert first.content_sha256 == _sha("memory 1 é")
    assert first.content_size_bytes == len("memory 1 é".encode())

    # basic view, several pages via auto-pagination
    basic = list(memories.list(store, limit=7))
    assert [m.path for m in basic] == sorted(made)
    assert all(m.content is None for m in basic)
    # full view, several pages (capped at 20 per page)
    full = list(memories.list(store, view="full", limit=20))
    assert len(full) == 25
    assert all(m.content == f"memory {int(m.path[-5:-3])} é" for m in full)  # type: ignore[union-attr]
    # depth=1 rollups and a path_prefix
    top = list(memories.list(store, depth=1, limit=5))
    assert (top[0].type, top[0].path) == ("memory_prefix", "/notes/")
    assert len(top) == 14
    assert len(list(memories.list(store, path_prefix="/notes/", limit=4))) == 12

    got = memories.retrieve(first.id, memory_store_id=store)
    assert got.content == "memory 1 é"

    # update with a precondition
    updated = memories.update(
        first.id,
        memory_store_id=store,
        content="edited",
        precondition={"type": "content_sha256", "content_sha256": first.content_sha256},
    )
    assert updated.content_sha256 == _sha("edited")
    assert updated.memory_version_id != first.memory_version_id
    with pytest.raises(anthropic.ConflictError) as conflict:
        memories.update(
            first.id,
            memory_store_id=store,
            content="lost update",
            precondition={"type": "content_sha256", "content_sha256": first.content_sha256},
        )
    assert conflict.value.body["error"]["type"] == "memory_precondition_failed_error"  # type: ignore[index]
    # the retry-safe exception: stale precondition, but state already matches → 200
    again = memories.update(
        first.id,
        memory_store_id=store,
        content="edited",
        precondition={"type": "content_sha256", "content_sha256": first.content_sha256},
    )
    assert again.memory_version_id == updated.memory_version_id
    renamed = memories.update(first.id, memory_store_id=store, path="/renamed.md", view="full")
    assert renamed.path == "/renamed.md"
    assert renamed.content == "edited"

    # path conflicts
    with pytest.raises(anthropic.ConflictError) as taken:
        memories.create(store, path="/renamed.md", content="x")
    assert taken.value.body["error"]["type"] == "memory_path_conflict_error"  # type: ignore[index]
    assert taken.value.body["error"]["conflicting_memory_id"] == first.id  # type: ignore[index]

    # delete with expected sha
    with pytest.raises(anthropic.ConflictError):
        memories.delete(first.id, memory_store_id=store, expected_content_sha256=_sha("not it"))
    deleted = memories.delete(first.id, memory_store_id=store, expected_content_sha256=_sha("edited"))
    assert deleted.id == first.id
    with pytest.raises(anthropic.NotFoundError):
        memories.retrieve(first.id, memory_store_id=store)

    # bad input surfaces as the SDK's BadRequestError
    with pytest.raises(anthropic.BadRequestError) as bad:
        memories.create(store, path="relative.md", content="x")
    assert "must start with '/'" in bad.value.body["error"]["message"]  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError):
        memories.create(store, path="/too-big", content="x" * 102_401)


def test_memory_versions(sdk: anthropic.Anthropic) -> None:
    store = sdk.beta.memory_stores.create(name="SDK Versions").id
    memories = sdk.beta.memory_stores.memories
    versions = sdk.beta.memory_stores.memory_versions
    mem = memories.create(store, path="/v.md", content="v0")
    for i in range(1, 6):
        memories.update(mem.id, memory_store_id=store, content=f"v{i}")
    listed = list(versions.list(store, memory_id=mem.id, limit=2))
    assert [v.operation for v in listed] == ["modified"] * 5 + ["created"]
    assert listed[0].created_by is not None
    assert listed[0].created_by.type == "api_actor"
    assert len(list(versions.list(store, operation="created"))) == 1
    assert list(versions.list(store, created_at_gte=datetime.now(UTC) + timedelta(hours=1))) == []
    full = list(versions.list(store, view="full", limit=20))
    assert [v.content for v in full] == [f"v{i}" for i in range(5, -1, -1)]

    oldest = listed[-1]
    got = versions.retrieve(oldest.id, memory_store_id=store)
    assert got.content == "v0"
    redacted = versions.redact(oldest.id, memory_store_id=store)
    assert redacted.redacted_at is not None
    assert redacted.content is None
    assert redacted.path is None
    assert versions.retrieve(oldest.id, memory_store_id=store).redacted_at is not None
    with pytest.raises(anthropic.ConflictError) as head:
        versions.redact(listed[0].id, memory_store_id=store)
    assert head.value.body["error"]["type"] == "conflict_error"  # type: ignore[index]


def test_sdk_with_a_sessions_token(store_server: RunningStoreServer) -> None:
    """The worker's way in: Bearer auth with the sessions token, no x-api-key."""
    from memsync.api.secret import decode_work_secret

    admin = anthropic.Anthropic(api_key=store_server.admin_key, base_url=store_server.url)
    store = admin.beta.memory_stores.create(name="SDK Session").id
    secret = decode_work_secret(store_server.mint_secret_sync([(store, "read_only")]))
    worker = anthropic.Anthropic(api_key=None, auth_token=secret.sessions_token, base_url=secret.api_base_url)
    try:
        admin.beta.memory_stores.memories.create(store, path="/seen", content="x")
        assert [m.path for m in worker.beta.memory_stores.memories.list(store)] == ["/seen"]
        with pytest.raises(anthropic.PermissionDeniedError):
            worker.beta.memory_stores.memories.create(store, path="/refused", content="x")
    finally:
        worker.close()
        admin.close()
