"""What a real kubelet does to a session, proven on kind (none of it can be proven on the process kubelet of
the control-plane tier, which has no PID namespace, no cgroups, no eviction manager and no image):

- the init container gates everything and the native sidecar serves /readyz before the sandbox starts;
- ``memsync mount``, its container's PID 1, handles SIGTERM: a session deleted while its mount waits on a
  store that never answers is gone at once;
- a sidecar that never starts (its startupProbe never passes) fails the session with ``SidecarNotStarted``
  once ``sync.sidecarStartSeconds`` is up, and its Pod is deleted;
- deleting a session gives the sandbox its SIGTERM and the sidecar its final flush within the grace period;
- a sandbox whose PID 1 installs no SIGTERM handler is not signalled at all (pid_namespaces(7)) and is
  killed at the end of the grace period, and the session says so;
- the sidecar OOM-killed under its memory limit is restarted by the kubelet and loses nothing;
- ``activeDeadlineSeconds`` ends the Pod, the sandbox gets SIGTERM and the final flush runs;
- an eviction through the Eviction API marks the Pod ``DisruptionTarget`` and still flushes;
- the stores' folder (an emptyDir with the session's ``sizeLimit``) filled past it gets the Pod evicted by
  the kubelet, and the session says why.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from typing import Any

import pytest

from memsync.api.hashing import content_sha256
from memsync.controller.sessionmemory import phases as ph
from memsync.controller.sessionmemory.pod import MOUNT_CONTAINER, grace_period_seconds
from support.k8s_scenarios import (
    FINAL,
    as_store_paths,
    container,
    make_store,
    store_files,
    wait_store_has,
)

from .conftest import CLUSTER, IN_CLUSTER_STORE_URL, KindEnv, apply, kubectl, kubectl_json
from .scenario import (
    LogFollower,
    agent,
    agent_report,
    condition,
    created_pod,
    evict,
    pod,
    pod_status,
    ready_reason,
    start_session,
    wait_phase,
)

pytestmark = [pytest.mark.kind, pytest.mark.timeout(600, func_only=True)]


def shell(image: str, script: str) -> dict[str, Any]:
    """A sandbox that runs ``script`` under ``sh -c`` (as PID 1 of its container)."""
    return {"image": image, "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", script]}


def started_at(state: dict[str, Any], key: str = "startedAt") -> datetime:
    for phase in ("running", "terminated"):
        if key in (state.get(phase) or {}):
            return datetime.fromisoformat(state[phase][key].replace("Z", "+00:00"))
    raise AssertionError(f"no {key} in {state}")


async def statuses_until_gone(namespace: str, name: str, timeout: float = 300) -> list[dict[str, Any]]:
    """Every distinct status of a SessionMemory being deleted, until the object is gone.

    Watched, not polled: the final status and the finalizer's removal are two writes milliseconds apart,
    so a poll would mostly miss the status that says how the session ended."""
    watch = await asyncio.create_subprocess_exec(
        "kubectl", "--context", f"kind-{CLUSTER}", "-n", namespace, "get", "smem", name,
        "--watch", "--output-watch-events", "-o", "json", "--request-timeout", "0",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert watch.stdout is not None
    seen: list[dict[str, Any]] = []
    decoder, text = json.JSONDecoder(), ""
    try:
        async with asyncio.timeout(timeout):
            while chunk := await watch.stdout.read(65536):
                text += chunk.decode()
                while text.strip():
                    try:
                        event, end = decoder.raw_decode(text.lstrip())
                    except json.JSONDecodeError:
                        break  # the rest of this event has not arrived yet
                    text = text.lstrip()[end:]
                    current = event["object"].get("status") or {}
                    if not seen or seen[-1] != current:
                        seen.append(current)
                    if event["type"] == "DELETED":
                        return seen
    except TimeoutError:
        pass
    finally:
        if watch.returncode is None:
            watch.kill()
        await watch.wait()
    raise AssertionError(f"SessionMemory {namespace}/{name} was not gone after {timeout} s: {seen}")


# --------------------------------------------------------------------------------------------------------
# start order
# --------------------------------------------------------------------------------------------------------


async def test_the_sandbox_starts_after_the_mount_and_a_serving_sidecar(
    kind_env: KindEnv, namespace: str
) -> None:
    store = await make_store(kind_env, "gate", {"/existing.md": "from the store\n"})
    # The sandbox's first act: read what the mount downloaded and ask the sidecar's /readyz in the Pod's own
    # network namespace; either failing ends the sandbox with an error instead of writing gate.md.
    probe = (
        "import pathlib, urllib.request; "
        "seen = pathlib.Path('/mnt/memory/gate/existing.md').read_text().strip(); "
        "code = urllib.request.urlopen('http://127.0.0.1:9477/readyz', timeout=5).status; "
        "pathlib.Path('/mnt/memory/gate/gate.md').write_text(f'{seen} / readyz {code}\\n')"
    )
    sandbox = {"image": kind_env.image, "imagePullPolicy": "IfNotPresent", "command": ["python", "-c", probe]}
    pod_name = await start_session(kind_env, namespace, "gate", store, slug="gate", sandbox=sandbox)
    status = await wait_phase(namespace, "gate", FINAL)
    assert status["phase"] == "Succeeded", status
    assert (await store_files(kind_env, store))["/gate.md"] == content_sha256("from the store / readyz 200\n")
    ps = pod_status(namespace, pod_name)
    mount, sync, sandbox_status = (container(ps, n) for n in ("memsync-mount", "memsync-sync", "sandbox"))
    assert mount["state"]["terminated"]["exitCode"] == 0
    assert started_at(mount["state"], "finishedAt") <= started_at(sync["state"])
    assert started_at(sync["state"]) <= started_at(sandbox_status["state"])


# --------------------------------------------------------------------------------------------------------
# termination
# --------------------------------------------------------------------------------------------------------


async def test_deletion_gives_the_final_flush_its_time(kind_env: KindEnv, namespace: str) -> None:
    """The agent keeps writing for 20 s after its SIGTERM; the sidecar, signalled only after the sandbox has
    ended, still has its 30 s final flush: everything the agent wrote is in the store."""
    store = await make_store(kind_env, "late", {})
    sandbox = agent(
        "--scenario", "steady", "--duration", "600", "--interval", "0.5", "--term-linger", "20",
        image=kind_env.image,
    )  # fmt: skip
    pod_name = await start_session(
        kind_env, namespace, "late", store, slug="late", sandbox=sandbox, final_flush=30
    )
    await wait_phase(namespace, "late", ("Running",))
    spec = (pod(namespace, pod_name) or {})["spec"]
    assert spec["terminationGracePeriodSeconds"] == grace_period_seconds(30)
    logs = LogFollower(namespace, pod_name)
    await wait_store_has(kind_env, store, 3, timeout=180)
    started = time.monotonic()
    kubectl("-n", namespace, "delete", "smem", "late", "--wait=true", "--timeout=300s", timeout=320)
    took = time.monotonic() - started
    report = logs.report()
    assert report["interrupted"] is True
    assert report["ticks"] - report["sigterm_tick"] >= 30  # 20 s at 0.5 s: it kept writing after SIGTERM
    assert took >= 20, f"the Pod was gone {took:.1f} s after the delete, before the agent's 20 s linger"
    assert await store_files(kind_env, store) == as_store_paths(report["stores"]["/mnt/memory/late"]["files"])


SILENT_SERVER = """
import socket, time
s = socket.socket()
s.bind(("", 8080))
s.listen(64)  # connections complete in the backlog; no request is ever read
time.sleep(3600)
"""

#: A store proxy that forwards every request to the in-cluster store server except the sync sidecar's
#: one-item listing probe (``limit=1``), which it never answers: the mount succeeds, the sidecar's first
#: pass never ends, so its /readyz never answers 200 and its startupProbe never passes.
PROBE_HANGING_PROXY = """
import os, time, httpx
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
upstream = httpx.Client(base_url=os.environ["UPSTREAM"], timeout=60)

class Forward(BaseHTTPRequestHandler):
    def handle_one(self):
        if "limit=1" in self.path.split("?", 1)[-1].split("&"):
            time.sleep(3600)
        size = int(self.headers.get("content-length") or 0)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        answer = upstream.request(self.command, self.path, headers=headers, content=self.rfile.read(size))
        self.send_response(answer.status_code)
        for k, v in answer.headers.items():
            if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                self.send_header(k, v)
        self.send_header("content-length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = handle_one

ThreadingHTTPServer(("", 8080), Forward).serve_forever()
"""


def serve_python(
    namespace: str, name: str, image: str, script: str, env: dict[str, str] | None = None
) -> str:
    """``script`` run by the image's Python as a Pod behind a Service on port 8080; returns its URL."""
    restricted = {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    server = {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", script],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "securityContext": restricted,
    }
    labels = {"app": name}
    apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"containers": [server]},
        }
    )
    apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": labels, "ports": [{"port": 8080, "targetPort": 8080}]},
        }
    )
    kubectl("-n", namespace, "wait", f"pod/{name}", "--for=condition=Ready", "--timeout=120s", timeout=130)
    return f"http://{name}.{namespace}.svc:8080"


async def test_a_mount_waiting_on_a_silent_store_ends_at_once_when_the_session_goes(
    kind_env: KindEnv, namespace: str
) -> None:
    """``memsync mount`` is its init container's PID 1, so it handles SIGTERM or it would never get one: a
    session deleted while its mount waits on a store that never answers is gone in seconds, not at the end
    of the grace period, and the mount says why it stopped."""
    url = serve_python(namespace, "silent", kind_env.image, SILENT_SERVER)
    store = await make_store(kind_env, "hung", {})
    sandbox = shell(kind_env.image, "exec sleep 3600")
    pod_name = await start_session(
        kind_env, namespace, "hung", store, slug="h", sandbox=sandbox, base_url=url
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        statuses = (pod(namespace, pod_name) or {}).get("status") or {}
        inits = statuses.get("initContainerStatuses") or []
        if any(c["name"] == MOUNT_CONTAINER and "running" in c.get("state", {}) for c in inits):
            break
        await asyncio.sleep(0.5)
    else:
        raise AssertionError(f"the mount never ran: {pod(namespace, pod_name)}")
    logs = LogFollower(namespace, pod_name, MOUNT_CONTAINER)
    await asyncio.sleep(3)  # the mount is waiting on the silent store by now (it reads the session first)
    grace = (pod(namespace, pod_name) or {})["spec"]["terminationGracePeriodSeconds"]
    started = time.monotonic()
    kubectl("-n", namespace, "delete", "smem", "hung", "--wait=false")
    await statuses_until_gone(namespace, "hung")
    took = time.monotonic() - started
    mount_log = logs.text()
    assert "SIGTERM received: stopping the mount" in mount_log, mount_log[-3000:]
    assert took < 20 < grace, f"the session was gone {took:.1f} s after the delete (grace {grace} s)"


async def test_a_pid1_without_a_sigterm_handler_runs_out_the_grace_period(
    kind_env: KindEnv, namespace: str
) -> None:
    """``exec sleep`` as the container's PID 1 installs no handler, so SIGTERM does nothing to it in its own
    PID namespace; the kubelet kills it when the grace period ends, the sidecar flushes only then, and the
    session names the cause."""
    store = await make_store(kind_env, "stubborn", {})
    sandbox = shell(kind_env.image, "echo one > /mnt/memory/n/one.md && exec sleep 3600")
    pod_name = await start_session(
        kind_env, namespace, "stubborn", store, slug="n", sandbox=sandbox, final_flush=5
    )
    await wait_phase(namespace, "stubborn", ("Running",))
    await wait_store_has(kind_env, store, 1)
    grace = (pod(namespace, pod_name) or {})["spec"]["terminationGracePeriodSeconds"]
    started = time.monotonic()
    kubectl("-n", namespace, "delete", "smem", "stubborn", "--wait=false")
    seen = await statuses_until_gone(namespace, "stubborn")
    took = time.monotonic() - started
    assert took >= grace - 2, (
        f"PID 1 ignored SIGTERM, yet the session was gone after {took:.1f} s < {grace} s"
    )
    assert ph.SANDBOX_KILLED in {ready_reason(st) for st in seen}, seen
    assert set(await store_files(kind_env, store)) == {"/one.md"}


async def test_the_sidecar_oom_killed_is_restarted_and_loses_nothing(
    kind_env: KindEnv, namespace: str
) -> None:
    """A real memory limit and the kernel's OOM killer: a small process in the sidecar's container fills the
    Pod's /dev/shm (tmpfs pages, charged to the container's memory cgroup but to no process's RSS), so the
    container goes over its 100 Mi limit and the largest process in it, the sidecar itself (about 60 MB), is
    killed. The kubelet reports OOMKilled, restarts the native sidecar, and the session ends with every file
    in the store."""
    store = await make_store(kind_env, "oom", {})
    sandbox = agent("--scenario", "steady", "--duration", "60", "--interval", "0.3", image=kind_env.image)
    limits = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "100Mi"}}
    pod_name = await start_session(
        kind_env,
        namespace,
        "oom",
        store,
        slug="oom",
        sandbox=sandbox,
        pod_spec={"memsync": {"resources": limits}},
    )
    await wait_phase(namespace, "oom", ("Running",))
    await wait_store_has(kind_env, store, 3, timeout=180)
    fill = "head -c 80m /dev/zero > /dev/shm/memsync-oom-test"
    kubectl("-n", namespace, "exec", pod_name, "-c", "memsync-sync", "--", "sh", "-c", fill, check=False)
    deadline = time.monotonic() + 120
    sync = container(pod_status(namespace, pod_name), "memsync-sync")
    while sync.get("restartCount", 0) < 1:
        assert time.monotonic() < deadline, f"the sidecar was not restarted: {sync}"
        await asyncio.sleep(1)
        sync = container(pod_status(namespace, pod_name), "memsync-sync")
    assert sync["lastState"]["terminated"]["reason"] == "OOMKilled", sync
    assert sync["lastState"]["terminated"]["exitCode"] == 137, sync
    status = await wait_phase(namespace, "oom", FINAL)
    assert status["phase"] == "Succeeded", status
    report = agent_report(namespace, pod_name)
    assert await store_files(kind_env, store) == as_store_paths(report["stores"]["/mnt/memory/oom"]["files"])


async def test_active_deadline_ends_the_pod_and_the_final_flush_runs(
    kind_env: KindEnv, namespace: str
) -> None:
    store = await make_store(kind_env, "deadline", {})
    sandbox = agent("--scenario", "steady", "--duration", "600", "--interval", "0.5", image=kind_env.image)
    pod_name = await start_session(
        kind_env,
        namespace,
        "deadline",
        store,
        slug="d",
        sandbox=sandbox,
        pod_spec={"activeDeadlineSeconds": 45},
    )
    logs = LogFollower(namespace, pod_name)
    status = await wait_phase(namespace, "deadline", FINAL, timeout=300)
    report = logs.report()
    assert report["interrupted"] is True  # SIGTERM, not the end of its 600 s
    assert (pod(namespace, pod_name) or {})["status"]["reason"] == "DeadlineExceeded"
    assert status["phase"] == "Failed" and ready_reason(status) == ph.DEADLINE_EXCEEDED, status
    assert "activeDeadlineSeconds" in status["message"] and "final flush completed" in status["message"], (
        status
    )
    assert await store_files(kind_env, store) == as_store_paths(report["stores"]["/mnt/memory/d"]["files"])


# --------------------------------------------------------------------------------------------------------
# evictions
# --------------------------------------------------------------------------------------------------------


async def test_an_eviction_through_the_api_marks_the_pod_and_still_flushes(
    kind_env: KindEnv, namespace: str
) -> None:
    store = await make_store(kind_env, "evicted", {})
    sandbox = agent(
        "--scenario", "steady", "--duration", "600", "--interval", "0.5", "--term-linger", "3",
        image=kind_env.image,
    )  # fmt: skip
    pod_name = await start_session(kind_env, namespace, "evicted", store, slug="e", sandbox=sandbox)
    await wait_phase(namespace, "evicted", ("Running",))
    await wait_store_has(kind_env, store, 3, timeout=180)
    logs = LogFollower(namespace, pod_name)
    evict(namespace, pod_name)
    disruption = None
    deadline = time.monotonic() + 60
    while disruption is None and time.monotonic() < deadline:
        current = pod(namespace, pod_name)
        disruption = condition(current["status"], "DisruptionTarget") if current else None
        await asyncio.sleep(0.3)
    assert disruption is not None and disruption["reason"] == "EvictionByEvictionAPI", disruption
    status = await wait_phase(namespace, "evicted", FINAL)
    report = logs.report()
    assert report["interrupted"] is True
    assert ready_reason(status) == ph.INTERRUPTED, status
    assert "EvictionByEvictionAPI" in status["message"] and "final flush completed" in status["message"], (
        status
    )
    assert await store_files(kind_env, store) == as_store_paths(report["stores"]["/mnt/memory/e"]["files"])


async def test_the_stores_folder_over_its_size_limit_gets_the_pod_evicted(
    kind_env: KindEnv, namespace: str
) -> None:
    """The stores' folder is an emptyDir with the SessionMemory's ``memoryVolumeSizeLimit`` (memsync-sync
    requests as much ephemeral storage). The kubelet's eviction manager measures it and evicts the Pod at
    once when the agent fills it: what the periodic sync had sent is in the store, and the session names
    the eviction."""
    store = await make_store(kind_env, "full", {})
    script = (
        "echo one > /mnt/memory/f/one.md; sleep 12; head -c 8388608 /dev/zero > /mnt/memory/fill; sleep 600"
    )
    pod_name = await start_session(
        kind_env,
        namespace,
        "full",
        store,
        slug="f",
        sandbox=shell(kind_env.image, script),
        interval=5,
        sync={"memoryVolumeSizeLimit": "4Mi"},
    )
    spec = (await created_pod(namespace, pod_name))["spec"]
    memory = next(v for v in spec["volumes"] if v["name"] == "memory")
    sync = next(c for c in spec["initContainers"] if c["name"] == "memsync-sync")
    assert memory["emptyDir"] == {"sizeLimit": "4Mi"}
    assert sync["resources"]["requests"]["ephemeral-storage"] == "4Mi"
    await wait_store_has(kind_env, store, 1, timeout=180)
    status = await wait_phase(namespace, "full", FINAL, timeout=240)
    assert status["phase"] == "Failed", status
    assert ready_reason(status) == ph.INTERRUPTED, status
    assert '"memory"' in status["message"] and "exceeds the limit" in status["message"], status
    assert set(await store_files(kind_env, store)) == {"/one.md"}


async def test_a_sidecar_that_never_starts_fails_the_session_and_its_pod_goes(
    kind_env: KindEnv, namespace: str
) -> None:
    """memsync-sync whose startupProbe never passes (here: its first pass never gets an answer; on a kubelet
    with the native-sidecar startup defect: a sidecar restarted before its first probe) keeps the sandbox
    from ever starting. Past ``sync.sidecarStartSeconds`` after the mount the operator fails the session
    with ``SidecarNotStarted`` and a Warning Event, and deletes the Pod; nothing was edited, nothing lost."""
    url = serve_python(
        namespace, "hangs", kind_env.image, PROBE_HANGING_PROXY, {"UPSTREAM": IN_CLUSTER_STORE_URL}
    )
    store = await make_store(kind_env, "unstarted", {"/a.md": "alpha"})
    sandbox = shell(kind_env.image, "exec sleep 3600")
    pod_name = await start_session(
        kind_env,
        namespace,
        "unstarted",
        store,
        slug="u",
        sandbox=sandbox,
        base_url=url,
        sync={"sidecarStartSeconds": 10},
    )
    status = await wait_phase(namespace, "unstarted", FINAL, timeout=240)
    assert ready_reason(status) == ph.SIDECAR_NOT_STARTED, status
    assert "had not started 10 s after the stores were mounted" in status["message"], status
    assert (condition(status, "Flushed") or {}).get("reason") == "NothingToFlush", status
    selector = "involvedObject.name=unstarted"
    events = kubectl_json("-n", namespace, "get", "events", "--field-selector", selector)
    assert "SidecarNotStarted" in {e["reason"] for e in events["items"]}, events
    deadline = time.monotonic() + 120
    while pod(namespace, pod_name) is not None and time.monotonic() < deadline:
        await asyncio.sleep(1)
    assert pod(namespace, pod_name) is None, "the operator did not delete the stuck Pod"
    assert (await store_files(kind_env, store)) == {"/a.md": content_sha256("alpha")}
