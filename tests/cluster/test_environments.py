"""The operator as a self-hosted environment on the real control plane: deployed as users deploy it, with
the AgentEnvironment add-on (``kubectl apply -k manifests/environments``, ``--environments`` through
``MEMSYNC_ENVIRONMENTS``), it polls the tier's store server's work queue, claims a session, and its sandbox
Pod runs ``memsync session run``: the scripted write lands in the store, the work item is stopped after the
last memory write, the SessionMemory is Succeeded and then removed with its Secret after the retention."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from conftest import RunningStoreServer
from memsync.controller.environment import decisions as d
from memsync.controller.pod import pod_name_for
from memsync.crd import agentenv as a
from memsync.crd.models import sandbox_template
from support.environments import memories_of, scripted_session, stopped_after_the_last_write

from .conftest import REPO, SYSTEM_NS, Cluster
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


def test_the_operator_serves_a_session_from_claim_to_stop(
    environments: Cluster, tier_store: RunningStoreServer, namespace: str
) -> None:
    cluster = environments
    admin = httpx.Client(base_url=tier_store.url, headers={"x-api-key": tier_store.admin_key}, timeout=30)
    scripted = scripted_session(admin, "/mnt/memory/{slug}/hello.md", "from the tier\n")
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "env-key", "namespace": namespace},
            "data": {"key": base64.b64encode(scripted.key.encode()).decode()},
        }
    )
    runner = ["memsync", "session", "run", "--max-idle", "5", "--final-timeout", "60"]
    body: dict[str, Any] = {
        "apiVersion": a.API_VERSION,
        "kind": a.KIND,
        "metadata": {"name": "tier-env", "namespace": namespace},
        "spec": {
            "environmentId": scripted.environment_id,
            "environmentKeySecretRef": {"name": "env-key", "key": "key"},
            "apiBaseUrl": tier_store.url,
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
    assert memories_of(admin, scripted) == [("/hello.md", "from the tier\n")], explain
    cluster.wait(
        "the work item stopped",
        lambda: (
            admin.get(f"/v1/environments/{scripted.environment_id}/work/{scripted.work_id}").json()["state"]
            == "stopped"
        ),
        timeout=60,
    )
    stopped_after_the_last_write(admin, scripted)

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
