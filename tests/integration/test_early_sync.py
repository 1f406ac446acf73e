"""Early sync in a real ``memsync sync`` process (docs/sync-agent.md#early-sync): with a periodic interval
of 300 s, an edit reaches the store soon after it settles, and a burst of writes is one pass or two, not one
per write. Outcomes only: generous polling deadlines, no assertion on latency."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from test_agent_process import Pod, free_port, make_pod, stop, wait_ready

pytestmark = pytest.mark.timeout(120)

LONG_INTERVAL = "300"  # the periodic pass never comes during these tests: only early sync can push


@pytest.fixture
async def pod(store_server, tmp_path: Path) -> AsyncIterator[Pod]:
    p = await make_pod(store_server, tmp_path, {"a.md": "alpha", "notes/b.md": "bravo"})
    try:
        yield p
    finally:
        await p.admin.aclose()


@contextlib.asynccontextmanager
async def sidecar(pod: Pod, **env: str) -> AsyncIterator[int]:
    """A ready ``memsync sync`` with a 300 s interval; yields its metrics port; SIGTERM at the end."""
    assert pod.run("mount").returncode == 0
    port = free_port()
    proc = pod.start("sync", MEMSYNC_METRICS_PORT=str(port), MEMSYNC_SYNC_INTERVAL=LONG_INTERVAL, **env)
    try:
        await wait_ready(port, proc)
        yield port
        code, out = stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, out


async def passes(port: int) -> int:
    """Every pass the sidecar ran so far, from its metrics page."""
    async with httpx.AsyncClient() as http:
        page = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    found = re.findall(r"^memsync_sync_passes_total\{[^}]*\} ([0-9.e+]+)$", page, re.MULTILINE)
    return int(sum(float(v) for v in found))


async def settle(port: int, *, quiet_s: float = 7.0, deadline_s: float = 60.0) -> int:
    """The pass count once it has stayed the same for ``quiet_s`` (longer than the 5 s gap)."""
    deadline = time.monotonic() + deadline_s
    count, since = await passes(port), time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        now = await passes(port)
        if now != count:
            count, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return count
    raise AssertionError(f"the sidecar never went quiet: {count} passes so far")


async def test_an_edit_reaches_the_store_without_waiting_for_the_periodic_pass(pod: Pod) -> None:
    async with sidecar(pod) as port:
        assert await settle(port) == 1  # the pass at start, and no pass set off by its own writes
        (pod.folder / "a.md").write_text("early")
        remote = await pod.wait_remote(lambda r: r.get("a.md") == "early", timeout=20)
        assert remote["a.md"] == "early"
        assert await settle(port) == 2


async def test_a_burst_of_fifty_writes_is_one_or_two_passes(pod: Pod) -> None:
    async with sidecar(pod) as port:
        before = await settle(port)
        (pod.folder / "burst").mkdir()
        for i in range(50):
            (pod.folder / f"burst/{i:02d}.md").write_text(f"write {i}")
        expected = {f"burst/{i:02d}.md": f"write {i}" for i in range(50)}
        remote = await pod.wait_remote(lambda r: expected.items() <= r.items(), timeout=20)
        assert expected.items() <= remote.items()
        assert 1 <= await settle(port) - before <= 2


async def test_a_folder_removed_is_recovered_early_and_watched_afresh(pod: Pod) -> None:
    async with sidecar(pod) as port:
        assert await settle(port) == 1
        shutil.rmtree(pod.folder)  # the change starts a pass, which recovers the folder from the store
        deadline = time.monotonic() + 20
        while not (pod.folder / "notes/b.md").is_file() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert (pod.folder / "notes/b.md").read_text() == "bravo"
        await settle(port)
        (pod.folder / "after.md").write_text("seen by the new watch")
        remote = await pod.wait_remote(lambda r: "after.md" in r, timeout=20)
        assert remote.get("after.md") == "seen by the new watch"


async def test_early_sync_off_leaves_the_edit_to_the_periodic_pass(pod: Pod) -> None:
    async with sidecar(pod, MEMSYNC_EARLY_SYNC="false") as port:
        (pod.folder / "a.md").write_text("waits")
        assert await settle(port) == 1
        assert (await pod.remote())["a.md"] == "alpha"
    assert (await pod.remote())["a.md"] == "waits"  # the final sync took it
