"""One Pod on the process kubelet, with the kubelet's semantics:

* setup: the Pod's network namespace and IP, then its volumes (a failure is a ``FailedMount`` Event and the
  Pod stays ``ContainerCreating``, retried);
* init containers one at a time (a failed one is restarted unless ``restartPolicy: Never``, which fails the
  Pod); a native sidecar (``restartPolicy: Always``) lets the next container start once it has *started*
  (its postStart exec hook done and its startupProbe passed, if it has them), and is restarted whenever
  it exits;
* the main containers, restarted by the Pod's ``restartPolicy`` with a doubling back-off; startup,
  readiness and liveness probes (``httpGet``, ``tcpSocket``, ``exec``); a failed liveness or startup probe
  restarts the container;
* a missing Secret, ConfigMap or key leaves a container waiting with ``CreateContainerConfigError``;
* termination (``deletionTimestamp``, or every main container finished): for every running container at
  once, its ``preStop`` exec hook, then — a sidecar only after every main container and every later
  sidecar has exited — SIGTERM, and SIGKILL when the grace period is over (never less than 2 s after the
  hook); then the terminal phase is written and, for a deleted Pod, the final delete with a UID
  precondition;
* the status (phase, conditions, container statuses, IPs) is written to ``pods/<name>/status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e_local.podrunner import MIN_GRACE_AFTER_HOOK_SECONDS
from support.image_env import ImageEnv

from .container import Container, Mount, Sandbox, now_iso
from .kubeapi import ApiError, KubeApi
from .network import TierNetwork
from .podspec import (
    ConfigError,
    ImageConfig,
    ImageError,
    Lookups,
    container_env,
    container_identity,
    image_config,
    pod_conditions,
    pod_phase,
    referenced_names,
)
from .volumes import MountError, VolumeBuilder, read_data

RETRY_SECONDS = 2.0
MAX_BACKOFF_SECONDS = 10.0
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


@dataclass
class NodeContext:
    """What every Pod worker shares: the node's API client, network and the API server's address."""

    api: KubeApi
    network: TierNetwork
    node_name: str
    api_host: str
    api_port: int
    state_dir: Path
    post_event: Callable[[dict[str, Any], str, str, str], Awaitable[None]]
    #: the project's environment as the memsync image has it (staged once for the node)
    image_env: ImageEnv


def turn_has_come(containers: list[Container], c: Container) -> bool:
    """A sidecar stops only after every main container and every sidecar declared after it has exited."""
    if c.kind != "sidecar":
        return True
    return not any(
        o.running and (o.kind == "main" or (o.kind == "sidecar" and o.index > c.index)) for o in containers
    )


async def lookups(api: KubeApi, pod: dict[str, Any]) -> Lookups:
    """The Secrets and ConfigMaps the Pod's env refers to, read as the node (absent ones left out)."""
    secrets, maps = referenced_names(pod)
    ns = pod["metadata"]["namespace"]
    found_s = {n: d for n in secrets if (d := await read_data(api, "Secret", ns, n)) is not None}
    found_m = {n: d for n in maps if (d := await read_data(api, "ConfigMap", ns, n)) is not None}
    return Lookups(found_s, found_m)


class PodWorker:
    def __init__(self, ctx: NodeContext, pod: dict[str, Any]) -> None:
        self.ctx = ctx
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        self.dir = ctx.state_dir / "pods" / f"{meta['namespace']}_{meta['name']}_{self.uid[:8]}"
        spec = pod["spec"]
        self.policy: str = spec.get("restartPolicy", "Always")
        self.containers: list[Container] = []
        for i, c in enumerate(spec.get("initContainers") or []):
            kind = "sidecar" if c.get("restartPolicy") == "Always" else "init"
            self.containers.append(Container(c, kind, i, self.dir / "containers" / c["name"]))
        for i, c in enumerate(spec.get("containers") or []):
            self.containers.append(Container(c, "main", i, self.dir / "containers" / c["name"]))
        self.sandbox: Sandbox | None = None
        self.volumes: dict[str, Path] = {}
        self.init_failed = False
        self.initialized = False
        self.terminating = False
        self.gone = False
        self.start_time = now_iso()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._supervisors: dict[str, asyncio.Task[None]] = {}
        self._deadline: float | None = None
        self._stopped = asyncio.Event()
        self._last_status: dict[str, Any] | None = None
        self._warned: set[tuple[str, str]] = set()

    # ------------------------------------------------------------------ entry points

    def start(self) -> None:
        self._spawn(self._lifecycle())
        self._spawn(self._status_writer())

    def update(self, pod: dict[str, Any]) -> None:
        self.pod = {**pod, "status": self.pod.get("status", {})}
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is not None and not self.terminating:
            self._spawn(self._terminate(float(grace)))

    async def vanish(self) -> None:
        """The API object is gone: stop everything now and release the Pod's resources."""
        self.gone = True
        self.terminating = True
        for c in self.containers:
            c.signal(signal.SIGKILL, group=True)
        await self._cleanup()

    # ------------------------------------------------------------------ helpers

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _warn(self, reason: str, message: str) -> None:
        if (reason, message) not in self._warned:
            self._warned.add((reason, message))
            await self.ctx.post_event(self.pod, reason, message, "Warning")

    def _will_restart(self, c: Container) -> bool:
        if self.terminating or c.exit_code is None:
            return not self.terminating and c.exit_code is None
        if c.kind == "sidecar":
            return True
        if c.kind == "init" or self.policy == "OnFailure":
            return self.policy != "Never" and c.exit_code != 0
        return self.policy == "Always"

    # ------------------------------------------------------------------ lifecycle

    async def _setup(self) -> bool:
        spec = self.pod["spec"]
        name = self.pod["metadata"]["name"]
        if spec.get("hostNetwork"):
            netns, pod_ip = None, self.ctx.network.gateway
        else:
            netns, pod_ip = self.ctx.network.add_pod(self.uid)
        hosts = (
            f"127.0.0.1\tlocalhost\n::1\tlocalhost\n{pod_ip}\t{name}\n"
            f"{self.ctx.api_host}\tkubernetes kubernetes.default kubernetes.default.svc "
            "kubernetes.default.svc.cluster.local\n"
        )
        self.sandbox = Sandbox(netns, pod_ip, hosts, name)
        for c in self.containers:
            c.state = {"waiting": {"reason": "ContainerCreating"}}
        builder = VolumeBuilder(self.ctx.api, self.pod, self.dir / "volumes")
        while not self.terminating:
            try:
                self.volumes = await builder.build_all()
                break
            except MountError as exc:
                await self._warn("FailedMount", str(exc))
                await asyncio.sleep(RETRY_SECONDS)
        for c in self.containers:
            c.state = {"waiting": {"reason": "PodInitializing"}}
        return not self.terminating

    async def _lifecycle(self) -> None:
        try:
            if not await self._setup():
                return
            for c in self.containers:
                if c.kind == "main" or self.terminating:
                    break
                self._supervisors[c.name] = self._spawn(self._supervise(c))
                if c.kind == "init":
                    await self._supervisors[c.name]
                    if c.exit_code != 0:
                        self.init_failed = True
                        break
                else:
                    while not (c.running and c.started) and not self.terminating:
                        await asyncio.sleep(0.05)
            if self.init_failed or self.terminating:
                return
            self.initialized = True
            mains = [c for c in self.containers if c.kind == "main"]
            for c in mains:
                self._supervisors[c.name] = self._spawn(self._supervise(c))
            await asyncio.gather(*(self._supervisors[c.name] for c in mains))
        finally:
            if not self.terminating and not self.gone:
                grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
                await self._terminate(grace)

    async def _supervise(self, c: Container) -> None:
        backoff = 1.0
        while not self.terminating:
            if not await self._start(c):
                await asyncio.sleep(RETRY_SECONDS)
                continue
            await c.reap()
            if not self._will_restart(c):
                return
            c.last_state = c.state  # the termination stays the container's lastState while it waits
            c.state = {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off {backoff:.0f}s"}}
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
            if self.terminating:
                return
            c.restart_count += 1

    async def _start(self, c: Container) -> bool:
        assert self.sandbox is not None
        try:
            image = image_config(c.spec.get("image", ""))
        except ImageError as exc:
            c.state = {"waiting": {"reason": "ErrImagePull", "message": str(exc)}}
            await self._warn("Failed", str(exc))
            return False
        base = {
            "HOME": "/",
            **image.env,
            "HOSTNAME": self.pod["metadata"]["name"],
            "KUBERNETES_SERVICE_HOST": self.ctx.api_host,
            "KUBERNETES_SERVICE_PORT": str(self.ctx.api_port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(self.ctx.api_port),
            "KUBERNETES_PORT": f"tcp://{self.ctx.api_host}:{self.ctx.api_port}",
        }
        try:
            pod = {**self.pod, "status": {"podIP": self.sandbox.pod_ip, "hostIP": self.ctx.api_host}}
            env = container_env(pod, c.spec, base, await lookups(self.ctx.api, self.pod))
            identity = container_identity(self.pod, c.spec)
            mounts = self._mounts(c, image)
        except ConfigError as exc:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            await self._warn("Failed", f"Error: {exc}")
            return False
        await c.start(self.sandbox, mounts, env, identity, image, traversable=self.ctx.image_env.traversable)
        post_start = (c.spec.get("lifecycle") or {}).get("postStart")
        if post_start is not None:
            code = await c.exec(list((post_start.get("exec") or {}).get("command") or ["false"]), 30)
            if code != 0:
                await self._warn("FailedPostStartHook", f"PostStartHook failed for {c.name} (exit {code})")
                await c.stop(float(self.pod["spec"].get("terminationGracePeriodSeconds", 30)))
                return True
        c.started = c.kind != "init" and c.spec.get("startupProbe") is None and c.running
        for kind in PROBES:
            if c.spec.get(kind) is not None:
                self._spawn(c.probe_loop(kind, self.sandbox.pod_ip, self._probe_failed))
        return True

    def _mounts(self, c: Container, image: ImageConfig) -> list[Mount]:
        binds = self.ctx.image_env.binds if image.project else ()
        mounts = [Mount(b.source, b.target, True) for b in binds]
        for m in c.spec.get("volumeMounts") or []:
            directory = self.volumes.get(m["name"])
            if directory is None:
                raise ConfigError(f"volumeMount {m['name']!r} names no volume")
            source = directory / m["subPath"] if m.get("subPath") else directory
            if m.get("subPath"):
                source.mkdir(parents=True, exist_ok=True)
            mounts.append(Mount(str(source), m["mountPath"], bool(m.get("readOnly", False))))
        return mounts

    async def _probe_failed(self, c: Container, kind: str) -> None:
        await self._warn("Unhealthy", f"{kind.removesuffix('Probe').capitalize()} probe failed for {c.name}")
        grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        await c.stop(grace)

    # ------------------------------------------------------------------ termination

    async def _kill(self, c: Container, deadline: float) -> None:
        pre_stop = (c.spec.get("lifecycle") or {}).get("preStop")
        if pre_stop is not None and c.running:
            if "exec" not in pre_stop:
                await self._warn("FailedPreStopHook", f"{c.name}: only exec preStop hooks are supported")
            else:
                code = await c.exec(list(pre_stop["exec"]["command"]), max(deadline - time.monotonic(), 0))
                if code != 0:
                    await self._warn("FailedPreStopHook", f"PreStopHook failed for {c.name} (exit {code})")
        while not turn_has_come(self.containers, c) and time.monotonic() < deadline and c.running:
            await asyncio.sleep(0.02)
        await c.stop(max(deadline - time.monotonic(), MIN_GRACE_AFTER_HOOK_SECONDS))

    async def _terminate(self, grace: float) -> None:
        if self.terminating:
            await self._stopped.wait()
            return
        self.terminating = True
        self._deadline = time.monotonic() + grace
        try:
            await asyncio.gather(*(self._kill(c, self._deadline) for c in self.containers if c.running))
            for task in self._supervisors.values():
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        finally:
            self._stopped.set()
        await self._write_status(force=True)
        if self.pod["metadata"].get("deletionTimestamp") and not self.gone:
            try:
                await self.ctx.api.delete(
                    self.path,
                    {
                        "kind": "DeleteOptions",
                        "apiVersion": "v1",
                        "gracePeriodSeconds": 0,
                        "preconditions": {"uid": self.uid},
                    },
                )
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise

    async def _cleanup(self) -> None:
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()
        if self.sandbox is not None and self.sandbox.netns is not None:
            self.ctx.network.remove_pod(self.sandbox.netns, self.sandbox.pod_ip)
            self.sandbox = Sandbox(None, self.sandbox.pod_ip, "", "")

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        views = [c.view(self._will_restart(c)) for c in self.containers]
        all_stopped = self._stopped.is_set() or (
            not any(c.running for c in self.containers)
            and not any(v.will_restart for v in views if v.kind != "init")
            and self.initialized
        )
        deleting = bool(self.pod["metadata"].get("deletionTimestamp"))
        phase = pod_phase(
            self.policy,
            views,
            init_failed=self.init_failed,
            deleting=deleting or self._stopped.is_set(),
            all_stopped=all_stopped,
        )
        if self._stopped.is_set() and phase not in ("Succeeded", "Failed"):
            phase = "Failed"
        pod_ip = self.sandbox.pod_ip if self.sandbox is not None else ""
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": pod_conditions(
                views,
                sandbox_ready=self.sandbox is not None and not self._stopped.is_set(),
                initialized=self.initialized,
                phase=phase,
            ),
            "hostIP": self.ctx.api_host,
            "hostIPs": [{"ip": self.ctx.api_host}],
            "startTime": self.start_time,
            "initContainerStatuses": [c.status() for c in self.containers if c.kind != "main"],
            "containerStatuses": [c.status() for c in self.containers if c.kind == "main"],
        }
        if pod_ip:
            status.update(podIP=pod_ip, podIPs=[{"ip": pod_ip}])
        return status

    async def _write_status(self, *, force: bool = False) -> None:
        status = self.status()
        if not force and status == self._last_status:
            return
        try:
            await self.ctx.api.patch(f"{self.path}/status", {"metadata": {"uid": self.uid}, "status": status})
            self._last_status = status
        except ApiError as exc:
            if exc.status in (404, 409):
                return
            if exc.status != 422 or force:
                raise

    async def _status_writer(self) -> None:
        while not self.gone:
            with contextlib.suppress(ApiError):
                await self._write_status()
            await asyncio.sleep(0.2)
