"""Memory versions: one per real change, newest first, filters, views, redaction, deleted lineages."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from conftest import StoreApi
from memsync.api.models import MemoryVersion

pytestmark = pytest.mark.both_backends


def _error(resp: httpx.Response, status: int, error_type: str) -> str:
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["type"] == error_type
    message: str = resp.json()["error"]["message"]
    return message


def _list(api: StoreApi, store: str, **params: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    page = None
    while True:
        query = dict(params)
        if page:
            query["page"] = page
        resp = api.admin("GET", f"/v1/memory_stores/{store}/memory_versions", params=query)
        assert resp.status_code == 200, resp.text
        out.extend(resp.json()["data"])
        page = resp.json()["next_page"]
        if not page:
            return out


def _history(api: StoreApi) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A store with /a (created, modified twice) and /b (created, deleted)."""
    store = api.new_store()
    a = api.create(store, "/a", "a1")
    api.admin("POST", f"/v1/memory_stores/{store}/memories/{a['id']}", json={"content": "a2"})
    api.admin("POST", f"/v1/memory_stores/{store}/memories/{a['id']}", json={"content": "a3", "path": "/a3"})
    b = api.create(store, "/b", "b1")
    api.admin("DELETE", f"/v1/memory_stores/{store}/memories/{b['id']}")
    return store, a, b


def test_every_change_appends_one_version_newest_first(store_api: StoreApi) -> None:
    store, a, b = _history(store_api)
    versions = _list(store_api, store, view="full")
    for v in versions:
        MemoryVersion.model_validate(v)
    assert [(v["memory_id"], v["operation"], v["path"], v["content"]) for v in versions] == [
        (b["id"], "deleted", "/b", None),
        (b["id"], "created", "/b", "b1"),
        (a["id"], "modified", "/a3", "a3"),
        (a["id"], "modified", "/a", "a2"),
        (a["id"], "created", "/a", "a1"),
    ]
    assert [v["created_at"] for v in versions] == sorted((v["created_at"] for v in versions), reverse=True)
    assert versions[2]["content_sha256"] == hashlib.sha256(b"a3").hexdigest()
    assert versions[2]["content_size_bytes"] == 2
    head = store_api.admin("GET", f"/v1/memory_stores/{store}/memories/{a['id']}").json()["memory_version_id"]
    assert head == versions[2]["id"]
    actor = versions[0]["created_by"]
    assert actor["type"] == "api_actor"
    assert actor["api_key_id"].startswith("apikey_")
    assert store_api.server.admin_key not in str(versions)


def test_basic_view_has_no_content_but_keeps_hashes(store_api: StoreApi) -> None:
    store, _, _ = _history(store_api)
    basic = _list(store_api, store)
    assert all(v["content"] is None for v in basic)
    assert [v["content_sha256"] is None for v in basic] == [True, False, False, False, False]


def test_filters(store_api: StoreApi) -> None:
    store, a, b = _history(store_api)
    assert [v["operation"] for v in _list(store_api, store, memory_id=a["id"])] == [
        "modified",
        "modified",
        "created",
    ]
    # a deleted memory's lineage stays listable, including its deleted row
    assert [v["operation"] for v in _list(store_api, store, memory_id=b["id"])] == ["deleted", "created"]
    assert len(_list(store_api, store, operation="modified")) == 2
    assert len(_list(store_api, store, operation="deleted")) == 1
    key_id = _list(store_api, store)[0]["created_by"]["api_key_id"]
    assert len(_list(store_api, store, api_key_id=key_id)) == 5
    assert _list(store_api, store, api_key_id="apikey_other") == []
    assert _list(store_api, store, session_id="sesn_nobody") == []
    assert _list(store_api, store, service_account_id="svac_nobody") == []
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    assert _list(store_api, store, **{"created_at[gte]": future}) == []
    assert len(_list(store_api, store, **{"created_at[gte]": past})) == 5
    assert _list(store_api, store, **{"created_at[lte]": past}) == []
    middle = _list(store_api, store)[2]["created_at"]
    upto = _list(store_api, store, **{"created_at[lte]": middle})
    assert len(upto) == 3
    assert upto[0]["created_at"] == middle
    assert "operation" in _error(
        store_api.admin("GET", f"/v1/memory_stores/{store}/memory_versions", params={"operation": "renamed"}),
        400,
        "invalid_request_error",
    )


def test_pagination_and_limits(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "0")
    for i in range(1, 25):
        store_api.admin("POST", f"/v1/memory_stores/{store}/memories/{mem['id']}", json={"content": str(i)})
    walked = _list(store_api, store, limit=7)
    assert len(walked) == 25
    assert len({v["id"] for v in walked}) == 25
    full = store_api.admin(
        "GET", f"/v1/memory_stores/{store}/memory_versions", params={"view": "full", "limit": 100}
    ).json()
    assert len(full["data"]) == 20
    assert full["next_page"]
    assert [v["content"] for v in full["data"]] == [str(i) for i in range(24, 4, -1)]
    _error(
        store_api.admin("GET", f"/v1/memory_stores/{store}/memory_versions", params={"limit": 101}),
        400,
        "invalid_request_error",
    )
    # a version-listing cursor with another filter is refused
    first = store_api.admin("GET", f"/v1/memory_stores/{store}/memory_versions", params={"limit": 2}).json()
    resp = store_api.admin(
        "GET",
        f"/v1/memory_stores/{store}/memory_versions",
        params={"limit": 2, "page": first["next_page"], "operation": "modified"},
    )
    assert "different query" in _error(resp, 400, "invalid_request_error")


def test_retrieve_defaults_to_full(store_api: StoreApi) -> None:
    store, a, _ = _history(store_api)
    version_id = _list(store_api, store, memory_id=a["id"])[-1]["id"]
    got = store_api.admin("GET", f"/v1/memory_stores/{store}/memory_versions/{version_id}").json()
    assert got["content"] == "a1"
    basic = store_api.admin(
        "GET", f"/v1/memory_stores/{store}/memory_versions/{version_id}", params={"view": "basic"}
    ).json()
    assert basic["content"] is None
    _error(
        store_api.admin("GET", f"/v1/memory_stores/{store}/memory_versions/memver_nope"),
        404,
        "not_found_error",
    )
    other = store_api.new_store()
    _error(
        store_api.admin("GET", f"/v1/memory_stores/{other}/memory_versions/{version_id}"),
        404,
        "not_found_error",
    )


def test_redact_an_old_version(store_api: StoreApi) -> None:
    store, a, _ = _history(store_api)
    old = _list(store_api, store, memory_id=a["id"])[-1]
    resp = store_api.admin("POST", f"/v1/memory_stores/{store}/memory_versions/{old['id']}/redact")
    assert resp.status_code == 200, resp.text
    red = resp.json()
    assert red["redacted_at"] is not None
    assert red["redacted_by"]["type"] == "api_actor"
    assert red["created_by"] == old["created_by"]  # kept through redaction
    assert (red["content"], red["content_sha256"], red["content_size_bytes"], red["path"]) == (None,) * 4
    assert red["operation"] == "created"
    # retrieve still answers 200, with the nulls
    got = store_api.admin("GET", f"/v1/memory_stores/{store}/memory_versions/{old['id']}")
    assert got.status_code == 200
    assert got.json() == red
    # idempotent
    time.sleep(0.002)
    again = store_api.admin("POST", f"/v1/memory_stores/{store}/memory_versions/{old['id']}/redact")
    assert again.status_code == 200
    assert again.json()["redacted_at"] == red["redacted_at"]
    # the memory itself is untouched
    assert store_api.admin("GET", f"/v1/memory_stores/{store}/memories/{a['id']}").json()["content"] == "a3"


def test_the_head_of_a_live_memory_cannot_be_redacted(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "secret")
    url = f"/v1/memory_stores/{store}/memory_versions/{mem['memory_version_id']}/redact"
    message = _error(store_api.admin("POST", url), 409, "conflict_error")
    assert "current version" in message
    assert mem["id"] in message
    head = store_api.admin(
        "GET", f"/v1/memory_stores/{store}/memory_versions/{mem['memory_version_id']}"
    ).json()
    assert head["content"] == "secret"
    assert head["redacted_at"] is None
    # once the memory is deleted, its former head can be redacted
    store_api.admin("DELETE", f"/v1/memory_stores/{store}/memories/{mem['id']}")
    assert store_api.admin("POST", url).status_code == 200
    # and so can the deleted row itself
    deleted = _list(store_api, store, operation="deleted")[0]
    resp = store_api.admin("POST", f"/v1/memory_stores/{store}/memory_versions/{deleted['id']}/redact")
    assert resp.status_code == 200
    assert resp.json()["path"] is None


def test_redact_unknown_version_is_404(store_api: StoreApi) -> None:
    store = store_api.new_store()
    _error(
        store_api.admin("POST", f"/v1/memory_stores/{store}/memory_versions/memver_nope/redact"),
        404,
        "not_found_error",
    )
