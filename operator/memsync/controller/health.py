"""Live sync health: the operator reads the sync sidecar's ``/status`` document from the Pod IP.

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
from memsync.controller.pod import METRICS_PORT, SYNC_CONTAINER

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
