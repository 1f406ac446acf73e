"""Property-based (hypothesis, stateful) test of the sync engine against the real store server. Each example
gets a fresh store on the session's server (the ``store_server`` fixture), a temp folder, and the real
engine in-process (``memsync.agent.commands.mount`` / ``SyncAgent``: the code of ``memsync mount``,
``sync`` and ``flush --final``). Rules make random local edits, creates, deletes and renames, remote edits,
creates and deletes (admin key), run passes, interrupt a pass after its N-th request (before or after the
server applied it) and then restart the engine from its persisted state (what a SIGKILL and a restarted
sidecar get), restart between passes, damage and restore the marker, wipe the folder, and run the final
shutdown. The delete window is 0 (test-only), so deletions are confirmed by the next pass's re-check. A
model tracks, per path, the local edits not yet known to be saved ("obligations") and the remote changes
made since the last complete pass ("concurrent"). Invariants, checked after every pass: (a) no local edit
is lost: after a complete pass over a trusted folder, a writable store holds every pending local edit,
unless a remote change of that path was concurrent and a ``memory changed both locally and remotely``
warning named the path; in a read-only store the edit stays on disk under the same condition; (b) a
read-only store never receives a write from the session's token (its versions list shows none); (c) deletes
go out only for files that are gone locally, with a trusted marker, within the per-pass cap, and never
after a wipe (which is recovered by re-downloading); (d) while the marker is bad (removed or altered, files
present) a pass neither writes to the store nor changes a local file; (e) after the final shutdown with no
concurrent remote change, a writable store equals the folder exactly. A failing example prints the rule
sequence that reproduces it (hypothesis' stateful report) and a ``@reproduce_failure`` blob.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from memsync.agent import messages
from memsync.agent.commands import SyncAgent, mount
from memsync.agent.config import AgentConfig, load_config
from memsync.agent.merge import delete_cap
from memsync.agent.state import load_state
from memsync.api.hashing import marker_text, sha256_bytes
from memsync.api.models import Memory, MemoryStoreResource
from memsync.client import StoreClient
from support.sync_harness import store_memories

pytestmark = pytest.mark.timeout(300)

PATHS = ("notes/a.md", "notes/b.md", "notes/deep/c.md", "work/a.md", "work/b.md", "top.md")
MARKER = ".anthropic-memory-store"
MOUNT_PATH = "/mnt/memory/prop"
LOST_WARNINGS = (messages.BOTH_CHANGED, messages.UPLOAD_LOST)

path_st = st.sampled_from(PATHS)


class Recorder(logging.Handler):
    """Keeps every warning of the sync agent (message and path) for invariant (a)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.getMessage(), str(getattr(record, "path", ""))))


class CutTransport(httpx.AsyncBaseTransport):
    """Forwards to the real server. When armed, the N-th request kills the pass: the victim task is cancelled
    right before the request goes out, or right after the server answered (the answer is never seen)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.cut_at: int | None = None
        self.after = False
        self.count = 0
        self.victim: asyncio.Task[Any] | None = None
        self.fired = False

    def arm(self, victim: asyncio.Task[Any], cut_at: int, after: bool) -> None:
        self.victim, self.cut_at, self.after, self.count, self.fired = victim, cut_at, after, 0, False

    def disarm(self) -> None:
        self.victim, self.cut_at = None, None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.victim is not None and self.cut_at is not None:
            self.count += 1
            if self.count == self.cut_at:
                self.fired = True
                if self.after:
                    response = await self.inner.handle_async_request(request)
                    await response.aread()
                    await response.aclose()
                self.victim.cancel()
                await asyncio.sleep(0)  # the cancellation lands here (every request runs inside the victim)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Obligation:
    """A local edit that must end up in the store (writable) or stay on disk (read-only), unless lost to a
    concurrent remote change with a warning."""

    content: str
    concurrent: bool
    log_mark: int


class SyncMachine(RuleBasedStateMachine):
    server: ClassVar[Any] = None
    workdir: ClassVar[Path] = Path()

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.executor = ThreadPoolExecutor(max_workers=4)
        self.loop.set_default_executor(self.executor)
        self.base = Path(tempfile.mkdtemp(dir=self.workdir))
        self.recorder = Recorder()
        self.agent_logger = logging.getLogger("memsync.agent")
        self.agent_logger.addHandler(self.recorder)
        self.counter = 0
        self.obligations: dict[str, Obligation] = {}
        self.remote_touched: set[str] = set()
        self.marker_bad = False
        self.ready = False
        self.read_only = False
        self.config: AgentConfig
        self.agent: SyncAgent
        self.admin: StoreClient
        self.client: StoreClient
        self.transport: CutTransport
        self.store_id = ""
        self.session_id = ""

    # --- plumbing -----------------------------------------------------------------------------------------

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def unique(self, kind: str, rel: str) -> str:
        self.counter += 1
        return f"{kind} edit {self.counter} of {rel}\n"

    @property
    def root(self) -> Path:
        return self.config.mount_dir(self.config.stores[0])

    def local(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for dirpath, _, files in os.walk(self.root):
            for name in files:
                full = Path(dirpath) / name
                rel = full.relative_to(self.root).as_posix()
                if rel != MARKER:
                    out[rel] = full.read_text(encoding="utf-8")
        return out

    async def _remote(self) -> dict[str, Memory]:
        return await store_memories(self.admin, self.store_id)

    def remote(self) -> dict[str, str]:
        return {rel: m.content or "" for rel, m in self.run(self._remote()).items()}

    async def _session_writes(self) -> dict[str, tuple[str, str]]:
        return {
            v.id: (v.operation, (v.path or "").lstrip("/"))
            async for v in self.admin.list_versions(self.store_id, session_id=self.session_id)
        }

    def session_writes(self) -> dict[str, tuple[str, str]]:
        """Every version the session's token created: id -> (operation, path)."""
        return dict(self.run(self._session_writes()))

    def baseline_size(self) -> int:
        state = load_state(self.config.state_path, self.store_id)
        return len(state.baseline) if state is not None else 0

    def baseline_sha(self, rel: str) -> str | None:
        state = load_state(self.config.state_path, self.store_id)
        return state.baseline.get(rel) if state is not None else None

    def new_agent(self) -> None:
        self.agent = SyncAgent(self.config, self.client)

    def quiesce(self) -> None:
        """After a kill: let every task and worker thread of the dead engine finish (a killed process has no
        threads left either), with a fresh executor for the restarted one."""

        async def drain() -> None:
            current = asyncio.current_task()
            others = [t for t in asyncio.all_tasks() if t is not current]
            await asyncio.gather(*others, return_exceptions=True)

        self.run(drain())
        old, self.executor = self.executor, ThreadPoolExecutor(max_workers=4)
        self.loop.set_default_executor(self.executor)
        old.shutdown(wait=True)

    # --- setup --------------------------------------------------------------------------------------------

    @initialize(
        access=st.sampled_from(["read_write", "read_write", "read_only"]),
        seed=st.dictionaries(path_st, st.integers(0, 9), max_size=4),
    )
    def start(self, access: str, seed: dict[str, int]) -> None:
        self.read_only = access == "read_only"
        note(f"store access={access}, initial memories={sorted(seed)}")

        async def setup() -> None:
            self.admin = StoreClient(self.server.url, api_key=self.server.admin_key)
            store = await self.admin.create_store("Property Store")
            self.store_id = store.id
            for rel, n in sorted(seed.items()):
                await self.admin.create_memory(store.id, "/" + rel, f"seed {n} of {rel}\n")
            session, secret = await self.admin.mint_session(
                [MemoryStoreResource(memory_store_id=store.id, access=access)]  # type: ignore[arg-type]
            )
            self.session_id = session.id
            self.config = load_config(
                stores=json.dumps(
                    [
                        {
                            "memory_store_id": store.id,
                            "name": "prop",
                            "mount_path": MOUNT_PATH,
                            "access": access,
                        }
                    ]
                ),
                delete_window=0,
                flush_timeout=30,
                work_secret=secret,
                test_root=str(self.base),
                state_dir="/var/lib/memsync",
                termination_log="/dev/termination-log",
            )
            self.transport = CutTransport()
            self.client = StoreClient.from_work_secret(secret, transport=self.transport)
            await mount(self.config, client=self.client)

        self.run(setup())
        self.new_agent()
        self.ready = True
        assert self.local() == self.remote(), "the mount materialises the store exactly"

    def teardown(self) -> None:
        try:
            if self.ready:
                if self.marker_bad:
                    self.restore_marker()
                self.final_shutdown()
        finally:
            with contextlib.suppress(Exception):
                self.run(self.client.aclose())
            with contextlib.suppress(Exception):
                self.run(self.admin.aclose())
            self.agent_logger.removeHandler(self.recorder)
            self.loop.close()
            self.executor.shutdown(wait=True)
            shutil.rmtree(self.base, ignore_errors=True)

    # --- local changes ------------------------------------------------------------------------------------

    def _obligate(self, rel: str, content: str) -> None:
        if sha256_bytes(content.encode()) == self.baseline_sha(rel):
            self.obligations.pop(rel, None)  # back to what the engine last synced: nothing new to save
            return
        self.obligations[rel] = Obligation(content, rel in self.remote_touched, len(self.recorder.records))

    @precondition(lambda self: self.ready)
    @rule(rel=path_st)
    def local_write(self, rel: str) -> None:
        content = self.unique("local", rel)
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        self._obligate(rel, content)

    @precondition(lambda self: self.ready)
    @rule(rel=path_st)
    def local_delete(self, rel: str) -> None:
        path = self.root / rel
        if path.is_file():
            path.unlink()
        self.obligations.pop(rel, None)

    @precondition(lambda self: self.ready)
    @rule(src=path_st, dst=path_st)
    def local_rename(self, src: str, dst: str) -> None:
        source = self.root / src
        if src == dst or not source.is_file():
            return
        target = self.root / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        content = source.read_text(encoding="utf-8")
        os.replace(source, target)
        self.obligations.pop(src, None)
        self._obligate(dst, content)

    @precondition(lambda self: self.ready and not self.marker_bad)
    @rule()
    def wipe(self) -> None:
        """Everything but the marker goes (``rm -rf *``): recovered by downloading, never deleted remotely."""
        for child in self.root.iterdir():
            if child.name == MARKER:
                continue
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
        self.obligations.clear()

    @precondition(lambda self: self.ready and not self.marker_bad)
    @rule(remove=st.booleans())
    def damage_marker(self, remove: bool) -> None:
        if not self.local():
            return  # a bad marker in an empty folder is recovered, not left as found
        marker = self.root / MARKER
        if remove:
            marker.unlink()
        else:
            marker.write_text("version 1\nmemstore_someone_else", encoding="utf-8")
        self.marker_bad = True

    @precondition(lambda self: self.ready and self.marker_bad)
    @rule()
    def restore_marker(self) -> None:
        (self.root / MARKER).write_text(marker_text(self.store_id), encoding="utf-8")
        self.marker_bad = False

    # --- remote changes -----------------------------------------------------------------------------------

    def _touch_remote(self, rel: str) -> None:
        self.remote_touched.add(rel)
        if rel in self.obligations:
            self.obligations[rel].concurrent = True

    @precondition(lambda self: self.ready)
    @rule(rel=path_st)
    def remote_write(self, rel: str) -> None:
        content = self.unique("remote", rel)

        async def put() -> None:
            existing = (await self._remote()).get(rel)
            if existing is None:
                await self.admin.create_memory(self.store_id, "/" + rel, content)
            else:
                await self.admin.update_memory(self.store_id, existing.id, content=content)

        self.run(put())
        self._touch_remote(rel)

    @precondition(lambda self: self.ready)
    @rule(rel=path_st)
    def remote_delete(self, rel: str) -> None:
        async def delete() -> bool:
            existing = (await self._remote()).get(rel)
            if existing is None:
                return False
            await self.admin.delete_memory(self.store_id, existing.id)
            return True

        if self.run(delete()):
            self._touch_remote(rel)

    # --- the engine ---------------------------------------------------------------------------------------

    @precondition(lambda self: self.ready)
    @rule()
    def sync_pass(self) -> None:
        before = self._before_pass()
        outcome = self.run(self.agent.sync_once())[self.store_id].outcome
        note(f"pass outcome: {outcome}")
        self._after_pass(before, complete=True, outcome=outcome)

    @precondition(lambda self: self.ready)
    @rule(cut_at=st.integers(1, 8), after=st.booleans())
    def killed_mid_pass_then_restart(self, cut_at: int, after: bool) -> None:
        """SIGKILL while a pass runs (right before, or right after, its N-th request), then a new engine."""
        before = self._before_pass()

        async def doomed() -> bool:
            task = asyncio.create_task(self.agent.sync_once())
            self.transport.arm(task, cut_at, after)
            try:
                done, _ = await asyncio.wait({task}, timeout=60)
                assert done, "a killed pass did not stop within 60 s:\n" + "\n".join(
                    "".join(__import__("traceback").format_stack(t.get_stack()[-1]))
                    for t in asyncio.all_tasks()
                    if t.get_stack()
                )
            finally:
                self.transport.disarm()
            return task.cancelled()

        killed = self.run(doomed())
        note(f"pass killed: {killed}")
        self.quiesce()
        self.new_agent()
        if killed:
            self._after_pass(before, complete=False, outcome="killed")
        else:  # the pass made fewer requests than cut_at: it simply completed
            self._after_pass(before, complete=True, outcome="synced")

    @precondition(lambda self: self.ready)
    @rule()
    def restart(self) -> None:
        """SIGKILL between passes: only the persisted state survives."""
        self.new_agent()

    @precondition(lambda self: self.ready)
    @rule()
    def final_shutdown(self) -> None:
        before = self._before_pass()
        quiet = not self.remote_touched
        outcome = self.run(self.agent.final_shutdown())
        note(f"final shutdown: {outcome.payload()}")
        self._after_pass(before, complete=True, outcome="final")
        if self.read_only or self.marker_bad:
            return
        assert outcome.complete, f"the final shutdown left files unsent: {outcome.payload()}"
        if quiet:
            local, remote = self.local(), self.remote()
            assert remote == local, (
                "(e) after the final shutdown with no concurrent remote change the store equals the folder:\n"
                f"only in the store: {sorted(set(remote) - set(local))}\n"
                f"only in the folder: {sorted(set(local) - set(remote))}\n"
                f"different: {sorted(r for r in set(local) & set(remote) if local[r] != remote[r])}"
            )

    # --- invariants ---------------------------------------------------------------------------------------

    def _before_pass(self) -> dict[str, Any]:
        return {
            "writes": self.session_writes(),
            "baseline": self.baseline_size(),
            "local": self.local(),
            "marker_bad": self.marker_bad,
        }

    def _after_pass(self, before: dict[str, Any], *, complete: bool, outcome: str) -> None:
        writes = self.session_writes()
        assert set(before["writes"]) <= set(writes), "versions are append-only"
        new = [w for vid, w in writes.items() if vid not in before["writes"]]
        local = self.local()

        # (b) read-only stores never push.
        if self.read_only:
            assert not writes, (
                f"(b) the read-only store received writes from the session: {list(writes.values())}"
            )

        # (d) a bad marker never pushes or deletes (and a pass leaves the folder as found).
        if before["marker_bad"]:
            assert not new, f"(d) a pass over a folder with a bad marker wrote to the store: {new}"
            if complete and before["local"]:
                assert local == before["local"], "(d) a pass over a folder with a bad marker changed files"
            if complete and not before["local"]:
                # Bad marker and no files: the folder is recovered (re-stamped and downloaded), never pushed.
                self.marker_bad = False
                before["marker_bad"] = False

        # (c) deletes: only of files gone locally, within the cap, never after a wipe.
        deleted = [path for op, path in new if op == "deleted"]
        if deleted:
            assert not before["marker_bad"]
            gone = [p for p in deleted if p in before["local"] or p in local]
            assert not gone, f"(c) deleted memories whose files exist locally: {gone}"
            assert len(deleted) <= delete_cap(before["baseline"]), f"(c) over the delete cap: {deleted}"
            assert before["local"] or before["baseline"] <= 1, (
                f"(c) an emptied folder (a wipe) must be re-downloaded, not deleted remotely: {deleted}"
            )

        if not complete or before["marker_bad"]:
            return
        # A complete pass over a trusted folder saw every remote change made so far.
        remote = self.remote()
        for rel, ob in sorted(self.obligations.items()):
            if self.read_only:
                kept = local.get(rel) == ob.content
            else:
                kept = remote.get(rel) == ob.content
                if kept:
                    assert local.get(rel) == ob.content, f"(a) {rel}: uploaded, but the file changed"
            if kept:
                continue
            warned = [
                m for m, p in self.recorder.records[ob.log_mark :] if p == "/" + rel and m in LOST_WARNINGS
            ]
            assert ob.concurrent and warned, (
                f"(a) the local edit of {rel} ({ob.content.strip()!r}) was lost: store has "
                f"{remote.get(rel)!r}, folder has {local.get(rel)!r}; concurrent remote change: "
                f"{ob.concurrent}; warnings for it: {warned}"
            )
        if self.read_only:
            self.obligations = {r: o for r, o in self.obligations.items() if local.get(r) == o.content}
        else:
            self.obligations.clear()
        self.remote_touched.clear()


def test_sync_engine_properties(store_server: Any, tmp_path: Path) -> None:
    SyncMachine.server = store_server
    SyncMachine.workdir = tmp_path
    run_state_machine_as_test(
        SyncMachine,
        settings=settings(
            max_examples=int(os.environ.get("MEMSYNC_PROPERTY_EXAMPLES", "40")),
            stateful_step_count=25,
            deadline=None,
            database=None,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
