"""Kubernetes Events about memsync's objects.

Inside a kopf handler, kopf posts them (queued, with its own retries). kopf keeps that queue per object
worker, so a step that runs outside every handler (the periodic re-check and health poll) has none to post
to: there the Event is created through the API directly, with the same reporting component.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, cast

import kopf

from memsync.controller.kube import KubeApi, KubeApiError
from memsync.controller.objects import meta_of

logger = logging.getLogger(__name__)

MESSAGE_MAX: Final = 1024


def event_manifest(
    obj: Mapping[str, Any], type_: str, reason: str, message: str, *, component: str, now: datetime
) -> dict[str, Any]:
    """A core/v1 Event about ``obj`` (its apiVersion, kind and identity), as kopf would post it."""
    meta = meta_of(obj)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.name}.", "namespace": meta.namespace},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.name,
            "namespace": meta.namespace,
            "uid": meta.uid,
        },
        "type": type_,
        "reason": reason,
        "message": message[:MESSAGE_MAX],
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


async def post(
    kube: KubeApi,
    obj: Mapping[str, Any],
    type_: str,
    reason: str,
    message: str,
    *,
    component: str,
    now: datetime,
) -> None:
    """Post an Event about ``obj``: through kopf inside a handler, else through the API (a failure to post
    is logged, never raised: the status already says it)."""
    meta = meta_of(obj)
    ref = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": meta.reference()}
    text = message[:MESSAGE_MAX]
    try:
        kopf.event(kopf.Body(cast(kopf.RawBody, ref)), type=type_, reason=reason, message=text)
        return
    except LookupError:  # no kopf event queue here: not inside a handler
        pass
    manifest = event_manifest(obj, type_, reason, message, component=component, now=now)
    try:
        await kube.create_event(str(meta.namespace), manifest)
    except KubeApiError as exc:
        logger.warning(
            "cannot post an Event",
            extra={"object": f"{meta.namespace}/{meta.name}", "reason": reason, "error": str(exc)},
        )
