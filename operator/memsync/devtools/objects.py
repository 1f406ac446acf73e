"""The Kubernetes objects of one namespace, in memory: the environment poll loop's ``EnvironmentObjects``
where there is no API server (``memsync dev --environment``, and the tests)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from memsync.crd.agentenv import STATUS_HELD_HEARTBEATS as HELD_HEARTBEATS


class MemoryObjects:
    """The Kubernetes objects of one namespace, in memory (the loop's EnvironmentObjects)."""

    def __init__(self, env: dict[str, Any], secrets: dict[str, dict[str, str]]) -> None:
        self.env: dict[str, Any] | None = env
        self.secrets = secrets
        self.smems: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str]] = []
        self.events: list[tuple[str, str, str]] = []  # (type, reason, message)

    async def get_environment(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.env)

    async def patch_environment_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        assert self.env is not None
        self.env["status"] = copy.deepcopy(dict(status))

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        return self.secrets.get(name, {}).get(key)

    async def owned_session_memories(self, namespace: str, environment: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(s) for s in self.smems.values()]

    async def record_heartbeat(self, namespace: str, name: str, work_id: str, value: str | None) -> None:
        if self.env is None:
            return
        held = self.env.setdefault("status", {}).setdefault(HELD_HEARTBEATS, {})
        if value is None:
            held.pop(work_id, None)
        else:
            held[work_id] = value

    async def get_session_memory(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.smems.get(name)
        return None if found is None else copy.deepcopy(found)

    async def create(self, namespace: str, body: Mapping[str, Any]) -> bool:
        name = body["metadata"]["name"]
        if body["kind"] == "Secret":
            if name in self.secrets:
                return False
            self.secrets[name] = dict(body["stringData"])
        else:
            if name in self.smems:
                return False
            self.smems[name] = copy.deepcopy(dict(body))
        self.created.append(copy.deepcopy(dict(body)))
        return True

    async def delete(self, namespace: str, kind: str, name: str) -> None:
        self.deleted.append((kind, name))
        (self.secrets if kind == "Secret" else self.smems).pop(name, None)

    async def post_event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))
