"""The poll loop of one AgentEnvironment: the I/O around ``decisions``.

Each pass: read the AgentEnvironment and its key, retire finished SessionMemories past their retention,
count the active ones, and (below ``maxConcurrentSessions``) long-poll the queue once. A claimed ``session``
item is acknowledged, its stores are read from the session with its sessions token, and a Secret plus a
SessionMemory are created for it (by session id: a second claim of the same session finds them). Items that
cannot run are force-stopped and counted as failed. Poll failures back off (1 s doubling to 60 s, with
jitter); a refused or missing key stops polling until the Secret changes. The status is written when it
changed.

The lease of a claimed item is the sandbox Pod's to keep: its runner heartbeats from its start until the
sidecar's final flush is done, then stops the item (docs/environments.md says why).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from memsync.api.secret import WorkSecretError, decode_work_secret
from memsync.controller.environment import decisions as d
from memsync.controller.environment.objects import EnvironmentObjects
from memsync.controller.environment.queue import QueueError, WorkQueue
from memsync.controller.kube import KubeApiError, is_refusal, refusal_message
from memsync.controller.objects import meta_of
from memsync.crd.agentenv import AgentEnvironmentSpec, validate_environment_spec
from memsync.crd.models import InvalidSpecError

logger = logging.getLogger("memsync.environment")

QueueFactory = Callable[[str, str, str, str], WorkQueue]
RECHECK_S = 5.0
AT_CAPACITY_WAIT_S = 2.0
STATUS_POLL_TIME_EVERY_S = 30.0  # lastPollTime alone is refreshed at most this often


def _now() -> datetime:
    return datetime.now(UTC)


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EnvironmentLoop:
    """Serves one AgentEnvironment until ``stop`` is set (or the object is gone)."""

    def __init__(
        self,
        objects: EnvironmentObjects,
        namespace: str,
        name: str,
        *,
        queue_factory: QueueFactory = WorkQueue,
        clock: Callable[[], datetime] = _now,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.objects = objects
        self.namespace = namespace
        self.name = name
        self.queue_factory = queue_factory
        self.clock = clock
        self.jitter = jitter
        self.queue: WorkQueue | None = None
        self.failures = 0
        self.tally: dict[str, int] = {}
        self.last_status: dict[str, Any] | None = None
        self.stopped_items: set[str] = (
            set()
        )  # work items of finished SessionMemories, stopped by this process

    def _log(self, **fields: Any) -> dict[str, Any]:
        return {"namespace": self.namespace, "agentenvironment": self.name, **fields}

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                wait = await self.run_pass()
                if wait is None:
                    return
                if wait > 0:
                    try:
                        await asyncio.wait_for(stop.wait(), timeout=wait)
                    except TimeoutError:
                        pass
        finally:
            if self.queue is not None:
                await self.queue.aclose()

    # --- one pass ------------------------------------------------------------------------------------------

    async def run_pass(self) -> float | None:
        """One pass; the seconds to wait before the next (None: the AgentEnvironment is gone)."""
        env = await self.objects.get_environment(self.namespace, self.name)
        if env is None:
            return None
        status = dict(env.get("status") or {})
        if not self.tally:
            self.tally = {k: int(v) for k, v in (status.get("tally") or {}).items()}
        try:
            spec = validate_environment_spec(env.get("spec") or {})
        except InvalidSpecError as exc:
            await self._write_status(
                env, d.Observation(0, 0, 0, None, None, key_problem=f"invalid spec: {exc}")
            )
            return RECHECK_S * 6
        ref = spec.environment_key_secret_ref
        key = await self.objects.secret_value(self.namespace, ref.name, ref.key)
        smems = await self.objects.owned_session_memories(self.namespace, self.name)
        await self._retire(smems, spec)
        active = sum(1 for s in smems if d.is_active(s))
        if key is not None:
            await self._stop_finished(smems, await self._queue_for(spec, key))
        seen = d.Observation(
            active=active,
            present_succeeded=sum(1 for s in smems if d.phase_of(s) == "Succeeded"),
            present_failed=sum(1 for s in smems if d.phase_of(s) == "Failed"),
            polled_at=None,
            error=None,
        )
        if key is None:
            problem = f"the environment key Secret {ref.name!r} (key {ref.key!r}) does not exist"
            await self._write_status(env, _with(seen, key_problem=problem))
            return RECHECK_S
        queue = await self._queue_for(spec, key)
        if d.capacity(spec.max_concurrent_sessions, active) == 0:
            await self._write_status(env, seen)
            return AT_CAPACITY_WAIT_S
        try:
            raw = await queue.poll()
        except QueueError as exc:
            return await self._poll_failed(env, seen, exc)
        self.failures = 0
        seen = _with(seen, polled_at=_stamp(self.clock()))
        if raw is not None:
            error, created = await self._handle(env, spec, queue, d.WorkItem.from_wire(raw))
            seen = _with(seen, active=seen.active + created, error=error)
        await self._write_status(env, seen)
        return 0.0

    async def _poll_failed(self, env: Mapping[str, Any], seen: d.Observation, exc: QueueError) -> float:
        if exc.key_refused:
            problem = f"the environment key was refused ({exc}); polling resumes when the Secret changes"
            logger.error("environment key refused", extra=self._log(error=str(exc)))
            await self._write_status(env, _with(seen, key_problem=problem))
            return RECHECK_S
        self.failures += 1
        delay = d.backoff_seconds(self.failures, self.jitter())
        logger.warning("poll failed", extra=self._log(error=str(exc), attempt=self.failures, backoff=delay))
        await self._write_status(env, _with(seen, error=str(exc)))
        return delay

    async def _queue_for(self, spec: AgentEnvironmentSpec, key: str) -> WorkQueue:
        """The queue client, rebuilt when the key (rotation) or the settings change."""
        worker = spec.worker_id or f"{self.namespace}.{self.name}"
        q = self.queue
        if (
            q is None
            or not q.uses_key(key)
            or q.base_url != spec.api_base_url
            or q.environment_id != spec.environment_id
            or q.worker_id != worker
        ):
            if q is not None:
                await q.aclose()
            self.queue = self.queue_factory(spec.api_base_url, spec.environment_id, key, worker)
        assert self.queue is not None
        return self.queue

    # --- one claimed item ----------------------------------------------------------------------------------

    async def _handle(
        self, env: Mapping[str, Any], spec: AgentEnvironmentSpec, queue: WorkQueue, item: d.WorkItem
    ) -> tuple[str | None, bool]:
        """Serve one polled item: the error to record (None: none), and whether a SessionMemory was made."""
        fields = self._log(work_id=item.id, session_id=item.session_id, work_type=item.type)
        has_stores: bool | None = None
        try:
            if item.type == d.SESSION_WORK and item.secret is None:
                session = await queue.session(item.session_id, None)
                has_stores = bool(d.stores_from_session(session))
            decision = d.decide_item(item, has_stores)
            if decision.action != "create":
                await queue.stop(item.id)
                if decision.action == "fail":
                    self.tally["itemsFailed"] = self.tally.get("itemsFailed", 0) + 1
                    logger.error(decision.message, extra=fields)
                    return decision.message, False
                logger.info(decision.message, extra=fields)
                return None, False
            await queue.ack(item.id)
            logger.info("claimed work", extra=fields)
            self.tally["claimed"] = self.tally.get("claimed", 0) + 1
            assert item.secret is not None
            token = decode_work_secret(item.secret).sessions_token
            stores = d.stores_to_mount(await queue.session(item.session_id, token))
            return None, await self._create(env, spec, queue, item, stores)
        except (d.StoreResolutionError, WorkSecretError, QueueError, KubeApiError) as exc:
            transient = isinstance(exc, QueueError | KubeApiError) and not (
                isinstance(exc, KubeApiError) and is_refusal(exc)
            )
            message = refusal_message(exc) if isinstance(exc, KubeApiError) else str(exc)
            logger.error("work item failed", extra={**fields, "error": message, "transient": transient})
            if not transient:
                # the item cannot run as it is: fail it now rather than let its lease run out
                self.tally["itemsFailed"] = self.tally.get("itemsFailed", 0) + 1
                try:
                    await queue.stop(item.id)
                except QueueError as stop_exc:
                    logger.error(
                        "stopping a failed work item failed", extra={**fields, "error": str(stop_exc)}
                    )
            return f"work item {item.id}: {message}", False

    async def _create(
        self,
        env: Mapping[str, Any],
        spec: AgentEnvironmentSpec,
        queue: WorkQueue,
        item: d.WorkItem,
        stores: list[dict[str, Any]],
    ) -> bool:
        """Create the item's Secret and SessionMemory (or settle with what exists); True when created."""
        secret = d.work_secret_manifest(env, item)
        smem = d.session_memory_manifest(env, spec, item, stores)
        name = str(meta_of(smem).name)
        fields = self._log(work_id=item.id, session_id=item.session_id, sessionmemory=name)
        existing = await self.objects.get_session_memory(self.namespace, name)
        verdict = None if existing is None else d.on_existing(existing, item)
        if verdict == "done":
            logger.info("the session already ran for this work item: stopping the item", extra=fields)
            await queue.stop(item.id)
            return False
        if verdict == "replace":
            logger.info("replacing the finished session memory of an earlier work item", extra=fields)
            await self.objects.delete(self.namespace, "SessionMemory", name)
            await self.objects.delete(self.namespace, "Secret", str(meta_of(secret).name))
        await self.objects.create(self.namespace, secret)
        created = await self.objects.create(self.namespace, smem)
        logger.info("session memory created" if created else "session memory exists already", extra=fields)
        return created

    async def _stop_finished(self, smems: list[dict[str, Any]], queue: WorkQueue) -> None:
        """Stop the work item of every finished SessionMemory (once per operator process; an item the runner
        stopped already answers 409, which is fine). A SessionMemory finishes only after its final flush was
        recorded, so this stop also comes after the last memory write, even when the runner never got to
        stop the item (its Pod failed to mount, or a runner image of the user's own ended early)."""
        for work_id in d.items_to_stop(smems, self.stopped_items):
            try:
                await queue.stop(work_id)
            except QueueError as exc:
                logger.warning(
                    "could not stop a finished session's work item",
                    extra=self._log(work_id=work_id, error=str(exc)),
                )
                continue
            self.stopped_items.add(work_id)

    async def _retire(self, smems: list[dict[str, Any]], spec: AgentEnvironmentSpec) -> None:
        for smem in d.expired(list(smems), self.clock(), spec.finished_retention_seconds):
            name = str(meta_of(smem).name)
            session_id = str((smem.get("spec") or {}).get("sessionId") or "")
            await self.objects.delete(self.namespace, "SessionMemory", name)
            await self.objects.delete(self.namespace, "Secret", d.secret_name(session_id))
            counter = "retiredSucceeded" if d.phase_of(smem) == "Succeeded" else "retiredFailed"
            self.tally[counter] = self.tally.get(counter, 0) + 1
            smems.remove(dict(smem))
            logger.info("finished session memory removed", extra=self._log(sessionmemory=name))

    async def _write_status(self, env: Mapping[str, Any], seen: d.Observation) -> None:
        previous = dict(env.get("status") or {})
        new = d.environment_status(previous, seen, self.tally, _stamp(self.clock()), meta_of(env).generation)
        if not d.worth_writing(previous, new, STATUS_POLL_TIME_EVERY_S) or new == self.last_status:
            return
        try:
            await self.objects.patch_environment_status(self.namespace, self.name, new)
            self.last_status = new
        except KubeApiError as exc:
            logger.warning("could not write the AgentEnvironment status", extra=self._log(error=str(exc)))


def _with(seen: d.Observation, **changes: Any) -> d.Observation:
    return replace(seen, **changes)
