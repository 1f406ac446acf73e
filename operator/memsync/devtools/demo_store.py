"""The demo store of ``memsync dev`` and of the environment demo: found by name, made with a few memories."""

from __future__ import annotations

from memsync.api.models import Memory, MemoryStore
from memsync.client import StoreClient

DEMO_STORE_NAME = "Demo Memory"
DEMO_DESCRIPTION = "memsync dev: a demo store; edit the files in the mounted folder and watch them sync."
DEMO_MEMORIES: dict[str, str] = {
    "/README.md": (
        "# Demo Memory\n\nThis store was created by `memsync dev`. Every file in this folder is a memory:\n"
        "edit, create or delete files here and the next sync pass sends the change to the store.\n"
    ),
    "/preferences/style.md": "- Answer briefly.\n- Prefer plain words over jargon.\n",
    "/projects/memsync.md": "memsync keeps /mnt/memory/<slug>/ in two-way sync with a memory store.\n",
    "/notes/todo.md": "- [ ] try editing this file while `memsync dev` runs\n",
}


async def ensure_demo_store(admin: StoreClient) -> tuple[MemoryStore, bool]:
    """The store named ``DEMO_STORE_NAME`` (the first listed, if several); created with a few memories."""
    async for existing in admin.list_stores():
        if existing.name == DEMO_STORE_NAME:
            return existing, False
    created = await admin.create_store(DEMO_STORE_NAME, description=DEMO_DESCRIPTION)
    for path, content in DEMO_MEMORIES.items():
        await admin.create_memory(created.id, path, content)
    return created, True


async def count_memories(admin: StoreClient, store_id: str) -> int:
    return sum([1 async for item in admin.list_memories(store_id, limit=100) if isinstance(item, Memory)])
