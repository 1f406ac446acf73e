"""kopf wiring: one poll loop (a kopf daemon) per AgentEnvironment, cancelled when it is deleted."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import kopf

from memsync.controller.environment.loop import EnvironmentLoop
from memsync.controller.environment.objects import KubeObjects
from memsync.controller.environment.queue import WorkQueue
from memsync.crd import agentenv as a
from memsync.crd.models import GROUP


def register(registry: kopf.OperatorRegistry, *, start_deadline: float) -> None:
    async def serve(name: str, namespace: str | None, memo: Any, **_: Any) -> None:
        # the operator's API client and its leadership fence (``sessionmemory.registry.build_memo``)
        kube, fence = memo["kube"], memo.get("fence")
        assert namespace is not None  # the resource is namespaced
        queues = functools.partial(WorkQueue, guard=fence.require if fence is not None else None)
        loop = EnvironmentLoop(
            KubeObjects(kube), namespace, name, queue_factory=queues, start_deadline=start_deadline
        )
        await loop.run(asyncio.Event())

    kopf.daemon(GROUP, a.VERSION, a.PLURAL, registry=registry, id="poll-loop")(serve)
