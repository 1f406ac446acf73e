"""What one operator process remembers of its SessionMemories (``SessionMemories``), behind methods.

kopf hands it to every handler through ``memo`` (``registry.py``). Per session (namespace, name) it keeps the
object as this process last read or wrote it and the last Pod state the watcher saw (``digest.py``: only
the fields the controller reads again), a lock for the status writes, and when a wait began (the deletion
waiting for a gone Pod's report, a Pod create waiting for its ServiceAccount). ``forget`` drops all of it
once the object is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Final

from memsync.controller import metrics
from memsync.controller.coalescing import Coalescer
from memsync.controller.conditions import now_utc
from memsync.controller.kube import CALL_THREADS, KubeApi, KubeApiError
from memsync.controller.objects import ObjectRef, meta_of
from memsync.controller.sessionmemory.digest import StorePaths, object_digest, pod_digest, store_paths
from memsync.controller.sessionmemory.pod import attempt_of_pod
from memsync.controller.settings import ControllerConfig

logger = logging.getLogger(__name__)

#: Handler steps that run at once. kopf starts a handler for every object at once: a burst of 1,000 new
#: SessionMemories would otherwise hold 1,000 objects, Pod manifests and responses while they all queue
#: for the API client's threads (which serve ``CALL_THREADS`` calls at a time anyway).
HANDLER_SLOTS: Final = 2 * CALL_THREADS
#: How long a Node read is reused: one read per node and interval, however many sessions run there.
NODE_CACHE_SECONDS: Final = 5.0

_Key = tuple[str, str]


@dataclass(frozen=True)
class SeenPod:
    """The last state of a SessionMemory's Pod that the Pod watcher saw (``gone``: its DELETED event)."""

    owner_uid: str
    pod: Mapping[str, Any]
    gone: bool
    at: float = 0.0  # when the watcher saw it (monotonic seconds)


def _report_end(task: asyncio.Task[None]) -> None:
    """Log the periodic loop's end unless it was stopped (cancelled): it must never end by itself."""
    if task.cancelled():
        return
    error = task.exception()
    logger.critical(
        "the periodic loop ended: no re-check and no sync-health watch runs until the operator restarts "
        "(its liveness probe fails)",
        exc_info=error,
    )


class SessionMemories:
    """The shared state of one operator process: the API client, the configuration, and its memory."""

    def __init__(
        self, kube: KubeApi, config: ControllerConfig, clock: Callable[[], dt.datetime] = now_utc
    ) -> None:
        self.kube = kube
        self.config = config
        self.clock = clock
        self.slots = asyncio.Semaphore(HANDLER_SLOTS)
        # The Pod watcher's status derivations, one at a time per SessionMemory (``coalescing.py``).
        self.pod_updates: Coalescer[ObjectRef] = Coalescer()
        # Set by the first handler kopf runs; the periodic jobs wait for it (``handler_started``).
        self.indexed = asyncio.Event()
        self._periodic: asyncio.Task[None] | None = None
        self._periodic_close: Callable[[], Awaitable[None]] | None = None
        self._locks: dict[_Key, asyncio.Lock] = {}
        self._gone_since: dict[_Key, float] = {}
        self._service_account_missing_since: dict[_Key, float] = {}
        # Pods (by uid) this operator process created or has already announced as adopted.
        self._announced_pods: set[str] = set()
        self._seen_pods: dict[_Key, SeenPod] = {}
        # The SessionMemory as this process last read or wrote it (``object_digest``): a status write starts
        # from it instead of a read (its resourceVersion precondition catches any newer change).
        self._objects: dict[_Key, dict[str, Any]] = {}
        # The store paths of each SessionMemory's spec (uid -> generation, paths).
        self._paths: dict[str, tuple[int | None, StorePaths]] = {}
        # Node reads (name -> (monotonic time, the Node or None when gone)); the nodes the operator may not
        # read (logged once).
        self._nodes: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._nodes_forbidden = False
        # Retries of a session waiting without a Pod (a quota): its backoff.
        self._waits: dict[_Key, int] = {}

    # --- the handlers and the periodic loop --------------------------------------------------------------

    def handler_started(self) -> None:
        """Called by every handler: kopf runs none before every SessionMemory is indexed, so the first one
        tells the periodic jobs (which need the whole index for the duplicate check) that they may start."""
        self.indexed.set()

    def start_periodic(
        self, loop: Coroutine[Any, Any, None], close: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Run the periodic loop; ``close`` releases what it holds (the health watches) when it stops."""
        self._periodic = asyncio.create_task(loop)
        self._periodic.add_done_callback(_report_end)
        self._periodic_close = close

    def periodic_ended(self) -> str | None:
        """Why the periodic loop is no longer running (None while it runs, or before it started)."""
        task = self._periodic
        if task is None or not task.done():
            return None
        if task.cancelled():
            return "cancelled"
        error = task.exception()
        return f"{type(error).__name__}: {error}" if error is not None else "returned"

    async def stop(self) -> None:
        """Stop the periodic loop and the Pod watcher's pending derivations."""
        if self._periodic is not None:
            self._periodic.cancel()
            # A loop that died has said so (``_report_end``, and the liveness probe): stopping goes on.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._periodic
        if self._periodic_close is not None:
            await self._periodic_close()
        await self.pod_updates.close()

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        return self._locks.setdefault((namespace, name), asyncio.Lock())

    # --- the Pods --------------------------------------------------------------------------------------

    def first_sight(self, pod_uid: str) -> bool:
        """True the first time this process adopts or creates Pod ``pod_uid`` (it is announced once)."""
        if pod_uid in self._announced_pods:
            return False
        self._announced_pods.add(pod_uid)
        return True

    def see_pod(self, namespace: str, name: str, uid: str, pod: Mapping[str, Any], *, gone: bool) -> None:
        """Remember one Pod event's state (its digest) for SessionMemory ``uid``; a Pod of an earlier attempt
        than the one remembered (its late events, after a restart) is not."""
        before = self._seen_pods.get((namespace, name))
        if (
            before is not None
            and before.owner_uid == uid
            and attempt_of_pod(before.pod) > attempt_of_pod(pod)
        ):
            return
        self._seen_pods[(namespace, name)] = SeenPod(
            owner_uid=uid, pod=pod_digest(pod), gone=gone, at=time.monotonic()
        )

    def last_seen(self, namespace: str, name: str) -> SeenPod | None:
        """The watcher's last view of the SessionMemory's Pod, whichever it was."""
        return self._seen_pods.get((namespace, name))

    def seen_pod(self, namespace: str, name: str, uid: str, pod_name: str) -> SeenPod | None:
        """The watcher's last view of Pod ``pod_name`` of SessionMemory ``uid``, if it saw one."""
        seen = self.last_seen(namespace, name)
        if seen is None or seen.owner_uid != uid or meta_of(seen.pod).name != pod_name:
            return None
        return seen

    def unsee(self, namespace: str, name: str, seen: SeenPod) -> None:
        """Drop the watcher's view ``seen`` (when it is still the last one): its SessionMemory is gone."""
        if self._seen_pods.get((namespace, name)) is seen:
            del self._seen_pods[(namespace, name)]

    def gone_since(self, namespace: str, name: str, now: float) -> float:
        """When the deletion first saw the SessionMemory's Pod gone (monotonic seconds; ``now`` the first
        time it asks)."""
        return self._gone_since.setdefault((namespace, name), now)

    def service_account_missing_since(self, namespace: str, name: str, now: float) -> float:
        """When a Pod create was first refused for a missing ServiceAccount (``now`` the first time)."""
        return self._service_account_missing_since.setdefault((namespace, name), now)

    def service_account_found(self, namespace: str, name: str) -> None:
        self._service_account_missing_since.pop((namespace, name), None)

    def waited(self, namespace: str, name: str) -> int:
        """Count one more retry of a session waiting without a Pod; how many there were."""
        key = (namespace, name)
        self._waits[key] = self._waits.get(key, 0) + 1
        return self._waits[key]

    def wait_over(self, namespace: str, name: str) -> None:
        self._waits.pop((namespace, name), None)

    # --- the Nodes -------------------------------------------------------------------------------------

    async def node(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        """(known, the Node or None when it does not exist); known is False when the operator may not read
        Nodes (no lost-node checks then: logged once) or the read failed."""
        now = time.monotonic()
        cached = self._nodes.get(name)
        if cached is not None and now - cached[0] < NODE_CACHE_SECONDS:
            return True, cached[1]
        try:
            node = await self.kube.get_node(name)
        except KubeApiError as exc:
            if exc.status == 403 and not self._nodes_forbidden:
                self._nodes_forbidden = True
                logger.warning(
                    "the operator may not read Nodes: sessions on a lost node are not detected",
                    extra={"error": str(exc)},
                )
            return False, None
        self._nodes[name] = (now, node)
        if len(self._nodes) > 4096:  # nodes come and go; keep the cache bounded
            self._nodes = {k: v for k, v in self._nodes.items() if now - v[0] < NODE_CACHE_SECONDS}
        return True, node

    # --- the SessionMemories ---------------------------------------------------------------------------

    def store_paths(self, obj: Mapping[str, Any], known: StorePaths | None = None) -> StorePaths:
        """The store paths the caller already has from its one validation, else those of ``obj``'s spec
        (validated once per object and generation: every Pod event of a session needs them)."""
        if known is not None:
            return known
        meta = meta_of(obj)
        generation, paths = self._paths.get(str(meta.uid), (None, None))
        if paths is None or generation != meta.generation:
            paths = store_paths(obj.get("spec") or {})
            self._paths[str(meta.uid)] = (meta.generation, paths)
        return paths

    def remember(self, namespace: str, name: str, obj: Mapping[str, Any]) -> None:
        """Keep ``obj`` (as the API just served it, spec included) for the next status write."""
        self.store_paths(obj)  # the digest has no spec: its paths are derived now
        self._objects[(namespace, name)] = object_digest(obj)
        metrics.show_sessionmemories(self._objects.values())

    def drop_known(self, namespace: str, name: str) -> None:
        """Forget the remembered SessionMemory: the next status write reads it afresh."""
        self._objects.pop((namespace, name), None)

    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The SessionMemory as the API serves it now (remembered for the next status write)."""
        obj = await self.kube.get_session_memory(namespace, name)
        if obj is None:
            self.drop_known(namespace, name)
        else:
            self.remember(namespace, name, obj)
        return obj

    def known(self, namespace: str, name: str, uid: str | None) -> dict[str, Any] | None:
        """The remembered SessionMemory, if it is the one with ``uid`` (any one when None) and its store
        paths are those of its generation."""
        obj = self._objects.get((namespace, name))
        if obj is None:
            return None
        meta = meta_of(obj)
        cached = self._paths.get(str(meta.uid))
        if (uid is not None and meta.uid != uid) or cached is None or cached[0] != meta.generation:
            return None
        return obj

    def forget(self, namespace: str, name: str) -> None:
        """The SessionMemory is released: drop everything kept for it."""
        key = (namespace, name)
        known = self._objects.pop(key, None)
        if known is not None:
            self._paths.pop(str(meta_of(known).uid), None)
        self._locks.pop(key, None)
        self._gone_since.pop(key, None)
        self._service_account_missing_since.pop(key, None)
        self._waits.pop(key, None)
        self._seen_pods.pop(key, None)
        metrics.show_sessionmemories(self._objects.values())
