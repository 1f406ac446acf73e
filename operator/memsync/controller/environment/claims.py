"""What the poll loop does with a polled work item, and with the items it holds until they have a Pod.

In the SDK's order: the item is acknowledged first, whatever it is; an item the operator will not run (another
work type, no secret, stores that cannot be mounted) is then force-stopped. An item it runs is held at once
(``holder.py``: the operator heartbeats it until the Pod's runner takes the lease over) and stays *pending*
until its SessionMemory exists: a transient failure (the API, Kubernetes) is retried on the next pass while
the hold keeps the lease, and a SessionMemory of the same session that is still running (a re-delivered item
whose old Pod is ending, or an earlier item's) is waited for and then replaced, so the item is served to its
end. The session is read with the item's sessions token, never with the environment key before the ack.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memsync.api.secret import WorkSecretError, decode_work_secret
from memsync.controller.environment import decisions as d
from memsync.controller.environment.holder import EXPIRED, Hold, LeaseHolder
from memsync.controller.environment.objects import EnvironmentObjects
from memsync.controller.environment.queue import QueueError, WorkQueue
from memsync.controller.kube import KubeApiError, is_refusal, refusal_message
from memsync.controller.objects import meta_of
from memsync.crd.agentenv import AgentEnvironmentSpec

logger = logging.getLogger("memsync.environment")


@dataclass(frozen=True)
class Outcome:
    """What handling one item came to: the error to record, whether a SessionMemory was created, and the
    pause before the next poll (a failed ack backs off)."""

    error: str | None = None
    created: bool = False
    wait: float = 0.0


@dataclass
class Claims:
    objects: EnvironmentObjects
    namespace: str
    holder: LeaseHolder
    tally: dict[str, int]
    fields: Callable[..., dict[str, Any]]
    jitter: Callable[[], float]
    start_deadline: float = 600.0  # the operator's --start-deadline (an environment's spec may set its own)
    pending: dict[str, d.WorkItem] = field(default_factory=dict)
    adopted: set[str] = field(default_factory=set)  # held items whose running SessionMemory was adopted
    ack_failures: int = 0

    def count(self, key: str) -> None:
        self.tally[key] = self.tally.get(key, 0) + 1

    async def handle(
        self, env: Mapping[str, Any], spec: AgentEnvironmentSpec, queue: WorkQueue, item: d.WorkItem
    ) -> Outcome:
        fields = self.fields(work_id=item.id, session_id=item.session_id, work_type=item.type)
        try:
            acked = await queue.ack(item.id)
        except QueueError as exc:
            return await self._ack_failed(queue, item, exc, fields)
        self.ack_failures = 0
        logger.info("claimed work", extra=fields)
        has_stores: bool | None = None
        try:
            if item.type == d.SESSION_WORK and item.secret is None:
                has_stores = bool(d.stores_from_session(await queue.session(item.session_id, None)))
            decision = d.decide_item(item, has_stores)
            if decision.action != "create":
                return await self._refuse(queue, item, decision, fields)
            assert item.secret is not None
            token = decode_work_secret(item.secret).sessions_token
        except (d.StoreResolutionError, WorkSecretError, QueueError) as exc:
            return await self._fail(queue, item, str(exc), fields)
        self.count("claimed")
        acknowledged_at = acked.get("acknowledged_at")
        deadline = spec.start_deadline_seconds or self.start_deadline
        self.holder.hold(
            queue,
            Hold(
                item.id,
                item.session_id,
                token,
                acknowledged_at if isinstance(acknowledged_at, str) else None,
                deadline_s=float(deadline),
            ),
        )
        self.pending[item.id] = item
        return await self.serve(env, spec, queue, item)

    async def serve_pending(
        self, env: Mapping[str, Any], spec: AgentEnvironmentSpec, queue: WorkQueue
    ) -> int:
        """Another try for every held item that has no SessionMemory of its own yet; how many were created."""
        created = 0
        for work_id, item in list(self.pending.items()):
            if not self.holder.holding(work_id):
                if self.holder.outcomes.get(work_id) == EXPIRED:
                    # no SessionMemory started it within the start deadline: released as one it cannot run
                    why = "its session did not start within the start deadline"
                    await self._fail(queue, item, why, self.fields(work_id=work_id))
                    continue
                # the hold ended (the item is stopping, its lease was lost or taken over): nothing to create
                logger.info("a pending work item is no longer held", extra=self.fields(work_id=work_id))
                self.pending.pop(work_id, None)
                continue
            created += (await self.serve(env, spec, queue, item)).created
        return created

    async def serve(
        self, env: Mapping[str, Any], spec: AgentEnvironmentSpec, queue: WorkQueue, item: d.WorkItem
    ) -> Outcome:
        """Give a held item its Secret and SessionMemory, or settle with what exists."""
        fields = self.fields(work_id=item.id, session_id=item.session_id)
        try:
            assert item.secret is not None
            token = decode_work_secret(item.secret).sessions_token
            stores = d.stores_to_mount(await queue.session(item.session_id, token))
            return await self._create(env, spec, queue, item, stores, fields=fields)
        except (d.StoreResolutionError, WorkSecretError, QueueError, KubeApiError) as exc:
            transient = (isinstance(exc, QueueError) and not exc.fatal) or (
                isinstance(exc, KubeApiError) and not is_refusal(exc)
            )
            message = refusal_message(exc) if isinstance(exc, KubeApiError) else str(exc)
            if transient:
                logger.warning("work item not served yet: trying again", extra={**fields, "error": message})
                return Outcome(error=f"work item {item.id}: {message}")
            return await self._fail(queue, item, message, fields)

    async def _create(
        self,
        env: Mapping[str, Any],
        spec: AgentEnvironmentSpec,
        queue: WorkQueue,
        item: d.WorkItem,
        stores: list[dict[str, Any]],
        *,
        fields: dict[str, Any],
    ) -> Outcome:
        secret = d.work_secret_manifest(env, item)
        smem = d.session_memory_manifest(env, spec, item, stores)
        name = str(meta_of(smem).name)
        fields = {**fields, "sessionmemory": name}
        existing = await self.objects.get_session_memory(self.namespace, name)
        verdict = None if existing is None else d.on_existing(existing, item, adopted=item.id in self.adopted)
        if verdict == "adopt":
            if item.id not in self.adopted:
                logger.info("waiting for the session's running SessionMemory to finish", extra=fields)
            self.adopted.add(item.id)
            return Outcome()
        if verdict == "done":
            logger.info("the session already ran for this work item: stopping the item", extra=fields)
            self.pending.pop(item.id, None)
            await self.holder.release(item.id)
            await queue.stop(item.id)
            return Outcome()
        if verdict == "replace":
            logger.info(
                "replacing the session's finished SessionMemory to serve this work item", extra=fields
            )
            self.adopted.discard(item.id)
            await self.objects.delete(self.namespace, "SessionMemory", name)
            await self.objects.delete(self.namespace, "Secret", str(meta_of(secret).name))
            return Outcome()  # created on a later pass, once it is gone
        await self.objects.create(self.namespace, secret)
        created = await self.objects.create(self.namespace, smem)
        logger.info("session memory created" if created else "session memory exists already", extra=fields)
        if created:
            self.pending.pop(item.id, None)
        return Outcome(created=created)

    async def _ack_failed(
        self, queue: WorkQueue, item: d.WorkItem, exc: QueueError, fields: dict[str, Any]
    ) -> Outcome:
        if exc.fatal:
            logger.error(
                "ack failed permanently: force-stopping the item", extra={**fields, "error": str(exc)}
            )
            await self._stop(queue, item.id, fields)
            return Outcome(error=str(exc))
        self.ack_failures += 1
        wait = d.retry_delay(self.ack_failures, self.jitter(), exc.retry_after)
        logger.warning("ack failed: backing off", extra={**fields, "error": str(exc), "backoff": wait})
        return Outcome(error=str(exc), wait=wait)

    async def _refuse(
        self, queue: WorkQueue, item: d.WorkItem, decision: d.ItemDecision, fields: dict[str, Any]
    ) -> Outcome:
        await self._stop(queue, item.id, fields)
        if decision.action == "fail":
            self.count("itemsFailed")
            logger.error(decision.message, extra=fields)
            return Outcome(error=decision.message)
        logger.info(decision.message, extra=fields)
        return Outcome()

    async def _fail(
        self, queue: WorkQueue, item: d.WorkItem, message: str, fields: dict[str, Any]
    ) -> Outcome:
        """The item cannot run as it is: fail it now rather than hold it or let its lease run out."""
        logger.error("work item failed", extra={**fields, "error": message})
        self.count("itemsFailed")
        self.pending.pop(item.id, None)
        await self.holder.release(item.id)
        await self._stop(queue, item.id, fields)
        return Outcome(error=f"work item {item.id}: {message}")

    async def _stop(self, queue: WorkQueue, work_id: str, fields: dict[str, Any]) -> None:
        try:
            await queue.stop(work_id)
        except QueueError as exc:
            logger.error("force-stopping a work item failed", extra={**fields, "error": str(exc)})
