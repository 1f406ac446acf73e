"""``memsync dev --environment``: an environment's whole flow on one machine.

An environment (and its key) on the embedded store server; a session minted into it with a scripted agent
that writes one memory; the operator's own poll loop claiming the work item and creating the Secret and
SessionMemory (kept in memory: there is no cluster); then the SessionMemory's "Pod" run in this process:
the sync agent's ``mount``, its sync sidecar, and ``memsync session run``'s runner, whose scripted ``write``
lands in the mounted folder; the session ends, the runner has the sidecar run the final sync and flush, the
item is stopped; the SessionMemory is marked Succeeded and the loop's next pass removes it (retention 0).
Every step is printed, and at the end the memory as the store holds it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from memsync.agent.commands import SyncAgent, mount, run_sync
from memsync.agent.config import load_config
from memsync.agent.metrics import MetricsServer
from memsync.api.paths import slugify
from memsync.client import StoreClient
from memsync.contracts import runner
from memsync.contracts.stores import StoreEntry
from memsync.controller.environment import decisions as d
from memsync.controller.environment.loop import EnvironmentLoop
from memsync.crd.models import sandbox_template, validate_spec
from memsync.devtools.demo_store import ensure_demo_store
from memsync.devtools.objects import MemoryObjects
from memsync.session.runner import RunnerConfig, run_session

NAMESPACE = "dev"
ENVIRONMENT = "dev-environment"
Say = Callable[[str], None]


def demo_script(slug: str, stamp: str) -> tuple[str, list[dict[str, Any]]]:
    """The memory path and the scripted agent: one ``write`` into the store's folder, then the end."""
    path = f"/sessions/{stamp}.md"
    content = f"# Session {stamp}\n\nWritten by the scripted agent through `memsync session run`.\n"
    return path, [
        {"type": "agent.tool_use", "id": "toolu_demo", "name": "write",
         "input": {"file_path": f"{slug}{path}", "content": content}},
        {"type": "session.status_idle", "stop_reason": {"type": "end_turn"}},
        {"type": "session.status_terminated"},
    ]  # fmt: skip


async def run_environment_demo(url: str, admin_key: str, base: Path, flush_timeout: float, say: Say) -> int:
    """The flow against the store server at ``url``; 0 when the memory landed before the item stopped."""
    headers = {"x-api-key": admin_key}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as admin:
        env = (await admin.post("/v1/environments", json={"name": "memsync dev"})).json()
        key = (await admin.post(f"/v1/memsync/environments/{env['id']}/keys")).json()["key"]
        async with StoreClient(url, api_key=admin_key) as client:
            store, _ = await ensure_demo_store(client)
        slug = slugify(store.name) or store.id
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:4]
        memory_path, script = demo_script(slug, stamp)
        body = {
            "environment_id": env["id"],
            "resources": [{"type": "memory_store", "memory_store_id": store.id}],
            "script": script,
        }
        minted = (await admin.post("/v1/memsync/sessions", json=body)).json()
        session_id = minted["session"]["id"]
        say(f"environment {env['id']} queued work item {minted['work_id']} for session {session_id}")

        objects = MemoryObjects(_environment(env["id"], url, flush_timeout), {"env-key": {"key": key}})
        loop = EnvironmentLoop(objects, NAMESPACE, ENVIRONMENT)
        await loop.run_pass()
        name = d.object_name(minted["session"]["id"])
        if name not in objects.smems:
            say(f"the poll loop created no SessionMemory: {(objects.env or {}).get('status')}")
            return 1
        say(f"the poll loop claimed it: SessionMemory {name}, Secret {d.secret_name(session_id)}")

        code = await _run_pod(objects, name, url, base / "sessions" / stamp, say)
        work = (await admin.get(f"/v1/environments/{env['id']}/work/{minted['work_id']}")).json()
        versions = (await admin.get(f"/v1/memory_stores/{store.id}/memory_versions")).json()["data"]
        memories = (await admin.get(f"/v1/memory_stores/{store.id}/memories", params={"view": "full"})).json()
        landed = [m for m in memories["data"] if m["path"] == memory_path]
        if not landed:
            say(f"the memory {memory_path} did not reach the store")
            return 1
        written = max(v["created_at"] for v in versions if v["memory_id"] == landed[0]["id"])
        say(f"the store holds {memory_path} (version written {written}):\n{landed[0]['content']}")
        say(f"work item {work['id']} is {work['state']} (at {work['stopped_at']}, after that write)")

        objects.smems[name]["status"] = {
            "phase": "Succeeded",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": _now()}],
        }
        await loop.run_pass()
        await loop.aclose()
        say(f"SessionMemory {name} Succeeded and was removed after its retention (0 s)")
        ok = work["state"] == "stopped" and written < work["stopped_at"]
        return code if ok else 1


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _environment(environment_id: str, url: str, flush_timeout: float) -> dict[str, Any]:
    return {
        "apiVersion": "agents.memsync.dev/v1alpha1",
        "kind": "AgentEnvironment",
        "metadata": {"name": ENVIRONMENT, "namespace": NAMESPACE, "uid": str(uuid.uuid4()), "generation": 1},
        "spec": {
            "environmentId": environment_id,
            "environmentKeySecretRef": {"name": "env-key", "key": "key"},
            "apiBaseUrl": url,
            "finishedRetentionSeconds": 0,
            "sync": {"intervalSeconds": 3600, "finalFlushSeconds": max(5, min(300, int(flush_timeout)))},
            "template": sandbox_template({"image": "memsync", "command": ["memsync", "session", "run"]}),
        },
    }


async def _run_pod(objects: MemoryObjects, name: str, url: str, root: Path, say: Say) -> int:
    """The SessionMemory's Pod, in this process: mount, the sync sidecar, and the session runner."""
    spec = validate_spec(objects.smems[name]["spec"])
    secret = objects.secrets[spec.work_item_secret_ref.name][spec.work_item_secret_ref.key]
    env = {e["name"]: e.get("value") for e in spec.template.spec.sandbox.get("env") or []}
    entries = [
        {"memory_store_id": s.memory_store_id, "name": s.name, "access": s.access,
         "mount_path": str(root / "mnt" / "memory" / Path(s.effective_mount_path).name)}
        for s in spec.stores or []
    ]  # fmt: skip
    await asyncio.to_thread(root.mkdir, parents=True, exist_ok=True)
    config = load_config(
        stores=entries,
        interval=spec.sync.interval_seconds,
        flush_timeout=spec.sync.final_flush_seconds,
        state_dir=str(root / "state"),
        base_url=url,
        work_secret=secret,
        termination_log=str(root / "termination-log"),
        metrics_port=0,
    )
    client = StoreClient.from_work_secret(secret, base_url=url)
    try:
        await mount(config, client=client)
        say(f"mounted {', '.join(e['mount_path'] for e in entries)}")
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_ready(_agent: SyncAgent, server: MetricsServer | None) -> None:
            assert server is not None
            ready.set_result(server.port)

        sidecar = asyncio.create_task(
            run_sync(config, client=client, install_signals=False, on_ready=on_ready)
        )
        port = await ready
        served = RunnerConfig(
            work_id=str(env[runner.WORK_ID]),
            environment_id=str(env[runner.ENVIRONMENT_ID]),
            session_id=spec.session_id,
            stores=tuple(StoreEntry.model_validate(e) for e in entries),
            sidecar_url=f"http://127.0.0.1:{port}",
            workdir=root / "mnt" / "memory",
        )
        say("memsync session run: serving the work item")
        await run_session(
            served,
            base_url=url,
            max_idle=5,
            work_secret=secret,
        )
        code = await sidecar
        say("the session ended; the sidecar ran the final sync and flush before the item was stopped")
        return code
    finally:
        await client.aclose()
