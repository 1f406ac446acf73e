"""Live sync health (the health poll): the operator reads the sync sidecar's ``/status`` from the Pod IP.

Least privilege: the sidecar serves counts, times and the last error (no content, no credential) on the Pod
network next to ``/readyz`` and ``/metrics``; the operator polls it on a timer while the session runs and
writes the ``Synced`` condition, ``lastSyncTime`` and the running totals. Nothing in the Pod gets any
Kubernetes API access or credential for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import httpx

from memsync.contracts.health import STATUS_PATH, SyncHealth, decode_health
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

READ_TIMEOUT_S: Final = 3.0
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


async def read_health(url: str) -> tuple[SyncHealth | None, str | None]:
    """(the document, None), or (None, why it could not be read)."""
    try:
        async with httpx.AsyncClient(timeout=READ_TIMEOUT_S, trust_env=False) as http:
            response = await http.get(url)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__} from {url}"
    if response.status_code != 200:
        return None, f"HTTP {response.status_code} from {url}"
    health = decode_health(response.content[:_BODY_LIMIT])
    if health is None:
        return None, f"{url} did not answer with a sync status document"
    return health, None


async def poll_health_of(state: SessionMemories, ref: ObjectRef) -> None:
    """The health poll of SessionMemory ``ref``, from the object as this process last read or wrote it."""
    namespace, name, uid = ref
    obj = state.known(namespace, name, uid) or await state.read(namespace, name)
    if obj is not None and meta_of(obj).uid == uid and is_running(obj.get("status") or {}):
        await poll_health(state, obj)


async def poll_health(state: SessionMemories, body: Mapping[str, Any]) -> None:
    """Read the running session's sync health from its sidecar and write it (only what changed).

    A Warning ``SyncFailing`` Event is posted when ``Synced`` turns False, a Normal ``SyncRecovered`` when
    it turns True again.
    """
    meta = body.get("metadata") or {}
    namespace, name, uid = str(meta["namespace"]), str(meta["name"]), str(meta.get("uid"))
    status: Mapping[str, Any] = body.get("status") or {}
    pod_name = str(status.get("podName") or "")
    seen = state.seen_pod(namespace, name, uid, pod_name)
    pod = seen.pod if seen is not None and not seen.gone else await state.kube.get_pod(namespace, pod_name)
    if pod is None or owner_uid(pod) != uid:
        return
    url = (state.config.health_address or health_url)(pod)
    if url is None:
        return
    health, error = await read_health(url)
    now = state.clock()
    if derive.health_status(status, health, error=error, generation=generation_of(body), now=now) == status:
        return  # nothing changed since the status this poll was given: no read, no write
    before: dict[str, Any] = {}

    def compute(obj: Mapping[str, Any], previous: Status) -> Status | None:
        before.clear()
        before.update(condition(previous, ph.SYNCED) or {})
        return derive.health_status(previous, health, error=error, generation=generation_of(obj), now=now)

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
