"""The store server's JSON request bodies, through the real app in this process (server/app.py over SQLite):
any body on any route that takes one is answered in the documented way, and what is accepted can be stored
by either backend.

For any bytes, and for JSON objects made of each route's fields and values on the rules' edges (NUL, lone
surrogates, long strings, huge numbers, deep nesting, wrong types), posted with the admin key to: create
and update a store, create and update a memory, mint a session, create an admin or a viewer key, create an
environment, post session events, stop a work item: the answer is 200 or a 4xx (400, 403, 404, 409, 413),
never a 5xx, and every error is the API's envelope (``{"type": "error", "error": {"type", "message"},
"request_id"}``). A body the server accepts holds no U+0000 outside a memory's ``content`` (PostgreSQL's
text columns cannot hold it, so the other backend would fail on it).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from fastapi.testclient import TestClient
from harness import Provider, holds, pick, provider

from memsync.server.app import create_app

ADMIN_KEY = "sk-memsync-admin-fuzz-" + "k" * 32
_DIR = tempfile.mkdtemp(prefix="memsync-fuzz-server-")
APP = create_app(os.path.join(_DIR, "store.db"), ADMIN_KEY, "http://127.0.0.1:1", access_logs=False)
HTTP = TestClient(APP, raise_server_exceptions=False, headers={"x-api-key": ADMIN_KEY})
HTTP.__enter__()  # the app's lifespan, for the whole process


def _post(path: str, body: object) -> dict[str, Any]:
    response = HTTP.post(path, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


STORE = _post("/v1/memory_stores", {"name": "fuzz"})["id"]
MEMORY = _post(f"/v1/memory_stores/{STORE}/memories", {"path": "/seed.md", "content": "seed"})["id"]
ENVIRONMENT = _post("/v1/environments", {"name": "fuzz", "config": {"type": "self_hosted"}})["id"]
MINTED = _post(
    "/v1/memsync/sessions",
    {"resources": [{"type": "memory_store", "memory_store_id": STORE}], "environment_id": ENVIRONMENT},
)
SESSION, WORK = MINTED["session"]["id"], MINTED["work_id"]

#: route -> the fields its body takes (the structured inputs are made of these)
ROUTES: dict[str, tuple[str, ...]] = {
    "/v1/memory_stores": ("name", "description", "metadata"),
    f"/v1/memory_stores/{STORE}": ("name", "description", "metadata"),
    f"/v1/memory_stores/{STORE}/memories": ("path", "content"),
    f"/v1/memory_stores/{STORE}/memories/{MEMORY}": ("path", "content", "precondition"),
    "/v1/memsync/sessions": ("session_id", "resources", "token_ttl_seconds", "environment_id", "script"),
    "/v1/memsync/admin_keys": ("name",),
    "/v1/memsync/viewer_keys": ("name",),
    "/v1/environments": ("name", "description", "metadata", "config", "scope"),
    f"/v1/sessions/{SESSION}/events": ("events",),
    f"/v1/environments/{ENVIRONMENT}/work/{WORK}/stop": ("force",),
}
ATOMS: tuple[object, ...] = (
    "",
    "a",
    "/a.md",
    "/notes/b.md",
    "sesn_fuzz",
    "\x00",
    "a\x00b",
    "\ud800",
    "\U0001f600",
    "é" * 600,
    "x" * 3000,
    STORE,
    MEMORY,
    ENVIRONMENT,
    "read_only",
    "memory_store",
    "content_sha256",
    "self_hosted",
    "user.message",
    "0" * 64,
    0,
    -1,
    1,
    86400,
    10**40,
    1.5,
    True,
    None,
)
KEYS = ("type", "memory_store_id", "access", "instructions", "content_sha256", "name", "path", "content", "k")
OK_STATUSES = frozenset({200, 400, 403, 404, 409, 413})


def value(fdp: Provider, depth: int = 0) -> object:
    kind = fdp.ConsumeIntInRange(0, 5 if depth < 3 else 2)
    if kind == 0:
        return pick(fdp, ATOMS)
    if kind == 1:
        return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 40))
    if kind == 2:
        return fdp.ConsumeInt(4)
    if kind == 3:
        return [value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    if kind == 4:
        return {pick(fdp, KEYS): value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 4))}
    return [[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]  # deeper than the parser allows


def body(fdp: Provider, fields: tuple[str, ...]) -> bytes:
    if fdp.ConsumeIntInRange(0, 4) == 0:
        return fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 2000))
    obj = {pick(fdp, fields): value(fdp) for _ in range(fdp.ConsumeIntInRange(0, len(fields) + 1))}
    return json.dumps(obj).encode("utf-8")


def _has_nul(value: object, skip: str | None = None) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    if isinstance(value, dict):
        return any(_has_nul(k) or (k != skip and _has_nul(v)) for k, v in value.items())
    return False


def test_one_input(data: bytes) -> None:
    fdp = provider(data)
    route = pick(fdp, tuple(ROUTES))
    raw = body(fdp, ROUTES[route])
    response = HTTP.post(route, content=raw, headers={"content-type": "application/json"})
    holds(
        response.status_code in OK_STATUSES, f"POST {route} {raw!r}: {response.status_code} {response.text}"
    )
    if response.status_code >= 400:
        answer = response.json()
        holds(
            answer.get("type") == "error"
            and isinstance(answer.get("error", {}).get("type"), str)
            and isinstance(answer["error"].get("message"), str)
            and "request_id" in answer,
            f"POST {route} {raw!r}: not the error envelope: {response.text}",
        )
        return
    if not raw.strip():
        return  # a work item's stop takes no body
    sent = json.loads(raw)
    holds(not _has_nul(sent, skip="content"), f"POST {route} {raw!r} was accepted with a U+0000 in it")
    if route.endswith("/memories"):  # keep the store small: the memory cap stays far away
        HTTP.delete(f"{route}/{response.json()['id']}")
