"""A self-hosted environment with one scripted session on a store server (the end-to-end environment tests):
the environment and its key, a memory store, and a session minted into the environment whose script writes
one file into that store's folder and ends."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from memsync.api.paths import slugify


@dataclass(frozen=True)
class ScriptedSession:
    environment_id: str
    key: str
    store_id: str
    slug: str  # the store's folder under /mnt/memory
    session_id: str
    work_id: str


#: A call for another client's tool: it stays pending, so the session runs on until something ends it.
PENDING_CALL: dict[str, Any] = {
    "type": "agent.custom_tool_use", "id": "toolu_pending", "name": "someone_elses_tool", "input": {},
}  # fmt: skip


def scripted_session(
    admin: httpx.Client, file_path: str, content: str, *, pending: bool = False
) -> ScriptedSession:
    """``file_path`` may name the store's folder as ``{slug}`` (the script writes ``content`` there); with
    ``pending``, the write is followed by a call that is never answered (the session runs on)."""
    env = admin.post("/v1/environments", json={"name": "scripted"}).json()
    key = admin.post(f"/v1/memsync/environments/{env['id']}/keys").json()["key"]
    store_name = f"Env Notes {uuid.uuid4().hex[:6]}"
    store = admin.post("/v1/memory_stores", json={"name": store_name}).json()
    slug = slugify(store_name)
    script: list[dict[str, Any]] = [
        {"type": "agent.tool_use", "id": "toolu_1", "name": "write",
         "input": {"file_path": file_path.format(slug=slug), "content": content}},
        *([PENDING_CALL] if pending else []),
        {"type": "session.status_idle", "stop_reason": {"type": "end_turn"}},
        {"type": "session.status_terminated"},
    ]  # fmt: skip
    minted = admin.post(
        "/v1/memsync/sessions",
        json={
            "environment_id": env["id"],
            "resources": [{"type": "memory_store", "memory_store_id": store["id"]}],
            "script": script,
        },
    ).json()
    return ScriptedSession(env["id"], key, store["id"], slug, minted["session"]["id"], minted["work_id"])


def timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def work_item(admin: httpx.Client, s: ScriptedSession) -> dict[str, Any]:
    """The scripted session's work item as the server has it now."""
    work: dict[str, Any] = admin.get(f"/v1/environments/{s.environment_id}/work/{s.work_id}").json()
    return work


def stopped_after_the_last_write(admin: httpx.Client, s: ScriptedSession) -> dict[str, Any]:
    """The work item, asserted stopped after the store's last memory version was written."""
    versions = admin.get(f"/v1/memory_stores/{s.store_id}/memory_versions").json()["data"]
    work = work_item(admin, s)
    assert work["state"] == "stopped", work
    assert max(timestamp(v["created_at"]) for v in versions) < timestamp(work["stopped_at"])
    return work


def memories_of(admin: httpx.Client, s: ScriptedSession) -> list[tuple[str, str]]:
    """(path, content) of every memory in the scripted session's store."""
    page = admin.get(f"/v1/memory_stores/{s.store_id}/memories", params={"view": "full"}).json()
    return [(m["path"], m["content"]) for m in page["data"]]
