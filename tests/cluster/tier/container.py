"""One container of a Pod on the process kubelet: its process (started through ``launcher.py`` in the Pod's
network namespace and its own mount and UTS namespaces), its probes, hooks run inside it with ``nsenter``,
its termination message, and its status entry."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from e2e_local.podrunner import FALLBACK_LOG_BYTES, FALLBACK_LOG_LINES, MAX_TERMINATION_MESSAGE_BYTES

from . import launcher
from .podspec import ContainerKind, ContainerView, Identity, ImageConfig, named_port, probe_settings


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Mount:
    source: str
    target: str
    read_only: bool


@dataclass
class Sandbox:
    """What the Pod's containers share: the network namespace (None: the host's), the Pod IP, /etc/hosts."""

    netns: str | None
    pod_ip: str
    hosts: str
    hostname: str


@dataclass
class Container:
    spec: Mapping[str, Any]
    kind: ContainerKind
    index: int
    directory: Path
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "PodInitializing"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    restart_count: int = 0
    started: bool = False
    ready: bool = False
    process: asyncio.subprocess.Process | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    exit_code: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    identity: Identity | None = None
    started_at: str = ""
    log_offset: int = 0
    liveness_failed: bool = False

    @property
    def name(self) -> str:
        name: str = self.spec["name"]
        return name

    @property
    def running(self) -> bool:
        return self.process is not None and not self.exited.is_set()

    @property
    def log_path(self) -> Path:
        return self.directory / "log"

    @property
    def message_file(self) -> Path:
        return self.directory / "termination-log"

    @property
    def is_ready(self) -> bool:
        """Ready: its readinessProbe passed, or (without one) it runs and has started."""
        if not self.running or not self.started:
            return False
        return self.ready if self.spec.get("readinessProbe") is not None else True

    def view(self, will_restart: bool) -> ContainerView:
        return ContainerView(
            self.kind, self.running, self.started, self.is_ready, self.exit_code, will_restart
        )

    # ------------------------------------------------------------------ process

    async def start(
        self,
        sandbox: Sandbox,
        mounts: list[Mount],
        env: dict[str, str],
        identity: Identity,
        image: ImageConfig,
        *,
        traversable: Sequence[str] = (),
    ) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        scratch = self.directory / "scratch"
        scratch.mkdir(exist_ok=True)
        self.message_file.write_bytes(b"")
        self.message_file.chmod(0o666)
        message_path = self.spec.get("terminationMessagePath") or "/dev/termination-log"
        spec = launcher.Spec(
            scratch=str(scratch),
            hosts=sandbox.hosts,
            hostname=sandbox.hostname,
            mounts=[
                *({"source": m.source, "target": m.target, "readOnly": m.read_only} for m in mounts),
                {"source": str(self.message_file), "target": message_path, "readOnly": False},
            ],
            read_only_root=identity.read_only_root,
            working_dir=self.spec.get("workingDir") or image.working_dir,
            users=[list(u) for u in image.users],
            uid=identity.uid,
            gid=identity.gid,
            groups=list(identity.groups),
            env=env,
            argv=[*self.spec.get("command", []), *self.spec.get("args", [])],
            traversable=list(traversable),
        )
        spec_file = self.directory / "spec.json"
        spec.write(spec_file)
        argv = launcher.command(spec_file, sandbox.netns)
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        self.env, self.identity = env, identity
        self.exited = asyncio.Event()
        self.exit_code = None
        self.liveness_failed = False
        self.started_at = now_iso()
        if "terminated" in self.state:
            self.last_state = self.state
        self.state = {"running": {"startedAt": self.started_at}}
        # started: after the postStart hook, and the startupProbe if there is one
        self.started = False
        self.ready = False

    async def reap(self) -> int:
        assert self.process is not None
        code = await self.process.wait()
        if code < 0:
            code = 128 - code
        with contextlib.suppress(FileNotFoundError):
            (self.directory / "spec.json").unlink()
        terminated: dict[str, Any] = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": self.started_at,
            "finishedAt": now_iso(),
            "containerID": self.container_id,
        }
        if message := self.termination_message(code):
            terminated["message"] = message
        self.state = {"terminated": terminated}
        self.exit_code = code
        self.started = self.ready = False
        self.exited.set()
        return code

    def termination_message(self, code: int) -> str:
        message = ""
        if self.message_file.is_file():
            with self.message_file.open("rb") as fh:
                message = fh.read(MAX_TERMINATION_MESSAGE_BYTES).decode(errors="replace")
        if not message and code != 0 and self.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            with self.log_path.open("rb") as fh:
                fh.seek(self.log_offset)
                tail = fh.read()[-FALLBACK_LOG_BYTES:].decode(errors="replace")
            message = "\n".join(tail.splitlines()[-FALLBACK_LOG_LINES:])
        return message

    @property
    def container_id(self) -> str:
        return f"process://{self.process.pid}" if self.process is not None else ""

    def signal(self, sig: signal.Signals, *, group: bool = False) -> None:
        if self.process is None or self.exited.is_set():
            return
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(self.process.pid, sig)
            else:
                os.kill(self.process.pid, sig)

    async def stop(self, grace: float) -> None:
        """SIGTERM to the container's PID 1, SIGKILL to all its processes after ``grace`` seconds."""
        if not self.running:
            return
        self.signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.exited.wait(), grace)
        if not self.exited.is_set():
            self.signal(signal.SIGKILL, group=True)
            await self.exited.wait()
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)

    # ------------------------------------------------------------------ exec, hooks, probes

    async def exec(self, command: list[str], timeout: float) -> int:
        """Run ``command`` inside the container (its namespaces, root, user and environment)."""
        if not self.running or self.process is None or self.identity is None:
            return -1
        argv = [
            "nsenter",
            "-t",
            str(self.process.pid),
            "-m",
            "-n",
            "-u",
            "-r",
            "-w",
            "-S",
            str(self.identity.uid),
            "-G",
            str(self.identity.gid),
            "--",
            *command,
        ]
        with (self.directory / "exec.log").open("ab") as log:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env,
                start_new_session=True,
            )
        try:
            return await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            return -1

    async def probe_once(self, probe: Mapping[str, Any], pod_ip: str) -> bool:
        timeout = probe_settings(probe).timeout
        if "exec" in probe:
            return await self.exec(list(probe["exec"]["command"]), timeout) == 0
        action = probe.get("httpGet") or probe.get("tcpSocket") or {}
        port = named_port(self.spec, action.get("port", 80))
        host = action.get("host") or pod_ip
        if "tcpSocket" in probe:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
            except (OSError, TimeoutError):
                return False
            writer.close()
            return True
        url = f"{action.get('scheme', 'HTTP').lower()}://{host}:{port}{action.get('path', '/')}"
        try:
            # The kubelet does not verify an HTTPS probe's certificate either.
            async with httpx.AsyncClient(timeout=timeout, verify=False) as http:  # noqa: S501
                resp = await http.get(url)
        except httpx.HTTPError:
            return False
        return 200 <= resp.status_code < 400

    async def probe_loop(self, kind: str, pod_ip: str, on_failure: Any) -> None:
        """Run one probe (startupProbe, readinessProbe or livenessProbe) while this instance runs."""
        probe = self.spec[kind]
        settings = probe_settings(probe)
        exited = self.exited
        failures = successes = 0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(exited.wait(), settings.initial_delay)
        while not exited.is_set():
            if kind != "startupProbe" and self.spec.get("startupProbe") is not None and not self.started:
                await asyncio.sleep(0.2)
                continue
            ok = await self.probe_once(probe, pod_ip)
            if exited.is_set():
                return
            failures, successes = (0, successes + 1) if ok else (failures + 1, 0)
            if kind == "startupProbe":
                if ok:
                    self.started = True
                    return
            elif kind == "readinessProbe":
                if ok and successes >= settings.success_threshold:
                    self.ready = True
                elif not ok and failures >= settings.failure_threshold:
                    self.ready = False
            if not ok and failures >= settings.failure_threshold and kind != "readinessProbe":
                await on_failure(self, kind)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(exited.wait(), settings.period)

    def status(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "",
            "ready": self.is_ready,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.process is not None:
            entry["containerID"] = self.container_id
        if self.kind != "init" or self.spec.get("restartPolicy") == "Always":
            entry["started"] = bool(self.started and self.running)
        return entry
