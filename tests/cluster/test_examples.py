"""The quickstart in examples/ runs as written on this control plane: its script makes the store and the
Secret, applies the SessionMemory, and the sandbox's file lands in the store."""

from __future__ import annotations

import asyncio
import os
import subprocess

from conftest import RunningStoreServer
from memsync.api.models import Memory

from .conftest import REPO, Cluster
from .scenario import FINAL, wait_phase

NAMESPACE = "memsync-quickstart"


async def store_contents(server: RunningStoreServer, store_id: str) -> dict[str, str]:
    async with server.admin_client() as admin:
        return {
            m.path: m.content
            async for m in admin.list_memories(store_id, view="full")
            if isinstance(m, Memory)
        }


def test_quickstart_lands_a_file_in_the_store(deployed: Cluster, tier_store: RunningStoreServer) -> None:
    env = {
        **os.environ,
        "STORE_URL": tier_store.url,
        "MEMSYNC_ADMIN_KEY": tier_store.admin_key,
        "KUBECTL": deployed.info.kubectl,
        "KUBECONFIG": deployed.info.kubeconfig,
        "TIMEOUT": "240",
    }
    try:
        proc = subprocess.run(
            [str(REPO / "examples/quickstart/run.sh")],
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
        )
        assert proc.returncode == 0, f"run.sh exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        ids = dict(part.split("=", 1) for part in proc.stdout.strip().splitlines()[-1].split() if "=" in part)
        files = asyncio.run(store_contents(tier_store, ids["store_id"]))
        assert list(files) == ["/hello.md"]
        assert files["/hello.md"].startswith("# Hello from the quickstart\n")
        assert tier_store.admin_key not in proc.stdout + proc.stderr

        # The sandbox exits after a minute: the session ends with a complete final flush.
        status = wait_phase(deployed, NAMESPACE, "quickstart", FINAL, timeout=240)
        assert status["phase"] == "Succeeded", status
        assert [store["memoryStoreId"] for store in status["stores"]] == [ids["store_id"]]
    finally:
        deployed.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
