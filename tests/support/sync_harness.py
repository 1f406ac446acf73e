"""A harness that drives the sync engine in-process against a real store server (tests and benchmarks).

It is the same code path as ``memsync mount`` / ``sync --once`` / ``flush``: ``commands.mount`` and
``commands.SyncAgent``. Time is controllable (``clock``) so delete-window scenarios need no sleeping, and a
``HookTransport`` can run a callback right before a given request reaches the real server, to interleave a
concurrent remote change deterministically (e.g. a memory deleted between the listing and an update), or right
after the server answered (to lose or rewrite that answer, e.g. a create that landed but whose response never
arrived).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from memsync.agent.commands import FlushResult, SyncAgent, mount
from memsync.agent.config import AgentConfig, load_config
from memsync.agent.engine import PassStats, StoreSync
from memsync.agent.state import StoreState, load_state, save_state
from memsync.api.models import Memory, MemoryStoreResource
from memsync.client import StoreClient

Hook = Callable[[httpx.Request], Awaitable[None]]
AfterHook = Callable[[httpx.Request, httpx.Response], Awaitable[httpx.Response]]


async def store_memories(client: StoreClient, store_id: str) -> dict[str, Memory]:
    """Every memory of a store with its content, keyed by its path relative to the store folder."""
    return {
        item.path.lstrip("/"): item
        async for item in client.list_memories(store_id, view="full", limit=20)
        if isinstance(item, Memory)
    }


async def store_contents(client: StoreClient, store_id: str) -> dict[str, str]:
    """What the store holds: relative path -> content."""
    return {rel: m.content or "" for rel, m in (await store_memories(client, store_id)).items()}


class HookTransport(httpx.AsyncBaseTransport):
    """Forwards to the real server; each hook runs once, right before the first request it matches (``once``)
    or right after the real server answered it (``after_once``: the hook returns the response the client sees,
    or raises an ``httpx`` transport error to lose it)."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.hooks: list[tuple[Callable[[httpx.Request], bool], Hook]] = []
        self.after_hooks: list[tuple[Callable[[httpx.Request], bool], AfterHook]] = []
        self.seen: list[tuple[str, str]] = []

    def once(self, match: Callable[[httpx.Request], bool], hook: Hook) -> None:
        self.hooks.append((match, hook))

    def after_once(self, match: Callable[[httpx.Request], bool], hook: AfterHook) -> None:
        self.after_hooks.append((match, hook))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.method, request.url.path))
        for i, (match, hook) in enumerate(self.hooks):
            if match(request):
                del self.hooks[i]
                await hook(request)
                break
        response = await self._inner.handle_async_request(request)
        for i, (match, after) in enumerate(self.after_hooks):
            if match(request):
                del self.after_hooks[i]
                await response.aread()
                return await after(request, response)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass
class Clock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Harness:
    admin: StoreClient
    client: StoreClient
    transport: HookTransport
    config: AgentConfig
    agent: SyncAgent
    store_id: str
    secret: str = field(repr=False)
    base: Path
    clock: Clock

    @property
    def engine(self) -> StoreSync:
        return self.agent.stores[0]

    @property
    def root(self) -> Path:
        return self.config.mount_dir(self.config.stores[0])

    # local files
    def write(self, rel: str, text: str | bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")

    def read(self, rel: str) -> str | None:
        path = self.root / rel
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def local_files(self) -> dict[str, str]:
        out = {}
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and not path.is_symlink() and path.name != ".anthropic-memory-store":
                out[path.relative_to(self.root).as_posix()] = path.read_text(
                    encoding="utf-8", errors="replace"
                )
        return out

    # the store, through the admin key
    async def remote(self) -> dict[str, str]:
        return await store_contents(self.admin, self.store_id)

    async def memory(self, rel: str) -> Memory | None:
        async for item in self.admin.list_memories(self.store_id):
            if isinstance(item, Memory) and item.path == "/" + rel:
                return item
        return None

    async def put(self, rel: str, content: str) -> None:
        existing = await self.memory(rel)
        if existing is None:
            await self.admin.create_memory(self.store_id, "/" + rel, content)
        else:
            await self.admin.update_memory(self.store_id, existing.id, content=content)

    async def delete(self, rel: str) -> None:
        existing = await self.memory(rel)
        assert existing is not None, rel
        await self.admin.delete_memory(self.store_id, existing.id)

    async def versions(self, rel: str) -> int:
        existing = await self.memory(rel)
        assert existing is not None, rel
        return len([v async for v in self.admin.list_versions(self.store_id, memory_id=existing.id)])

    # the engine
    async def sync(self, *, final: bool = False) -> PassStats:
        return (await self.agent.sync_once(final=final))[self.store_id]

    async def flush(self) -> FlushResult:
        return await self.agent.flush()

    async def final(self) -> FlushResult:
        return await self.agent.final_shutdown()

    def state(self) -> StoreState:
        state = load_state(self.config.state_path, self.store_id)
        assert state is not None
        return state

    def save(self, state: StoreState) -> None:
        save_state(self.config.state_path, state)

    def restart(self) -> None:
        """A new SyncAgent in the same 'Pod' (what a restarted sidecar gets: same folders, same state dir)."""
        self.agent = SyncAgent(self.config, self.client)
        self.agent.context.clock = self.clock

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.admin.aclose()


async def make_harness(
    url: str,
    admin_key: str,
    base: Path,
    *,
    files: dict[str, str] | None = None,
    access: str = "read_write",
    deletions: str = "enabled",
    delete_window: float = 30.0,
    flush_timeout: float = 30.0,
    name: str = "Golden Store",
    mount_now: bool = True,
    **config: Any,
) -> Harness:
    admin = StoreClient(url, api_key=admin_key)
    store = await admin.create_store(name)
    for rel, content in (files or {}).items():
        await admin.create_memory(store.id, "/" + rel, content)
    _, secret = await admin.mint_session([MemoryStoreResource(memory_store_id=store.id, access=access)])
    base.mkdir(parents=True, exist_ok=True)
    cfg = load_config(
        stores=json.dumps(
            [
                {
                    "memory_store_id": store.id,
                    "name": name,
                    "mount_path": "/mnt/memory/golden",
                    "access": access,
                }
            ]
        ),
        deletions=deletions,
        delete_window=delete_window,
        flush_timeout=flush_timeout,
        work_secret=secret,
        test_root=str(base),
        state_dir="/var/lib/memsync",
        termination_log="/dev/termination-log",
        **config,
    )
    transport = HookTransport()
    client = StoreClient.from_work_secret(secret, transport=transport)
    clock = Clock()
    if mount_now:
        await mount(cfg, client=client)
    agent = SyncAgent(cfg, client)
    agent.context.clock = clock
    return Harness(admin, client, transport, cfg, agent, store.id, secret, base, clock)
