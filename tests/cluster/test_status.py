"""``kubectl memsync status`` on the real control plane: kubectl finds the installed plugin on PATH and it
shows a live session (its stores in sync, read from the running sidecar), then the same session ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RunningStoreServer
from memsync.controller.sessionmemory.pod import pod_name_for

from .conftest import Cluster
from .scenario import make_store, smem_status, steady_session, wait_phase

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

BIN = Path(sys.executable).parent  # where kubectl-memsync is installed


def kubectl_memsync(cluster: Cluster, *args: str) -> str:
    # kubectl looks a plugin up only when its name comes before any flag; the kubeconfig goes by env.
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.run(
        [cluster.info.kubectl, "memsync", "status", *args],
        env={**os.environ, "PATH": path, "KUBECONFIG": cluster.info.kubeconfig},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl memsync status {' '.join(args)}: {proc.returncode}\n{proc.stderr}"
    return proc.stdout


async def test_status_shows_a_live_session(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    notes = await make_store(tier_store, "notes", {"/existing.md": "from the store\n"})
    await steady_session(
        deployed, tier_store, namespace, "live", store=notes, mount="notes", interval=0.5, linger=2
    )
    deployed.wait(
        "the Synced condition True (the operator read the sidecar's /status)",
        lambda: any(
            c["type"] == "Synced" and c["status"] == "True"
            for c in smem_status(deployed, namespace, "live").get("conditions", [])
        ),
        timeout=120,
        explain=deployed.dump,
    )

    listing = kubectl_memsync(deployed, "-n", namespace).splitlines()
    assert listing[0].split()[:3] == ["NAME", "PHASE", "STORES"]
    name, phase, stores, *_ = listing[1].split()
    assert (name, phase, stores) == ("live", "Running", "notes:in-sync")

    pod = pod_name_for("live")
    text = kubectl_memsync(deployed, "-n", namespace, "live")
    assert "Phase:     Running" in text
    assert f"Pod: {pod} (Running, node " in text
    assert "memsync-sync    sidecar   running      yes" in text
    assert "sandbox         main      running      yes" in text
    events = text.split("Events:\n", 1)[1]
    assert "SessionMemory/live" in events or f"Pod/{pod}" in events, text

    data = json.loads(kubectl_memsync(deployed, "-A", "--json"))
    mine = [i for i in data["items"] if i["namespace"] == namespace]
    assert [(i["name"], i["phase"], i["synced"]) for i in mine] == [("live", "Running", "True")]
    assert mine[0]["stores"][0]["storeId"] == notes and mine[0]["stores"][0]["memoriesMounted"] == 1

    # The sandbox Pod is deleted: the session ends with its final flush, and the status says so.
    deployed.kubectl("-n", namespace, "delete", "pod", pod, "--wait=false")
    final = wait_phase(deployed, namespace, "live", ("Succeeded", "Failed"), timeout=240)
    assert final["phase"] == "Succeeded", final
    listing = kubectl_memsync(deployed, "-n", namespace).splitlines()
    assert listing[1].split()[:3] == ["live", "Succeeded", "notes:flushed"]
