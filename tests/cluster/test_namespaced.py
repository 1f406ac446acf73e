"""Namespaced mode on a real control plane: the operator serves two namespaces with the namespaced RBAC
(``manifests/overlays/namespaced``'s Roles in each, its small cluster-wide grant), as its own ServiceAccount,
run here as a process of this machine while the deployed operator is scaled to zero.

- a SessionMemory that ended keeps no finalizer: it is deleted at once with no operator running at all;
- one served namespace is deleted with a session running in it: its RoleBindings go first, yet the session's
  finalizer is removed and the namespace goes, and the Pod's final flush (run by the namespace's deletion)
  loses nothing the agent wrote;
- the operator, restarted while that namespace is gone (every request there answers 403), keeps running,
  logs and reports it, and serves the other namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import RunningStoreServer
from memsync.controller.sessionmemory.pod import pod_name_for
from memsync.crd.models import FINALIZER

from .conftest import REPO, SYSTEM_NS, Cluster
from .scenario import (
    FINAL,
    agent,
    agent_report,
    assert_final_store,
    assert_store_holds_final_files,
    make_store,
    start_session,
    steady_session,
    store_files,
    wait_phase,
)
from .test_rbac import grant_namespaced

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


@contextlib.contextmanager
def namespaced_operator_account(cluster: Cluster, namespaces: list[str]) -> Iterator[str]:
    """A ServiceAccount of its own granted what namespaced mode grants, in ``namespaces``: a kubeconfig."""
    suffix = uuid.uuid4().hex[:6]
    system = f"sys-{suffix}"
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": system}})
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "memsync-operator", "namespace": system},
        }
    )
    grant = grant_namespaced(cluster, system, namespaces, suffix)
    token = cluster.kubectl("-n", system, "create", "token", "memsync-operator", "--duration", "2h").strip()
    admin = yaml.safe_load(Path(cluster.info.kubeconfig).read_text())
    server = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "tier", "cluster": server}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "tier", "context": {"cluster": "tier", "user": "operator"}}],
        "current-context": "tier",
    }
    path = cluster.state / f"namespaced-operator-{suffix}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    try:
        yield str(path)
    finally:
        cluster.kubectl("delete", "clusterrolebinding,clusterrole", grant, check=False)
        cluster.kubectl("delete", "namespace", system, "--wait=false", check=False)


@contextlib.contextmanager
def deployed_operator_stopped(cluster: Cluster) -> Iterator[None]:
    """The deployed (cluster-wide) operator scaled to zero, and back to its replicas afterwards."""
    replicas = cluster.get("-n", SYSTEM_NS, "deployment", "memsync-operator")["spec"]["replicas"]
    cluster.kubectl("-n", SYSTEM_NS, "scale", "deployment/memsync-operator", "--replicas=0")
    cluster.wait(
        "the deployed operator gone",
        lambda: (
            not cluster.get("-n", SYSTEM_NS, "pods", "-l", "app.kubernetes.io/name=memsync-operator")["items"]
        ),
        120,
    )
    try:
        yield
    finally:
        cluster.kubectl("-n", SYSTEM_NS, "scale", "deployment/memsync-operator", f"--replicas={replicas}")
        cluster.kubectl(
            "-n", SYSTEM_NS, "rollout", "status", "deployment/memsync-operator", "--timeout=180s", timeout=200
        )


class LocalOperator:
    """``memsync operator --namespace ...`` as a process of this machine (its log in the tier's state)."""

    def __init__(self, kubeconfig: str, namespaces: list[str], log: Path) -> None:
        # one process, so no leader election (its ServiceAccount has no Lease to hold)
        self.argv = [
            sys.executable, "-m", "memsync", "operator", "--agent-image", "memsync:kind", "--no-leader-elect",
        ]  # fmt: skip
        for ns in namespaces:
            self.argv += ["--namespace", ns]
        self.env = {**os.environ, "KUBECONFIG": kubeconfig, "MEMSYNC_LOG_FORMAT": "json"}
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=REPO
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out


def finalizers(cluster: Cluster, namespace: str, name: str) -> list[str]:
    obj = cluster.get_or_none("-n", namespace, "smem", name) or {}
    return list(obj.get("metadata", {}).get("finalizers") or [])


def plain_namespace(cluster: Cluster, name: str) -> None:
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                },
            },
        }
    )
    cluster.wait(
        "the default ServiceAccount", lambda: cluster.get_or_none("-n", name, "serviceaccount", "default")
    )


async def test_namespaced_mode_survives_a_namespace_deletion(
    deployed: Cluster, tier_store: RunningStoreServer, namespace: str, tmp_path: Path
) -> None:
    gone, kept = namespace, f"t-{uuid.uuid4().hex[:8]}"
    plain_namespace(deployed, kept)
    try:
        # A session that ended keeps no finalizer: with no operator at all it is deleted at once.
        ended_store = await make_store(tier_store, "ended", {})
        await start_session(
            deployed,
            tier_store,
            kept,
            "ended",
            stores=[(ended_store, "n", "read_write")],
            sandbox=agent("--duration", "2"),
        )
        assert wait_phase(deployed, kept, "ended", FINAL)["phase"] == "Succeeded"
        deployed.wait("no finalizer", lambda: FINALIZER not in finalizers(deployed, kept, "ended"), 60)
        with (
            namespaced_operator_account(deployed, [gone, kept]) as kubeconfig,
            deployed_operator_stopped(deployed),
        ):
            deployed.kubectl("-n", kept, "delete", "smem", "ended", "--timeout=20s", timeout=40)
            operator = LocalOperator(kubeconfig, [gone, kept], tmp_path / "operator.log")
            operator.start()
            try:
                await run_namespace_deletion(deployed, tier_store, operator, gone, kept)
            finally:
                operator.stop()
                print(f"--- namespaced operator log (tail) ---\n{operator.log.read_text()[-6000:]}")
    finally:
        deployed.kubectl("delete", "namespace", kept, "--wait=false", check=False)


async def run_namespace_deletion(
    cluster: Cluster, server: RunningStoreServer, operator: LocalOperator, gone: str, kept: str
) -> None:
    store = await make_store(server, "ns-deleted", {})
    pod = await steady_session(cluster, server, gone, "live", store=store, mount="n", linger=2, memories=3)
    started = time.monotonic()
    cluster.kubectl("delete", "namespace", gone, "--wait=true", "--timeout=240s", timeout=260)
    took = time.monotonic() - started
    assert cluster.get_or_none("namespace", gone) is None
    assert operator.alive(), "the operator exited"
    report = agent_report(cluster, gone, pod)
    assert report["interrupted"] is True
    await assert_store_holds_final_files(server, store, report, "n")
    print(f"namespace {gone} deleted in {took:.1f} s")

    # Restarted while that namespace is gone: every request there is forbidden (no RoleBinding left).
    operator.stop()
    operator.start()
    other = await make_store(server, "kept", {})
    await start_session(
        cluster, server, kept, "other", stores=[(other, "n", "read_write")], sandbox=agent("--duration", "3")
    )
    status = wait_phase(cluster, kept, "other", FINAL, timeout=240)
    assert status["phase"] == "Succeeded", status
    assert_final_store(
        await store_files(server, other), agent_report(cluster, kept, pod_name_for("other")), "n", status
    )
    cluster.wait(
        "the forbidden namespace logged",
        lambda: [
            line
            for line in operator.lines()
            if "forbids watching" in str(line.get("message")) and line.get("namespace") == gone
        ],
        180,
    )
    assert operator.alive(), "the operator exited on a forbidden namespace"
