"""The operator as a self-hosted environment on the real control plane: deployed as users deploy it, with
the AgentEnvironment add-on (``kubectl apply -k manifests/environments``, ``--environments`` through
``MEMSYNC_ENVIRONMENTS``), it polls the tier's store server's work queue, claims a session, and its sandbox
Pod runs ``memsync session run``: the scripted write lands in the store, the work item is stopped after the
last memory write, the SessionMemory is Succeeded and then removed with its Secret after the retention.
Against a store server whose first-heartbeat window is shorter than the Pod takes to start, the operator's
own heartbeats hold the item until the runner takes the lease over, and the session is still served."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import RunningStoreServer
from memsync.controller.environment import decisions as d
from memsync.controller.sessionmemory.pod import pod_name_for
from memsync.crd import agentenv as a
from memsync.crd.models import sandbox_template
from support.environments import (
    ScriptedSession,
    memories_of,
    scripted_session,
    stopped_after_the_last_write,
    work_item,
)

from .conftest import REPO, SYSTEM_NS, Cluster, store_on_bridge
from .scenario import IMAGE, container, pod_status, smem_status, wait_phase

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

RETENTION_S = 20


@pytest.fixture(scope="module")
def environments(deployed: Cluster) -> Cluster:
    """The operator with the AgentEnvironment add-on: its RBAC, and ``--environments`` (a new rollout)."""
    deployed.kubectl("apply", "--server-side", "-k", str(REPO / "manifests/environments"))
    deployed.kubectl("wait", "--for=condition=Established", f"crd/{a.CRD_NAME}", "--timeout=60s")
    deployed.kubectl(
        "-n", SYSTEM_NS, "set", "env", "deployment/memsync-operator", "MEMSYNC_ENVIRONMENTS=true"
    )
    deployed.kubectl(
        "-n", SYSTEM_NS, "rollout", "status", "deployment/memsync-operator", "--timeout=180s", timeout=200
    )
    return deployed


def serve_one_session(
    cluster: Cluster, store: RunningStoreServer, namespace: str, content: str, *, runner_delay_s: int = 0
) -> tuple[httpx.Client, ScriptedSession, str, dict[str, Any]]:
    """An AgentEnvironment against ``store`` serving one scripted session to its end; the admin client, the
    session, the SessionMemory's name and its sandbox container's terminated state. The sandbox's runner
    starts ``runner_delay_s`` after its container (a Pod slow to start: a large image, many stores)."""
    admin = httpx.Client(base_url=store.url, headers={"x-api-key": store.admin_key}, timeout=30)
    scripted = scripted_session(admin, "/mnt/memory/{slug}/hello.md", content)
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "env-key", "namespace": namespace},
            "data": {"key": base64.b64encode(scripted.key.encode()).decode()},
        }
    )
    runner = ["memsync", "session", "run", "--max-idle", "5", "--final-timeout", "60"]
    if runner_delay_s:
        runner = ["sh", "-c", f"sleep {runner_delay_s} && exec {' '.join(runner)}"]
    body: dict[str, Any] = {
        "apiVersion": a.API_VERSION,
        "kind": a.KIND,
        "metadata": {"name": "tier-env", "namespace": namespace},
        "spec": {
            "environmentId": scripted.environment_id,
            "environmentKeySecretRef": {"name": "env-key", "key": "key"},
            "apiBaseUrl": store.url,
            "maxConcurrentSessions": 2,
            "finishedRetentionSeconds": RETENTION_S,
            "sync": {"intervalSeconds": 3600, "finalFlushSeconds": 30},  # only the final flush uploads
            "template": sandbox_template({"image": IMAGE, "command": runner}),
        },
    }
    cluster.apply(body)

    name = d.object_name(scripted.session_id)
    cluster.wait(
        "the claimed session's SessionMemory",
        lambda: cluster.get_or_none("-n", namespace, "smem", name),
        explain=cluster.dump,
    )
    status = wait_phase(cluster, namespace, name, ("Succeeded", "Failed"))
    pod = pod_name_for(name)
    explain = cluster.pod_logs(namespace, pod, "sandbox")[-4000:] + cluster.dump()
    assert status["phase"] == "Succeeded", explain
    sandbox = container(pod_status(cluster, namespace, pod), "sandbox")["state"]["terminated"]
    assert sandbox["exitCode"] == 0, explain

    # the write is in the store, uploaded by the final flush (the interval never came), before the stop
    assert memories_of(admin, scripted) == [("/hello.md", content)], explain
    cluster.wait(
        "the work item stopped",
        lambda: work_item(admin, scripted)["state"] == "stopped",
        timeout=60,
    )
    stopped_after_the_last_write(admin, scripted)
    return admin, scripted, name, sandbox


def test_the_operator_serves_a_session_from_claim_to_stop(
    environments: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    cluster = environments
    admin, scripted, name, _ = serve_one_session(cluster, tier_store, namespace, "from the tier\n")

    # the AgentEnvironment counted it; the SessionMemory and its Secret go after the retention
    aenv = cluster.wait(
        "the AgentEnvironment's count of succeeded sessions",
        lambda: (
            (s := (cluster.get("-n", namespace, "aenv", "tier-env").get("status") or {})).get("succeeded")
            == 1
            and s
        ),
        timeout=60,
    )
    assert (aenv["phase"], aenv["claimed"], aenv["active"]) == ("Polling", 1, 0)
    cluster.wait(
        "the SessionMemory removed after its retention",
        lambda: (
            smem_status(cluster, namespace, name) == {}
            and cluster.get_or_none("-n", namespace, "smem", name) is None
        ),
        timeout=RETENTION_S + 90,
        explain=cluster.dump,
    )
    assert cluster.get_or_none("-n", namespace, "secret", d.secret_name(scripted.session_id)) is None
    admin.close()


FIRST_HEARTBEAT_S = 1
RUNNER_DELAY_S = 3


def test_a_first_heartbeat_window_shorter_than_the_pod_start_still_serves_the_session(
    environments: Cluster, namespace: str, tmp_path: Path
) -> None:
    """The store server re-queues an acknowledged item that is not heartbeated within 1 s: far less than a
    sandbox Pod needs to be scheduled, mount its stores and start its runner (here the runner waits 3 s after
    its container starts, since the tier's process kubelet starts a Pod in under 2 s). The operator heartbeats
    the item from its acknowledgement until the runner takes the lease over, so the session is served."""
    cluster = environments
    window = ("--first-heartbeat-window", str(FIRST_HEARTBEAT_S))
    with store_on_bridge(cluster, tmp_path, window) as store:
        # the runner starts RUNNER_DELAY_S after its container, itself started after the acknowledgement: well
        # after the window has closed, so only the operator's hold can have kept the item for it
        admin, _, _, _ = serve_one_session(
            cluster, store, namespace, "held through the start\n", runner_delay_s=RUNNER_DELAY_S
        )
        admin.close()
