"""The resources the operator serves must be served by the API server before kopf starts.

With kopf's scanning off (``controller/settings.py``), kopf resolves each resource once, by API discovery,
when it starts; a resource that is missing then (a CRD not installed or not Established yet, or a CRD whose
version the operator serves is gone or no longer ``served``, e.g. after a ``helm upgrade``, which never
updates ``crds/``) is never looked up again, and the operator idles with its liveness endpoint green. So
``memsync operator`` asks discovery first and exits non-zero naming each missing group/version/resource; the
kubelet restarts it (with its backoff) until the CRD is served.

The decision is a pure function of what discovery answered; ``served_plurals`` is the one API read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memsync.crd import agentenv
from memsync.crd import models as smem

if TYPE_CHECKING:
    from memsync.controller.kube import KubeApi


@dataclass(frozen=True, order=True)
class Resource:
    group: str
    version: str
    plural: str
    crd: str  # the CustomResourceDefinition that serves it, for the message

    def __str__(self) -> str:
        return f"{self.group}/{self.version}/{self.plural}"


SESSION_MEMORIES = Resource(smem.GROUP, smem.VERSION, smem.PLURAL, f"{smem.PLURAL}.{smem.GROUP}")
AGENT_ENVIRONMENTS = Resource(smem.GROUP, agentenv.VERSION, agentenv.PLURAL, agentenv.CRD_NAME)


def served_resources(*, environments: bool) -> tuple[Resource, ...]:
    """What this operator serves: SessionMemories, and AgentEnvironments with the add-on on."""
    return (SESSION_MEMORIES, AGENT_ENVIRONMENTS) if environments else (SESSION_MEMORIES,)


#: (group, version) -> the plurals discovery lists there, or None when the group/version is not served.
Discovered = Mapping[tuple[str, str], frozenset[str] | None]


def missing(wanted: Iterable[Resource], discovered: Discovered) -> list[Resource]:
    """The resources of ``wanted`` that discovery does not serve."""
    return [r for r in wanted if r.plural not in (discovered.get((r.group, r.version)) or frozenset())]


def missing_message(resources: Iterable[Resource]) -> str:
    """Why the operator does not start: each missing resource and what to do about it."""
    parts = [
        f"{r} is not served by the API server (CustomResourceDefinition {r.crd} missing, not Established, "
        f"or without version {r.version} served)"
        for r in resources
    ]
    return (
        "; ".join(parts)
        + ": install or upgrade the CRDs from this release first (kubectl apply --server-side "
        "-f crds/; helm upgrade never changes them), then the operator starts"
    )


async def discover(kube: KubeApi, wanted: Iterable[Resource]) -> dict[tuple[str, str], frozenset[str] | None]:
    """Ask discovery about every group/version of ``wanted`` (one read each)."""
    found: dict[tuple[str, str], frozenset[str] | None] = {}
    for r in wanted:
        if (r.group, r.version) not in found:
            found[(r.group, r.version)] = await kube.served_plurals(r.group, r.version)
    return found
