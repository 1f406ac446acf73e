"""The Argo CD health check (manifests/argocd/health.lua, shipped by the chart and the kustomize component),
run by Lua 5.1 (lupa's bundled interpreter; Argo CD runs gopher-lua, a Lua 5.1) against SessionMemories in
every phase, each status made by the operator's own derivations."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from memsync.controller.sessionmemory import derive, interruption, waiting
from memsync.controller.sessionmemory import phases as ph
from support.argocd import HEALTH_LUA, argocd_health

REPO = Path(__file__).resolve().parents[2]
HEALTH = HEALTH_LUA
KEY = "resource.customizations.health.agents.memsync.dev_SessionMemory"
NOW = datetime(2026, 1, 1, 0, 30, tzinfo=UTC)
STORES = {"memstore_01aa": "/mnt/memory/notes"}
MOUNTED = json.dumps({"phase": "mounted", "stores": {"memstore_01aa": {"memories": 3}}})


health = argocd_health


def container(name: str, state: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "state": state, **extra}


def pod(
    phase: str,
    *,
    mount: dict[str, Any] | None = None,
    sync: dict[str, Any] | None = None,
    sandbox: dict[str, Any] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "s1-sandbox"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:20:00Z"
    init = [c for c in (mount, sync) if c is not None]
    return {
        "metadata": meta,
        "spec": {"nodeName": "node-a"} if phase != "Pending" else {},
        "status": {
            "phase": phase,
            "initContainerStatuses": init,
            "containerStatuses": [sandbox] if sandbox else [],
            "conditions": conditions or [],
        },
    }


MOUNT_DONE = container(
    "memsync-mount", {"terminated": {"exitCode": 0, "message": MOUNTED, "finishedAt": "2026-01-01T00:01:00Z"}}
)
SYNC_READY = container("memsync-sync", {"running": {}}, ready=True, started=True)
SANDBOX_RUNNING = container("sandbox", {"running": {}}, ready=True, started=True)
FLUSHED = json.dumps(
    {"phase": "flushed", "complete": True, "stores": {"memstore_01aa": {"uploaded": 1, "unsent": 0}}}
)


def from_pod(p: dict[str, Any], previous: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    return dict(derive.derive_status(previous, p, stores=STORES, generation=1, now=NOW, **kw))


def obj(status: dict[str, Any] | None, generation: int = 1) -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {"name": "s1", "generation": generation}}
    if status is not None:
        out["status"] = status
    return out


def ended_well() -> dict[str, Any]:
    running = from_pod(pod("Running", mount=MOUNT_DONE, sync=SYNC_READY, sandbox=SANDBOX_RUNNING))
    done = pod(
        "Succeeded",
        mount=MOUNT_DONE,
        sync=container("memsync-sync", {"terminated": {"exitCode": 0, "message": FLUSHED}}),
        sandbox=container("sandbox", {"terminated": {"exitCode": 0}}),
    )
    return from_pod(done, running)


def cases() -> list[tuple[str, dict[str, Any], str, str]]:
    """(id, SessionMemory, Argo CD status, a word of the message)."""
    unscheduled = pod(
        "Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.",
            }
        ],
    )
    mounting = pod("Pending", mount=container("memsync-mount", {"running": {}}))
    running = from_pod(pod("Running", mount=MOUNT_DONE, sync=SYNC_READY, sandbox=SANDBOX_RUNNING))
    flushing = from_pod(
        pod("Running", mount=MOUNT_DONE, sync=SYNC_READY, sandbox=SANDBOX_RUNNING, deleting=True), running
    )
    quota = waiting.waiting_status(
        {}, ph.QUOTA_EXCEEDED, "exceeded quota: pods", stores=STORES, generation=1, now=NOW
    )
    timed_out = waiting.start_timeout_status(
        quota, "the sandbox did not start within 600 s", pod_name=None, stores=STORES, generation=1, now=NOW
    )
    lost = interruption.node_lost_status(
        running,
        interruption.LostNode("node-a", "node node-a no longer exists", None),
        pod_name="s1-sandbox",
        stores=STORES,
        generation=1,
        now=NOW,
    )
    restarting = interruption.restarting_status(
        lost, why="node node-a no longer exists", waits_for="Pod s1-sandbox is gone", generation=1, now=NOW
    )
    refused = derive.refusal_status(
        {},
        reason=ph.SECRET_NOT_FOUND,
        message="Secret work does not exist",
        stores=STORES,
        generation=1,
        now=NOW,
    )
    edited = derive.with_spec_applied(running, False, "spec changed but Pod s1-sandbox is immutable", 2, NOW)
    return [
        ("no-status", obj(None), "Progressing", "operator"),
        ("unschedulable", obj(from_pod(unscheduled)), "Progressing", "node"),
        ("quota", obj(quota), "Progressing", "quota"),
        ("mounting", obj(from_pod(mounting)), "Progressing", "memsync-mount"),
        ("running", obj(running), "Healthy", "sandbox runs"),
        ("flushing", obj(flushing), "Progressing", "flushing"),
        ("succeeded", obj(ended_well()), "Healthy", "final flush completed"),
        ("refused", obj(refused), "Degraded", "Secret work"),
        ("start-timeout", obj(timed_out), "Degraded", "did not start"),
        ("node-lost", obj(lost), "Degraded", "node-a"),
        ("restarting", obj(restarting), "Progressing", "restart 1 of"),
        ("spec-not-applied", obj(edited, generation=2), "Degraded", "immutable"),
        ("generation-not-observed", obj(running, generation=2), "Progressing", "latest spec"),
    ]


@pytest.mark.parametrize(("case", "body", "status", "word"), cases(), ids=[c[0] for c in cases()])
def test_the_health_check_maps_every_phase(case: str, body: dict[str, Any], status: str, word: str) -> None:
    got, message = health(body)
    assert (got, word in message) == (status, True), (case, got, message)


def test_every_phase_is_covered() -> None:
    phases = {c[1].get("status", {}).get("phase") for c in cases()}
    assert {p.value for p in ph.Phase} <= phases


def test_the_chart_ships_the_same_check(tmp_path: Path) -> None:
    """The chart's file is the kustomize component's (a symlink, resolved when the chart is packaged)."""
    assert (REPO / "charts/memsync/files/argocd-health.lua").resolve() == HEALTH.resolve()


@pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl (which ships kustomize) is not installed"
)
def test_the_component_merges_the_check_into_argocd_cm(tmp_path: Path) -> None:
    """manifests/argocd added to a kustomization that installs Argo CD's argocd-cm: the key is merged in,
    the ConfigMap's own keys stay."""
    (tmp_path / "argocd-cm.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "argocd-cm", "namespace": "argocd"},
                "data": {"url": "https://argocd.example.com"},
            }
        )
    )
    component = os.path.relpath(REPO / "manifests" / "argocd", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["argocd-cm.yaml"], "components": [component]})
    )
    out = subprocess.run(
        ["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    (cm,) = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert cm["data"] == {"url": "https://argocd.example.com", KEY: HEALTH.read_text()}
