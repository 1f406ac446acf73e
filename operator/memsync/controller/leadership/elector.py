"""The leader election's I/O: take the Lease, keep it, let it go (the decisions are ``lease.py``'s).

``acquire()`` returns once this replica holds the Lease (a standby waits there, trying every retry period);
``keep()`` renews it every retry period until cancelled, and trips the fence when no renewal has succeeded
within the renew deadline (a refused renewal means another replica holds it: the fence trips at once);
``release()`` clears the holder on a clean shutdown, so a standby takes over without waiting for expiry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime

from memsync.controller import metrics
from memsync.controller.conditions import now_utc
from memsync.controller.kube import KubeApi, KubeApiError, KubeConflict
from memsync.controller.leadership import lease
from memsync.controller.leadership.fence import Fence

logger = logging.getLogger("memsync.operator.leadership")


class LeaderElector:
    """One replica's side of the election for the Lease ``namespace/name``."""

    def __init__(
        self,
        kube: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        timings: lease.Timings,
        fence: Fence,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = now_utc,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings
        self.fence = fence
        self.clock = clock
        self.wall = wall
        self.seen: lease.Observation | None = None
        self.record: lease.Record | None = None  # the Lease as this replica last wrote it
        self.leading = False
        self.last_attempt = clock()  # the liveness probe reads it: the elector's loop is turning

    @property
    def fields(self) -> dict[str, str]:
        return {"lease": f"{self.namespace}/{self.name}", "identity": self.identity}

    async def acquire(self) -> None:
        """Wait until this replica holds the Lease."""
        logger.info("waiting to hold the leader election's Lease (standby)", extra=self.fields)
        while not await self._try():  # noqa: ASYNC110 (each turn is a request: nothing to wait on)
            await asyncio.sleep(self.timings.retry_period)
        self.leading = True
        metrics.LEADER.set(1)
        holder = self.seen.record.holder if self.seen is not None else None
        logger.info(
            "this replica holds the Lease and starts acting",
            extra={**self.fields, "previous_holder": holder, "transitions": self._transitions()},
        )

    async def keep(self) -> None:
        """Renew every retry period; trip the fence when the Lease is lost or its deadline passes."""
        last_renewal = self.clock()
        while True:
            await asyncio.sleep(self.timings.retry_period)
            started = self.clock()
            if await self._try():
                last_renewal = started
                continue
            if self.seen is not None and self.seen.record.holder not in (None, self.identity):
                self.fence.trip(f"the Lease is held by {self.seen.record.holder} now")
            if self.clock() - last_renewal >= self.timings.renew_deadline:
                self.fence.trip(f"the Lease could not be renewed for {self.timings.renew_deadline:.0f} s")

    async def release(self) -> None:
        """Let the Lease go (a clean shutdown, after everything stopped acting); errors are only logged."""
        if not self.leading or self.record is None or not self.fence.open:
            return
        self.leading = False
        metrics.LEADER.set(0)
        body = lease.released(self.record, namespace=self.namespace, name=self.name)
        try:
            await self.kube.replace_lease(self.namespace, self.name, body)
        except KubeApiError as exc:
            logger.warning(
                "could not release the Lease; it expires by itself", extra={**self.fields, "error": str(exc)}
            )
            return
        logger.info("released the Lease", extra=self.fields)

    def _transitions(self) -> int:
        return self.record.transitions if self.record is not None else 0

    async def _try(self) -> bool:
        """One attempt to create, take or renew the Lease; True when this replica holds it afterwards."""
        sent = self.last_attempt = self.clock()
        try:
            current = await self.kube.get_lease(self.namespace, self.name)
            if current is None:
                body = lease.claim(
                    None, self.identity, self.wall(), self.timings, namespace=self.namespace, name=self.name
                )
                written = await self.kube.create_lease(self.namespace, body)
            else:
                record = lease.Record.of(current)
                self.seen = lease.observe(self.seen, record, self.clock())
                if not lease.may_claim(self.seen, self.identity, self.clock(), self.timings):
                    return False
                body = lease.claim(
                    record, self.identity, self.wall(), self.timings, namespace=self.namespace, name=self.name
                )
                written = await self.kube.replace_lease(self.namespace, self.name, body)
        except KubeConflict:
            return False  # another replica wrote it first; read again next time
        except Exception as exc:  # a refusal (KubeApiError) or the API server not reached
            logger.warning("the Lease could not be read or written", extra={**self.fields, "error": str(exc)})
            return False
        self.record = lease.Record.of(written)
        self.seen = lease.observe(self.seen, self.record, self.clock())
        self.fence.extend(sent + self.timings.renew_deadline)
        return True
