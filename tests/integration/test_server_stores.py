"""Memory stores over real HTTP: create, list, retrieve, update (metadata patch), archive, delete."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from conftest import RunningStoreServer, StoreApi

pytestmark = pytest.mark.both_backends


def _error(resp: httpx.Response, status: int, error_type: str) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["error"]["type"] == error_type
    assert body["request_id"] == resp.headers["request-id"]
    message: str = body["error"]["message"]
    return message


def _store(api: StoreApi, store_id: str) -> dict[str, Any]:
    resp = api.admin("GET", f"/v1/memory_stores/{store_id}")
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _all_store_ids(api: StoreApi, **params: Any) -> list[str]:
    ids: list[str] = []
    page = None
    while True:
        query = {"limit": 100, **params}
        if page:
            query["page"] = page
        body = api.admin("GET", "/v1/memory_stores", params=query).json()
        ids.extend(s["id"] for s in body["data"])
        page = body["next_page"]
        if not page:
            return ids


def test_create_and_retrieve(store_api: StoreApi) -> None:
    resp = store_api.admin(
        "POST", "/v1/memory_stores", json={"name": "User Preferences", "metadata": {"team": "core"}}
    )
    assert resp.status_code == 200, resp.text
    created = resp.json()
    assert created["type"] == "memory_store"
    assert created["id"].startswith("memstore_")
    assert created["description"] == ""
    assert created["metadata"] == {"team": "core"}
    assert created["archived_at"] is None
    assert created["created_at"] == created["updated_at"]
    assert _store(store_api, created["id"]) == created


def test_unknown_store_is_404(store_api: StoreApi) -> None:
    message = _error(store_api.admin("GET", "/v1/memory_stores/memstore_nope"), 404, "not_found_error")
    assert "memstore_nope" in message
    _error(store_api.admin("GET", "/v1/memory_stores/memstore_nope/memories"), 404, "not_found_error")
    _error(
        store_api.admin(
            "POST", "/v1/memory_stores/memstore_nope/memories", json={"path": "/a", "content": "x"}
        ),
        404,
        "not_found_error",
    )


def test_bad_store_bodies_store_nothing(store_api: StoreApi) -> None:
    before = set(_all_store_ids(store_api, include_archived="true"))
    cases = [
        ({}, "missing required field 'name'"),
        ({"name": ""}, "name must be 1 to 255"),
        ({"name": "x" * 256}, "name must be 1 to 255"),
        ({"name": "a\x07b"}, "control characters"),
        ({"name": "ok", "description": "d" * 1025}, "description must be at most 1024"),
        ({"name": "ok", "metadata": {f"k{i}": "v" for i in range(17)}}, "at most 16 keys"),
        ({"name": "ok", "metadata": {"k": 1}}, "metadata.k"),
        ({"name": "ok", "colour": "red"}, "unknown field 'colour'"),
    ]
    for body, needle in cases:
        assert needle in _error(
            store_api.admin("POST", "/v1/memory_stores", json=body), 400, "invalid_request_error"
        )
    assert set(_all_store_ids(store_api, include_archived="true")) == before


def test_update_patches_metadata_and_moves_updated_at_only_on_change(store_api: StoreApi) -> None:
    store = store_api.new_store("Before", description="d", metadata={"keep": "1", "drop": "2", "edit": "3"})
    original = _store(store_api, store)
    time.sleep(0.002)
    store_api.create(store, "/a", "memory writes do not advance updated_at")
    assert _store(store_api, store)["updated_at"] == original["updated_at"]
    noop = store_api.admin(
        "POST", f"/v1/memory_stores/{store}", json={"name": "Before", "metadata": {"keep": "1"}}
    )
    assert noop.status_code == 200
    assert noop.json()["updated_at"] == original["updated_at"]
    resp = store_api.admin(
        "POST",
        f"/v1/memory_stores/{store}",
        json={"name": "After", "metadata": {"drop": None, "edit": "33", "new": "4"}},
    )
    assert resp.status_code == 200, resp.text
    updated = resp.json()
    assert updated["name"] == "After"
    assert updated["description"] == "d"
    assert updated["metadata"] == {"keep": "1", "edit": "33", "new": "4"}
    assert updated["updated_at"] > original["updated_at"]
    assert updated["created_at"] == original["created_at"]
    cleared = store_api.admin("POST", f"/v1/memory_stores/{store}", json={"description": ""}).json()
    assert cleared["description"] == ""
    assert cleared["metadata"] == updated["metadata"]


def test_update_refuses_bad_fields_and_keeps_the_store(store_api: StoreApi) -> None:
    store = store_api.new_store("Name", metadata={f"k{i}": "v" for i in range(16)})
    original = _store(store_api, store)
    for body in ({"name": ""}, {"metadata": {"k16": "v"}}, {"unknown": 1}, {"description": "x" * 2000}):
        _error(store_api.admin("POST", f"/v1/memory_stores/{store}", json=body), 400, "invalid_request_error")
    assert _store(store_api, store) == original


def test_list_newest_first_with_cursor_and_filters(store_api: StoreApi) -> None:
    stamp = datetime.now(UTC) - timedelta(seconds=1)
    made = [store_api.new_store(f"list-{i}") for i in range(5)]
    page1 = store_api.admin(
        "GET", "/v1/memory_stores", params={"limit": 2, "created_at[gte]": stamp.isoformat()}
    ).json()
    ids = [s["id"] for s in page1["data"]]
    page = page1["next_page"]
    assert page.startswith("page_")
    while page:
        body = store_api.admin(
            "GET",
            "/v1/memory_stores",
            params={"limit": 2, "created_at[gte]": stamp.isoformat(), "page": page},
        ).json()
        ids.extend(s["id"] for s in body["data"])
        page = body["next_page"]
    # other tests of this worker may create stores concurrently; ours appear newest first, each once
    ours = [i for i in ids if i in made]
    assert ours == list(reversed(made))
    assert len(ids) == len(set(ids))
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert (
        store_api.admin("GET", "/v1/memory_stores", params={"created_at[gte]": future}).json()["data"] == []
    )
    past = (stamp - timedelta(days=1)).isoformat()
    assert store_api.admin("GET", "/v1/memory_stores", params={"created_at[lte]": past}).json()["data"] == []
    _error(
        store_api.admin("GET", "/v1/memory_stores", params={"created_at[gte]": "last tuesday"}),
        400,
        "invalid_request_error",
    )


def test_archive_is_one_way_idempotent_and_read_only(store_api: StoreApi) -> None:
    store = store_api.new_store("To Archive")
    mem = store_api.create(store, "/kept", "kept")
    first = store_api.admin("POST", f"/v1/memory_stores/{store}/archive")
    assert first.status_code == 200
    archived_at = first.json()["archived_at"]
    assert archived_at is not None
    second = store_api.admin("POST", f"/v1/memory_stores/{store}/archive")
    assert second.status_code == 200
    assert second.json()["archived_at"] == archived_at
    # hidden from the default listing, shown with include_archived
    assert store not in _all_store_ids(store_api)
    assert store in _all_store_ids(store_api, include_archived="true")
    # reads still work
    assert store_api.paths(store) == ["/kept"]
    # writes are refused with 409 conflict_error, and nothing changes
    base = f"/v1/memory_stores/{store}"
    attempts = [
        store_api.admin("POST", f"{base}/memories", json={"path": "/new", "content": "x"}),
        store_api.admin("POST", f"{base}/memories/{mem['id']}", json={"content": "changed"}),
        store_api.admin("DELETE", f"{base}/memories/{mem['id']}"),
        store_api.admin("POST", base, json={"name": "Renamed"}),
    ]
    for resp in attempts:
        assert "archived" in _error(resp, 409, "conflict_error")
    assert store_api.paths(store) == ["/kept"]
    assert store_api.admin("GET", f"{base}/memories/{mem['id']}").json()["content"] == "kept"
    assert _store(store_api, store)["name"] == "To Archive"
    # an archived store cannot be attached to a new session
    resp = store_api.admin(
        "POST",
        "/v1/memsync/sessions",
        json={"resources": [{"type": "memory_store", "memory_store_id": store}]},
    )
    assert "archived" in _error(resp, 409, "conflict_error")
    # and it can still be deleted
    assert store_api.admin("DELETE", base).status_code == 200


def test_delete_cascades(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "x")
    resp = store_api.admin("DELETE", f"/v1/memory_stores/{store}")
    assert resp.status_code == 200
    assert resp.json() == {"type": "memory_store_deleted", "id": store}
    _error(store_api.admin("GET", f"/v1/memory_stores/{store}"), 404, "not_found_error")
    _error(store_api.admin("GET", f"/v1/memory_stores/{store}/memories/{mem['id']}"), 404, "not_found_error")
    _error(store_api.admin("GET", f"/v1/memory_stores/{store}/memory_versions"), 404, "not_found_error")
    _error(store_api.admin("DELETE", f"/v1/memory_stores/{store}"), 404, "not_found_error")
    assert store not in _all_store_ids(store_api, include_archived="true")


def test_data_and_cursors_survive_a_restart(fresh_store_server: RunningStoreServer) -> None:
    api = StoreApi(fresh_store_server)
    try:
        store = api.new_store("Durable")
        for i in range(5):
            api.create(store, f"/m{i}", f"v{i}")
        page = api.admin("GET", f"/v1/memory_stores/{store}/memories", params={"limit": 2}).json()
        fresh_store_server.stop()
        fresh_store_server.start()
        rest = api.admin(
            "GET", f"/v1/memory_stores/{store}/memories", params={"limit": 100, "page": page["next_page"]}
        )
        assert rest.status_code == 200, rest.text
        assert [m["path"] for m in rest.json()["data"]] == ["/m2", "/m3", "/m4"]
        assert api.paths(store) == [f"/m{i}" for i in range(5)]
    finally:
        api.close()


def test_unknown_endpoint_and_method_use_the_envelope(store_api: StoreApi) -> None:
    assert "no such endpoint" in _error(store_api.admin("GET", "/v1/nothing"), 404, "not_found_error")
    _error(store_api.admin("PUT", "/v1/memory_stores"), 405, "invalid_request_error")
