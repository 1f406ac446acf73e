"""What the Kubernetes scenario tiers (``tests/cluster``, ``tests/kind``) share: stores on a store server,
the scripted agent as a sandbox, the manifests of a SessionMemory and its Secret, and reading what a Pod
and the agent reported. Each tier brings its own way to run kubectl and to reach the store server (anything
with an ``admin_client()``)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from memsync.api.models import Memory
from memsync.client import StoreClient
from memsync.crd.models import API_VERSION, sandbox_template
from memsync.devtools.scripted_agent import REPORT_PREFIX

SECRET_KEY = "work-secret"
FINAL = ("Succeeded", "Failed")
SMEM_API_VERSION = API_VERSION


class StoreAdmin(Protocol):
    """A store server a test can administer (the tier's own process, or a port-forward to a cluster's)."""

    def admin_client(self) -> StoreClient: ...


def session_id(tier: str) -> str:
    return f"sesn_{tier}{uuid.uuid4().hex[:16]}"


async def make_store(server: StoreAdmin, name: str, memories: dict[str, str]) -> str:
    async with server.admin_client() as admin:
        store = await admin.create_store(f"{name}-{uuid.uuid4().hex[:6]}")
        for path, content in memories.items():
            await admin.create_memory(store.id, path, content)
        return str(store.id)


async def store_files(server: StoreAdmin, store_id: str) -> dict[str, str]:
    """path -> content sha256 of every memory in the store."""
    async with server.admin_client() as admin:
        return {
            m.path: m.content_sha256 async for m in admin.list_memories(store_id) if isinstance(m, Memory)
        }


async def versions(server: StoreAdmin, store_id: str) -> list[tuple[str, str]]:
    async with server.admin_client() as admin:
        return [(v.memory_id, v.operation) async for v in admin.list_versions(store_id)]


async def wait_store_has(server: StoreAdmin, store_id: str, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(await store_files(server, store_id)) < count:
        assert time.monotonic() < deadline, f"store {store_id} never held {count} memories"
        await asyncio.sleep(0.5)


def agent(*args: str, image: str, pull_policy: str | None = None) -> dict[str, Any]:
    """The scripted agent of the memsync image as the sandbox, writing its report to /tmp too."""
    sandbox: dict[str, Any] = {
        "image": image,
        "command": ["python", "-m", "memsync.devtools.scripted_agent"],
        "args": ["--report", "/tmp/agent-report.json", *args],
    }
    if pull_policy is not None:
        sandbox["imagePullPolicy"] = pull_policy
    return sandbox


def secret_object(namespace: str, name: str, value: str, key: str = SECRET_KEY) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {key: base64.b64encode(value.encode()).decode()},
    }


def smem_object(
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
    sync: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A SessionMemory of ``stores`` ([(memoryStoreId, name, access)]) with deletions enabled, whose sandbox
    container is ``sandbox``; ``pod_spec`` and ``metadata`` add to its template, ``sync`` to its sync,
    ``spec`` to its spec (``startDeadlineSeconds``, ``onInterruption``)."""
    template = sandbox_template(sandbox, **(pod_spec or {}))
    if metadata is not None:
        template["metadata"] = metadata
    return {
        "apiVersion": SMEM_API_VERSION,
        "kind": "SessionMemory",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "sessionId": session,
            "workItemSecretRef": {"name": secret_name, "key": SECRET_KEY},
            "apiBaseUrl": base_url,
            "stores": [{"memoryStoreId": i, "name": n, "access": a} for i, n, a in stores],
            "sync": {
                "intervalSeconds": interval,
                "deletions": "enabled",
                "finalFlushSeconds": final_flush,
                **(sync or {}),
            },
            "template": template,
            **(spec or {}),
        },
    }


def container(status: dict[str, Any], name: str) -> dict[str, Any]:
    """The status of container ``name`` (init or main) in a Pod's ``status``."""
    for entry in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        if entry["name"] == name:
            result: dict[str, Any] = entry
            return result
    raise KeyError(name)


def report_from_logs(text: str) -> dict[str, Any]:
    """The scripted agent's last report line in its container's output."""
    lines = [line for line in text.splitlines() if line.startswith(REPORT_PREFIX)]
    assert lines, f"the scripted agent printed no report:\n{text[-3000:]}"
    report: dict[str, Any] = json.loads(lines[-1].removeprefix(REPORT_PREFIX))
    return report


def as_store_paths(files: dict[str, str]) -> dict[str, str]:
    """The agent's report paths (relative to its store folder) as the store's absolute paths."""
    return {"/" + rel: sha for rel, sha in files.items()}


def assert_final_store(
    remote: dict[str, str], report: dict[str, Any], mount: str, status: dict[str, Any], *, prefix: str = ""
) -> None:
    """The store (``remote``, path -> sha) holds exactly the files the agent's report lists at its end under
    ``/mnt/memory/<mount>`` (only those below ``prefix``, when another session writes the rest), apart from
    local deletions the per-sync delete cap held back at the session's end. Those stay in the store by the
    sync rules (docs/sync-semantics.md#deletes): each must be a file the agent deleted, and the store's entry
    in the SessionMemory ``status`` must count them and name them (a sample of up to five). How many reach
    the final sync depends on when the passes ran, so a churning agent meets the cap now and then."""
    mine = report["stores"][f"/mnt/memory/{mount}"]
    want = as_store_paths({p: s for p, s in mine["files"].items() if p.startswith(prefix)})
    got = {p: s for p, s in remote.items() if p.startswith("/" + prefix)}
    held = got.keys() - want.keys()
    assert {p: s for p, s in got.items() if p not in held} == want
    assert held <= {"/" + p for p in mine["deleted"]}, (sorted(held), mine["deleted"])
    entries = [s for s in status.get("stores") or [] if s.get("mountPath") == f"/mnt/memory/{mount}"]
    assert len(entries) == 1, status
    assert entries[0].get("heldDeletes", 0) == len(held), (entries[0], sorted(held))
    assert {"/" + p for p in entries[0].get("heldDeletePaths") or []} <= held, entries[0]


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def record_phase_reports(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A ``pytest_runtest_makereport`` hook: keeps each phase's report on the item (``rep_call``, ...), so a
    fixture can dump the cluster's state after a failed test."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


def mark_tier(ours: list[pytest.Item], marker: pytest.MarkDecorator, why_not: str | None) -> None:
    """Mark a tier's tests, skipping them, with the reason, when the tier cannot run here."""
    for item in ours:
        item.add_marker(marker)
        if why_not is not None:
            item.add_marker(pytest.mark.skip(reason=why_not))
