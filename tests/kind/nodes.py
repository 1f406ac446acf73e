"""The kind cluster's worker node: where the scenarios that lose a node or drain one run their sessions.

``tier.sh`` adds one worker to its cluster, registered with the taint ``WORKER_TAINT`` so that nothing but
those scenarios' sandbox Pods (which tolerate it and prefer the worker) ever lands there: every other test
runs on the control-plane node as before, and losing the worker costs them nothing. Once the cluster exists
(``prepare``, idempotent):

- the control-plane node's own NoSchedule taint is removed (kind removes it only from a one-node cluster),
  so the operator, the store server and a restarted session run there;
- with the node image's bridge CNI (one fixed pod subnet, node-local, no routes between nodes) the worker's
  configuration gets the pod subnet the controller manager allocated to it, and each node a route to the
  other's pod subnet through the other's address on kind's docker network. A CNI that routes between
  nodes by itself (its configuration is not the bridge's fixed subnet) is left alone.
"""

from __future__ import annotations

import json
from typing import Any, Final

from .conftest import CLUSTER, kubectl, kubectl_json, run

WORKER_TAINT: Final = {"key": "memsync.dev/scenarios", "value": "worker", "effect": "NoSchedule"}
CONTROL_PLANE_TAINT: Final = "node-role.kubernetes.io/control-plane"
BRIDGE_CONFIG: Final = "/etc/cni/net.d/10-bridge.conflist"
STATIC_SUBNET: Final = "10.244.0.0/24"


def nodes() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl_json("get", "nodes")["items"]
    return items


def worker_name() -> str | None:
    """The worker node's name (``<cluster>-worker``), or None in a one-node cluster."""
    for node in nodes():
        if CONTROL_PLANE_TAINT not in (
            node["metadata"].get("labels") or {}
        ):  # the control plane's role label
            return str(node["metadata"]["name"])
    return None


def _address(container: str) -> str:
    out = run(
        "docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", container
    )
    return out.stdout.split()[0]


def _route(container: str, subnet: str, via: str) -> None:
    run("docker", "exec", container, "ip", "route", "replace", subnet, "via", via)


def prepare() -> str | None:
    """Make a cluster with a worker ready for the scenarios (the module docstring says how); its name."""
    worker = worker_name()
    if worker is None:
        return None
    control_plane = f"{CLUSTER}-control-plane"
    kubectl("taint", "nodes", control_plane, f"{CONTROL_PLANE_TAINT}:NoSchedule-", check=False)
    config = run("docker", "exec", worker, "cat", BRIDGE_CONFIG, check=False)
    if config.returncode != 0 or STATIC_SUBNET not in config.stdout:
        return worker  # another CNI, or configured already
    subnets = {str(n["metadata"]["name"]): str(n["spec"]["podCIDR"]) for n in nodes()}
    own = json.loads(config.stdout)
    own["plugins"][0]["ipam"]["ranges"] = [[{"subnet": subnets[worker]}]]
    text = json.dumps(own, indent=2)
    run("docker", "exec", "-i", worker, "sh", "-c", f"cat > {BRIDGE_CONFIG}", input=text)
    _route(control_plane, subnets[worker], _address(worker))
    _route(worker, subnets[control_plane], _address(control_plane))
    return worker
