"""The cluster tier (``make cluster-test``; part of ``make test`` where Go is installed): a real control plane
built from the pinned Go modules (``make controlplane``) and the process kubelet, started once per pytest
session by the same code as ``make cluster-up``; memsync deployed as users deploy it.

Every test that uses the ``cluster`` fixture is skipped, with the reason, when the binaries are not built,
or when this is not root on Linux with ``ip``, ``nsenter`` and ``unshare`` (the kubelet makes network and
mount namespaces).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import RunningStoreServer
from support.k8s_scenarios import mark_tier, record_phase_reports

from .tier.__main__ import ClusterInfo, spawn_serve, stop_serve, wait_ready
from .tier.controlplane import built_binaries, free_port

REPO = Path(__file__).resolve().parents[2]
SYSTEM_NS = "memsync-system"
SMEM = "sessionmemories.agents.memsync.dev"


def missing_prerequisite() -> str | None:
    if os.geteuid() != 0:
        return "the cluster tier needs root (the process kubelet makes network and mount namespaces)"
    for tool in ("ip", "nsenter", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"the cluster tier needs `{tool}` on PATH"
    bin_dir, why = built_binaries()
    return why if bin_dir is None else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    # Only the tests that need the running cluster; the kubelet's pure logic is tested everywhere.
    ours = [
        item for item in items if here in item.path.parents and "cluster" in getattr(item, "fixturenames", ())
    ]
    if ours:
        mark_tier(ours, pytest.mark.cluster, missing_prerequisite())


pytest_runtest_makereport = record_phase_reports

#: Figures the scenarios measure (a takeover's time): printed in the summary of the run, pass or fail.
MEASURED: list[str] = []


@pytest.fixture
def measured() -> list[str]:
    return MEASURED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if MEASURED:
        terminalreporter.section("measured on the cluster tier")
        for line in MEASURED:
            terminalreporter.write_line(line)


@dataclass
class Cluster:
    info: ClusterInfo

    @property
    def state(self) -> Path:
        return Path(self.info.state_dir)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> str:
        proc = subprocess.run(
            [self.info.kubectl, "--kubeconfig", self.info.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=REPO,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args[:4])}... exited {proc.returncode}:\n{proc.stderr}")
        return proc.stdout

    def run_kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.info.kubectl, "--kubeconfig", self.info.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=REPO,
        )

    def get(self, *args: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json"))
        return result

    def get_or_none(self, *args: str) -> dict[str, Any] | None:
        proc = self.run_kubectl("get", *args, "-o", "json")
        if proc.returncode != 0:
            if "NotFound" in proc.stderr:
                return None
            raise AssertionError(proc.stderr)
        result: dict[str, Any] = json.loads(proc.stdout)
        return result

    def apply(self, obj: dict[str, Any]) -> None:
        """Server-side apply from stdin: secret values never appear on a command line."""
        self.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))

    def wait(self, what: str, predicate: Any, timeout: float = 120, explain: Any = None) -> Any:
        end = time.monotonic() + timeout
        value = None
        while time.monotonic() < end:
            value = predicate()
            if value:
                return value
            time.sleep(0.5)
        story = explain() if explain is not None else ""
        raise AssertionError(f"{what}: not reached in {timeout:.0f} s (last: {value!r})\n{story}")

    def pod_logs(self, namespace: str, pod: str, container: str) -> str:
        """What a container wrote, read from the process kubelet's state (there is no kubelet API)."""
        base = self.state / "pods"
        parts = []
        for pod_dir in sorted(base.glob(f"{namespace}_{pod}_*")):
            for name in ("log", "exec.log"):
                path = pod_dir / "containers" / container / name
                if path.exists():
                    parts.append(path.read_text(errors="replace"))
        return "".join(parts)

    def dump(self) -> str:
        parts = [
            self.kubectl("get", "nodes,pods,smem,events", "-A", "-o", "wide", check=False),
            self.kubectl("get", "smem", "-A", "-o", "yaml", check=False),
        ]
        for pod_dir in sorted((self.state / "pods").glob(f"{SYSTEM_NS}_memsync-operator-*")):
            log = pod_dir / "containers" / "operator" / "log"
            if log.exists():
                parts.append(
                    f"--- operator log {pod_dir.name} ---\n{log.read_text(errors='replace')[-8000:]}"
                )
        return "\n".join(parts)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    state = tmp_path_factory.mktemp("cluster")
    proc = spawn_serve(state)
    try:
        info = wait_ready(state, proc)
        yield Cluster(info)
    finally:
        stop_serve(proc.pid)
        proc.wait(timeout=30)


@pytest.fixture(scope="session")
def deployed(cluster: Cluster) -> Cluster:
    """memsync deployed as users deploy it: ``kubectl apply --server-side -k manifests/overlays/kind``."""
    cluster.kubectl("apply", "--server-side", "-k", str(REPO / "manifests/overlays/kind"), timeout=180)
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{SMEM}", "--timeout=60s")
    cluster.kubectl(
        "-n", SYSTEM_NS, "rollout", "status", "deployment/memsync-operator", "--timeout=180s", timeout=200
    )
    return cluster


@contextlib.contextmanager
def store_on_bridge(
    cluster: Cluster, directory: Path, extra_args: tuple[str, ...] = ()
) -> Iterator[RunningStoreServer]:
    """A store server on the tier's bridge address, where the sandbox Pods reach it; stopped at the end."""
    host = cluster.info.gateway
    port = free_port(host)
    server = RunningStoreServer(
        url=f"http://{host}:{port}",
        admin_key="sk-ant-admin-test-" + secrets.token_urlsafe(24),
        db_path=directory / "store.db",
        log_path=directory / "server.log",
        port=port,
        extra_args=("--host", host, *extra_args),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tier_store(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStoreServer]:
    """The store server the scenarios share."""
    with store_on_bridge(cluster, tmp_path_factory.mktemp("tier-store")) as server:
        yield server


@pytest.fixture
def namespace(request: pytest.FixtureRequest, deployed: Cluster) -> Iterator[str]:
    """A fresh namespace with the restricted Pod Security level enforced, and its ``default`` SA made."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    deployed.apply(
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
    deployed.wait(
        "the default ServiceAccount", lambda: deployed.get_or_none("-n", name, "serviceaccount", "default")
    )
    try:
        yield name
    finally:
        call = getattr(request.node, "rep_call", None)
        if call is not None and call.failed:
            print(f"\n===== cluster state after {request.node.name} =====\n{deployed.dump()}")
        deployed.kubectl("delete", "namespace", name, "--wait=false", check=False)
