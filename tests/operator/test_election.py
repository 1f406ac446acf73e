"""The leader election inside a running operator process, against the API server emulator: the Lease is
renewed on a lane of its own, so a burst of work that occupies every thread of the operator's API client
never makes the leader miss its renew deadline (it did, with 5,000 SessionMemories created at once: the
renewal queued behind the status writes, the fence tripped and the leader exited, again after each restart).
"""

from __future__ import annotations

import asyncio
import threading
import time

from smem_harness import Cluster, eventually, run_operator

from memsync.controller.kube import CALL_THREADS
from memsync.controller.leadership.fence import Fence
from memsync.controller.leadership.lease import Timings
from memsync.controller.runtime import Election

TIMINGS = Timings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.25)


async def test_the_lease_is_renewed_while_every_api_thread_is_busy(cluster: Cluster) -> None:
    trips: list[str] = []
    fence = Fence(on_trip=trips.append)
    election = Election(
        namespace=cluster.namespace, name="memsync-operator", identity="replica-a", timings=TIMINGS
    )

    def renewed() -> str | None:
        held = cluster.lease(cluster.namespace, "memsync-operator")
        spec = (held or {}).get("spec") or {}
        return str(spec["renewTime"]) if spec.get("holderIdentity") == "replica-a" else None

    async with run_operator(cluster, fence=fence, election=election) as running:
        first = await eventually(renewed, what="the Lease held by this replica")
        release = threading.Event()
        busy = [running.kube._executor.submit(release.wait, 30) for _ in range(CALL_THREADS)]
        try:
            deadline = time.monotonic() + 2.5 * TIMINGS.renew_deadline
            renewals = {first}
            while time.monotonic() < deadline:  # every API thread taken, for longer than the deadline
                renewals.add(renewed() or "")
                await asyncio.sleep(0.1)
        finally:
            release.set()
        assert all(f.result(5) for f in busy)
        assert trips == [], trips
        assert fence.open
        assert len(renewals - {""}) >= 3, renewals  # renewed all along, never let go
