"""What the schema-driven tests run against: the store server's OpenAPI document, the credentials they call
with, and a world of resources seeded on a real server for each test.

Two sessions each reach their own store (``mine``, read-write, and ``shared``, read-only, for the first;
``theirs`` for the second), every store holds memories whose content carries a marker naming the store, and
an environment has a work item queued for the first session. A credential sees some of the world; a check
then knows what it must never see (``World.foreign``).
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from conftest import API_HEADERS
from memsync.api.secret import decode_work_secret
from memsync.server.app import create_app


def openapi_document() -> dict[str, Any]:
    """The document the store server answers at ``/openapi.json`` (``app.openapi()``), from an app over a
    scratch database. Its credentials are security schemes, not parameters: each test sends its own."""
    with tempfile.TemporaryDirectory(prefix="memsync-openapi-") as tmp:
        app = create_app(Path(tmp) / "doc.db", "sk-memsync-admin-document-" + "x" * 24, "http://127.0.0.1:1")
        document: dict[str, Any] = app.openapi()
    return document


@dataclass
class World:
    url: str
    admin_key: str
    viewer_key: str  # reads every store, writes nothing
    token: str  # the session that reaches ``mine`` (read-write) and ``shared`` (read-only)
    other_token: str  # the session that reaches ``theirs``
    session_id: str
    other_session_id: str
    ids: dict[str, str] = field(default_factory=dict)  # path parameter -> an id that exists
    markers: dict[str, str] = field(default_factory=dict)  # store name -> the marker in its memories' content

    def foreign(self, credential: str) -> list[str]:
        """What a response to ``credential`` must never hold: the other session's store and content, and any
        credential but its own."""
        if credential == "admin":
            return [self.viewer_key, self.token, self.other_token]
        if credential == "viewer":
            return [self.admin_key, self.token, self.other_token]
        return [
            self.admin_key,
            self.viewer_key,
            self.other_token,
            self.ids["other_store"],
            self.markers["theirs"],
        ]


@dataclass(frozen=True)
class Credential:
    """One way of calling the API, and the headers that carry it (the world's keys and tokens)."""

    name: str
    headers: Callable[[World], dict[str, str]]
    writes: bool = True  # False: no request that would change anything may succeed


#: The credentials every schema-driven test runs with (a new kind of key is one line here).
CREDENTIALS = (
    Credential("admin", lambda w: {"x-api-key": w.admin_key}),
    Credential("viewer", lambda w: {"x-api-key": w.viewer_key}, writes=False),
    Credential("session", lambda w: {"authorization": f"Bearer {w.token}"}),
)


def _call(http: httpx.Client, method: str, path: str, **kw: Any) -> dict[str, Any]:
    resp = http.request(method, path, params={"beta": "true"}, **kw)
    assert resp.status_code == 200, f"{method} {path}: {resp.status_code} {resp.text}"
    body: dict[str, Any] = resp.json()
    return body


def seed(url: str, server_admin_key: str) -> World:
    """A fresh world on the server at ``url``, with admin keys of its own: the one it calls with, and a spare
    that an id in a generated request may revoke (the server's own key is never put at risk)."""
    with httpx.Client(
        base_url=url, headers={**API_HEADERS, "x-api-key": server_admin_key}, timeout=30.0
    ) as http:
        admin_key = _call(http, "POST", "/v1/memsync/admin_keys", json={"name": "schema-tests"})["key"]
        spare = _call(http, "POST", "/v1/memsync/admin_keys", json={"name": "schema-spare"})["id"]
        viewer_key = _call(http, "POST", "/v1/memsync/viewer_keys", json={"name": "schema-viewer"})["key"]
    headers = {**API_HEADERS, "x-api-key": admin_key}
    with httpx.Client(base_url=url, headers=headers, timeout=30.0) as http:
        stores, markers, memories = {}, {}, {}
        for name in ("mine", "shared", "theirs"):
            stores[name] = _call(
                http, "POST", "/v1/memory_stores", json={"name": f"{name} {secrets.token_hex(3)}"}
            )["id"]
            markers[name] = f"marker-{name}-{secrets.token_hex(8)}"
            for path in ("/notes/a.md", "/notes/deep/b.md", "/top.md"):
                created = _call(
                    http,
                    "POST",
                    f"/v1/memory_stores/{stores[name]}/memories",
                    json={"path": path, "content": f"{markers[name]} {path}"},
                )
                memories[name] = created
        env = _call(
            http, "POST", "/v1/environments", json={"name": "schema", "config": {"type": "self_hosted"}}
        )
        minted = _call(
            http,
            "POST",
            "/v1/memsync/sessions",
            json={
                "resources": [
                    {"type": "memory_store", "memory_store_id": stores["mine"], "access": "read_write"},
                    {"type": "memory_store", "memory_store_id": stores["shared"], "access": "read_only"},
                ],
                "environment_id": env["id"],
            },
        )
        other = _call(
            http,
            "POST",
            "/v1/memsync/sessions",
            json={"resources": [{"type": "memory_store", "memory_store_id": stores["theirs"]}]},
        )
        versions = _call(http, "GET", f"/v1/memory_stores/{stores['mine']}/memory_versions")["data"]
    return World(
        url=url,
        admin_key=admin_key,
        viewer_key=viewer_key,
        token=decode_work_secret(minted["work_secret"]).sessions_token,
        other_token=decode_work_secret(other["work_secret"]).sessions_token,
        session_id=minted["session"]["id"],
        other_session_id=other["session"]["id"],
        ids={
            "store_id": stores["mine"],
            "memory_id": memories["mine"]["id"],
            "version_id": versions[0]["id"],
            "session_id": minted["session"]["id"],
            "env_id": env["id"],
            "work_id": minted["work_id"],
            "key_id": spare,
            "other_store": stores["theirs"],
        },
        markers=markers,
    )
