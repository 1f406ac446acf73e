"""The fleet benchmark's two probes on a running fleet: sidecars turned unhealthy (how long until the
SessionMemory's ``Synced`` condition says so) and Pods ended (how long until its phase does)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cluster.tier.kubeapi import KubeApi
from fleet import stages
from fleet.observe import Fleet, until
from fleet.processes import HealthStub
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory.pod import pod_name_for


@dataclass
class Timings:
    """Two latencies per probe in seconds (``main``, the one with a target, and ``side``), each ascending, and
    how many probes timed out."""

    main: list[float] = field(default_factory=list)
    side: list[float] = field(default_factory=list)
    missed: int = 0


async def spread(
    names: list[str], spacing: float, probe: Callable[[str], Awaitable[tuple[float, float] | None]]
) -> Timings:
    """``probe`` each name, one every ``spacing`` seconds (they overlap when a probe takes longer)."""
    timings = Timings()

    async def one(index: int, name: str) -> None:
        await asyncio.sleep(index * spacing)
        got = await probe(name)
        if got is None:
            timings.missed += 1
        else:
            timings.main.append(got[0])
            timings.side.append(got[1])

    await asyncio.gather(*(one(i, n) for i, n in enumerate(names)))
    timings.main.sort()
    timings.side.sort()
    return timings


async def flips(
    fleet: Fleet, stub: HealthStub, names: list[str], *, spacing: float, within: float
) -> Timings:
    """Turn each named session's sidecar unhealthy and wait for ``Synced=False`` (``main``), then healthy
    again and wait for ``Synced=True`` (``side``)."""

    async def probe(name: str) -> tuple[float, float] | None:
        pod = fleet.pod_of(name)
        seen = fleet.session(name).synced
        if pod is None or pod.ip is None:
            return None
        took: list[float] = []
        for healthy, value in ((False, "False"), (True, "True")):
            started = time.monotonic()
            await stub.set_healthy(pod.ip, healthy)

            def reached(value: str = value, started: float = started) -> bool:
                return seen.value == value and seen.last[value] >= started

            if await until(reached, within) is None:
                await stub.set_healthy(pod.ip, True)
                return None
            took.append(seen.last[value] - started)
        return took[0], took[1]

    return await spread(names, spacing, probe)


async def ends(
    fleet: Fleet, api: KubeApi, namespace: str, names: list[str], *, spacing: float, within: float
) -> Timings:
    """End each named session's Pod: from the Pod's end to the SessionMemory's phase ``Succeeded`` (``main``;
    another phase counts as missed), and from the label to the Pod's end as kwok played it (``side``)."""

    async def probe(name: str) -> tuple[float, float] | None:
        pod = fleet.pod_of(name)
        phase = fleet.session(name).phase
        if pod is None:
            return None
        labelled = time.monotonic()
        path = f"/api/v1/namespaces/{namespace}/pods/{pod_name_for(name)}"
        await api.patch(path, {"metadata": {"labels": {stages.END_LABEL: "true"}}}, strategic=False)
        if await until(lambda: "Succeeded" in pod.phase.first, within) is None:
            return None
        ended = pod.phase.first["Succeeded"]
        if await until(lambda: phase.value in ph.TERMINAL_PHASES, within) is None:
            return None
        if phase.value != ph.SUCCEEDED:  # the Pod ended well: any other phase is a wrong status
            return None
        return phase.first[ph.SUCCEEDED] - ended, ended - labelled

    return await spread(names, spacing, probe)
