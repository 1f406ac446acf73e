"""What the fleet benchmark sees of its namespace: every SessionMemory's phase and ``Synced`` condition and
every sandbox Pod's phase and IP, each with the moment (this process's monotonic clock) the benchmark's own
watch saw it change. Latencies are differences of two such moments, so both ends carry the same watch
delay."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cluster.tier.kubeapi import KubeApi
from memsync.controller.sessionmemory.phases import SYNCED
from memsync.crd.models import API_VERSION, LABEL_SESSIONMEMORY, PLURAL

logger = logging.getLogger(__name__)


@dataclass
class Seen:
    """One object's watched value, and when each value was first (``first``) and last (``last``) reached."""

    value: str | None = None
    first: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)

    def update(self, value: str | None, now: float) -> None:
        if value is not None and value != self.value:
            self.first.setdefault(value, now)
            self.last[value] = now
        self.value = value


@dataclass
class Session:
    phase: Seen = field(default_factory=Seen)
    synced: Seen = field(default_factory=Seen)


@dataclass
class Pod:
    session: str
    phase: Seen = field(default_factory=Seen)
    ip: str | None = None


def synced_of(status: Mapping[str, Any]) -> str | None:
    for entry in status.get("conditions") or []:
        if isinstance(entry, Mapping) and entry.get("type") == SYNCED:
            return str(entry.get("status"))
    return None


class Fleet:
    """The benchmark's namespace, kept from two watches (SessionMemories and Pods) while ``run`` runs."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.sessions: dict[str, Session] = {}
        self.pods: dict[str, Pod] = {}
        self.events = 0

    def session(self, name: str) -> Session:
        return self.sessions.setdefault(name, Session())

    def _on_session(self, obj: Mapping[str, Any], now: float) -> None:
        status = obj.get("status") or {}
        seen = self.session(str(obj["metadata"]["name"]))
        seen.phase.update(status.get("phase"), now)
        seen.synced.update(synced_of(status), now)

    def _on_pod(self, obj: Mapping[str, Any], now: float) -> None:
        meta = obj["metadata"]
        owner = (meta.get("labels") or {}).get(LABEL_SESSIONMEMORY)
        if not owner:
            return
        status = obj.get("status") or {}
        seen = self.pods.setdefault(str(meta["name"]), Pod(str(owner)))
        seen.phase.update(status.get("phase"), now)
        seen.ip = status.get("podIP") or seen.ip

    async def _follow(self, path: str, apply: Callable[[Mapping[str, Any], float], None]) -> None:
        """List and watch ``path`` until cancelled, again whenever the API server ends a watch."""
        while True:
            try:
                async for event in self.api.watch(path):
                    self.events += 1
                    if event["type"] in ("ADDED", "MODIFIED"):
                        apply(event["object"], time.monotonic())
            except Exception as exc:  # a dropped watch, refused or cut: list and watch again
                logger.warning("watch of %s ended: %s", path, exc)
                await asyncio.sleep(1)

    async def run(self) -> None:
        sessions = f"/apis/{API_VERSION}/namespaces/{self.namespace}/{PLURAL}"
        pods = f"/api/v1/namespaces/{self.namespace}/pods"
        await asyncio.gather(self._follow(sessions, self._on_session), self._follow(pods, self._on_pod))

    def count(self, phase: str) -> int:
        return sum(1 for s in self.sessions.values() if s.phase.value == phase)

    def pods_in(self, phase: str) -> int:
        return sum(1 for p in self.pods.values() if p.phase.value == phase)

    def pod_of(self, session: str) -> Pod | None:
        return next((p for p in self.pods.values() if p.session == session), None)


async def until(check: Callable[[], bool], within: float, every: float = 0.2) -> float | None:
    """Seconds until ``check()`` held, or None if it did not within ``within`` seconds."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > within:
            return None
        await asyncio.sleep(every)
    return time.monotonic() - started


@contextlib.asynccontextmanager
async def watching(api: KubeApi, namespace: str):  # type: ignore[no-untyped-def]
    """A ``Fleet`` kept current while the block runs."""
    fleet = Fleet(api, namespace)
    task = asyncio.create_task(fleet.run())
    try:
        yield fleet
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
