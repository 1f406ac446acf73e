"""Shared pieces of the local-Pod e2e tests: a SessionMemory spec -> the operator's Pod -> the local runner.

Nothing here stands in for a memsync part: the spec is the CRD model, the Pod is ``build_sandbox_pod``'s,
the containers run the real ``memsync`` commands and the scripted agent, the store is the real server, and
the SessionMemory status comes from the controller's pure status logic fed with the runner's Pod status.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memsync.client import StoreClient
from memsync.controller.conditions import now_utc
from memsync.controller.sessionmemory.derive import derive_status
from memsync.controller.sessionmemory.pod import (
    MOUNT_CONTAINER,
    SANDBOX_CONTAINER,
    SYNC_CONTAINER,
    build_sandbox_pod,
)
from memsync.crd.models import SessionMemorySpec, sandbox_template

from .podrunner import PodRunner

NAMESPACE = "e2e"
AGENT_IMAGE = "memsync:e2e"
SECRET_KEY = "work-secret"
REPORT_PATH = "/tmp/agent-report.json"  # inside the sandbox container, outside the store folders
# Test-only knobs every memsync container gets from the harness (documented as test-only).
HARNESS_ENV = {"MEMSYNC_TEST_DELETE_WINDOW": "1"}

__all__ = [
    "MOUNT_CONTAINER",
    "SANDBOX_CONTAINER",
    "SYNC_CONTAINER",
    "Session",
    "agent_command",
    "secret_object",
    "session_id",
    "store_files",
]


def session_id() -> str:
    return f"sesn_e2e{uuid.uuid4().hex[:16]}"


def secret_object(name: str, value: str, key: str = SECRET_KEY) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "type": "Opaque",
        "data": {key: base64.b64encode(value.encode("utf-8")).decode("ascii")},
    }


def agent_command(*args: str) -> dict[str, Any]:
    """The sandbox container of a SessionMemory whose agent is the scripted agent."""
    return {
        "image": AGENT_IMAGE,
        "command": ["python", "-m", "memsync.devtools.scripted_agent"],
        "args": ["--report", REPORT_PATH, *args],
    }


@dataclass
class Session:
    """One SessionMemory: its spec, the Pod the operator builds for it, and the runner executing it."""

    name: str
    spec: SessionMemorySpec
    pod: dict[str, Any]
    runner: PodRunner
    deleted_at: datetime | None = None

    @classmethod
    def create(
        cls,
        *,
        name: str,
        workdir: Path,
        base_url: str,
        stores: Sequence[tuple[str, str, str]],  # (memory_store_id, name, access)
        sandbox: dict[str, Any],
        secrets: Sequence[dict[str, Any]],
        secret_name: str,
        sid: str | None = None,
        interval: int = 5,
        final_flush: int = 10,
        stores_from_session: bool = False,
    ) -> Session:
        """``stores_from_session``: the SessionMemory omits ``spec.stores`` (the mount reads them)."""
        body: dict[str, Any] = {
            "sessionId": sid or session_id(),
            "workItemSecretRef": {"name": secret_name, "key": SECRET_KEY},
            "apiBaseUrl": base_url,
            "stores": [{"memoryStoreId": i, "name": n, "access": a} for i, n, a in stores],
            "sync": {"intervalSeconds": interval, "deletions": "enabled", "finalFlushSeconds": final_flush},
            "template": sandbox_template(sandbox),
        }
        if stores_from_session:
            del body["stores"]
        spec = SessionMemorySpec.model_validate(body)
        pod = build_sandbox_pod(
            name=name, namespace=NAMESPACE, uid=str(uuid.uuid4()), spec=spec, agent_image=AGENT_IMAGE
        )
        runner = PodRunner(pod, workdir=workdir, secrets=secrets, harness_env=HARNESS_ENV)
        return cls(name=name, spec=spec, pod=pod, runner=runner)

    @property
    def store_ids(self) -> list[str]:
        return [s.memory_store_id for s in self.spec.stores or []]

    async def delete(self) -> dict[str, Any]:
        self.deleted_at = datetime.now(UTC)
        return await self.runner.delete()

    def pod_object(self) -> dict[str, Any]:
        """The Pod as the API would serve it now: the manifest plus the runner's status."""
        metadata = dict(self.pod["metadata"])
        if self.deleted_at is not None:
            metadata["deletionTimestamp"] = self.deleted_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        return {**self.pod, "metadata": metadata, "status": self.runner.status()}

    def status(self) -> dict[str, Any]:
        """The SessionMemory status the controller derives from what the Pod really did."""
        stores = {s.memory_store_id: s.effective_mount_path for s in self.spec.stores or []}
        return derive_status(None, self.pod_object(), stores=stores, generation=1, now=now_utc())

    def report(self) -> dict[str, Any]:
        """The scripted agent's JSON report."""
        report: dict[str, Any] = json.loads(self.runner.host_path(SANDBOX_CONTAINER, REPORT_PATH).read_text())
        return report

    def sync_logs(self) -> str:
        return self.runner.logs(SYNC_CONTAINER)

    def explain(self) -> str:
        """Everything useful when a scenario fails: the Pod status and every container's logs."""
        parts = [f"pod status: {json.dumps(self.runner.status(), indent=1)}"]
        for c in (MOUNT_CONTAINER, SYNC_CONTAINER, SANDBOX_CONTAINER):
            parts.append(f"--- {c} ---\n{self.runner.logs(c)[-6000:]}")
        return "\n".join(parts)


async def store_files(client: StoreClient, store_id: str) -> dict[str, str]:
    """Every memory of a store: path -> content sha256."""
    from memsync.api.models import Memory

    files: dict[str, str] = {}
    async for item in client.list_memories(store_id, view="basic"):
        if isinstance(item, Memory):
            assert item.path not in files, f"two memories share the path {item.path}"
            files[item.path] = item.content_sha256
    return files


def as_store_paths(files: dict[str, str]) -> dict[str, str]:
    """A report's relative paths as the store's memory paths."""
    return {"/" + rel: sha for rel, sha in files.items()}


def container_status(status: dict[str, Any], name: str) -> dict[str, Any]:
    for entry in status["initContainerStatuses"] + status["containerStatuses"]:
        if entry["name"] == name:
            result: dict[str, Any] = entry
            return result
    raise KeyError(name)
