"""The store browser and viewer keys over plain HTTP, against the real server on both backends: who may sign
in, what the cookie is, the headers of every browser answer, CSRF and origin checks, signing out and revoking,
a viewer key's reach through the API, and ``--no-ui``. (tests/browser drives the pages in Chromium.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import RunningStoreServer, StoreApi, launch_store_server
from memsync.server.ui.security import CONTENT_SECURITY_POLICY

pytestmark = pytest.mark.both_backends


def browser(server: RunningStoreServer) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30.0, follow_redirects=False)


def sign_in(client: httpx.Client, key: str, **headers: str) -> httpx.Response:
    return client.post("/ui/signin", data={"key": key, "next": "/ui/"}, headers=headers)


def csrf_of(client: httpx.Client) -> str:
    page = client.get("/ui/").text
    marker = 'name="csrf" value="'
    start = page.index(marker) + len(marker)
    return page[start : page.index('"', start)]


def new_viewer_key(api: StoreApi, name: str = "auditor") -> dict[str, str]:
    made = api.admin("POST", "/v1/memsync/viewer_keys", json={"name": name})
    assert made.status_code == 200, made.text
    body: dict[str, str] = made.json()
    assert body["key"].startswith("sk-memsync-viewer-") and body["id"].startswith("viewerkey_")
    return body


@pytest.fixture
def client(store_server: RunningStoreServer) -> Iterator[httpx.Client]:
    with browser(store_server) as c:
        yield c


def test_signing_in_sets_a_strict_httponly_cookie_and_no_key_in_a_url(
    client: httpx.Client, store_server: RunningStoreServer
) -> None:
    first = client.get("/ui/stores/memstore_x?prefix=%2F")
    assert first.status_code == 303
    assert first.headers["location"] == "/ui/signin?next=%2Fui%2Fstores%2Fmemstore_x%3Fprefix%3D%252F"
    signed = sign_in(client, store_server.admin_key)
    assert signed.status_code == 303 and signed.headers["location"] == "/ui/"
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # plain HTTP on loopback
    assert store_server.admin_key not in cookie and store_server.admin_key not in signed.headers["location"]
    assert client.get("/ui/").status_code == 200
    behind_tls = browser(store_server)
    assert (
        "Secure"
        in sign_in(behind_tls, store_server.admin_key, **{"x-forwarded-proto": "https"}).headers["set-cookie"]
    )
    behind_tls.close()
    assert store_server.admin_key not in store_server.log_text()


@pytest.mark.parametrize("path", ["/ui/", "/ui/signin", "/docs", "/openapi.json", "/ui/static/ui.js"])
def test_every_browser_answer_carries_the_policy(client: httpx.Client, path: str) -> None:
    resp = client.get(path)
    assert resp.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert resp.headers["x-frame-options"] == "DENY"
    assert resp.headers["referrer-policy"] == "no-referrer"
    assert resp.headers["x-content-type-options"] == "nosniff"
    if not path.startswith("/ui/static/"):
        assert resp.headers["cache-control"] == "no-store"


def test_only_admin_and_viewer_keys_sign_in(
    client: httpx.Client, store_api: StoreApi, store_server: RunningStoreServer
) -> None:
    store = store_api.new_store("sign-in")
    token = store_api.session_token([(store, "read_write")])
    for key in (token, "sk-memsync-viewer-nope", ""):
        refused = sign_in(client, key)
        assert refused.status_code == 401 and "set-cookie" not in refused.headers
        assert "not a current admin key or viewer key" in refused.text
    viewer = new_viewer_key(store_api)
    assert sign_in(client, viewer["key"]).status_code == 303
    page = client.get("/ui/")
    assert "a viewer key" in page.text and viewer["id"] in page.text


def test_forms_need_the_sessions_csrf_token_and_the_servers_origin(
    client: httpx.Client, store_server: RunningStoreServer
) -> None:
    sign_in(client, store_server.admin_key)
    csrf = csrf_of(client)
    forged = client.post("/ui/signout", data={"csrf": "0" * 64})
    assert forged.status_code == 403 and "stale" in forged.text
    cross = client.post("/ui/signout", data={"csrf": csrf}, headers={"origin": "https://evil.example"})
    assert cross.status_code == 403
    site = client.post(
        "/ui/signout", data={"csrf": csrf}, headers={"origin": "null", "sec-fetch-site": "cross-site"}
    )
    assert site.status_code == 403
    assert client.get("/ui/").status_code == 200  # still signed in
    out = client.post("/ui/signout", data={"csrf": csrf}, headers={"origin": store_server.url})
    assert out.status_code == 303
    assert client.get("/ui/").status_code == 303  # the cookie is gone from the jar...


def test_signing_out_and_revoking_end_the_session_everywhere(
    store_api: StoreApi, store_server: RunningStoreServer
) -> None:
    viewer = new_viewer_key(store_api, "to-revoke")
    with browser(store_server) as one, browser(store_server) as kept:
        sign_in(one, store_server.admin_key)
        stolen = one.cookies.get("memsync_ui")
        one.post("/ui/signout", data={"csrf": csrf_of(one)})
        kept.cookies.set("memsync_ui", stolen or "")
        assert kept.get("/ui/").status_code == 303  # ...and ended on the server: a copy of it is refused
        sign_in(kept, viewer["key"])
        assert kept.get("/ui/").status_code == 200
        revoked = store_api.admin("POST", f"/v1/memsync/viewer_keys/{viewer['id']}/revoke")
        assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
        assert kept.get("/ui/").status_code == 303
    listed = store_api.admin("GET", "/v1/memsync/viewer_keys").json()["data"]
    assert [k["revoked_at"] is not None for k in listed if k["id"] == viewer["id"]] == [True]
    assert all("key" not in k for k in listed)


def test_a_viewer_key_reads_every_store_and_writes_nothing(store_api: StoreApi) -> None:
    store = store_api.new_store("viewer reach")
    memory = store_api.create(store, "/a.md", "hello")
    key = new_viewer_key(store_api)["key"]

    def as_viewer(method: str, path: str, **kw: object) -> httpx.Response:
        return store_api.anon(method, path, headers={"x-api-key": key}, **kw)  # type: ignore[arg-type]

    assert as_viewer("GET", "/v1/memory_stores").status_code == 200
    assert as_viewer("GET", f"/v1/memory_stores/{store}/memories/{memory['id']}").json()["content"] == "hello"
    assert as_viewer("GET", f"/v1/memory_stores/{store}/memory_versions").status_code == 200
    bearer = store_api.bearer(key, "GET", f"/v1/memory_stores/{store}/memories")
    assert bearer.status_code == 200
    for method, path, body in (
        ("POST", f"/v1/memory_stores/{store}/memories", {"path": "/b.md", "content": "x"}),
        ("POST", f"/v1/memory_stores/{store}/memories/{memory['id']}", {"content": "x"}),
        ("DELETE", f"/v1/memory_stores/{store}/memories/{memory['id']}", None),
        ("POST", "/v1/memory_stores", {"name": "nope"}),
        ("POST", f"/v1/memory_stores/{store}/archive", None),
        ("POST", "/v1/memsync/viewer_keys", {"name": "more"}),
        ("POST", "/v1/memsync/sessions", {"resources": []}),
        ("GET", "/v1/environments", None),
    ):
        refused = as_viewer(method, path, json=body) if body is not None else as_viewer(method, path)
        assert refused.status_code == 403, (method, path, refused.text)
        assert "viewer key" in refused.json()["error"]["message"]
    assert store_api.paths(store) == ["/a.md"]


def test_no_ui_serves_neither_the_browser_nor_the_reference(tmp_path: Path) -> None:
    server = launch_store_server(tmp_path, ("--no-ui",))
    try:
        for path in ("/ui/", "/ui/signin", "/docs", "/openapi.json", "/ui/static/ui.css"):
            resp = httpx.get(server.url + path, headers={"x-api-key": server.admin_key})
            assert resp.status_code == 404, path
            assert "content-security-policy" not in resp.headers
    finally:
        server.stop()
