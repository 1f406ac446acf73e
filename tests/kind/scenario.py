"""What the kind scenarios share: sessions on the in-cluster store server, their SessionMemories and Secrets,
and waiting on what the cluster reports."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from typing import Any

from memsync.api.secret import decode_work_secret, encode_work_secret
from memsync.controller.sessionmemory.pod import pod_name_for
from memsync.devtools.scripted_agent import REPORT_PREFIX
from support import k8s_scenarios as k8s
from support.k8s_scenarios import report_from_logs, secret_object, session_id, smem_object

from .conftest import CLUSTER, IN_CLUSTER_STORE_URL, KindEnv, apply, kubectl, kubectl_json, run


def sid() -> str:
    return session_id("kind")


def mint(env: KindEnv, stores: list[tuple[str, str]], session: str) -> str:
    """``memsync store token`` against the in-cluster server (through the port-forward)."""
    args = [sys.executable, "-m", "memsync", "store", "token", "--url", env.store_url, "--session", session]
    for store_id, access in stores:
        args += ["--store", f"{store_id}:{access}"]
    return run(*args, env={"MEMSYNC_ADMIN_KEY": env.admin_key}).stdout.strip()


def create_secret(namespace: str, name: str, value: str) -> None:
    apply(secret_object(namespace, name, value))


def agent(*args: str, image: str) -> dict[str, Any]:
    return k8s.agent(*args, image=image, pull_policy="IfNotPresent")


def create_smem(
    namespace: str,
    name: str,
    session: str,
    stores: list[tuple[str, str, str]],
    sandbox: dict[str, Any],
    *,
    secret_name: str | None = None,  # default: the Secret "work"
    interval: int = 5,
    final_flush: int = 10,
    pod_spec: dict[str, Any] | None = None,
    base_url: str = IN_CLUSTER_STORE_URL,
    sync: dict[str, Any] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Applies the SessionMemory and returns it (``pod_spec`` adds to its template's Pod spec, ``spec`` to
    its spec)."""
    obj = smem_object(
        namespace,
        name,
        session=session,
        base_url=base_url,
        stores=stores,
        sandbox=sandbox,
        secret_name=secret_name or "work",
        interval=interval,
        final_flush=final_flush,
        pod_spec=pod_spec,
        sync=sync,
        spec=spec,
    )
    apply(obj)
    return obj


async def start_session(
    env: KindEnv,
    namespace: str,
    name: str,
    store: str,
    *,
    slug: str,
    sandbox: dict[str, Any],
    **smem: Any,
) -> str:
    """A session over one read-write store: its Secret, then its SessionMemory; returns the Pod's name. A
    ``base_url`` (of a stand-in for the store) goes into the work-item secret too: the secret's URL is the
    one the sync agent uses."""
    session = sid()
    secret = mint(env, [(store, "read_write")], session)
    if "base_url" in smem:
        secret = encode_work_secret(decode_work_secret(secret).sessions_token, smem["base_url"])
    create_secret(namespace, "work", secret)
    create_smem(namespace, name, session, [(store, slug, "read_write")], sandbox, **smem)
    return pod_name_for(name)


def smem_status(namespace: str, name: str) -> dict[str, Any]:
    out = kubectl("-n", namespace, "get", "smem", name, "-o", "json", check=False)
    if not out.strip():
        return {}
    status: dict[str, Any] = json.loads(out).get("status") or {}
    return status


async def wait_phase(
    namespace: str, name: str, phases: tuple[str, ...], timeout: float = 300
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = smem_status(namespace, name)
        if status.get("phase") in phases:
            return status
        await asyncio.sleep(1)
    raise AssertionError(f"SessionMemory {namespace}/{name} never reached {phases}; last status: {status}")


def pod_status(namespace: str, pod: str) -> dict[str, Any]:
    status: dict[str, Any] = kubectl_json("-n", namespace, "get", "pod", pod).get("status") or {}
    return status


def agent_report(namespace: str, pod: str) -> dict[str, Any]:
    return report_from_logs(kubectl("-n", namespace, "logs", pod, "-c", "sandbox"))


def pod(namespace: str, name: str) -> dict[str, Any] | None:
    """The Pod, or None once it is gone."""
    out = kubectl("-n", namespace, "get", "pod", name, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


async def created_pod(namespace: str, name: str, timeout: float = 120) -> dict[str, Any]:
    """The Pod once the operator has created it: ``start_session`` returns when the SessionMemory exists,
    and its Pod appears only after the operator's first reconcile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pod(namespace, name)
        if found is not None:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"the operator never created Pod {namespace}/{name}")


def evict(namespace: str, pod_name: str) -> None:
    """Evict the Pod through the Eviction API (what a drain does)."""
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod_name, "namespace": namespace},
    }
    kubectl(
        "create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{pod_name}/eviction", "-f", "-",
        input=json.dumps(eviction),
    )  # fmt: skip


def ready_reason(status: dict[str, Any]) -> str | None:
    """The reason of a SessionMemory status's Ready condition."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            reason: str | None = cond.get("reason")
            return reason
    return None


def condition(pod_status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in pod_status.get("conditions") or []:
        if cond.get("type") == kind:
            found: dict[str, Any] = cond
            return found
    return None


class LogFollower:
    """``kubectl logs -f`` of one container, read to the end: the report of an agent whose Pod goes away.

    Following starts (on a thread) once the container has started: ``kubectl logs -f`` on a container still
    waiting to start ends at once with nothing. If what was followed holds no report and the Pod is still
    there (a Pod ended by its deadline stays), the container's whole log is read once more."""

    def __init__(self, namespace: str, pod_name: str, container_name: str = "sandbox") -> None:
        self.namespace, self.pod_name, self.container_name = namespace, pod_name, container_name
        self.proc: subprocess.Popen[str] | None = None
        self._seen = False
        self._stopped = threading.Event()
        self._out = ""  # what the follow read, set by its thread when kubectl ends
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _started(self) -> bool:
        """The container is running or has ended, or the Pod, once seen, is gone (following says why)."""
        found = pod(self.namespace, self.pod_name)
        if found is None:
            return self._seen  # not created yet (the operator creates it after its first reconcile)
        self._seen = True
        status = found.get("status") or {}
        try:
            state = k8s.container(status, self.container_name).get("state") or {}
        except KeyError:
            return False
        return "running" in state or "terminated" in state

    def _follow(self) -> None:
        deadline = time.monotonic() + 300
        while not self._stopped.is_set() and time.monotonic() < deadline and not self._started():
            self._stopped.wait(0.3)
        if self._stopped.is_set():
            return
        self.proc = subprocess.Popen(
            [
                "kubectl", "--context", f"kind-{CLUSTER}", "-n", self.namespace,
                "logs", "-f", self.pod_name, "-c", self.container_name,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        if self._stopped.is_set():  # stopped while it started
            self.proc.kill()
        self._out, _ = self.proc.communicate()

    def text(self, timeout: float = 240) -> str:
        """Everything the container wrote, once it has ended."""
        self._thread.join(timeout)
        self.stop()
        self._thread.join(5)
        out = self._out
        if REPORT_PREFIX not in out and pod(self.namespace, self.pod_name) is not None:
            again = kubectl(
                "-n", self.namespace, "logs", self.pod_name, "-c", self.container_name, check=False
            )  # fmt: skip
            out = f"{out}\n{again}" if out else again
        return out

    def report(self, timeout: float = 240) -> dict[str, Any]:
        return report_from_logs(self.text(timeout))

    def stop(self) -> None:
        self._stopped.set()
        if self.proc is not None:
            self.proc.kill()
