"""Live sync health on the real control plane: a store outage mid-session shows in ``kubectl get smem``.

The session's store server stops while the agent keeps writing: the ``Synced`` printer column turns False,
with the reason and the last error in the condition, and True again once the server is back; the session
then ends by deletion (the final flush) with every edit of the agent in the store.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Cluster, store_on_bridge
from .scenario import (
    agent_report,
    assert_store_holds_final_files,
    condition,
    make_store,
    printed,
    smem_status,
    steady_session,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def wait_synced(cluster: Cluster, namespace: str, name: str, value: str, timeout: float = 120) -> None:
    cluster.wait(
        f"kubectl get smem {name} shows Synced={value}",
        lambda: printed(cluster, namespace, name)["SYNCED"] == value,
        timeout,
        explain=cluster.dump,
    )


async def test_store_outage_turns_synced_false_then_true_and_loses_nothing(
    deployed: Cluster, namespace: str, tmp_path: Path
) -> None:
    # Its own store server: stopping it must not touch the other scenarios' server.
    with store_on_bridge(deployed, tmp_path) as server:
        store = await make_store(server, "outage", {})
        pod = await steady_session(
            deployed,
            server,
            namespace,
            "outage",
            store=store,
            mount="outage",
            interval=0.5,
            linger=2,
            memories=2,
            final_flush=30,
        )
        wait_synced(deployed, namespace, "outage", "True")

        server.stop()
        wait_synced(deployed, namespace, "outage", "False")
        synced = condition(smem_status(deployed, namespace, "outage"), "Synced")
        assert synced["reason"] == "SyncFailing", synced
        assert store in synced["message"] and "failed pass" in synced["message"], synced
        row = printed(deployed, namespace, "outage")
        assert (row["PHASE"], row["SYNCED"]) == ("Running", "False"), row

        server.start()
        wait_synced(deployed, namespace, "outage", "True")
        synced = condition(smem_status(deployed, namespace, "outage"), "Synced")
        assert synced["reason"] == "InSync", synced

        # The end: the deletion's final flush; every edit the agent made, the outage's included, is stored.
        deployed.kubectl(
            "-n", namespace, "delete", "smem", "outage", "--wait=true", "--timeout=240s", timeout=260
        )
        report = agent_report(deployed, namespace, pod)
        assert report["interrupted"] is True
        await assert_store_holds_final_files(server, store, report, "outage")
