"""Live sync health: the operator follows each running session's sidecar ``/status`` from the Pod IP.

Least privilege: the sidecar serves counts, times and the last error (no content, no credential) on the Pod
network next to ``/readyz`` and ``/metrics``; the operator writes the ``Synced`` condition, ``lastSyncTime``
and the running totals. Nothing in the Pod gets any Kubernetes API access or credential for it.

A running session costs almost nothing: one watch per session (``HealthWatch``), a long-lived request the
sidecar answers only when what the operator records has changed (``contracts/health.py``: ``?wait`` with
``If-None-Match``), over one HTTP client shared by every watch (keep-alive, one connection per sidecar). While
nothing changes the operator receives a ``304`` every ``WAIT_S`` per session and writes nothing; a change
reaches the status within a fraction of a second. A sidecar that predates the watch (no ``ETag``) is read
every ``health_interval`` instead, and so is one that cannot be read (the condition then says why).

The status is written only when what it says changed: the ``Synced`` condition or a store's totals.
``lastSyncTime`` travels with those writes (and is set when it has none): a pass that only confirmed that
nothing changed is not worth a write per session every few seconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from memsync.contracts.health import STATUS_PATH, WAIT_PARAM, SyncHealth, decode_health
from memsync.controller.conditions import condition
from memsync.controller.objects import ObjectRef, meta_of
from memsync.controller.periodic import is_running
from memsync.controller.sessionmemory import derive
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory.derive import Status
from memsync.controller.sessionmemory.ownership import owner_uid
from memsync.controller.sessionmemory.pod import METRICS_PORT, SYNC_CONTAINER
from memsync.controller.sessionmemory.state import SessionMemories
from memsync.controller.sessionmemory.writer import generation_of, post_event, write_status

if TYPE_CHECKING:
    import aiohttp

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S: Final = 3.0
#: How long the sidecar may hold a watch while nothing changes (it answers 304 then).
WAIT_S: Final = 120.0
#: Beyond the wait, how long an answer may take before the sidecar counts as unreachable.
READ_SLACK_S: Final = 10.0
_BODY_LIMIT: Final = 256 * 1024


def health_url(pod: Mapping[str, Any]) -> str | None:
    """``http://<podIP>:<metrics port>/status`` of the Pod's sync sidecar; None before it has an IP."""
    status = pod.get("status") or {}
    ip = status.get("podIP") if isinstance(status, Mapping) else None
    if not isinstance(ip, str) or not ip:
        return None
    port = METRICS_PORT
    for container in (pod.get("spec") or {}).get("initContainers") or []:
        if isinstance(container, Mapping) and container.get("name") == SYNC_CONTAINER:
            for entry in container.get("ports") or []:
                if isinstance(entry, Mapping) and entry.get("name") == "metrics":
                    port = int(entry.get("containerPort") or port)
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}{STATUS_PATH}"


@dataclass(frozen=True)
class Reading:
    """One answer of the sidecar: its document (or why there is none), and its tag (None: it does not
    support the watch); ``unchanged`` for a 304."""

    health: SyncHealth | None = None
    error: str | None = None
    tag: str | None = None
    unchanged: bool = False


async def read_health(
    http: aiohttp.ClientSession, url: str, *, tag: str | None = None, wait: float = WAIT_S
) -> Reading:
    """Read the sidecar's document; with ``tag``, wait up to ``wait`` seconds for it to change."""
    import aiohttp  # noqa: PLC0415 (loaded with kopf: the operator's own dependency)

    headers, params = ({"If-None-Match": tag}, {WAIT_PARAM: f"{wait:g}"}) if tag else ({}, {})
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=(wait if tag else 0.0) + READ_SLACK_S
    )
    try:
        async with http.get(url, headers=headers, params=params, timeout=timeout) as response:
            if response.status == 304:
                return Reading(tag=response.headers.get("ETag") or tag, unchanged=True)
            if response.status != 200:
                return Reading(error=f"HTTP {response.status} from {url}")
            body = await response.content.read(_BODY_LIMIT)
            etag = response.headers.get("ETag")
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Reading(error=f"{type(exc).__name__} from {url}")
    health = decode_health(body)
    if health is None:
        return Reading(error=f"{url} did not answer with a sync status document")
    return Reading(health=health, tag=etag)


def worth_writing(previous: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether the status with the health applied says something new: anything but a later
    ``lastSyncTime`` (which is written when there is none yet)."""
    if new == previous:
        return False
    if previous.get("lastSyncTime") is None and new.get("lastSyncTime") is not None:
        return True
    return {k: v for k, v in new.items() if k != "lastSyncTime"} != {
        k: v for k, v in previous.items() if k != "lastSyncTime"
    }


async def record_health(
    state: SessionMemories, body: Mapping[str, Any], health: SyncHealth | None, error: str | None
) -> None:
    """Write the running session's sync health when it says something new.

    A Warning ``SyncFailing`` Event is posted when ``Synced`` turns False, a Normal ``SyncRecovered`` when
    it turns True again.
    """
    meta = body.get("metadata") or {}
    namespace, name, uid = str(meta["namespace"]), str(meta["name"]), str(meta.get("uid"))
    status: Mapping[str, Any] = body.get("status") or {}
    now = state.clock()
    derived = derive.health_status(status, health, error=error, generation=generation_of(body), now=now)
    if derived is None or not worth_writing(status, derived):
        return  # nothing new since the status this watch was given: no read, no write
    before: dict[str, Any] = {}

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        before.clear()
        before.update(condition(previous, ph.SYNCED) or {})
        new = derive.health_status(previous, health, error=error, generation=generation_of(obj), now=now)
        return new if new is not None and worth_writing(previous, new) else None

    new = await write_status(state, namespace, name, compute, uid=uid)
    after = condition(new or {}, ph.SYNCED) or {}
    if after.get("status") != before.get("status") and after.get("status") in ("True", "False"):
        failing = after["status"] == "False"
        if failing or before.get("status") == "False":
            await post_event(
                state,
                body,
                "Warning" if failing else "Normal",
                "SyncFailing" if failing else "SyncRecovered",
                str(after.get("message") or ""),
            )


class HealthWatches:
    """One watch task per running session, over one shared HTTP client (``sync`` follows the periodic
    index: a session that stops running has its watch cancelled)."""

    def __init__(self, state: SessionMemories, *, connections: int = 0, wait: float = WAIT_S) -> None:
        self.state = state
        self.connections = connections  # at most this many sidecars read at once (0: no bound)
        self.wait = wait
        self.tasks: dict[ObjectRef, asyncio.Task[None]] = {}
        self._http: aiohttp.ClientSession | None = None

    @property
    def http(self) -> aiohttp.ClientSession:
        if self._http is None:
            import aiohttp  # noqa: PLC0415

            connector = aiohttp.TCPConnector(limit=self.connections, limit_per_host=1, keepalive_timeout=30)
            self._http = aiohttp.ClientSession(connector=connector, trust_env=False, auto_decompress=False)
        return self._http

    def sync(self, wanted: Iterable[ObjectRef]) -> None:
        wanted = set(wanted)
        for ref in [r for r in self.tasks if r not in wanted]:
            self.tasks.pop(ref).cancel()
        for ref in wanted:
            task = self.tasks.get(ref)
            if task is None or task.done():
                self.tasks[ref] = asyncio.create_task(self._follow(ref), name=f"memsync-health-{ref[1]}")

    async def close(self) -> None:
        tasks = list(self.tasks.values())
        self.tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _follow(self, ref: ObjectRef) -> None:
        """Follow one session's sidecar until the session stops running (or the watch is cancelled)."""
        interval = self.state.config.health_interval
        tag: str | None = None
        url: str | None = None
        while True:
            try:
                step = await self._step(ref, url, tag)
            except Exception:
                logger.exception(
                    "following a session's sync health failed; it is read again",
                    extra={"namespace": ref[0], "sessionmemory": ref[1]},
                )
                step = (url, None, True)
            if step is None:
                return
            url, tag, pause = step
            if pause:
                await asyncio.sleep(interval)

    async def _step(
        self, ref: ObjectRef, url: str | None, tag: str | None
    ) -> tuple[str | None, str | None, bool] | None:
        """One read of the sidecar: (its URL, the tag to wait on next, whether to pause before the next
        read), or None once the session no longer runs."""
        namespace, name, uid = ref
        obj = self.state.known(namespace, name, uid) or await self.state.read(namespace, name)
        if obj is None or meta_of(obj).uid != uid or not is_running(obj.get("status") or {}):
            return None
        pod = await self._pod_of(obj)
        found = (self.state.config.health_address or health_url)(pod) if pod is not None else None
        if found is None:
            return url, None, True
        if found != url:
            tag = None  # another Pod (or address): read it afresh
        reading = await read_health(self.http, found, tag=tag, wait=self.wait)
        if reading.unchanged:
            return found, reading.tag, False
        async with self.state.slots:  # the API calls of a write take a handler slot, like every step
            await record_health(self.state, obj, reading.health, reading.error)
        # unreadable, or a sidecar that predates the watch: read it again after the interval
        return found, reading.tag, reading.error is not None or reading.tag is None

    async def _pod_of(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        meta = meta_of(obj)
        namespace, name, uid = str(meta.namespace), str(meta.name), str(meta.uid)
        pod_name = str((obj.get("status") or {}).get("podName") or "")
        seen = self.state.seen_pod(namespace, name, uid, pod_name)
        if seen is not None and not seen.gone:
            pod: Mapping[str, Any] | None = seen.pod
        else:
            pod = await self.state.kube.get_pod(namespace, pod_name)
        if pod is None or owner_uid(pod) != uid:
            return None
        return pod
