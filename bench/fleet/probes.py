"""The fleet benchmark's two probes on a running fleet: sidecars turned unhealthy (how long until the
SessionMemory's ``Synced`` condition says so) and Pods ended (how long until its phase does)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from _common import percentile
from cluster.tier.kubeapi import KubeApi
from fleet import stages
from fleet.observe import Fleet, until
from fleet.processes import HealthStub
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory.pod import pod_name_for

#: A latency not seen within the probe's bound: longer than any, and reported as such.
MISSED: Final = math.inf


@dataclass
class Timings:
    """Two latencies per probe in seconds, ascending: ``main`` (the one with a target) and ``side``; a
    latency not seen within the bound is ``MISSED``."""

    main: list[float] = field(default_factory=list)
    side: list[float] = field(default_factory=list)

    def percentile(self, pct: float, *, side: bool = False) -> float | None:
        """The latency at ``pct`` (``MISSED`` when it was not seen), None when there was no probe."""
        values = self.side if side else self.main
        return percentile(values, pct) if values else None

    @property
    def seen(self) -> int:
        return sum(1 for v in self.main if v != MISSED)

    @property
    def missed(self) -> int:
        return len(self.main) - self.seen


async def spread(
    names: list[str], spacing: float, probe: Callable[[str], Awaitable[tuple[float, float]]]
) -> Timings:
    """``probe`` each name, one every ``spacing`` seconds (they overlap when a probe takes longer)."""
    timings = Timings()

    async def one(index: int, name: str) -> None:
        await asyncio.sleep(index * spacing)
        main, side = await probe(name)
        timings.main.append(main)
        timings.side.append(side)

    await asyncio.gather(*(one(i, n) for i, n in enumerate(names)))
    timings.main.sort()
    timings.side.sort()
    return timings


async def flips(
    fleet: Fleet, stub: HealthStub, names: list[str], *, spacing: float, within: float
) -> Timings:
    """Turn each named session's sidecar unhealthy and wait for ``Synced=False`` (``main``), then healthy
    again and wait for ``Synced=True`` (``side``), each for at most ``within`` seconds."""

    async def probe(name: str) -> tuple[float, float]:
        pod = fleet.pod_of(name)
        seen = fleet.session(name).synced
        if pod is None or pod.ip is None:
            return MISSED, MISSED
        took: list[float] = []
        for healthy, value in ((False, "False"), (True, "True")):
            started = time.monotonic()
            await stub.set_healthy(pod.ip, healthy)

            def reached(value: str = value, started: float = started) -> bool:
                return seen.value == value and seen.last[value] >= started

            took.append(MISSED if await until(reached, within) is None else seen.last[value] - started)
        return took[0], took[1]

    return await spread(names, spacing, probe)


async def ends(
    fleet: Fleet, api: KubeApi, namespace: str, names: list[str], *, spacing: float, within: float
) -> Timings:
    """End each named session's Pod: from the Pod's end to the SessionMemory's phase ``Succeeded`` (``main``;
    another phase counts as missed), and from the label to the Pod's end as kwok played it (``side``)."""

    async def probe(name: str) -> tuple[float, float]:
        pod = fleet.pod_of(name)
        phase = fleet.session(name).phase
        if pod is None:
            return MISSED, MISSED
        labelled = time.monotonic()
        path = f"/api/v1/namespaces/{namespace}/pods/{pod_name_for(name)}"
        await api.patch(path, {"metadata": {"labels": {stages.END_LABEL: "true"}}}, strategic=False)
        if await until(lambda: "Succeeded" in pod.phase.first, within) is None:
            return MISSED, MISSED
        ended = pod.phase.first["Succeeded"]
        reached = await until(lambda: phase.value in ph.TERMINAL_PHASES, within)
        if reached is None or phase.value != ph.SUCCEEDED:  # the Pod ended well: another phase is wrong
            return MISSED, ended - labelled
        return phase.first[ph.SUCCEEDED] - ended, ended - labelled

    return await spread(names, spacing, probe)
