"""Credentials in production: sessions tokens that expire and are revoked with their session, named admin
keys that rotate, and the commands that manage them (``memsync store token [revoke]``, ``admin-key``)."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from conftest import RunningStoreServer, StoreApi
from memsync.api.secret import decode_work_secret
from support.server_process import run_cli

pytestmark = pytest.mark.both_backends


def _memsync(
    server: RunningStoreServer, *args: str, key: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, url=server.url, admin_key=key or server.admin_key)


def _mint(store_api: StoreApi, store: str, **extra: object) -> tuple[str, str]:
    resp = store_api.admin(
        "POST", "/v1/memsync/sessions", json={"resources": [{"memory_store_id": store}], **extra}
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["session"]["id"], decode_work_secret(resp.json()["work_secret"]).sessions_token


def test_a_sessions_token_expires_at_the_lifetime_set_at_mint(store_api: StoreApi) -> None:
    store = store_api.new_store()
    session_id, token = _mint(store_api, store, token_ttl_seconds=2)
    listing = f"/v1/memory_stores/{store}/memories"
    assert store_api.bearer(token, "GET", listing).status_code == 200
    session = store_api.admin("GET", f"/v1/sessions/{session_id}").json()
    assert session["id"] == session_id
    time.sleep(2.5)
    refused = store_api.bearer(token, "GET", listing)
    assert refused.status_code == 401
    assert "expired" in refused.json()["error"]["message"]
    for bad in (0, 90 * 24 * 3600 + 1):
        resp = store_api.admin(
            "POST",
            "/v1/memsync/sessions",
            json={"resources": [{"memory_store_id": store}], "token_ttl_seconds": bad},
        )
        assert resp.status_code == 400 and "token_ttl_seconds" in resp.text


def test_token_revoke_command_revokes_at_once(store_api: StoreApi, store_server: RunningStoreServer) -> None:
    store = store_api.new_store()
    minted = _memsync(store_server, "store", "token", "--store", store, "--ttl", "600")
    assert minted.returncode == 0, minted.stderr
    token = decode_work_secret(minted.stdout.strip()).sessions_token
    session_id = minted.stderr.split("minted session ", 1)[1].split()[0]
    listing = f"/v1/memory_stores/{store}/memories"
    assert store_api.bearer(token, "GET", listing).status_code == 200
    revoked = _memsync(store_server, "store", "token", "revoke", session_id)
    assert revoked.returncode == 0, revoked.stderr
    assert store_api.bearer(token, "GET", listing).status_code == 401
    # the session stays readable (its versions name it); revoking again is harmless; unknown is a 404
    assert store_api.admin("GET", f"/v1/sessions/{session_id}").status_code == 200
    assert _memsync(store_server, "store", "token", "revoke", session_id).returncode == 0
    unknown = _memsync(store_server, "store", "token", "revoke", "sesn_unknown")
    assert unknown.returncode == 3 and "not found" in unknown.stderr
    # a sessions token cannot delete sessions
    other_id, other = _mint(store_api, store)
    assert store_api.bearer(other, "DELETE", f"/v1/sessions/{other_id}").status_code == 403
    assert _memsync(store_server, "store", "token").returncode == 2  # nothing to mint


def test_admin_keys_rotate(store_api: StoreApi, store_server: RunningStoreServer) -> None:
    created = _memsync(store_server, "store", "admin-key", "create", "ci-rotation")
    assert created.returncode == 0, created.stderr
    new_key = created.stdout.strip()
    key_id = created.stderr.split("created admin key ", 1)[1].split()[0]
    assert new_key.startswith("sk-memsync-admin-") and key_id.startswith("apikey_")

    listed = _memsync(store_server, "store", "admin-key", "list", key=new_key)  # the new key works
    assert listed.returncode == 0, listed.stderr
    assert re.search(rf"^{key_id} +ci-rotation ", listed.stdout, re.M) and "default" in listed.stdout
    assert new_key not in listed.stdout and store_server.admin_key not in listed.stdout

    # writes are attributed to the key that made them
    store = store_api.anon(
        "POST", "/v1/memory_stores", json={"name": "by new key"}, headers={"x-api-key": new_key}
    ).json()["id"]
    mem = store_api.anon(
        "POST", f"/v1/memory_stores/{store}/memories", json={"path": "/a", "content": "x"},
        headers={"x-api-key": new_key},
    ).json()  # fmt: skip
    versions = store_api.admin("GET", f"/v1/memory_stores/{store}/memory_versions").json()["data"]
    assert versions[0]["memory_id"] == mem["id"]
    assert versions[0]["created_by"] == {"type": "api_actor", "api_key_id": key_id}

    revoked = _memsync(store_server, "store", "admin-key", "revoke", key_id)
    assert revoked.returncode == 0, revoked.stderr
    refused = _memsync(store_server, "store", "list", key=new_key)
    assert refused.returncode == 4 and "401" in refused.stderr
    again = _memsync(store_server, "store", "admin-key", "list")
    assert re.search(rf"^{key_id} +ci-rotation .* revoked ", again.stdout, re.M)
    items = json.loads(_memsync(store_server, "store", "admin-key", "list", "-o", "json").stdout)["items"]
    assert {i["id"]: i["name"] for i in items}[key_id] == "ci-rotation"
    assert all("key" not in i for i in items)


def test_the_last_current_admin_key_cannot_be_revoked(fresh_store_server: RunningStoreServer) -> None:
    api = StoreApi(fresh_store_server)
    try:
        keys = api.admin("GET", "/v1/memsync/admin_keys").json()["data"]
        assert [k["name"] for k in keys] == ["default"]  # the configured key, entered on first start
        resp = api.admin("POST", f"/v1/memsync/admin_keys/{keys[0]['id']}/revoke")
        assert resp.status_code == 409 and "last current admin key" in resp.text
        bad = api.admin("POST", "/v1/memsync/admin_keys", json={"name": "no spaces allowed"})
        assert bad.status_code == 400
        # revoked, the configured key cannot start the server again
        other = api.admin("POST", "/v1/memsync/admin_keys", json={"name": "next"}).json()
        assert api.admin("POST", f"/v1/memsync/admin_keys/{keys[0]['id']}/revoke").status_code == 200
        fresh_store_server.stop()
        with pytest.raises(RuntimeError, match="was revoked"):
            fresh_store_server.start()
        assert other["key"].startswith("sk-memsync-admin-")
    finally:
        api.close()
