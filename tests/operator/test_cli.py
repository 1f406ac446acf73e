"""``memsync operator``: the command line, and the real process against the emulated API server."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import socket
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from click.testing import CliRunner
from smem_harness import NAMESPACE, Cluster, eventually, smem_body

from memsync import __version__
from memsync.cli import cli
from memsync.controller.kube import version_refusal
from memsync.controller.sessionmemory.pod import pod_name_for
from memsync.crd.schema import build_crd, render_crd_yaml


def test_crd_prints_the_checked_in_crd() -> None:
    result = CliRunner().invoke(cli, ["operator", "crd"])
    assert result.exit_code == 0, result.output
    assert result.output == render_crd_yaml()
    assert yaml.safe_load(result.output) == build_crd()


def test_run_requires_an_agent_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMSYNC_AGENT_IMAGE", raising=False)
    result = CliRunner().invoke(cli, ["operator", "run", "--namespace", "agents"])
    assert result.exit_code == 2
    assert "--agent-image" in result.output


def test_namespace_and_all_namespaces_exclude_each_other() -> None:
    result = CliRunner().invoke(cli, ["operator", "-n", "agents", "--all-namespaces", "--agent-image", "x"])
    assert result.exit_code == 2
    assert "exclude each other" in result.output


def test_there_is_no_peering_flag() -> None:
    """One replica, standalone: kopf's peering would pause equal-priority replicas but not memsync's own
    periodic loops, so the flag is gone rather than half-working (docs/operations.md)."""
    result = CliRunner().invoke(cli, ["operator", "--peering", "memsync", "--agent-image", "x"])
    assert result.exit_code == 2
    assert "No such option '--peering'" in result.output


async def test_the_operator_refuses_to_start_on_a_kubernetes_older_than_1_29(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.kmock.server_version = ("1", "28+")  # type: ignore[attr-defined]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(KUBECONFIG=str(cluster.write_kubeconfig(tmp_path / "kubeconfig")), MEMSYNC_LOG_FORMAT="json")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "memsync",
        "operator",
        "--namespace",
        NAMESPACE,
        "--agent-image",
        "registry.test/memsync:cli",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output = (await asyncio.wait_for(proc.communicate(), timeout=60))[0].decode()
    assert proc.returncode == 1, output
    assert "the Kubernetes API server is v1.28.0; memsync needs 1.33 or newer" in output
    assert "unsupported Kubernetes version" in output  # the error log line, not only the exit message
    # It never started handling: no watch of SessionMemories was opened.
    assert not any("sessionmemories" in str(r.url) for r in list(cluster.kmock))


@pytest.mark.parametrize(
    ("info", "refused"),
    [
        ({"major": "1", "minor": "28", "gitVersion": "v1.28.15"}, True),
        ({"major": "1", "minor": "27+", "gitVersion": "v1.27.16-eks-a18cd3a"}, True),
        ({"major": "", "minor": "", "gitVersion": "v1.26.4+k3s1"}, True),
        ({"major": "1", "minor": "29", "gitVersion": "v1.29.0"}, True),
        ({"major": "1", "minor": "32", "gitVersion": "v1.32.11"}, True),  # never got the kubelet fix
        ({"major": "1", "minor": "33", "gitVersion": "v1.33.5"}, True),
        ({"major": "1", "minor": "33", "gitVersion": "v1.33.6"}, False),
        ({"major": "1", "minor": "34+", "gitVersion": "v1.34.1-eks-1234"}, True),
        ({"major": "1", "minor": "34", "gitVersion": "v1.34.2"}, False),
        ({"major": "1", "minor": "34", "gitVersion": "v1.34"}, False),  # no patch: start, with a warning
        ({"major": "1", "minor": "35", "gitVersion": "v1.35.0"}, False),
        ({"major": "1", "minor": "36+", "gitVersion": "v1.36.3-gke.100"}, False),
        ({"major": "2", "minor": "0", "gitVersion": "v2.0.0"}, False),
        ({"gitVersion": "unknown"}, False),  # cannot tell: start (with a warning) rather than refuse
    ],
)
def test_version_refusal(info: dict[str, str], refused: bool) -> None:
    assert (version_refusal(info) is not None) is refused


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_operator_process_runs_against_a_kubeconfig(cluster: Cluster, tmp_path: Path) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    liveness_port, metrics_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(
        KUBECONFIG=str(kubeconfig), MEMSYNC_AGENT_IMAGE="registry.test/memsync:cli", MEMSYNC_LOG_FORMAT="json"
    )
    await cluster.create_secret("work-secret", {"secret": base64.b64encode(b"opaque").decode()})
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "memsync",
        "operator",
        "--namespace",
        NAMESPACE,
        "--liveness",
        f"http://127.0.0.1:{liveness_port}/healthz",
        "--metrics-port",
        str(metrics_port),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        await cluster.create_smem(smem_body("cli"))
        pod = await eventually(lambda: cluster.pod(pod_name_for("cli")), timeout=60, what="the Pod")
        images = {c["image"] for c in pod["spec"]["initContainers"]}
        assert images == {"registry.test/memsync:cli"}
        await eventually(lambda: cluster.smem_status("cli").get("phase") == "Pending", what="Pending")
        async with httpx.AsyncClient() as client:
            health = await client.get(f"http://127.0.0.1:{liveness_port}/healthz")
            assert health.status_code == 200
            metrics = await client.get(f"http://127.0.0.1:{metrics_port}/metrics")
            assert "memsync_operator_pods_created_total 1.0" in metrics.text
        # The token from the kubeconfig reached kopf's requests too (same credentials for both clients: the
        # watches are kopf's), and every request names this replica (the leader election's identity).
        requests = list(cluster.kmock)
        tokens = {r.headers.get("Authorization") for r in requests if r.params.get("watch") == "true"}
        assert tokens == {"Bearer test-token"}
        agents = {r.headers.get("User-Agent", "") for r in requests} - {cluster.user_agent}
        assert len(agents) == 1, agents
        [agent] = agents
        lease = cluster.lease("default", "memsync-operator")
        assert lease is not None
        assert agent == f"memsync-operator/{__version__} ({lease['spec']['holderIdentity']})"
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        output = (await asyncio.wait_for(proc.communicate(), timeout=30))[0].decode()
    assert proc.returncode == 0, output
    assert "test-token" not in output
