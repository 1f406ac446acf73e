"""No edit lost, and say so: real ``memsync`` processes against files the sidecar cannot read, a store that
goes away during the final flush, and the live sync health (``/readyz``, ``/status``) while the store is down.

Tests run as root, and root reads a mode-000 file; the agent here runs as ``nobody``, as the sidecar runs as
its own uid in a Pod, while the test (root) plants files it cannot read. It runs as a container of the process
kubelet would (``tests/cluster/tier/launcher.py``): the project's environment at the image's ``/opt/memsync``
(``support/image_env.py``), so it works wherever the clone lives, a parent of mode 0700 included.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_agent_process import Pod, free_port, make_pod, stop, wait_ready

from cluster.tier import launcher
from memsync.agent import messages
from memsync.contracts.health import STATUS_PATH, decode_health
from support import image_env

pytestmark = pytest.mark.timeout(180)

NOBODY = 65534


@pytest.fixture
def nobody_root() -> Iterator[Path]:
    """A temp dir the unprivileged agent can use (pytest's own tmp dirs are private to root), and beside it
    the project's environment staged as the image has it."""
    if os.getuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("these tests need root and unshare (util-linux) to run the agent as another uid")
    root = Path(tempfile.mkdtemp(prefix="memsync-nobody-", dir="/tmp"))
    root.chmod(0o755)
    (root / "dev").mkdir()
    for path in (root, root / "dev"):
        os.chown(path, NOBODY, NOBODY)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_as_nobody(pod: Pod, *args: str) -> subprocess.CompletedProcess[str]:
    """``memsync ARGS`` as uid 65534 in a container: the project at ``/opt/memsync``, the Pod's folder bound
    at its own path (what the process writes there is what the test reads)."""
    with tempfile.TemporaryDirectory(prefix="memsync-nobody-ctr-") as work:
        image = image_env.stage(Path(work) / "image")
        (Path(work) / "scratch").mkdir()
        spec = launcher.Spec(
            scratch=str(Path(work) / "scratch"),
            argv=[f"{image_env.BIN}/python", "-m", "memsync", *args],
            env=pod.env,
            uid=NOBODY,
            gid=NOBODY,
            mounts=[
                *({"source": b.source, "target": b.target, "readOnly": True} for b in image.binds),
                {"source": str(pod.root), "target": str(pod.root), "readOnly": False},
            ],
            traversable=list(image.traversable),
        )
        spec.write(Path(work) / "spec.json")
        return subprocess.run(
            launcher.command(Path(work) / "spec.json"),
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )


async def test_unreadable_files_never_stop_a_store_and_are_counted_and_retried(
    store_server, nobody_root: Path
) -> None:
    pod = await make_pod(store_server, nobody_root, {"a.md": "alpha", "notes/b.md": "bravo"})
    try:
        mounted = run_as_nobody(pod, "mount")
        assert mounted.returncode == 0, mounted.stderr
        folder = pod.folder
        (folder / "a.md").write_text("alpha, edited")
        os.chown(folder / "a.md", NOBODY, NOBODY)
        (folder / "new.md").write_text("a new file")
        (folder / "new.md").chmod(0o644)
        (folder / "secret.md").write_text("root's file")  # root-owned, mode 000: nobody cannot read it
        (folder / "secret.md").chmod(0o000)
        (folder / "private.md").write_text("another uid's file, written with umask 077")
        (folder / "private.md").chmod(0o600)
        (folder / "notes" / "locked").mkdir()
        (folder / "notes" / "locked" / "inside.md").write_text("below a folder nobody can open")
        (folder / "notes" / "locked").chmod(0o000)

        once = run_as_nobody(pod, "sync", "--once")
        assert once.returncode == 0, once.stderr  # the pass does not fail
        remote = await pod.remote()
        assert remote == {"a.md": "alpha, edited", "new.md": "a new file", "notes/b.md": "bravo"}
        warned = [line for line in once.stderr.splitlines() if messages.UNREADABLE in line]
        assert any("/secret.md" in line for line in warned), once.stderr
        assert any("/private.md" in line for line in warned), once.stderr
        assert any("/notes/locked" in line for line in warned), once.stderr

        final = run_as_nobody(pod, "flush", "--final")
        report = pod.termination
        counts = report["stores"][pod.store_id]
        assert counts["unreadable"] == 3
        assert counts["unreadable_paths"] == ["notes/locked", "private.md", "secret.md"]
        # Files it could not read may hold edits: they are unsaved, and the flush says so.
        assert counts["unsent"] == 3 and report["complete"] is False and final.returncode == 1
        assert report["totals"][pod.store_id]["uploaded"] == 2  # the session's uploads survive the shutdown

        # Retried on later passes: once readable, it syncs like any file.
        (folder / "secret.md").chmod(0o644)
        (folder / "private.md").chmod(0o644)
        (folder / "notes" / "locked").chmod(0o755)
        again = run_as_nobody(pod, "sync", "--once")
        assert again.returncode == 0, again.stderr
        remote = await pod.remote()
        assert remote["secret.md"] == "root's file"
        assert remote["private.md"] == "another uid's file, written with umask 077"
        assert remote["notes/locked/inside.md"] == "below a folder nobody can open"
    finally:
        await pod.admin.aclose()


# --- the store goes away during the final flush ---------------------------------------------------------


async def test_store_outage_of_10s_during_a_30s_final_flush_loses_nothing(
    fresh_store_server, tmp_path: Path
) -> None:
    server = fresh_store_server
    pod = await make_pod(
        server, tmp_path, {"a.md": "alpha", "notes/b.md": "bravo"}, MEMSYNC_FLUSH_TIMEOUT="30"
    )
    try:
        assert pod.run("mount").returncode == 0
        port = free_port()
        proc = pod.start("sync", MEMSYNC_METRICS_PORT=str(port), MEMSYNC_SYNC_INTERVAL="60")
        try:
            await wait_ready(port, proc)
            (pod.folder / "a.md").write_text("alpha, edited at the end")
            for i in range(3):
                (pod.folder / f"late{i}.md").write_text(f"late edit {i}")
            (pod.folder / "notes" / "b.md").unlink()
            server.stop()
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(10)
            server.start()  # same port, same database
            out, _ = proc.communicate(timeout=90)
            took = time.monotonic() - started
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, out
        assert took < 60, took
        report = pod.termination
        assert report["complete"] is True and report["stores"][pod.store_id]["unsent"] == 0
        assert await pod.remote() == {
            "a.md": "alpha, edited at the end",
            "late0.md": "late edit 0",
            "late1.md": "late edit 1",
            "late2.md": "late edit 2",
        }
        assert "retrying" in out
    finally:
        await pod.admin.aclose()


async def test_flush_counts_every_unsaved_file_when_the_store_stays_down(
    fresh_store_server, tmp_path: Path
) -> None:
    server = fresh_store_server
    pod = await make_pod(server, tmp_path, {"a.md": "alpha"}, MEMSYNC_FLUSH_TIMEOUT="5")
    try:
        assert pod.run("mount").returncode == 0
        (pod.folder / "a.md").write_text("edit")
        for i in range(3):
            (pod.folder / f"n{i}.md").write_text(f"new {i}")
        server.stop()
        started = time.monotonic()
        result = pod.run("flush", "--final")
        took = time.monotonic() - started
        assert result.returncode == 1
        assert pod.termination["stores"][pod.store_id]["unsent"] == 4  # every unsaved file, not one per store
        assert took >= 5, took  # it kept retrying while it had budget left
    finally:
        await pod.admin.aclose()


# --- live sync health -----------------------------------------------------------------------------------


async def _poll(url: str, check: Callable[[httpx.Response], bool], timeout: float) -> httpx.Response:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as http:
        while True:
            try:
                response = await http.get(url)
                if check(response):
                    return response
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} never matched within {timeout}s")
            await asyncio.sleep(0.2)


def _health(response: httpx.Response) -> Any:
    health = decode_health(response.content)
    assert health is not None, response.text
    return health


@pytest.fixture
async def running(fresh_store_server, tmp_path: Path) -> AsyncIterator[tuple[Pod, int, Any]]:
    pod = await make_pod(fresh_store_server, tmp_path, {"a.md": "alpha"}, MEMSYNC_SYNC_INTERVAL="5")
    assert pod.run("mount").returncode == 0
    port = free_port()
    proc = pod.start("sync", MEMSYNC_METRICS_PORT=str(port))
    try:
        await wait_ready(port, proc)
        yield pod, port, proc
    finally:
        if proc.poll() is None:
            stop(proc)
        await pod.admin.aclose()


async def test_readyz_and_status_follow_failing_passes_and_recovery(running, fresh_store_server) -> None:
    pod, port, _ = running
    base = f"http://127.0.0.1:{port}"
    ok = _health(await _poll(base + STATUS_PATH, lambda r: r.status_code == 200 and _health(r).healthy, 15))
    assert ok.stores[pod.store_id].last_success is not None
    (pod.folder / "x.md").write_text("synced before the outage")
    await _poll(base + STATUS_PATH, lambda r: _health(r).stores[pod.store_id].totals.uploaded >= 1, 20)

    fresh_store_server.stop()
    started = time.monotonic()
    await _poll(base + "/readyz", lambda r: r.status_code == 503, 20)
    down = _health(await _poll(base + STATUS_PATH, lambda r: not _health(r).healthy, 5))
    assert time.monotonic() - started < 15  # within three intervals of 5 s
    store = down.stores[pod.store_id]
    assert store.failing_passes >= 1 and messages.SYNC_FAILED in (store.last_error or "")
    assert store.totals.uploaded >= 1  # running totals stay
    # A failing pass is not a sync: the last success stays where it was.
    later = _health(
        await _poll(base + STATUS_PATH, lambda r: _health(r).stores[pod.store_id].failing_passes >= 2, 20)
    )
    assert later.stores[pod.store_id].last_success == store.last_success
    text = (await _poll(base + STATUS_PATH, lambda r: True, 1)).text
    assert pod.env["ANTHROPIC_WORK_SECRET"] not in text and "content" not in json.loads(text)

    fresh_store_server.start()
    await _poll(base + "/readyz", lambda r: r.status_code == 200, 20)
    back = _health(await _poll(base + STATUS_PATH, lambda r: _health(r).healthy, 5))
    assert back.stores[pod.store_id].last_error is None
    assert back.stores[pod.store_id].last_success != ok.stores[pod.store_id].last_success


async def test_a_permanent_refusal_is_not_retried_until_the_deadline(store_server, tmp_path: Path) -> None:
    pod = await make_pod(store_server, tmp_path, {"a.md": "alpha"}, MEMSYNC_FLUSH_TIMEOUT="30")
    try:
        assert pod.run("mount").returncode == 0
        (pod.folder / "a.md").write_text("edit")
        (pod.folder / "b.md").write_text("new")
        unknown = {"sessions_token": "sk-ant-req-" + "x" * 40, "api_base_url": store_server.url}
        secret = base64.urlsafe_b64encode(json.dumps(unknown).encode()).decode().rstrip("=")
        started = time.monotonic()
        result = pod.run("flush", "--final", env={**pod.env, "ANTHROPIC_WORK_SECRET": secret})
        took = time.monotonic() - started
        assert result.returncode == 1
        assert pod.termination["stores"][pod.store_id]["unsent"] == 2
        assert took < 20, took  # a 401 will not go away by retrying: no waiting out the 30 s budgets
    finally:
        await pod.admin.aclose()
