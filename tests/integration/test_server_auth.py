"""Credentials and scoping: the admin key, sessions tokens limited to their session's stores, read_only."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest

from conftest import RunningStoreServer, StoreApi
from memsync.api.models import Session
from memsync.api.secret import decode_work_secret

pytestmark = pytest.mark.both_backends


def _error(resp: httpx.Response, status: int, error_type: str) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert body["request_id"] == resp.headers["request-id"]
    message: str = body["error"]["message"]
    return message


def test_missing_or_wrong_credentials_are_401(store_api: StoreApi) -> None:
    store = store_api.new_store()
    url = f"/v1/memory_stores/{store}/memories"
    assert "missing credential" in _error(store_api.anon("GET", url), 401, "authentication_error")
    assert "x-api-key" in _error(
        store_api.anon("GET", url, headers={"x-api-key": "sk-wrong"}), 401, "authentication_error"
    )
    message = _error(
        store_api.anon("GET", url, headers={"authorization": "Bearer sk-ant-req-forged"}),
        401,
        "authentication_error",
    )
    assert "sk-ant-req-forged" not in message
    _error(store_api.anon("GET", url, headers={"authorization": "Basic abc"}), 401, "authentication_error")
    _error(store_api.anon("GET", url, headers={"authorization": "Bearer"}), 401, "authentication_error")
    # a wrong admin key is refused even when a valid bearer token is also sent
    token = store_api.session_token([(store, "read_write")])
    _error(
        store_api.anon("GET", url, headers={"x-api-key": "nope", "authorization": f"Bearer {token}"}),
        401,
        "authentication_error",
    )
    for method, path, body in [
        ("POST", "/v1/memory_stores", {"name": "x"}),
        ("POST", url, {"path": "/x", "content": "x"}),
        ("POST", "/v1/memsync/sessions", {"resources": []}),
    ]:
        _error(store_api.anon(method, path, json=body), 401, "authentication_error")
    assert store_api.paths(store) == []


def test_wrong_key_message_never_echoes_it(store_api: StoreApi) -> None:
    resp = store_api.anon("GET", "/v1/memory_stores", headers={"x-api-key": "sk-very-secret-guess"})
    assert "sk-very-secret-guess" not in resp.text


def test_sessions_token_reaches_only_its_stores(store_api: StoreApi) -> None:
    mine, other = store_api.new_store("Mine"), store_api.new_store("Other")
    store_api.create(other, "/private", "not yours")
    token = store_api.session_token([(mine, "read_write")])
    assert store_api.bearer(token, "GET", f"/v1/memory_stores/{mine}").status_code == 200
    assert store_api.bearer(token, "GET", f"/v1/memory_stores/{mine}/memories").status_code == 200
    # another store: 404, exactly as if it did not exist
    for method, path, body in [
        ("GET", f"/v1/memory_stores/{other}", None),
        ("GET", f"/v1/memory_stores/{other}/memories", None),
        ("GET", f"/v1/memory_stores/{other}/memory_versions", None),
        ("POST", f"/v1/memory_stores/{other}/memories", {"path": "/intruder", "content": "x"}),
    ]:
        assert other in _error(store_api.bearer(token, method, path, json=body), 404, "not_found_error")
    assert store_api.paths(other) == ["/private"]
    # the store listing shows only the session's stores
    listed = store_api.bearer(token, "GET", "/v1/memory_stores", params={"limit": 100}).json()["data"]
    assert [s["id"] for s in listed] == [mine]


def test_session_writes_are_session_actors(store_api: StoreApi) -> None:
    store = store_api.new_store()
    token = store_api.session_token([(store, "read_write")], session_id="sesn_actor_test_" + store[-8:])
    resp = store_api.bearer(
        token, "POST", f"/v1/memory_stores/{store}/memories", json={"path": "/a", "content": "x"}
    )
    assert resp.status_code == 200, resp.text
    mem = resp.json()
    resp = store_api.bearer(
        token, "POST", f"/v1/memory_stores/{store}/memories/{mem['id']}", json={"content": "y"}
    )
    assert resp.status_code == 200
    versions = store_api.admin("GET", f"/v1/memory_stores/{store}/memory_versions").json()["data"]
    assert [v["created_by"] for v in versions] == [
        {"type": "session_actor", "session_id": "sesn_actor_test_" + store[-8:]}
    ] * 2
    by_session = store_api.admin(
        "GET",
        f"/v1/memory_stores/{store}/memory_versions",
        params={"session_id": "sesn_actor_test_" + store[-8:]},
    ).json()["data"]
    assert len(by_session) == 2


def test_read_only_attachment_refuses_writes_with_403(store_api: StoreApi) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "original")
    token = store_api.session_token([(store, "read_only")])
    base = f"/v1/memory_stores/{store}/memories"
    attempts = [
        store_api.bearer(token, "POST", base, json={"path": "/b", "content": "x"}),
        store_api.bearer(token, "POST", f"{base}/{mem['id']}", json={"content": "changed"}),
        store_api.bearer(token, "POST", f"{base}/{mem['id']}", json={"path": "/moved"}),
        store_api.bearer(token, "DELETE", f"{base}/{mem['id']}"),
    ]
    for resp in attempts:
        assert "read_only" in _error(resp, 403, "permission_error")
    # reads work
    got = store_api.bearer(token, "GET", f"{base}/{mem['id']}")
    assert got.status_code == 200
    assert got.json()["content"] == "original"
    assert store_api.paths(store) == ["/a"]
    assert len(store_api.admin("GET", f"/v1/memory_stores/{store}/memory_versions").json()["data"]) == 1


def test_sessions_token_cannot_manage_stores_or_sessions(store_api: StoreApi) -> None:
    store = store_api.new_store("Managed")
    mem = store_api.create(store, "/a", "x")
    store_api.admin("POST", f"/v1/memory_stores/{store}/memories/{mem['id']}", json={"content": "y"})
    old_version = store_api.admin(
        "GET", f"/v1/memory_stores/{store}/memory_versions", params={"operation": "created"}
    ).json()["data"][0]["id"]
    token = store_api.session_token([(store, "read_write")])
    attempts = [
        store_api.bearer(token, "POST", "/v1/memory_stores", json={"name": "Sneaky"}),
        store_api.bearer(token, "POST", f"/v1/memory_stores/{store}", json={"name": "Renamed"}),
        store_api.bearer(token, "POST", f"/v1/memory_stores/{store}/archive"),
        store_api.bearer(token, "DELETE", f"/v1/memory_stores/{store}"),
        store_api.bearer(token, "POST", f"/v1/memory_stores/{store}/memory_versions/{old_version}/redact"),
        store_api.bearer(token, "POST", "/v1/memsync/sessions", json={"resources": []}),
    ]
    for resp in attempts:
        assert "admin key" in _error(resp, 403, "permission_error")
    after = store_api.admin("GET", f"/v1/memory_stores/{store}").json()
    assert after["name"] == "Managed"
    assert after["archived_at"] is None
    version = store_api.admin("GET", f"/v1/memory_stores/{store}/memory_versions/{old_version}").json()
    assert version["redacted_at"] is None


def test_get_session(store_api: StoreApi, store_server: RunningStoreServer) -> None:
    one = store_api.new_store("User Preferences", description="likes and dislikes")
    two = store_api.new_store("Team Notes!!")
    sid = "sesn_get_" + one[-10:]
    token = store_api.session_token([(one, "read_only"), (two, "read_write")], session_id=sid)
    resp = store_api.bearer(token, "GET", f"/v1/sessions/{sid}")
    assert resp.status_code == 200, resp.text
    session = Session.model_validate(resp.json())
    assert session.id == sid
    assert [(r.memory_store_id, r.name, r.mount_path, r.access) for r in session.resources] == [
        (one, "User Preferences", "/mnt/memory/user-preferences", "read_only"),
        (two, "Team Notes!!", "/mnt/memory/team-notes", "read_write"),
    ]
    assert session.resources[0].description == "likes and dislikes"
    # the admin sees any session; a token sees only its own
    assert store_api.admin("GET", f"/v1/sessions/{sid}").json() == resp.json()
    other_token = store_api.session_token([(two, "read_write")])
    _error(store_api.bearer(other_token, "GET", f"/v1/sessions/{sid}"), 404, "not_found_error")
    _error(store_api.admin("GET", "/v1/sessions/sesn_unknown"), 404, "not_found_error")
    # the name is snapshotted at attach time
    store_api.admin("POST", f"/v1/memory_stores/{one}", json={"name": "Renamed Later"})
    again = store_api.bearer(token, "GET", f"/v1/sessions/{sid}").json()
    assert again["resources"][0]["mount_path"] == "/mnt/memory/user-preferences"


def test_mint_answers_a_decodable_work_secret(store_api: StoreApi, store_server: RunningStoreServer) -> None:
    store = store_api.new_store("Minted")
    resp = store_api.admin(
        "POST",
        "/v1/memsync/sessions",
        json={"resources": [{"type": "memory_store", "memory_store_id": store, "access": "read_only"}]},
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["session"]["id"].startswith("sesn_")
    assert body["session"]["resources"][0]["access"] == "read_only"
    secret = decode_work_secret(body["work_secret"])
    assert secret.sessions_token.startswith("sk-ant-req-")
    assert secret.api_base_url == store_server.url
    who = store_api.bearer(secret.sessions_token, "GET", f"/v1/sessions/{body['session']['id']}")
    assert who.status_code == 200


def test_tokens_are_stored_only_as_hashes(store_api: StoreApi, store_server: RunningStoreServer) -> None:
    store = store_api.new_store()
    token = store_api.session_token([(store, "read_write")])
    stored = store_server.stored_bytes()
    assert hashlib.sha256(token.encode()).hexdigest().encode() in stored  # the dump does hold the sessions
    assert token.encode() not in stored, "sessions token found in plain text in the database"
    assert store_server.admin_key.encode() not in stored, "admin key found in plain text in the database"


@pytest.mark.parametrize(
    ("resources", "session_id", "status", "error_type", "needle"),
    [
        ([{"memory_store_id": "memstore_missing"}], None, 404, "not_found_error", "memstore_missing"),
        (
            [{"memory_store_id": "STORE"}, {"memory_store_id": "STORE"}],
            None,
            400,
            "invalid_request_error",
            "twice",
        ),
        (
            [{"memory_store_id": "STORE", "access": "write_only"}],
            None,
            400,
            "invalid_request_error",
            "access",
        ),
        ([{"memory_store_id": "STORE", "type": "file"}], None, 400, "invalid_request_error", "type"),
        ([{"memory_store_id": "STORE", "extra": 1}], None, 400, "invalid_request_error", "extra"),
        ([{"memory_store_id": "STORE"}], "not-a-session", 400, "invalid_request_error", "sesn_"),
        ([{"memory_store_id": "STORE"}] * 9, None, 400, "invalid_request_error", "at most 8"),
        (
            [{"memory_store_id": "STORE"}, {"memory_store_id": "TWIN"}],
            None,
            400,
            "invalid_request_error",
            "mount",
        ),
    ],
)
def test_mint_refuses_bad_requests(
    store_api: StoreApi,
    *,
    resources: list[dict[str, Any]],
    session_id: str | None,
    status: int,
    error_type: str,
    needle: str,
) -> None:
    store = store_api.new_store("Slug Twin")
    twin = store_api.new_store("slug-twin")  # same mount slug as "Slug Twin"
    subst = {"STORE": store, "TWIN": twin}
    body: dict[str, Any] = {
        "resources": [
            {**r, "memory_store_id": subst.get(r["memory_store_id"], r["memory_store_id"])} for r in resources
        ]
    }
    if session_id is not None:
        body["session_id"] = session_id
    message = _error(store_api.admin("POST", "/v1/memsync/sessions", json=body), status, error_type)
    assert needle in message


def test_mint_refuses_an_existing_session_id(store_api: StoreApi) -> None:
    store = store_api.new_store()
    sid = "sesn_dup_" + store[-10:]
    first = store_api.session_token([(store, "read_write")], session_id=sid)
    resp = store_api.admin(
        "POST",
        "/v1/memsync/sessions",
        json={"session_id": sid, "resources": [{"memory_store_id": store, "access": "read_only"}]},
    )
    assert sid in _error(resp, 409, "conflict_error")
    # the first session keeps its token and its access
    assert store_api.bearer(
        first, "POST", f"/v1/memory_stores/{store}/memories", json={"path": "/w", "content": ""}
    )
    assert store_api.paths(store) == ["/w"]


def test_deleted_store_is_404_for_its_session(store_api: StoreApi) -> None:
    store = store_api.new_store()
    token = store_api.session_token([(store, "read_write")])
    store_api.admin("DELETE", f"/v1/memory_stores/{store}")
    _error(store_api.bearer(token, "GET", f"/v1/memory_stores/{store}/memories"), 404, "not_found_error")


def test_session_without_stores_sees_none(store_api: StoreApi) -> None:
    store_api.new_store("Someone Else's")
    token = store_api.session_token([])
    resp = store_api.bearer(token, "GET", "/v1/memory_stores", params={"include_archived": "true"})
    assert resp.status_code == 200
    assert resp.json() == {"data": [], "next_page": None}
