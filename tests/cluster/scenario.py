"""Helpers of the cluster scenarios: stores on the tier's store server, SessionMemories through kubectl, and
waits on what the API server shows."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from typing import Any

from conftest import RunningStoreServer
from memsync.api.models import Memory
from memsync.crd.models import API_VERSION, sandbox_template
from memsync.devtools.scripted_agent import REPORT_PREFIX

from .conftest import SECRET_KEY, Cluster, secret_object

IMAGE = "memsync:kind"  # the kind overlay's image; the process kubelet maps it onto this project
FINAL = ("Succeeded", "Failed")


def sid() -> str:
    return f"sesn_cl{uuid.uuid4().hex[:16]}"


async def make_store(server: RunningStoreServer, name: str, memories: dict[str, str]) -> str:
    async with server.admin_client() as admin:
        store = await admin.create_store(f"{name}-{uuid.uuid4().hex[:6]}")
        for path, content in memories.items():
            await admin.create_memory(store.id, path, content)
        return str(store.id)


async def store_files(server: RunningStoreServer, store_id: str) -> dict[str, str]:
    async with server.admin_client() as admin:
        return {
            m.path: m.content_sha256 async for m in admin.list_memories(store_id) if isinstance(m, Memory)
        }


async def versions(server: RunningStoreServer, store_id: str) -> list[tuple[str, str]]:
    async with server.admin_client() as admin:
        return [(v.memory_id, v.operation) async for v in admin.list_versions(store_id)]


def agent(*args: str) -> dict[str, Any]:
    return {
        "image": IMAGE,
        "command": ["python", "-m", "memsync.devtools.scripted_agent"],
        "args": ["--report", "/tmp/agent-report.json", *args],
    }


def smem(
    namespace: str,
    name: str,
    *,
    session: str,
    base_url: str,
    stores: list[tuple[str, str, str]],
    sandbox: dict[str, Any],
    secret_name: str = "work",  # noqa: S107 (a Secret's name)
    interval: int = 5,
    final_flush: int = 10,
    pod_spec: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A SessionMemory whose sandbox container is ``sandbox``; ``pod_spec`` and ``metadata`` add to its
    template."""
    template = sandbox_template(sandbox, **(pod_spec or {}))
    if metadata is not None:
        template["metadata"] = metadata
    return {
        "apiVersion": API_VERSION,
        "kind": "SessionMemory",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "sessionId": session,
            "workItemSecretRef": {"name": secret_name, "key": SECRET_KEY},
            "apiBaseUrl": base_url,
            "stores": [{"memoryStoreId": i, "name": n, "access": a} for i, n, a in stores],
            "sync": {"intervalSeconds": interval, "deletions": "enabled", "finalFlushSeconds": final_flush},
            "template": template,
        },
    }


async def start_session(
    cluster: Cluster,
    server: RunningStoreServer,
    namespace: str,
    name: str,
    *,
    stores: list[tuple[str, str, str]],
    sandbox: dict[str, Any],
    **kw: Any,
) -> str:
    """Mint a work-item secret for ``stores`` into Secret ``work-<name>``; create the SessionMemory."""
    session = sid()
    secret = await server.mint_secret([(i, a) for i, _, a in stores], session_id=session)
    cluster.apply(secret_object(namespace, f"work-{name}", secret))
    work = f"work-{name}"
    body = smem(
        namespace,
        name,
        session=session,
        base_url=server.url,
        stores=stores,
        sandbox=sandbox,
        secret_name=work,
        **kw,
    )
    cluster.apply(body)
    return session


def smem_status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    obj = cluster.get_or_none("-n", namespace, "smem", name)
    status: dict[str, Any] = (obj or {}).get("status") or {}
    return status


def wait_phase(
    cluster: Cluster, namespace: str, name: str, phases: tuple[str, ...], timeout: float = 240
) -> dict[str, Any]:
    status: dict[str, Any] = cluster.wait(
        f"SessionMemory {namespace}/{name} in {phases}",
        lambda: (s := smem_status(cluster, namespace, name)).get("phase") in phases and s,
        timeout,
        explain=cluster.dump,
    )
    return status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    for entry in status.get("conditions") or []:
        if entry["type"] == kind:
            result: dict[str, Any] = entry
            return result
    raise KeyError(f"no condition {kind} in {status}")


def pod_status(cluster: Cluster, namespace: str, pod: str) -> dict[str, Any]:
    status: dict[str, Any] = cluster.get("-n", namespace, "pod", pod).get("status") or {}
    return status


def container(status: dict[str, Any], name: str) -> dict[str, Any]:
    for entry in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        if entry["name"] == name:
            result: dict[str, Any] = entry
            return result
    raise KeyError(name)


def agent_report(cluster: Cluster, namespace: str, pod: str) -> dict[str, Any]:
    text = cluster.pod_logs(namespace, pod, "sandbox")
    lines = [line for line in text.splitlines() if line.startswith(REPORT_PREFIX)]
    assert lines, f"the scripted agent printed no report:\n{text[-3000:]}"
    report: dict[str, Any] = json.loads(lines[-1].removeprefix(REPORT_PREFIX))
    return report


def as_store_paths(files: dict[str, str]) -> dict[str, str]:
    return {"/" + rel: sha for rel, sha in files.items()}


def kill_container(cluster: Cluster, namespace: str, pod: str, name: str) -> None:
    """SIGKILL a running container's processes (its ID is ``process://<pid>`` on this kubelet)."""
    entry = container(pod_status(cluster, namespace, pod), name)
    pid = int(entry["containerID"].removeprefix("process://"))
    os.killpg(pid, signal.SIGKILL)


def events(cluster: Cluster, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("-n", namespace, "events")["items"]
    return [e for e in items if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name]


async def wait_store_has(server: RunningStoreServer, store_id: str, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(await store_files(server, store_id)) < count:
        assert time.monotonic() < deadline, f"store {store_id} never held {count} memories"
        await asyncio.sleep(0.5)


def container_state(cluster: Cluster, namespace: str, pod: str, name: str) -> dict[str, Any]:
    """The container's current ``state`` ({} while the Pod or its status does not exist yet)."""
    obj = cluster.get_or_none("-n", namespace, "pod", pod)
    try:
        return container((obj or {}).get("status") or {}, name).get("state") or {}
    except KeyError:
        return {}
