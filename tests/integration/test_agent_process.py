"""Real ``memsync`` processes and real signals: mount, sync, SIGTERM, SIGKILL and restart, flush alongside.

Each test maps the Pod's absolute paths under its own temp dir with the test-only ``MEMSYNC_TEST_ROOT``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from memsync.agent import messages
from memsync.api.hashing import content_sha256
from memsync.api.models import Memory, MemoryStoreResource
from memsync.client import StoreClient
from support.sync_harness import store_contents

pytestmark = pytest.mark.timeout(120)

MOUNT = "/mnt/memory/proc-store"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Pod:
    """One 'Pod' on this machine: its store, secret, env and temp root."""

    root: Path
    store_id: str
    admin: StoreClient
    env: dict[str, str]

    @property
    def folder(self) -> Path:
        return self.root / MOUNT.lstrip("/")

    @property
    def termination(self) -> dict:
        return json.loads((self.root / "dev/termination-log").read_text())

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memsync", *args],
            env=env if env is not None else self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, *args: str, **extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "memsync", *args],
            env={**self.env, **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    async def remote(self) -> dict[str, str]:
        return await store_contents(self.admin, self.store_id)

    async def versions(self) -> dict[str, int]:
        """memory path -> number of versions (to see that nothing was uploaded twice)."""
        ids = {}
        async for item in self.admin.list_memories(self.store_id):
            if isinstance(item, Memory):
                ids[item.id] = item.path.lstrip("/")
        counts = dict.fromkeys(ids.values(), 0)
        async for version in self.admin.list_versions(self.store_id, limit=100):
            if version.memory_id in ids:
                counts[ids[version.memory_id]] += 1
        return counts

    async def wait_remote(self, predicate, timeout: float = 30) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            remote = await self.remote()
            if predicate(remote) or time.monotonic() > deadline:
                return remote
            await asyncio.sleep(0.2)


async def make_pod(server, tmp_path: Path, files: dict[str, str], **env: str) -> Pod:
    admin = StoreClient(server.url, api_key=server.admin_key)
    store = await admin.create_store("Proc Store")
    for rel, content in files.items():
        await admin.create_memory(store.id, "/" + rel, content)
    _, secret = await admin.mint_session([MemoryStoreResource(memory_store_id=store.id, access="read_write")])
    (tmp_path / "dev").mkdir(parents=True, exist_ok=True)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSYNC_", "ANTHROPIC_"))}
    base_env.update(
        {
            "MEMSYNC_TEST_ROOT": str(tmp_path),
            "MEMSYNC_STORES": json.dumps(
                [
                    {
                        "memory_store_id": store.id,
                        "name": "Proc Store",
                        "mount_path": MOUNT,
                        "access": "read_write",
                    }
                ]
            ),
            "ANTHROPIC_WORK_SECRET": secret,
            "MEMSYNC_SYNC_INTERVAL": "5",
            "MEMSYNC_TEST_DELETE_WINDOW": "0",
            "MEMSYNC_FLUSH_TIMEOUT": "20",
            "MEMSYNC_SESSION_ID": "sesn_proc",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
    )
    return Pod(tmp_path, store.id, admin, base_env)


@pytest.fixture
async def pod(store_server, tmp_path: Path) -> AsyncIterator[Pod]:
    p = await make_pod(
        store_server, tmp_path, {"a.md": "alpha", "notes/b.md": "bravo", "notes/c.md": "charlie"}
    )
    try:
        yield p
    finally:
        await p.admin.aclose()


async def wait_catches(proc: subprocess.Popen[str], sig: signal.Signals, timeout: float = 60) -> None:
    """Until the process has a handler for ``sig`` (its ``SigCgt`` mask): what a container's first process
    needs to be signalled at all."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        status = Path(f"/proc/{proc.pid}/status").read_text()
        caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
        if caught & (1 << (int(sig) - 1)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the process never installed a handler for {sig.name}")


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 60) -> tuple[int, str]:
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


async def wait_ready(port: int, proc: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as http:
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[0]
            try:
                if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("sync never became ready")


# --- mount ------------------------------------------------------------------------------------------------


async def test_mount_then_sync_then_sigterm_saves_every_edit(pod: Pod) -> None:
    mounted = pod.run("mount")
    assert mounted.returncode == 0, mounted.stderr
    assert pod.termination == {"phase": "mounted", "stores": {pod.store_id: {"memories": 3}}}
    assert (pod.folder / "notes/b.md").read_text() == "bravo"
    assert pod.env["ANTHROPIC_WORK_SECRET"] not in mounted.stderr + mounted.stdout

    port = free_port()
    proc = pod.start("sync", MEMSYNC_METRICS_PORT=str(port))
    try:
        await wait_ready(port, proc)
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
            assert "memsync_sync_passes_total" in metrics
            assert (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
        (pod.folder / "a.md").write_text("edited while running")
        remote = await pod.wait_remote(lambda r: r.get("a.md") == "edited while running", timeout=20)
        assert remote["a.md"] == "edited while running"  # the periodic loop pushed it
        # Edits right before SIGTERM are saved by the final sync / flush.
        (pod.folder / "new.md").write_text("written at the last moment")
        (pod.folder / "notes/b.md").write_text("bravo, last edit")
        (pod.folder / "notes/c.md").unlink()
        code, out = stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, out
    assert pod.env["ANTHROPIC_WORK_SECRET"] not in out
    remote = await pod.remote()
    assert remote == {
        "a.md": "edited while running",
        "new.md": "written at the last moment",
        "notes/b.md": "bravo, last edit",
    }
    term = pod.termination
    assert term["phase"] == "flushed" and term["complete"] is True
    assert term["stores"][pod.store_id]["unsent"] == 0
    assert term["stores"][pod.store_id]["deleted"] == 1


async def test_mount_refuses_an_existing_path(pod: Pod) -> None:
    pod.folder.mkdir(parents=True)
    (pod.folder / "leftover.md").write_text("from an earlier session")
    result = pod.run("mount")
    assert result.returncode == 1
    assert f"{messages.ALREADY_EXISTS}: {MOUNT}" in result.stderr
    term = pod.termination
    assert term["phase"] == "mount_failed" and term["store"] == pod.store_id
    assert term["error"].startswith(messages.ALREADY_EXISTS)
    assert (pod.folder / "leftover.md").read_text() == "from an earlier session"  # never touched


async def test_mount_refuses_a_dangling_symlink(pod: Pod) -> None:
    pod.folder.parent.mkdir(parents=True)
    os.symlink(pod.root / "nowhere", pod.folder)
    result = pod.run("mount")
    assert result.returncode == 1 and messages.ALREADY_EXISTS in result.stderr


@pytest.mark.parametrize("secret", ["", "not-base64-json!!", "eyJmb28iOiAiYmFyIn0"])
async def test_mount_without_a_sessions_token_fails_with_the_documented_message(
    pod: Pod, secret: str
) -> None:
    env = {**pod.env, "ANTHROPIC_WORK_SECRET": secret}
    result = pod.run("mount", env=env)
    assert result.returncode == 1
    assert messages.NO_SESSIONS_TOKEN in result.stderr
    if secret:
        assert secret not in result.stderr
    term = pod.termination
    assert term == {"phase": "mount_failed", "store": None, "error": term["error"]}
    assert term["error"].startswith(messages.NO_SESSIONS_TOKEN)
    assert not pod.folder.exists()


async def test_mount_failure_removes_what_it_created(pod: Pod, store_server) -> None:
    # A second store the session cannot see: its download fails, and both folders are removed again.
    other = await pod.admin.create_store("Not Attached")
    stores = [
        *json.loads(pod.env["MEMSYNC_STORES"]),
        {"memory_store_id": other.id, "name": "x", "mount_path": "/mnt/memory/other", "access": "read_write"},
    ]
    result = pod.run("mount", env={**pod.env, "MEMSYNC_STORES": json.dumps(stores)})
    assert result.returncode == 1
    assert f"{messages.DOWNLOAD_FAILED}{other.id}" in result.stderr
    assert pod.termination["store"] == other.id
    assert not pod.folder.exists() and not (pod.root / "mnt/memory/other").exists()
    assert not (pod.root / "mnt").exists()


async def test_sigterm_interrupts_a_mount_waiting_on_the_store(pod: Pod) -> None:
    """The init container's ``memsync mount`` handles SIGTERM (as its container's PID 1 it would otherwise
    ignore it and run out the grace period): the folders it made are removed, the termination message says
    why, and it exits 143 at once, not when the store finally answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections complete in the backlog; no request is ever answered
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        secret = _secret_for(pod.env["ANTHROPIC_WORK_SECRET"], url)
        proc = pod.start("mount", ANTHROPIC_WORK_SECRET=secret)
        await wait_catches(proc, signal.SIGTERM)
        await asyncio.sleep(0.5)  # into the mount, which waits on the silent server
        assert proc.poll() is None
        started = time.monotonic()
        code, out = stop(proc, timeout=10)
    assert code == 143, out
    assert time.monotonic() - started < 5
    assert "SIGTERM received: stopping the mount" in out
    assert "Traceback" not in out
    assert pod.termination == {"phase": "mount_failed", "store": None, "error": messages.MOUNT_INTERRUPTED}
    assert not (pod.root / "mnt").exists()


async def test_mount_cannot_create_folder(pod: Pod) -> None:
    (pod.root / "mnt").write_text("a file where /mnt should be a directory")  # mkdir fails even as root
    result = pod.run("mount")
    assert result.returncode == 1
    assert f"{messages.CANNOT_CREATE} {MOUNT}" in result.stderr and messages.MAKE_WRITABLE in result.stderr
    assert pod.termination["error"].startswith(messages.CANNOT_CREATE)


async def test_bad_configuration_exits_2_naming_the_field(pod: Pod) -> None:
    cases = [
        ("mount", "MEMSYNC_SYNC_INTERVAL", "2"),
        ("sync", "MEMSYNC_SYNC_INTERVAL", "nan"),
        ("flush", "MEMSYNC_SYNC_DELETIONS", "maybe"),
        ("sync", "MEMSYNC_STORES", "[]"),
    ]
    for command, var, value in cases:
        result = pod.run(command, env={**pod.env, var: value})
        assert result.returncode == 2, (command, result.stderr)
        assert var in result.stderr
        assert pod.env["ANTHROPIC_WORK_SECRET"] not in result.stderr
    assert pod.termination["phase"] == "mount_failed"  # mount tells the operator why, even then
    assert not pod.folder.exists()


# --- sync: SIGKILL and restart ----------------------------------------------------------------------------


async def test_sigkill_mid_pass_then_restart_loses_and_duplicates_nothing(
    store_server, tmp_path: Path
) -> None:
    files = {f"d{i % 10}/f{i:03d}.md": f"original {i}" for i in range(300)}
    pod = await make_pod(store_server, tmp_path, files)
    try:
        assert pod.run("mount").returncode == 0
        edits = {rel: f"edited {rel}" for rel in files}
        news = {f"new/n{i:03d}.md": f"new {i}" for i in range(100)}
        for rel, text in {**edits, **news}.items():
            (pod.folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (pod.folder / rel).write_text(text)
        proc = pod.start("sync")
        # Kill as soon as the first upload landed: the pass is in the middle of its upload batch.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            landed = [v async for v in pod.admin.list_versions(pod.store_id, operation="modified", limit=1)]
            if landed:
                break
            await asyncio.sleep(0.02)
        proc.kill()
        proc.wait(timeout=10)
        # More edits while the sidecar is down.
        (pod.folder / "d0/f000.md").write_text("edited again after the kill")
        edits["d0/f000.md"] = "edited again after the kill"
        once = pod.run("sync", "--once")
        assert once.returncode == 0, once.stderr
        assert await pod.remote() == {**edits, **news}
        versions = await pod.versions()
        for rel in files:
            expected = 3 if rel == "d0/f000.md" else 2  # created + each distinct edit, never an upload twice
            assert versions[rel] == expected, rel
        for rel in news:
            assert versions[rel] == 1, rel
        state = json.loads((pod.root / f"var/lib/memsync/store-{pod.store_id}.json").read_text())
        assert state["sent_shas"] == {}
        assert state["baseline"]["d0/f000.md"] == content_sha256("edited again after the kill")
    finally:
        await pod.admin.aclose()


async def test_sigterm_right_after_the_start_line_still_flushes(pod: Pod) -> None:
    """The start line is the sidecar's word that SIGTERM now runs the final flush: a supervisor that ends the
    session the moment it sees the line (a sidecar restarted just before the session ends) loses nothing."""
    assert pod.run("mount").returncode == 0
    (pod.folder / "a.md").write_text("edited before the restart")
    proc = pod.start("sync", MEMSYNC_SYNC_INTERVAL="60")
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "memsync sync starting" in line:
                break
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "".join(seen) + out
    assert (await pod.remote())["a.md"] == "edited before the restart"
    assert pod.termination["phase"] == "flushed"


async def test_flush_while_sync_runs(pod: Pod) -> None:
    assert pod.run("mount").returncode == 0
    port = free_port()
    # Early sync off: the flush, not the sidecar, is to push the edit.
    proc = pod.start(
        "sync", MEMSYNC_METRICS_PORT=str(port), MEMSYNC_SYNC_INTERVAL="60", MEMSYNC_EARLY_SYNC="false"
    )
    try:
        await wait_ready(port, proc)
        (pod.folder / "a.md").write_text("pushed by preStop flush")
        flushed = pod.run("flush")
        assert flushed.returncode == 0, flushed.stderr
        assert (await pod.remote())["a.md"] == "pushed by preStop flush"
        term = pod.termination
        assert term["phase"] == "flushed" and term["complete"] is True
        assert term["stores"][pod.store_id]["uploaded"] == 1
        again = pod.run("flush")  # idempotent
        assert again.returncode == 0
        assert pod.termination["stores"][pod.store_id]["uploaded"] == 0
        assert proc.poll() is None  # the sidecar keeps running
        code, out = stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, out
    assert (await pod.versions())["a.md"] == 2


async def test_flush_final_runs_the_final_sync(pod: Pod) -> None:
    assert pod.run("mount").returncode == 0
    (pod.folder / "a.md").unlink()
    (pod.folder / "z.md").write_text("zulu")
    result = pod.run("flush", "--final")
    assert result.returncode == 0, result.stderr
    assert await pod.remote() == {"notes/b.md": "bravo", "notes/c.md": "charlie", "z.md": "zulu"}
    assert pod.termination["stores"][pod.store_id] == {
        "uploaded": 1,
        "deleted": 1,
        "conflicts": 0,
        "refused": 0,
        "unsent": 0,
    }


async def test_sync_once_never_dies_on_an_unreachable_server(pod: Pod) -> None:
    assert pod.run("mount").returncode == 0
    env = {
        **pod.env,
        "ANTHROPIC_WORK_SECRET": _secret_for(
            pod.env["ANTHROPIC_WORK_SECRET"], f"http://127.0.0.1:{free_port()}"
        ),
    }
    result = pod.run("sync", "--once", env=env)
    assert result.returncode == 1
    assert messages.SYNC_FAILED in result.stderr
    assert "Traceback" not in result.stderr


def _secret_for(secret: str, url: str) -> str:
    from memsync.api.secret import decode_work_secret, encode_work_secret

    return encode_work_secret(decode_work_secret(secret).sessions_token, url)


# --- secrets --------------------------------------------------------------------------------------------


async def test_no_secret_or_token_in_any_output_at_debug(store_server, tmp_path: Path) -> None:
    """mount, sync (loop + SIGTERM), flush, flush --final, a refused file and failing calls, all at DEBUG, in
    text and JSON: neither the work secret nor the sessions token shows up in any output, termination message,
    state file or metrics page."""
    from memsync.api.secret import decode_work_secret, encode_work_secret

    pod = await make_pod(
        store_server, tmp_path, {"a.md": "alpha", "notes/b.md": "bravo"}, MEMSYNC_LOG_LEVEL="DEBUG"
    )
    try:
        secret = pod.env["ANTHROPIC_WORK_SECRET"]
        token = decode_work_secret(secret).sessions_token
        outputs: list[str] = []

        def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
            result = pod.run(*args, env=env)
            outputs.extend([result.stdout, result.stderr, (pod.root / "dev/termination-log").read_text()])
            return result

        assert run("mount").returncode == 0
        (pod.folder / "a.md").write_text("edited")
        (pod.folder / "big.md").write_bytes(b"x" * 200_000)  # refused (over the limit)
        (pod.folder / "bad.md").write_bytes(b"\xff\xfe")  # refused (not UTF-8)
        assert run("sync", "--once", env={**pod.env, "MEMSYNC_LOG_FORMAT": "json"}).returncode == 0
        port = free_port()
        proc = pod.start("sync", MEMSYNC_METRICS_PORT=str(port))
        try:
            await wait_ready(port, proc)
            async with httpx.AsyncClient() as http:
                outputs.append((await http.get(f"http://127.0.0.1:{port}/metrics")).text)
            (pod.folder / "new.md").write_text("new")
            code, out = stop(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
        outputs.append(out)
        assert code == 0, out
        assert run("flush").returncode == 0
        assert run("flush", "--final").returncode == 0
        # Failing calls: a token the server does not know (401), and a server that is not there.
        wrong = encode_work_secret(token + "-revoked", store_server.url)
        assert run("sync", "--once", env={**pod.env, "ANTHROPIC_WORK_SECRET": wrong}).returncode == 1
        gone = _secret_for(secret, f"http://127.0.0.1:{free_port()}")
        assert run("sync", "--once", env={**pod.env, "ANTHROPIC_WORK_SECRET": gone}).returncode == 1
        outputs.extend(p.read_text(errors="replace") for p in (pod.root / "var/lib/memsync").glob("*.json"))
        blob = "\n".join(outputs)
        assert messages.LOCAL_REFUSED in blob  # the runs did real work, logged at DEBUG...
        assert '"level": "DEBUG"' in blob or " DEBUG " in blob
        assert "authentication_error" in blob  # the 401 run was logged...
        for credential in (secret, token, token + "-revoked", wrong, gone):
            assert credential not in blob  # ...without any credential
        assert (await pod.remote())["new.md"] == "new"
    finally:
        await pod.admin.aclose()
