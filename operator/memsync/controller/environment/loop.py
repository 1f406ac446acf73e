"""The poll loop of one AgentEnvironment: the I/O around ``decisions``.

Each pass: read the AgentEnvironment and its key, stop the work items of finished SessionMemories, retire
those past their retention (after their item was stopped), serve the held items still waiting for a
SessionMemory, count the active ones, and (below ``maxConcurrentSessions``) long-poll the queue once. A
polled item goes to ``claims.py`` (acknowledged, then held or force-stopped). Pacing: after a poll with no
work the next one starts 2 to 4 s after it (``decisions.idle_pause``); after an item, at once; after a
failure, a jittered exponential backoff or the server's ``retry-after``, whichever is longer. A refused or
missing key stops polling until the Secret changes; a poll refused for good (the environment is archived or
gone: a 4xx the SDK's poller treats as final) stops polling until the AgentEnvironment's spec changes, with
phase ``Failed``, reason ``EnvironmentUnavailable`` and a Warning Event. The status is written when it
changed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from memsync.api.secret import WorkSecretError, decode_work_secret
from memsync.contracts import runner
from memsync.controller.conditions import format_time, now_utc
from memsync.controller.environment import decisions as d
from memsync.controller.environment import starts
from memsync.controller.environment.claims import Claims
from memsync.controller.environment.holder import Hold, LeaseHolder
from memsync.controller.environment.objects import EnvironmentObjects
from memsync.controller.environment.queue import QueueError, WorkQueue
from memsync.controller.kube import KubeApiError
from memsync.controller.objects import meta_of
from memsync.controller.settings import DEFAULT_START_DEADLINE
from memsync.crd.agentenv import AgentEnvironmentSpec, validate_environment_spec
from memsync.crd.spec_messages import InvalidSpecError

logger = logging.getLogger("memsync.environment")

QueueFactory = Callable[[str, str, str, str], WorkQueue]
RECHECK_S = 5.0
AT_CAPACITY_WAIT_S = 2.0
STATUS_POLL_TIME_EVERY_S = 30.0  # lastPollTime alone is refreshed at most this often


class EnvironmentLoop:
    """Serves one AgentEnvironment until ``stop`` is set (or the object is gone)."""

    def __init__(
        self,
        objects: EnvironmentObjects,
        namespace: str,
        name: str,
        *,
        queue_factory: QueueFactory = WorkQueue,
        clock: Callable[[], datetime] = now_utc,
        jitter: Callable[[], float] = random.random,
        host: str | None = None,
        start_deadline: float = DEFAULT_START_DEADLINE,
    ) -> None:
        self.objects = objects
        self.namespace = namespace
        self.name = name
        self.queue_factory = queue_factory
        self.clock = clock
        self.jitter = jitter
        self.host = host or socket.gethostname()
        self.start_token = secrets.token_hex(6)  # the worker id is new at every start
        self.queue: WorkQueue | None = None
        self.failures = 0
        self.tally: dict[str, int] = {}
        self.last_status: dict[str, Any] | None = None
        self.stopped_items: set[str] = (
            set()
        )  # work items of finished SessionMemories, stopped by this process
        self.unavailable: tuple[int | None, str] | None = None  # (generation, why) of a final poll refusal
        self.holder = LeaseHolder(self._log, record=self._record_held)
        self.claims = Claims(
            objects, namespace, self.holder, self.tally, self._log, jitter, start_deadline=start_deadline
        )
        self.resumed = False  # the holds an earlier leader left were looked for

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
            await self.aclose()

    async def aclose(self) -> None:
        """Release every held lease (the runner can still take it over while it lasts) and the client."""
        await self.holder.close()
        if self.queue is not None:
            await self.queue.aclose()
            self.queue = None

    # --- one pass ------------------------------------------------------------------------------------------

    async def run_pass(self) -> float | None:
        """One pass; the seconds to wait before the next (None: the AgentEnvironment is gone)."""
        env = await self.objects.get_environment(self.namespace, self.name)
        if env is None:
            return None
        status = dict(env.get("status") or {})
        if not self.tally:
            self.tally.update({k: int(v) for k, v in (status.get("tally") or {}).items()})
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
        if key is not None and not self.resumed:
            await self._resume_holds(env, smems, await self._queue_for(spec, key))
        if key is not None:
            await self._stop_finished(smems, await self._queue_for(spec, key))
        await self._retire(smems, spec)
        if key is not None and self.claims.pending:
            await self.claims.serve_pending(env, spec, await self._queue_for(spec, key))
            smems = await self.objects.owned_session_memories(self.namespace, self.name)
        running = {str(meta_of(s).name) for s in smems if d.is_active(s)}
        waiting = {d.object_name(i.session_id) for i in self.claims.pending.values()}
        active = len(running | waiting)
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
        generation = meta_of(env).generation
        if self.unavailable is not None and self.unavailable[0] == generation:
            await self._write_status(env, _with(seen, unavailable=self.unavailable[1]))
            return RECHECK_S * 6
        self.unavailable = None
        if d.capacity(spec.max_concurrent_sessions, active, smems) == 0:
            await self._write_status(env, seen)
            return AT_CAPACITY_WAIT_S
        started = time.monotonic()
        try:
            raw = await queue.poll()
        except QueueError as exc:
            return await self._poll_failed(env, seen, exc)
        self.failures = 0
        seen = _with(seen, polled_at=format_time(self.clock()))
        if raw is None:
            await self._write_status(env, seen)
            return d.idle_pause(self.jitter(), time.monotonic() - started)
        outcome = await self.claims.handle(env, spec, queue, d.WorkItem.from_wire(raw))
        seen = _with(seen, active=seen.active + outcome.created, error=outcome.error)
        await self._write_status(env, seen)
        return outcome.wait

    async def _poll_failed(self, env: Mapping[str, Any], seen: d.Observation, exc: QueueError) -> float:
        if exc.fatal and not exc.key_refused:
            why = (
                f"the environment's work queue refused polling for good ({exc}); "
                "polling resumes when the AgentEnvironment's spec changes"
            )
            self.unavailable = (meta_of(env).generation, why)
            logger.error("environment unavailable: polling stopped", extra=self._log(error=str(exc)))
            await self.objects.post_event(env, "Warning", d.REASON_UNAVAILABLE, why)
            await self._write_status(env, _with(seen, unavailable=why))
            return RECHECK_S * 6
        if exc.key_refused:
            problem = f"the environment key was refused ({exc}); polling resumes when the Secret changes"
            logger.error("environment key refused", extra=self._log(error=str(exc)))
            await self._write_status(env, _with(seen, key_problem=problem))
            return RECHECK_S
        self.failures += 1
        delay = d.retry_delay(self.failures, self.jitter(), exc.retry_after)
        logger.warning("poll failed", extra=self._log(error=str(exc), attempt=self.failures, backoff=delay))
        await self._write_status(env, _with(seen, error=str(exc)))
        return delay

    async def _queue_for(self, spec: AgentEnvironmentSpec, key: str) -> WorkQueue:
        """The queue client, rebuilt when the key (rotation) or the settings change."""
        worker = d.worker_id(spec.worker_id, self.namespace, self.name, self.host, self.start_token)
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

    async def _stop_finished(self, smems: list[dict[str, Any]], queue: WorkQueue) -> None:
        """Stop the work item of every finished SessionMemory (once per operator process; an item the runner
        stopped already answers 409, which is fine). A SessionMemory finishes only after its final flush was
        recorded, so this stop also comes after the last memory write, even when the runner never got to
        stop the item (its Pod failed to mount, or a runner image of the user's own ended early)."""
        for work_id in d.items_to_stop(smems, self.stopped_items, set(self.claims.pending)):
            await self.holder.release(work_id)  # its Pod finished without taking the lease over
            try:
                await queue.stop(work_id)
            except QueueError as exc:
                if exc.status == 404:  # the item is gone: nothing left to stop
                    self.stopped_items.add(work_id)
                    continue
                logger.warning(
                    "could not stop a finished session's work item",
                    extra=self._log(work_id=work_id, error=str(exc)),
                )
                continue
            self.stopped_items.add(work_id)

    async def _resume_holds(
        self, env: Mapping[str, Any], smems: list[dict[str, Any]], queue: WorkQueue
    ) -> None:
        """Once, at the start: hold again the items an earlier leader of the operator held (the status
        records the value), so their lease never lapses while their runner is not there yet."""
        for work_id, session_id, value in d.holds_to_resume(env, smems, self.holder.held()):
            token = await self.objects.secret_value(
                self.namespace, d.secret_name(session_id), runner.SECRET_KEY
            )
            try:
                sessions_token = decode_work_secret(token or "").sessions_token
            except WorkSecretError as exc:
                logger.warning(
                    "cannot resume a held work item", extra=self._log(work_id=work_id, error=str(exc))
                )
                continue
            logger.info(
                "resuming the hold of a work item an earlier leader held", extra=self._log(work_id=work_id)
            )
            smem = next((s for s in smems if meta_of(s).name == d.object_name(session_id)), None)
            deadline = starts.resumed_hold_deadline(smem, self.claims.start_deadline, self.clock())
            hold = Hold(work_id, session_id, sessions_token, None, resume_from=value, deadline_s=deadline)
            self.holder.hold(queue, hold)
        self.resumed = True

    async def _record_held(self, hold: Hold, value: str | None) -> None:
        await self.objects.record_heartbeat(self.namespace, self.name, hold.work_id, value)

    async def _retire(self, smems: list[dict[str, Any]], spec: AgentEnvironmentSpec) -> None:
        for smem in d.expired(list(smems), self.clock(), spec.finished_retention_seconds, self.stopped_items):
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
        new = d.environment_status(
            previous, seen, self.tally, format_time(self.clock()), meta_of(env).generation
        )
        if not d.worth_writing(previous, new, STATUS_POLL_TIME_EVERY_S) or new == self.last_status:
            return
        try:
            await self.objects.patch_environment_status(self.namespace, self.name, new)
            self.last_status = new
        except KubeApiError as exc:
            logger.warning("could not write the AgentEnvironment status", extra=self._log(error=str(exc)))


def _with(seen: d.Observation, **changes: Any) -> d.Observation:
    return replace(seen, **changes)
