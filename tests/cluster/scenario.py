"""Helpers of the cluster scenarios: stores on the tier's store server, SessionMemories through kubectl, and
waits on what the API server shows."""

from __future__ import annotations

import os
import re
import signal
from typing import Any

from conftest import RunningStoreServer
from memsync.controller.sessionmemory.pod import pod_name_for
from support import k8s_scenarios as k8s
from support.k8s_scenarios import (
    FINAL,
    as_store_paths,
    assert_final_store,
    container,
    make_store,
    report_from_logs,
    secret_object,
    session_id,
    smem_object,
    store_files,
    versions,
    wait_store_has,
)

from .conftest import Cluster

__all__ = [
    "FINAL",
    "as_store_paths",
    "assert_final_store",
    "assert_store_holds_final_files",
    "container",
    "make_store",
    "secret_object",
    "smem",
    "store_files",
    "versions",
    "wait_store_has",
]

IMAGE = "memsync:kind"  # the kind overlay's image; the process kubelet maps it onto this project


smem = smem_object


def sid() -> str:
    return session_id("cl")


def agent(*args: str) -> dict[str, Any]:
    return k8s.agent(*args, image=IMAGE)


async def start_session(
    cluster: Cluster,
    server: RunningStoreServer,
    namespace: str,
    name: str,
    *,
    stores: list[tuple[str, str, str]],
    sandbox: dict[str, Any],
    **kw: Any,
) -> str:
    """Mint a work-item secret for ``stores`` into Secret ``work-<name>``; create the SessionMemory."""
    session = sid()
    secret = await server.mint_secret([(i, a) for i, _, a in stores], session_id=session)
    cluster.apply(secret_object(namespace, f"work-{name}", secret))
    work = f"work-{name}"
    body = smem_object(
        namespace,
        name,
        session=session,
        base_url=server.url,
        stores=stores,
        sandbox=sandbox,
        secret_name=work,
        **kw,
    )
    cluster.apply(body)
    return session


async def steady_session(
    cluster: Cluster,
    server: RunningStoreServer,
    namespace: str,
    name: str,
    *,
    store: str,
    mount: str,
    duration: int = 600,
    interval: float = 0.3,
    linger: int | None = None,
    memories: int = 0,
    **kw: Any,
) -> str:
    """A session whose scripted agent keeps writing (the ``steady`` scenario) into one read-write store
    mounted at ``/mnt/memory/<mount>``, waited until Running and, with ``memories``, until the store holds
    that many: the sandbox Pod's name. ``linger``: seconds the agent keeps writing after its SIGTERM."""
    args = ["--scenario", "steady", "--duration", str(duration), "--interval", str(interval)]
    if linger is not None:
        args += ["--term-linger", str(linger)]
    stores = [(store, mount, "read_write")]
    await start_session(cluster, server, namespace, name, stores=stores, sandbox=agent(*args), **kw)
    wait_phase(cluster, namespace, name, ("Running",))
    if memories:
        await wait_store_has(server, store, memories)
    return pod_name_for(name)


async def assert_store_holds_final_files(
    server: RunningStoreServer, store: str, report: dict[str, Any], mount: str
) -> None:
    """The store holds exactly the files the agent's report lists for ``/mnt/memory/<mount>`` at its end."""
    final = as_store_paths(report["stores"][f"/mnt/memory/{mount}"]["files"])
    assert await store_files(server, store) == final


def smem_status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    obj = cluster.get_or_none("-n", namespace, "smem", name)
    status: dict[str, Any] = (obj or {}).get("status") or {}
    return status


def wait_phase(
    cluster: Cluster, namespace: str, name: str, phases: tuple[str, ...], timeout: float = 240
) -> dict[str, Any]:
    status: dict[str, Any] = cluster.wait(
        f"SessionMemory {namespace}/{name} in {phases}",
        lambda: (s := smem_status(cluster, namespace, name)).get("phase") in phases and s,
        timeout,
        explain=cluster.dump,
    )
    return status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    for entry in status.get("conditions") or []:
        if entry["type"] == kind:
            result: dict[str, Any] = entry
            return result
    raise KeyError(f"no condition {kind} in {status}")


def pod_status(cluster: Cluster, namespace: str, pod: str) -> dict[str, Any]:
    status: dict[str, Any] = cluster.get("-n", namespace, "pod", pod).get("status") or {}
    return status


def agent_report(cluster: Cluster, namespace: str, pod: str) -> dict[str, Any]:
    return report_from_logs(cluster.pod_logs(namespace, pod, "sandbox"))


def kill_container(cluster: Cluster, namespace: str, pod: str, name: str) -> None:
    """SIGKILL a running container's processes (its ID is ``process://<pid>`` on this kubelet)."""
    entry = container(pod_status(cluster, namespace, pod), name)
    pid = int(entry["containerID"].removeprefix("process://"))
    os.killpg(pid, signal.SIGKILL)


def events(cluster: Cluster, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("-n", namespace, "events")["items"]
    return [e for e in items if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name]


def container_state(cluster: Cluster, namespace: str, pod: str, name: str) -> dict[str, Any]:
    """The container's current ``state`` ({} while the Pod or its status does not exist yet)."""
    obj = cluster.get_or_none("-n", namespace, "pod", pod)
    try:
        return container((obj or {}).get("status") or {}, name).get("state") or {}
    except KeyError:
        return {}


def printed(cluster: Cluster, namespace: str, name: str) -> dict[str, str]:
    """The SessionMemory's row as ``kubectl get smem`` prints it (its printer columns), by column title.

    kubectl aligns each column under its title, so a cell is the text from its title's offset to the next's.
    """
    header, row = cluster.kubectl("-n", namespace, "get", "smem", name).splitlines()[:2]
    starts = [m.start() for m in re.finditer(r"(?<!\S)\S+(?: \S+)*", header)]
    bounds = [*starts[1:], None]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, bounds, strict=True)}
