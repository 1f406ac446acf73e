"""A spec edit after the sandbox Pod started, on a real API server: accepted by the API, never applied to the
running Pod (a Pod's containers are immutable), and reported: ``SpecApplied`` False with a Warning Event,
which the shipped Argo CD health check (manifests/argocd/health.lua, run here on the object the API serves)
maps to Degraded; changed back, the condition is True again and the check Healthy. The session then ends as
it would have: every file the agent wrote is in the store, and the finalizer goes with the outcome."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import RunningStoreServer
from memsync.crd.models import FINALIZER
from support.argocd import argocd_health

from .conftest import Cluster
from .scenario import (
    FINAL,
    agent_report,
    assert_final_store,
    condition,
    make_store,
    steady_session,
    store_files,
    wait_phase,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def spec_applied(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    status = (cluster.get_or_none("-n", namespace, "smem", name) or {}).get("status") or {}
    try:
        return condition(status, "SpecApplied")
    except KeyError:
        return None


async def test_a_spec_edit_after_start_is_reported_and_the_session_ends_as_it_would_have(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    store = await make_store(tier_store, "spec-edit", {})
    pod = await steady_session(
        deployed, tier_store, namespace, "edited", store=store, mount="n", duration=25, memories=2
    )
    before = deployed.get("-n", namespace, "pod", pod)
    original = deployed.get("-n", namespace, "smem", "edited")["spec"]["template"]
    changed = json.loads(json.dumps(original))
    changed.setdefault("metadata", {}).setdefault("annotations", {})["team"] = "blue"
    deployed.kubectl(
        "-n",
        namespace,
        "patch",
        "smem",
        "edited",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"template": changed}}),
    )
    applied = deployed.wait(
        "SpecApplied False",
        lambda: (c := spec_applied(deployed, namespace, "edited")) and c["status"] == "False" and c,
        60,
        explain=deployed.dump,
    )
    assert applied["reason"] == "SpecChangeNotApplied" and pod in applied["message"], applied
    obj = deployed.get("-n", namespace, "smem", "edited")
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"] == 2
    assert argocd_health(obj)[0] == "Degraded"
    events: list[dict[str, Any]] = deployed.get("-n", namespace, "events")["items"]
    assert [e for e in events if e["reason"] == "SpecChangeNotApplied" and e["type"] == "Warning"]
    after = deployed.get("-n", namespace, "pod", pod)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert "team" not in (after["metadata"].get("annotations") or {})

    # changed back (a JSON patch: a merge patch would keep the added annotation)
    deployed.kubectl(
        "-n",
        namespace,
        "patch",
        "smem",
        "edited",
        "--type=json",
        "-p",
        json.dumps([{"op": "replace", "path": "/spec/template", "value": original}]),
    )
    deployed.wait(
        "SpecApplied True once changed back",
        lambda: (spec_applied(deployed, namespace, "edited") or {}).get("status") == "True",
        60,
    )
    status = wait_phase(deployed, namespace, "edited", ("Running", *FINAL))
    if status["phase"] == "Running":
        assert argocd_health(deployed.get("-n", namespace, "smem", "edited"))[0] == "Healthy"
    status = wait_phase(deployed, namespace, "edited", FINAL, timeout=180)
    assert status["phase"] == "Succeeded", status
    assert argocd_health(deployed.get("-n", namespace, "smem", "edited"))[0] == "Healthy"
    assert_final_store(
        await store_files(tier_store, store), agent_report(deployed, namespace, pod), "n", status
    )
    deployed.wait(
        "the finalizer removed",
        lambda: (
            FINALIZER
            not in (
                (deployed.get_or_none("-n", namespace, "smem", "edited") or {})
                .get("metadata", {})
                .get("finalizers")
                or []
            )
        ),
        60,
    )
