"""Sessions whose Pod's node was lost: the verdict (``interruption.node_lost``) applied, and the Pod
force-deleted when the operator runs with ``--force-delete-lost-pods``.

A Pod on a node that stopped answering stays Terminating until the node comes back or is deleted: its
kubelet is the only one that may confirm its end. The operator reads the Pod's Node (one read per node per
few seconds, however many sessions run there), records ``NodeLost`` once the node is gone, tainted
``node.kubernetes.io/out-of-service`` or not Ready for ``--node-lost-grace``, and, only when asked to,
force-deletes the Pod after its own grace period on top: the risk is the one of any force deletion, that a
node that comes back later still runs the old Pod's containers for a moment (its sidecar's flush then still
reaches the store; its agent may write there too) while the session has ended or been restarted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from memsync.controller.objects import ObjectRef, meta_of
from memsync.controller.sessionmemory import interruption
from memsync.controller.sessionmemory.digest import StorePaths
from memsync.controller.sessionmemory.finalize import grace_seconds
from memsync.controller.sessionmemory.podview import pod_view
from memsync.controller.sessionmemory.record import record_node_lost
from memsync.controller.sessionmemory.state import SessionMemories
from memsync.controller.sessionmemory.writer import post_event

logger = logging.getLogger(__name__)


async def lost_node_of(state: SessionMemories, pod: Mapping[str, Any]) -> interruption.LostNode | None:
    """The verdict on ``pod``'s node: None while it answers, the Pod has ended, or is not bound to one."""
    view = pod_view(pod)
    if view.node is None or view.phase in ("Succeeded", "Failed"):
        return None
    known, node = await state.node(view.node)
    if not known:
        return None
    return interruption.node_lost(view.node, node, state.clock(), state.config.node_lost_grace)


async def force_delete_if_due(
    state: SessionMemories, body: Mapping[str, Any], pod: Mapping[str, Any], lost: interruption.LostNode
) -> bool:
    """Force-delete ``pod`` (on ``lost``) when the operator may and its grace is over; True when it did."""
    config = state.config
    pod_grace = grace_seconds(pod, config.default_grace_seconds)
    if not config.force_delete_lost_pods or not interruption.force_delete_due(
        lost, state.clock(), config.node_lost_grace, pod_grace
    ):
        return False
    meta = meta_of(pod)
    namespace, pod_name = str(meta.namespace), str(meta.name)
    deleted = await state.kube.delete_pod(
        namespace, pod_name, uid=str(meta.uid) if meta.uid else None, grace_period_seconds=0
    )
    if deleted:
        message = f"force-deleted sandbox Pod {pod_name}: {lost.why} (--force-delete-lost-pods)"
        logger.warning(message, extra={"namespace": namespace, "pod": pod_name, "node": lost.node})
        await post_event(state, body, "Warning", "LostPodForceDeleted", message)
    return deleted


async def check_node(
    state: SessionMemories,
    body: Mapping[str, Any],
    pod: Mapping[str, Any],
    *,
    stores: StorePaths | None = None,
) -> bool:
    """Record ``NodeLost`` (or a restart waiting for the Pod) when ``pod``'s node is lost, and force-delete
    the Pod when due; True when the node is lost."""
    lost = await lost_node_of(state, pod)
    if lost is None:
        return False
    meta = meta_of(body)
    ref = ObjectRef(str(meta.namespace), str(meta.name), str(meta.uid))
    await record_node_lost(state, ref, str(meta_of(pod).name), lost, stores=stores)
    await force_delete_if_due(state, body, pod, lost)
    return True
