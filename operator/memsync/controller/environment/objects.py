"""The Kubernetes objects the environment loop reads and writes (the I/O edge), behind a small protocol.

``KubeObjects`` implements it over the operator's ``KubeApi``; the tests use an in-memory one. Reading the
environment key is the only place a Secret's value is read, and the value goes nowhere but the queue client.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from memsync.controller import events
from memsync.controller.kube import (
    MERGE_PATCH,
    KubeAlreadyExists,
    KubeApi,
    KubeConflict,
    KubeNotFound,
    core_path,
    custom_path,
)
from memsync.controller.objects import meta_of
from memsync.controller.settings import EVENT_COMPONENT
from memsync.crd import agentenv as a
from memsync.crd.models import PLURAL, VERSION


class EnvironmentObjects(Protocol):
    async def get_environment(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def patch_environment_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None: ...

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        """The value under ``key``, or None when the Secret or the key does not exist."""
        ...

    async def owned_session_memories(self, namespace: str, environment: str) -> list[dict[str, Any]]: ...

    async def record_heartbeat(self, namespace: str, name: str, work_id: str, value: str | None) -> None:
        """Record (None: clear) the heartbeat value a work item's lease is held with, in the
        AgentEnvironment's status (``STATUS_HELD_HEARTBEATS``)."""
        ...

    async def get_session_memory(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def create(self, namespace: str, body: Mapping[str, Any]) -> bool:
        """Create a Secret or SessionMemory; False when one of that name exists already."""
        ...

    async def delete(self, namespace: str, kind: str, name: str) -> None: ...

    async def post_event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """A Kubernetes Event about ``obj`` (the AgentEnvironment)."""
        ...


class KubeObjects:
    """:class:`EnvironmentObjects` over the operator's Kubernetes client."""

    def __init__(self, kube: KubeApi) -> None:
        self.kube = kube

    async def get_environment(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.kube._call("GET", custom_path(a.VERSION, a.PLURAL, namespace, name))
        except KubeNotFound:
            return None

    async def patch_environment_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        path = custom_path(a.VERSION, a.PLURAL, namespace, name) + "/status"
        await self.kube._call("PATCH", path, body={"status": dict(status)}, content_type=MERGE_PATCH)

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        try:
            secret = await self.kube._call("GET", core_path(namespace, "secrets", name))
        except KubeNotFound:
            return None
        raw = (secret.get("data") or {}).get(key)
        secret.clear()
        if not isinstance(raw, str):
            return None
        try:
            return base64.b64decode(raw).decode("utf-8").strip() or None
        except (binascii.Error, UnicodeDecodeError):
            return None

    async def owned_session_memories(self, namespace: str, environment: str) -> list[dict[str, Any]]:
        listing = await self.kube._call(
            "GET",
            custom_path(VERSION, PLURAL, namespace),
            query={"labelSelector": f"{a.LABEL_ENVIRONMENT}={environment}"},
        )
        items = listing.get("items")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    async def record_heartbeat(self, namespace: str, name: str, work_id: str, value: str | None) -> None:
        path = custom_path(a.VERSION, a.PLURAL, namespace, name) + "/status"
        body = {"status": {a.STATUS_HELD_HEARTBEATS: {work_id: value}}}
        try:
            await self.kube._call("PATCH", path, body=body, content_type=MERGE_PATCH)
        except KubeNotFound:
            pass  # the AgentEnvironment is gone: nothing to hold for

    async def get_session_memory(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.kube.get_session_memory(namespace, name)

    async def create(self, namespace: str, body: Mapping[str, Any]) -> bool:
        secret = body["kind"] == "Secret"
        path = core_path(namespace, "secrets") if secret else custom_path(VERSION, PLURAL, namespace)
        try:
            await self.kube._call("POST", path, body=body)
        except (KubeAlreadyExists, KubeConflict):
            return False
        return True

    async def post_event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        ref = {"apiVersion": a.API_VERSION, "kind": a.KIND, "metadata": meta_of(obj).reference()}
        await events.post(
            self.kube, ref, type_, reason, message, component=EVENT_COMPONENT, now=datetime.now(UTC)
        )

    async def delete(self, namespace: str, kind: str, name: str) -> None:
        if kind == "Secret":
            path = core_path(namespace, "secrets", name)
        else:
            path = custom_path(VERSION, PLURAL, namespace, name)
        try:
            await self.kube._call("DELETE", path)
        except KubeNotFound:
            pass
