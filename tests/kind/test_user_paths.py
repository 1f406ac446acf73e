"""What users do with memsync on a real cluster, on kind: GitOps (the operator never writes a field the
applier owns; deleting a session from the source flushes before the object goes), the README's quickstart as
written, and a self-hosted environment's session from claim to stop against the in-cluster store server."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from memsync.api.hashing import content_sha256
from memsync.controller.environment import decisions as d
from memsync.controller.sessionmemory.phases import INTERRUPTED
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
from support.k8s_scenarios import FINAL, make_store, store_files

from .conftest import (
    CLUSTER,
    IN_CLUSTER_STORE_URL,
    REPO,
    SYSTEM_NS,
    KindEnv,
    dump_cluster_state,
    kubectl,
    kubectl_json,
    load_image,
    node_has_image,
    overlay_objects,
    run,
)
from .scenario import LogFollower, create_secret, evict, mint, ready_reason, sid, smem_status, wait_phase

pytestmark = [pytest.mark.kind, pytest.mark.timeout(600, func_only=True)]

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 120) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s\n{dump_cluster_state()}")
        time.sleep(1)


def server_side_diff(objects: list[dict[str, Any]]) -> str:
    """``kubectl diff --server-side`` of ``objects`` as the applier ("kubectl") would apply them again: empty
    when nobody else changed a field the applier owns."""
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    proc = run(
        "kubectl", "--context", f"kind-{CLUSTER}", "diff", "--server-side", "-f", "-", input=body, check=False
    )
    assert proc.returncode in (0, 1), f"kubectl diff failed ({proc.returncode}): {proc.stderr}"
    return proc.stdout


# --------------------------------------------------------------------------------------------------------
# GitOps
# --------------------------------------------------------------------------------------------------------


async def test_the_operator_never_writes_what_the_applier_owns(kind_env: KindEnv, namespace: str) -> None:
    objects = overlay_objects()
    kubectl(
        "apply",
        "--server-side",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
    )
    kubectl(
        "-n", SYSTEM_NS, "rollout", "status", "deployment/memsync-operator", "--timeout=300s", timeout=330
    )

    store = await make_store(kind_env, "gitops", {})
    session = sid()
    create_secret(namespace, "work", mint(kind_env, [(store, "read_write")], session))
    script = (
        "trap 'echo bye > /mnt/memory/g/bye.md; exit 0' TERM; "
        "echo hello > /mnt/memory/g/hello.md; sleep 600 & wait"
    )
    smem = {
        "apiVersion": "agents.memsync.dev/v1alpha2",
        "kind": "SessionMemory",
        "metadata": {"name": "gitops", "namespace": namespace},
        "spec": {
            "sessionId": session,
            "workItemSecretRef": {"name": "work", "key": "work-secret"},
            "apiBaseUrl": IN_CLUSTER_STORE_URL,
            "stores": [{"memoryStoreId": store, "name": "g"}],
            "sync": {"intervalSeconds": 5},
            "template": sandbox_template(
                {"image": kind_env.image, "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", script]}
            ),
        },
    }
    kubectl("apply", "--server-side", "-f", "-", input=json.dumps(smem))
    await wait_phase(namespace, "gitops", ("Running",))
    live = kubectl_json("-n", namespace, "get", "smem", "gitops")
    assert live["status"]["phase"] == "Running" and live["metadata"].get("finalizers"), live["metadata"]

    assert server_side_diff(objects) == ""
    assert server_side_diff([smem]) == ""

    # Deleting the session from the source: the object goes only after the final flush.
    kubectl("delete", "-f", "-", "--wait=true", "--timeout=240s", input=json.dumps(smem), timeout=260)
    files = await store_files(kind_env, store)
    assert files == {"/hello.md": content_sha256("hello\n"), "/bye.md": content_sha256("bye\n")}


# --------------------------------------------------------------------------------------------------------
# the quickstart
# --------------------------------------------------------------------------------------------------------

QUICKSTART_NS = "memsync-quickstart"


def node_image_like(name: str) -> None:
    """The quickstart's sandbox image in the node: pulled where a registry answers, else a Debian image made
    on this machine under that name (it needs only sh, printf, date and sleep)."""
    if node_has_image(name):
        return
    present = run("docker", "image", "inspect", name, check=False).returncode == 0
    if not present and run("docker", "pull", "-q", name, check=False, timeout=120).returncode != 0:
        base = run(str(REPO / "images/debian-base.sh"), "debian", timeout=900).stdout.strip()
        run("docker", "tag", base, name)
    load_image(name)


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(run("kind", "get", "kubeconfig", "--name", CLUSTER).stdout)
    return path


async def test_the_quickstart_as_the_readme_gives_it(kind_env: KindEnv, kubeconfig: Path) -> None:
    node_image_like("busybox:1.37")
    env = {
        "STORE_URL": kind_env.store_url,
        "MEMSYNC_ADMIN_KEY": kind_env.admin_key,
        "KUBECONFIG": str(kubeconfig),
        "TIMEOUT": "240",
    }
    try:
        proc = run(str(REPO / "examples/quickstart/run.sh"), env=env, check=False, timeout=400)
        assert proc.returncode == 0, f"run.sh exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        assert kind_env.admin_key not in proc.stdout + proc.stderr
        ids = dict(part.split("=", 1) for part in proc.stdout.strip().splitlines()[-1].split() if "=" in part)
        async with kind_env.admin_client() as admin:
            memories = [m async for m in admin.list_memories(ids["store_id"], view="full")]
        assert [m.path for m in memories] == ["/hello.md"]
        assert memories[0].content.startswith("# Hello from the quickstart\n")  # type: ignore[union-attr]
        # The README's next step: deleting the session flushes, then the object goes (the sandbox handles
        # SIGTERM, so this takes seconds, not the grace period).
        started = time.monotonic()
        kubectl(
            "-n", QUICKSTART_NS, "delete", "smem", "quickstart", "--wait=true", "--timeout=120s", timeout=140
        )
        assert time.monotonic() - started < 60
    finally:
        kubectl("delete", "namespace", QUICKSTART_NS, "--wait=false", check=False)


# --------------------------------------------------------------------------------------------------------
# a self-hosted environment
# --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def environments(kind_env: KindEnv) -> Iterator[KindEnv]:
    """The operator with the AgentEnvironment add-on: its RBAC, and ``--environments`` (a new rollout); the
    overlay as applied is restored afterwards."""
    kubectl("apply", "--server-side", "-k", str(REPO / "manifests/environments"))
    kubectl("wait", "--for=condition=Established", f"crd/{a.CRD_NAME}", "--timeout=60s")
    kubectl("-n", SYSTEM_NS, "set", "env", "deployment/memsync-operator", "MEMSYNC_ENVIRONMENTS=true")
    kubectl(
        "-n", SYSTEM_NS, "rollout", "status", "deployment/memsync-operator", "--timeout=300s", timeout=330
    )
    try:
        yield kind_env
    finally:
        kubectl("-n", SYSTEM_NS, "set", "env", "deployment/memsync-operator", "MEMSYNC_ENVIRONMENTS-")
        kubectl(
            "-n", SYSTEM_NS, "rollout", "status", "deployment/memsync-operator", "--timeout=300s", timeout=330
        )


def apply_environment(
    env: KindEnv, namespace: str, name: str, scripted: ScriptedSession, runner: list[str]
) -> str:
    """The scripted session's environment as an AgentEnvironment whose sandbox runs ``runner``, with the
    periodic sync off (only the final flush uploads); returns the name of the session's SessionMemory."""
    kubectl(
        "apply", "-f", "-",
        input=json.dumps({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-key", "namespace": namespace},
            "data": {"key": base64.b64encode(scripted.key.encode()).decode()},
        }),
    )  # fmt: skip
    kubectl(
        "apply", "-f", "-",
        input=json.dumps({
            "apiVersion": a.API_VERSION,
            "kind": a.KIND,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "environmentId": scripted.environment_id,
                "environmentKeySecretRef": {"name": f"{name}-key", "key": "key"},
                "apiBaseUrl": IN_CLUSTER_STORE_URL,
                "maxConcurrentSessions": 2,
                "finishedRetentionSeconds": 20,
                "sync": {"intervalSeconds": 3600, "finalFlushSeconds": 30},
                "template": sandbox_template(
                    {"image": env.image, "imagePullPolicy": "IfNotPresent", "command": runner}
                ),
            },
        }),
    )  # fmt: skip
    smem = d.object_name(scripted.session_id)
    wait_for(
        "the claimed session's SessionMemory",
        lambda: kubectl("-n", namespace, "get", "smem", smem, "--ignore-not-found", check=False).strip(),
    )
    return smem


def test_an_environment_session_from_claim_to_stop(environments: KindEnv, namespace: str) -> None:
    env = environments
    admin = httpx.Client(base_url=env.store_url, headers={"x-api-key": env.admin_key}, timeout=30)
    scripted = scripted_session(admin, "/mnt/memory/{slug}/hello.md", "from kind\n")
    runner = ["memsync", "session", "run", "--max-idle", "5", "--final-timeout", "60"]
    name = apply_environment(env, namespace, "kind-env", scripted, runner)
    status = wait_for(
        "the session's end",
        lambda: (st := smem_status(namespace, name)).get("phase") in FINAL and st,
        timeout=300,
    )
    sandbox_log = kubectl("-n", namespace, "logs", pod_name_for(name), "-c", "sandbox", check=False)
    assert status["phase"] == "Succeeded", f"{status}\n{sandbox_log[-4000:]}"
    assert memories_of(admin, scripted) == [("/hello.md", "from kind\n")]
    wait_for(
        "the work item stopped",
        lambda: work_item(admin, scripted)["state"] == "stopped",
        timeout=60,
    )
    stopped_after_the_last_write(admin, scripted)
    aenv = wait_for(
        "the AgentEnvironment's count of succeeded sessions",
        lambda: (
            (s := (kubectl_json("-n", namespace, "get", "aenv", "kind-env").get("status") or {})).get(
                "succeeded"
            )
            == 1
            and s
        ),
        timeout=60,
    )
    assert (aenv["phase"], aenv["claimed"], aenv["active"]) == ("Polling", 1, 0)
    admin.close()


def test_an_environment_session_evicted_mid_turn_flushes_then_stops_its_item(
    environments: KindEnv, namespace: str
) -> None:
    """The runner is its sandbox's PID 1 (``memsync session run``), so it has a SIGTERM handler or it would
    never be signalled: an eviction mid-turn ends the session the way its own end does (the final flush
    through the sidecar, then the item's stop) within seconds, not at the end of the grace period, and the
    session says it was interrupted."""
    env = environments
    admin = httpx.Client(base_url=env.store_url, headers={"x-api-key": env.admin_key}, timeout=30)
    scripted = scripted_session(admin, "/mnt/memory/{slug}/kept.md", "kept\n", pending=True)
    runner = ["memsync", "session", "run", "--max-idle", "600", "--final-timeout", "60"]
    name = apply_environment(env, namespace, "evict-env", scripted, runner)
    pod_name = pod_name_for(name)
    wait_for(
        "the write's tool result",
        lambda: any(
            e.get("tool_use_id") == "toolu_1"
            for e in admin.get(f"/v1/sessions/{scripted.session_id}/events").json()["data"]
        ),
        timeout=300,
    )
    logs = LogFollower(namespace, pod_name)
    grace = kubectl_json("-n", namespace, "get", "pod", pod_name)["spec"]["terminationGracePeriodSeconds"]
    started = time.monotonic()
    evict(namespace, pod_name)
    sandbox_log = logs.text()
    took = time.monotonic() - started
    assert "SIGTERM received: stopping the session runner" in sandbox_log, sandbox_log[-4000:]
    assert "final sync and flush done" in sandbox_log, sandbox_log[-4000:]
    assert took < 30 < grace, f"the sandbox ended {took:.1f} s after the eviction (grace {grace} s)"
    assert memories_of(admin, scripted) == [("/kept.md", "kept\n")]  # only the final flush uploads
    wait_for("the work item stopped", lambda: work_item(admin, scripted)["state"] == "stopped", timeout=60)
    stopped_after_the_last_write(admin, scripted)
    status = wait_for(
        "the session's end", lambda: (st := smem_status(namespace, name)).get("phase") in FINAL and st
    )
    assert ready_reason(status) == INTERRUPTED, status
    admin.close()
