"""``memsync status`` / ``kubectl memsync status`` as a real process against the emulated API server, with
the operator running a live session (the test plays the kubelet)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web
from smem_harness import (
    FAST,
    NAMESPACE,
    RUNNING_POD,
    Cluster,
    eventually,
    run_operator,
    serve_get,
    smem_body,
)

from memsync.contracts.health import StoreHealth, SyncHealth, encode_health
from memsync.contracts.report import StoreCounts
from memsync.controller.sessionmemory.pod import pod_name_for

SECRET_VALUE = "sk-ant-status-cli-do-not-print"
PLUGIN = Path(sys.executable).with_name("kubectl-memsync")


@asynccontextmanager
async def sidecar_status(health: SyncHealth) -> AsyncIterator[str]:
    """A sync sidecar's ``/status`` endpoint serving ``health``; yields its URL."""

    async def serve(_: web.Request) -> web.Response:
        return web.Response(body=encode_health(health), content_type="application/json")

    async with serve_get("/status", serve) as url:
        yield url


HEALTH = SyncHealth(
    healthy=False,
    stores={
        "memstore_01aa": StoreHealth(
            outcome="synced", last_success="2026-01-01T12:05:00Z", totals=StoreCounts(uploaded=3, conflicts=2)
        ),
        "memstore_02bb": StoreHealth(
            healthy=False, outcome="failed", last_error="503 overloaded", failing_passes=2
        ),
    },
)


async def run(config: Path, *args: str, program: str | None = None) -> tuple[int, str, str]:
    """The installed command in its own process (the emulator keeps serving from this loop)."""
    argv = [program] if program else [sys.executable, "-m", "memsync"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(config)
    proc = await asyncio.create_subprocess_exec(
        *argv, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_status_shows_a_live_session_in_list_detail_and_json(cluster: Cluster, tmp_path: Path) -> None:
    config = cluster.write_kubeconfig(tmp_path / "kubeconfig", NAMESPACE)
    await cluster.create_secret("work-secret", {"secret": base64.b64encode(SECRET_VALUE.encode()).decode()})
    pod_name = pod_name_for("s1")
    async with (
        sidecar_status(HEALTH) as url,
        run_operator(
            cluster, dataclasses.replace(FAST, health_interval=0.2, health_address=lambda _pod: url)
        ),
    ):
        await cluster.create_smem(smem_body("s1"))
        await eventually(lambda: cluster.pod(pod_name), what="the sandbox Pod")
        await cluster.set_pod_status(pod_name, RUNNING_POD)
        await eventually(lambda: cluster.smem_status("s1").get("phase") == "Running", what="Running")
        await eventually(
            lambda: any(c["type"] == "Synced" for c in cluster.smem_status("s1").get("conditions", [])),
            what="the Synced condition",
        )
        assert cluster.smem_status("s1")["phase"] == "Running"
        await eventually(lambda: cluster.event_reasons("s1"), what="an Event about s1")

        code, out, err = await run(config, "status", program=str(PLUGIN))
        assert code == 0, err
        header, row = out.splitlines()
        assert header.split()[:3] == ["NAME", "PHASE", "STORES"]
        name, phase, stores, *_, conflicts, _age = row.split()
        assert (name, phase, stores, conflicts) == (
            "s1",
            "Running",
            "user-preferences:in-sync,team-notes:failing",
            "2",
        )

        code, out, err = await run(config, "status", "s1")
        assert code == 0, err
        assert "Phase:     Running" in out
        assert f"Pod: {pod_name} (Running" in out
        assert "memsync-sync    sidecar   running" in out
        assert "memstore_02bb: 2 failed passes, last error: 503 overloaded" in out
        for reason in cluster.event_reasons("s1"):
            assert reason in out.split("Events:")[1]
        assert SECRET_VALUE not in out

        code, out, err = await run(config, "status", "s1", "--json")
        assert code == 0, err
        data = json.loads(out)
        assert data["summary"]["phase"] == "Running" and data["pod"]["name"] == pod_name
        assert {c["type"] for c in data["conditions"]} >= {"Ready", "StoresMounted", "Flushed"}
        assert [s["storeId"] for s in data["summary"]["stores"]] == ["memstore_01aa", "memstore_02bb"]

        code, out, err = await run(config, "status", "-A", "--json")
        assert code == 0, err
        assert [(i["namespace"], i["name"]) for i in json.loads(out)["items"]] == [(NAMESPACE, "s1")]


async def test_status_errors_name_what_is_missing(cluster: Cluster, tmp_path: Path) -> None:
    config = cluster.write_kubeconfig(tmp_path / "kubeconfig", NAMESPACE)
    code, out, err = await run(config, "status", "nope")
    assert code == 3 and f"SessionMemory 'nope' not found in namespace {NAMESPACE}" in err
    code, out, err = await run(config, "status", "-n", "elsewhere")
    assert code == 0 and out == "" and "No SessionMemories in namespace elsewhere" in err
    code, out, err = await run(config, "status", "-A", "-n", "x")
    assert code == 2 and "--all-namespaces excludes NAME and --namespace" in err
    code, out, err = await run(tmp_path / "missing", "status", "--kubeconfig", str(tmp_path / "missing"))
    assert code == 2 and "cannot use the kubeconfig" in err
