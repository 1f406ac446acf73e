"""The kind tier: memsync on a real kubelet. ``make test`` runs it through ``tests/kind/tier.sh``, which
builds everything on a machine with no registry; ``make e2e`` runs it with your own docker, kind and node
image.

Every test here is skipped, with the reason, when ``docker``, ``kind`` or ``kubectl`` is not on PATH or the
docker daemon does not answer (``docker info``); with ``MEMSYNC_KIND_REQUIRED=1`` (set by tier.sh) the
tests fail instead, so CI can never count a skipped kind tier as a pass. Otherwise, once per session:

1. the cluster ``$KIND_CLUSTER`` (default ``memsync-e2e``) is created from ``$KIND_CONFIG`` (default
   ``kind-config.yaml``) unless it exists already (an existing cluster is reused and never deleted);
2. the image ``$MEMSYNC_IMAGE`` (default ``memsync:e2e``) is built from the Dockerfile unless
   ``MEMSYNC_SKIP_BUILD=1``, and loaded into the cluster unless the node has it already;
3. the CRDs of ``manifests/overlays/kind`` are applied and awaited (Established) before anything else, then
   the rest of the overlay with that image; the operator and the in-cluster store server are awaited. An
   image tag that names new code therefore rolls the operator out; tier.sh tags by content;
4. the store server is reached through ``kubectl port-forward`` (whose output is read all along: a pipe
   left full would block it); its admin key comes from the Secret of the kind overlay;
5. each test gets its own namespace (restricted Pod Security enforced); when a test fails the cluster
   state (``kubectl get all,smem,events -A -o wide``), the operator's logs and every container log of the
   test's own Pods (the sidecar's passes, the mount, the agent) are printed;
6. a cluster this session created is deleted at the end unless ``KEEP_CLUSTER=1``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.k8s_scenarios import mark_tier, record_phase_reports

REPO = Path(__file__).resolve().parents[2]
CLUSTER = os.environ.get("KIND_CLUSTER", "memsync-e2e")
CONFIG = Path(os.environ.get("KIND_CONFIG", str(REPO / "kind-config.yaml")))
IMAGE = os.environ.get("MEMSYNC_IMAGE", "memsync:e2e")
REQUIRED = os.environ.get("MEMSYNC_KIND_REQUIRED") == "1"
NODE = f"{CLUSTER}-control-plane"
SYSTEM_NS = "memsync-system"
STORE_SERVICE = "memsync-store"
STORE_PORT = 8700
IN_CLUSTER_STORE_URL = f"http://{STORE_SERVICE}.{SYSTEM_NS}.svc:{STORE_PORT}"


def _missing_prerequisite() -> str | None:
    for tool in ("docker", "kind", "kubectl"):
        if shutil.which(tool) is None:
            return f"the kind tier needs `{tool}` on PATH; it is not installed here"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the kind tier needs a reachable docker daemon; `docker info` failed: {exc}"
    if info.returncode != 0:
        tail = (info.stderr or info.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"the kind tier needs a reachable docker daemon; `docker info` failed: {tail[0]}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    ours = [item for item in items if here in item.path.parents]
    if ours:
        why_not = _missing_prerequisite()
        if why_not is not None and REQUIRED:
            raise pytest.UsageError(f"MEMSYNC_KIND_REQUIRED=1 but {why_not}")
        mark_tier(ours, pytest.mark.kind, why_not)


pytest_runtest_makereport = record_phase_reports


# --------------------------------------------------------------------------------------------------------
# Shell helpers
# --------------------------------------------------------------------------------------------------------


def run(
    *args: str,
    input: str | None = None,
    check: bool = True,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        list(args),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(args[:4])}... exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def kubectl(*args: str, input: str | None = None, check: bool = True, timeout: float = 300) -> str:
    return run(
        "kubectl", "--context", f"kind-{CLUSTER}", *args, input=input, check=check, timeout=timeout
    ).stdout


def kubectl_json(*args: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kubectl(*args, "-o", "json"))
    return result


def apply(obj: dict[str, Any]) -> None:
    """``kubectl apply`` from stdin: secret values never appear on a command line."""
    kubectl("apply", "-f", "-", input=json.dumps(obj))


# --------------------------------------------------------------------------------------------------------
# The cluster
# --------------------------------------------------------------------------------------------------------


@dataclass
class KindEnv:
    cluster: str
    image: str
    store_url: str  # port-forwarded to this machine
    admin_key: str

    def admin_client(self) -> Any:
        from memsync.client import StoreClient

        return StoreClient(self.store_url, api_key=self.admin_key)


def _cluster_exists() -> bool:
    return CLUSTER in run("kind", "get", "clusters").stdout.split()


def overlay_objects() -> list[dict[str, Any]]:
    text = kubectl("kustomize", str(REPO / "manifests/overlays/kind")).replace("memsync:kind", IMAGE)
    return [obj for obj in yaml.safe_load_all(text) if obj]


def _deploy() -> None:
    """The CRDs first, Established, then the rest: the operator resolves its resources once at start."""
    objects = overlay_objects()
    crds = [obj for obj in objects if obj["kind"] == "CustomResourceDefinition"]
    assert crds, "the kind overlay has no CRD"
    kubectl(
        "apply",
        "--server-side",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": crds}),
    )
    for crd in crds:
        kubectl("wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=120s")
    rest = [obj for obj in objects if obj["kind"] != "CustomResourceDefinition"]
    kubectl(
        "apply",
        "--server-side",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": rest}),
    )
    for deployment in ("memsync-operator", STORE_SERVICE):
        kubectl(
            "-n", SYSTEM_NS, "rollout", "status", f"deployment/{deployment}", "--timeout=300s", timeout=330
        )


def _port_forward() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [
            "kubectl",
            "--context",
            f"kind-{CLUSTER}",
            "-n",
            SYSTEM_NS,
            "port-forward",
            f"svc/{STORE_SERVICE}",
            f":{STORE_PORT}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        match = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line)
        if match:
            _drain(proc.stdout)
            return proc, int(match.group(1))
        if proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("kubectl port-forward to the store server did not start")


def _drain(stream: Any) -> deque[str]:
    """Read a child's output until it closes, keeping the last lines: kubectl port-forward prints a line per
    connection and blocks once nobody reads a full pipe."""
    tail: deque[str] = deque(maxlen=50)

    def read() -> None:
        for line in stream:
            tail.append(line)

    threading.Thread(target=read, name="port-forward-output", daemon=True).start()
    return tail


def load_image(image: str) -> None:
    """``kind load docker-image``; where docker keeps images in containerd's store (Docker 29's default), its
    ``docker save`` of a multi-platform image can name blobs it does not include, and the node's import fails
    with "content digest ... not found": then one platform is saved and loaded as an archive."""
    loaded = run("kind", "load", "docker-image", image, "--name", CLUSTER, timeout=900, check=False)
    if loaded.returncode == 0:
        return
    if "content digest" not in loaded.stdout + loaded.stderr:
        raise AssertionError(f"kind load docker-image {image} failed:\n{loaded.stdout}\n{loaded.stderr}")
    arch = run("docker", "version", "-f", "{{.Server.Arch}}").stdout.strip()
    archive = REPO / ".memsync" / "kind" / "image.tar"
    archive.parent.mkdir(parents=True, exist_ok=True)
    run("docker", "image", "save", "--platform", f"linux/{arch}", "-o", str(archive), image, timeout=900)
    try:
        run("kind", "load", "image-archive", str(archive), "--name", CLUSTER, timeout=900)
    finally:
        archive.unlink(missing_ok=True)


def node_has_image(image: str) -> bool:
    ref = image if "/" in image.split(":", maxsplit=1)[0] else f"docker.io/library/{image}"
    found = run("docker", "exec", NODE, "crictl", "inspecti", ref, check=False)
    return found.returncode == 0


@pytest.fixture(scope="session")
def image() -> str:
    """The memsync image under test, built from the Dockerfile unless ``MEMSYNC_SKIP_BUILD=1``."""
    if os.environ.get("MEMSYNC_SKIP_BUILD") != "1":
        run("docker", "build", "-t", IMAGE, str(REPO), timeout=1800)
    return IMAGE


@pytest.fixture(scope="session")
def kind_env(image: str) -> Iterator[KindEnv]:
    created = False
    if not _cluster_exists():
        run(
            "kind",
            "create",
            "cluster",
            "--name",
            CLUSTER,
            "--config",
            str(CONFIG),
            "--wait",
            "5m",
            timeout=900,
        )
        created = True
    try:
        if not node_has_image(IMAGE):
            load_image(IMAGE)
        from .nodes import prepare  # here: nodes.py imports this module's helpers

        prepare()  # the worker node of the node-loss and drain scenarios, when the cluster has one
        _deploy()
        secret = kubectl_json("-n", SYSTEM_NS, "get", "secret", "memsync-store-admin")
        admin_key = base64.b64decode(secret["data"]["admin-key"]).decode()
        forward, port = _port_forward()
        try:
            yield KindEnv(
                cluster=CLUSTER, image=IMAGE, store_url=f"http://127.0.0.1:{port}", admin_key=admin_key
            )
        finally:
            forward.terminate()
            forward.wait(timeout=10)
    finally:
        if created and os.environ.get("KEEP_CLUSTER") != "1":
            run("kind", "delete", "cluster", "--name", CLUSTER, check=False, timeout=300)


def dump_cluster_state(namespace: str | None = None) -> str:
    parts = [
        kubectl("get", "all,smem,events", "-A", "-o", "wide", check=False),
        kubectl("get", "smem", "-A", "-o", "yaml", check=False),
        kubectl("-n", SYSTEM_NS, "logs", "deployment/memsync-operator", "--tail=400", check=False),
    ]
    if namespace is not None:
        parts.append(pod_logs(namespace))
    return "\n".join(parts)


def pod_logs(namespace: str) -> str:
    """Every container log (init containers and the sidecar included) of every Pod in ``namespace``."""
    names = kubectl("-n", namespace, "get", "pods", "-o", "name", check=False).split()
    return "\n".join(
        f"----- logs of {name} -----\n"
        + kubectl("-n", namespace, "logs", name, "--all-containers", "--prefix", "--timestamps", check=False)
        for name in names
    )


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kind_env: KindEnv) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    apply(
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
    try:
        yield name
    finally:
        call = getattr(request.node, "rep_call", None)
        if call is not None and call.failed:
            print(f"\n===== cluster state after {request.node.name} =====\n{dump_cluster_state(name)}")
        kubectl("delete", "namespace", name, "--wait=false", check=False)
