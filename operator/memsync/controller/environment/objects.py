"""The Kubernetes objects the environment loop reads and writes (the I/O edge), behind a small protocol.

``KubeObjects`` implements it over the operator's ``KubeApi``; the tests use an in-memory one. Reading the
environment key is the only place a Secret's value is read, and the value goes nowhere but the queue client.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, Protocol

from memsync.controller.kube import MERGE_PATCH, KubeAlreadyExists, KubeApi, KubeConflict, KubeNotFound
from memsync.crd import agentenv as a
from memsync.crd.models import GROUP, PLURAL, VERSION


class EnvironmentObjects(Protocol):
    async def get_environment(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def patch_environment_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None: ...

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        """The value under ``key``, or None when the Secret or the key does not exist."""
        ...

    async def owned_session_memories(self, namespace: str, environment: str) -> list[dict[str, Any]]: ...

    async def get_session_memory(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def create(self, namespace: str, body: Mapping[str, Any]) -> bool:
        """Create a Secret or SessionMemory; False when one of that name exists already."""
        ...

    async def delete(self, namespace: str, kind: str, name: str) -> None: ...


class KubeObjects:
    """:class:`EnvironmentObjects` over the operator's Kubernetes client."""

    def __init__(self, kube: KubeApi) -> None:
        self.kube = kube

    async def get_environment(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.kube._call(
                self.kube._custom.get_namespaced_custom_object, GROUP, a.VERSION, namespace, a.PLURAL, name
            )
        except KubeNotFound:
            return None

    async def patch_environment_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        await self.kube._call(
            self.kube._custom.patch_namespaced_custom_object_status,
            GROUP,
            a.VERSION,
            namespace,
            a.PLURAL,
            name,
            {"status": dict(status)},
            _content_type=MERGE_PATCH,
        )

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        try:
            secret = await self.kube._call(self.kube._core.read_namespaced_secret, name, namespace)
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
            self.kube._custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            label_selector=f"{a.LABEL_ENVIRONMENT}={environment}",
        )
        items = listing.get("items")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    async def get_session_memory(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.kube.get_session_memory(namespace, name)

    async def create(self, namespace: str, body: Mapping[str, Any]) -> bool:
        try:
            if body["kind"] == "Secret":
                await self.kube._call(self.kube._core.create_namespaced_secret, namespace, dict(body))
            else:
                await self.kube._call(
                    self.kube._custom.create_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    dict(body),
                )
        except (KubeAlreadyExists, KubeConflict):
            return False
        return True

    async def delete(self, namespace: str, kind: str, name: str) -> None:
        try:
            if kind == "Secret":
                await self.kube._call(self.kube._core.delete_namespaced_secret, name, namespace)
            else:
                await self.kube._call(
                    self.kube._custom.delete_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
                )
        except KubeNotFound:
            pass
