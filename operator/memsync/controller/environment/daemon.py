"""kopf wiring: one poll loop (a kopf daemon) per AgentEnvironment, cancelled when it is deleted."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from memsync.controller.environment.loop import EnvironmentLoop
from memsync.controller.environment.objects import KubeObjects
from memsync.crd import agentenv as a
from memsync.crd.models import GROUP


def register(registry: kopf.OperatorRegistry) -> None:
    async def serve(name: str, namespace: str | None, memo: Any, **_: Any) -> None:
        kube = memo["kube"]  # the operator's API client (``sessionmemory.registry.build_memo``)
        assert namespace is not None  # the resource is namespaced
        await EnvironmentLoop(KubeObjects(kube), namespace, name).run(asyncio.Event())

    kopf.daemon(GROUP, a.VERSION, a.PLURAL, registry=registry, id="poll-loop")(serve)
