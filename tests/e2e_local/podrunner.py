"""A local Pod runner: executes a Pod manifest (a plain dict) on this machine, with the kubelet's semantics
that memsync depends on. It is a test harness, not a container runtime: there are no images, namespaces or
cgroups; every container is a local process group running the container's own ``command`` + ``args`` with
its own ``env``.

How a Pod is mapped onto the machine
------------------------------------
* **Directories.** Each Pod gets ``<workdir>/``; each ``emptyDir`` volume is a fresh directory
  ``<workdir>/volumes/<name>/`` (so two Pods never share one), each ``secret`` volume a directory holding
  one file per key. Each container gets its own root ``<workdir>/containers/<name>/root/``: every
  ``volumeMount.mountPath`` is a *symlink* at ``<root><mountPath>`` to the volume directory (or to its
  ``subPath``); the ancestors of a mount path are real directories. The store folders that memsync creates
  *inside* ``/mnt/memory`` are therefore real directories (memsync refuses a store root that is a symlink;
  only its ancestors are one here). The process gets ``MEMSYNC_TEST_ROOT=<root>``, the test-only variable
  under which memsync resolves every absolute path of its configuration (``/mnt/memory/...``,
  ``/var/lib/memsync``, ``/dev/termination-log``), and its working directory is ``<root><workingDir>``
  (``<root>`` when unset). ``HOME`` and ``TMPDIR`` are private to the container.
* **Termination messages.** ``terminationMessagePath`` (default ``/dev/termination-log``) is a fresh, empty
  regular file under the container's root for every start of the container; it is read (at most 4096 bytes)
  when the container exits. ``FallbackToLogsOnError`` uses the tail of the logs of a failed container.
* **Ports.** Several Pods run at once on one machine, and a Pod's containers share one network namespace, so
  every port a Pod names — ``containerPort``s, the ports of probes, and the value of the environment
  variables in ``PORT_ENV_VARS`` (``MEMSYNC_METRICS_PORT``, which sets the port the sync agent serves
  ``/readyz`` on) — is mapped to a free loopback port of its own per Pod. Probes use the mapped port and
  those environment variables are rewritten to it, consistently across the Pod's containers and hooks
  (``PodRunner.port_map`` shows the mapping).
* **Environment.** Containers do not inherit the test's environment: they get ``PATH`` (the venv's
  ``bin`` first, so ``memsync`` and ``python`` are the venv's), ``HOME``, ``TMPDIR``, ``HOSTNAME`` (the Pod
  name), ``LANG``, then ``harness_env`` (test-only knobs such as ``MEMSYNC_TEST_DELETE_WINDOW``), then the
  container's ``env`` in order with ``$(VAR)`` references expanded as the kubelet does, ``value`` and
  ``valueFrom.secretKeyRef`` (resolved from the Secret dicts given to the runner; a missing Secret or key
  leaves the container *waiting* with reason ``CreateContainerConfigError`` and the kubelet's message, and
  the Pod ``Pending``, unless the ref is ``optional``), then ``MEMSYNC_TEST_ROOT``.

Lifecycle (``restartPolicy: Never`` Pods)
-----------------------------------------
* Init containers run one after another. A regular init container must exit 0; a failure stops the Pod
  (phase ``Failed``, the main containers never start). A native sidecar (``restartPolicy: Always``) is
  started and the next container waits until it has *started*, as the kubelet does: until its
  ``startupProbe`` passes (``httpGet`` or ``tcpSocket``, polled every ``probe_interval`` seconds), else
  until its process runs. Readiness gates nothing (a ``readinessProbe`` only sets ``ready``); a sidecar
  whose startupProbe never passes keeps every later container from starting. Then all main containers
  start.
* A sidecar that exits while the Pod is not terminating is restarted after a backoff (``restart_backoff``,
  doubling, capped at ``max_restart_backoff``); its ``restartCount`` grows and ``lastState`` keeps the
  previous termination. ``kill(name)`` SIGKILLs a container's process group on demand.
* Termination — on ``delete()``, or when every main container has exited by itself — follows the kubelet's
  ``killContainer`` for native sidecars (KEP-753): the grace period (``terminationGracePeriodSeconds``,
  default 30, or the override passed to ``delete``) starts counting at once; for every running container
  concurrently, its ``lifecycle.preStop`` exec hook runs first (bounded by the grace left; it runs in the
  container's root and environment), then the container waits for its turn — a sidecar only after every
  main container and every sidecar defined after it has exited; a main container at once — then gets
  SIGTERM (to its main process only, as PID 1 in a container would) and, after the grace left but never
  less than 2 s (the kubelet's minimum after a hook ate the budget), SIGKILL to its whole process group.
  So a sidecar's preStop runs while the main container is still handling its SIGTERM, and the sidecar gets
  its SIGTERM only after the main container has exited.
* Status: ``status()`` returns a Kubernetes-shaped Pod ``status`` at any moment (phase, conditions,
  ``initContainerStatuses`` including the sidecar, ``containerStatuses``, each with ``state`` /
  ``lastState`` / ``ready`` / ``started`` / ``restartCount``; a terminated state carries ``exitCode``,
  ``reason`` — ``Completed`` or ``Error`` — and ``message``, the termination message). Exit by a signal is
  reported as 128 + the signal number, as container runtimes do. The phase becomes terminal only after every
  container (sidecars included) has stopped.
* Each container's stdout and stderr are appended (across restarts) to
  ``<workdir>/logs/<name>.stdout`` / ``.stderr``; a hook's output to ``<name>.prestop.log``.
  ``events`` records the order of what happened (container started/exited, signals sent, hooks run) so
  tests can assert order without timing.

Not modelled: images, liveness probes, postStart hooks, resource limits, read-only mounts or root
filesystems, security contexts, ``restartPolicy`` other than ``Never``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx

PORT_ENV_VARS: frozenset[str] = frozenset({"MEMSYNC_METRICS_PORT"})
DEFAULT_GRACE_SECONDS = 30.0
MIN_GRACE_AFTER_HOOK_SECONDS = 2.0
MAX_TERMINATION_MESSAGE_BYTES = 4096
FALLBACK_LOG_BYTES = 2048
FALLBACK_LOG_LINES = 80
DEFAULT_VENV_BIN = Path(sys.executable).parent

ContainerKind = Literal["init", "sidecar", "main"]


class PodSpecError(ValueError):
    """The manifest uses something this runner does not model; the message names the field."""


class ContainerConfigError(Exception):
    """The kubelet could not build the container's config (CreateContainerConfigError)."""


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand_var_refs(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: defined names are replaced, ``$$`` escapes, others stay."""

    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VAR_REF.sub(repl, text)


def decode_secret_data(secret: Mapping[str, Any]) -> dict[str, str]:
    """A Secret dict's ``data`` (base64) and ``stringData`` (plain; wins, as the API server merges it)."""
    values: dict[str, str] = {}
    for key, encoded in (secret.get("data") or {}).items():
        values[key] = base64.b64decode(encoded).decode("utf-8")
    for key, plain in (secret.get("stringData") or {}).items():
        values[key] = str(plain)
    return values


@dataclass(frozen=True)
class PodEvent:
    at: float  # time.monotonic()
    container: str
    what: str  # started | exited:<code> | sigterm | sigkill | prestop-start | prestop-end:<code> | ...


@dataclass
class _Instance:
    """One start of a container (a restart is a new instance)."""

    process: asyncio.subprocess.Process
    started_at: str
    log_offset: int
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    exit_code: int | None = None
    finished_at: str | None = None
    sigterm_sent: bool = False


@dataclass
class _Container:
    spec: Mapping[str, Any]
    kind: ContainerKind
    index: int
    root: Path
    stdout_path: Path
    stderr_path: Path
    prestop_log: Path
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "PodInitializing"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    instance: _Instance | None = None
    ever_started: bool = False
    done: bool = False  # will not run (again)

    @property
    def name(self) -> str:
        name: str = self.spec["name"]
        return name

    @property
    def alive(self) -> bool:
        return self.instance is not None and not self.instance.exited.is_set()

    @property
    def termination_message_path(self) -> str:
        path: str = self.spec.get("terminationMessagePath") or "/dev/termination-log"
        return path


class PodRunner:
    """Runs one Pod manifest locally. Use as ``async with PodRunner(...) as pod: await pod.start()``."""

    def __init__(
        self,
        pod: Mapping[str, Any],
        *,
        workdir: Path,
        secrets: Iterable[Mapping[str, Any]] = (),
        harness_env: Mapping[str, str] | None = None,
        venv_bin: Path = DEFAULT_VENV_BIN,
        probe_interval: float = 0.1,
        restart_backoff: float = 0.2,
        max_restart_backoff: float = 2.0,
        port_env_vars: frozenset[str] = PORT_ENV_VARS,
    ) -> None:
        self.pod = pod
        self.name: str = pod.get("metadata", {}).get("name", "pod")
        self.namespace: str = pod.get("metadata", {}).get("namespace", "default")
        spec: Mapping[str, Any] = pod["spec"]
        self.spec = spec
        restart_policy = spec.get("restartPolicy", "Always")
        if restart_policy != "Never":
            raise PodSpecError(f"spec.restartPolicy: only 'Never' is modelled, got {restart_policy!r}")
        self.workdir = workdir
        self.secrets: dict[str, Mapping[str, Any]] = {
            s["metadata"]["name"]: s
            for s in secrets
            if s.get("metadata", {}).get("namespace", self.namespace) == self.namespace
        }
        self.harness_env = dict(harness_env or {})
        self.venv_bin = venv_bin
        self.probe_interval = probe_interval
        self.restart_backoff = restart_backoff
        self.max_restart_backoff = max_restart_backoff
        self.port_env_vars = port_env_vars
        self.grace_seconds = float(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))
        self.events: list[PodEvent] = []

        self.containers: list[_Container] = []
        for i, c in enumerate(spec.get("initContainers") or []):
            kind: ContainerKind = "sidecar" if c.get("restartPolicy") == "Always" else "init"
            self.containers.append(self._make_container(c, kind, i))
        for i, c in enumerate(spec.get("containers") or []):
            self.containers.append(self._make_container(c, "main", i))
        if not any(c.kind == "main" for c in self.containers):
            raise PodSpecError("spec.containers: a Pod needs at least one container")
        self._by_name = {c.name: c for c in self.containers}
        self.port_map: dict[int, int] = {}
        self._validate_and_map_ports()

        self.volume_dirs: dict[str, Path] = {}
        self._prepared = False
        self.phase_override: str | None = None  # "Failed" when an init container failed
        self.start_time: str | None = None
        self.deletion_started: float | None = None
        self.config_error = False
        self._terminating = False
        self._finished = asyncio.Event()
        self._lifecycle: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._kill_tasks: dict[str, asyncio.Task[None]] = {}
        self._deadline: float | None = None
        self._termination_done = asyncio.Event()

    # ------------------------------------------------------------------ setup

    def _make_container(self, c: Mapping[str, Any], kind: ContainerKind, index: int) -> _Container:
        name = c.get("name")
        where = f"{'initContainers' if kind != 'main' else 'containers'}[{index}]"
        if not name:
            raise PodSpecError(f"spec.{where}.name is required")
        if not c.get("command"):
            raise PodSpecError(f"spec.{where}.command: required here (there is no image entrypoint)")
        lifecycle = c.get("lifecycle") or {}
        if "postStart" in lifecycle:
            raise PodSpecError(f"spec.{where}.lifecycle.postStart is not modelled")
        pre_stop = lifecycle.get("preStop")
        if pre_stop is not None and "exec" not in pre_stop:
            raise PodSpecError(f"spec.{where}.lifecycle.preStop: only 'exec' hooks are modelled")
        for probe_name in ("readinessProbe", "startupProbe"):
            probe = c.get(probe_name)
            if probe is not None and "httpGet" not in probe and "tcpSocket" not in probe:
                raise PodSpecError(f"spec.{where}.{probe_name}: only httpGet and tcpSocket are modelled")
        base = self.workdir / "containers" / name
        logs = self.workdir / "logs"
        return _Container(
            spec=c,
            kind=kind,
            index=index,
            root=base / "root",
            stdout_path=logs / f"{name}.stdout",
            stderr_path=logs / f"{name}.stderr",
            prestop_log=logs / f"{name}.prestop.log",
        )

    def _probe_port(self, c: _Container, probe: Mapping[str, Any]) -> int:
        action = probe.get("httpGet") or probe.get("tcpSocket") or {}
        port = action.get("port")
        if isinstance(port, str) and not port.isdigit():
            for p in c.spec.get("ports") or []:
                if p.get("name") == port:
                    return int(p["containerPort"])
            raise PodSpecError(f"container {c.name}: probe port {port!r} names no containerPort")
        if port is None:
            raise PodSpecError(f"container {c.name}: probe has no port")
        return int(port)

    def _validate_and_map_ports(self) -> None:
        ports: set[int] = set()
        for c in self.containers:
            for p in c.spec.get("ports") or []:
                ports.add(int(p["containerPort"]))
            for probe_name in ("readinessProbe", "startupProbe"):
                probe = c.spec.get(probe_name)
                if probe is not None:
                    ports.add(self._probe_port(c, probe))
            for e in c.spec.get("env") or []:
                if e.get("name") in self.port_env_vars and str(e.get("value", "")).isdigit():
                    ports.add(int(e["value"]))
        self.port_map = {p: free_loopback_port() for p in sorted(ports)}

    def _prepare_filesystem(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        for i, vol in enumerate(self.spec.get("volumes") or []):
            vname = vol["name"]
            vdir = self.workdir / "volumes" / vname
            if vdir.exists():
                shutil.rmtree(vdir)
            vdir.mkdir(parents=True)
            if "emptyDir" in vol:
                pass
            elif "secret" in vol:
                sname = vol["secret"]["secretName"]
                secret = self.secrets.get(sname)
                if secret is None:
                    raise PodSpecError(f"spec.volumes[{i}]: secret {sname!r} was not given to the runner")
                for key, value in decode_secret_data(secret).items():
                    (vdir / key).write_text(value)
            else:
                raise PodSpecError(f"spec.volumes[{i}] ({vname}): only emptyDir and secret are modelled")
            self.volume_dirs[vname] = vdir
        for c in self.containers:
            c.root.mkdir(parents=True, exist_ok=True)
            (c.root / "home").mkdir(exist_ok=True)
            (c.root / "tmp").mkdir(exist_ok=True)
            mount_paths = [m["mountPath"] for m in c.spec.get("volumeMounts") or []]
            for m in c.spec.get("volumeMounts") or []:
                mpath: str = m["mountPath"]
                if not mpath.startswith("/") or ".." in mpath.split("/"):
                    raise PodSpecError(
                        f"container {c.name}: mountPath {mpath!r} must be a clean absolute path"
                    )
                if any(other != mpath and mpath.startswith(other.rstrip("/") + "/") for other in mount_paths):
                    raise PodSpecError(f"container {c.name}: nested mount {mpath!r} is not modelled")
                vdir = self.volume_dirs.get(m["name"])
                if vdir is None:
                    raise PodSpecError(f"container {c.name}: volumeMount {m['name']!r} names no volume")
                target = vdir / m["subPath"] if m.get("subPath") else vdir
                target.mkdir(parents=True, exist_ok=True)
                link = self.host_path(c.name, mpath)
                link.parent.mkdir(parents=True, exist_ok=True)
                if not link.is_symlink():
                    link.symlink_to(target, target_is_directory=True)
            self.host_path(c.name, c.termination_message_path).parent.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ paths and logs

    def host_path(self, container: str, path: str) -> Path:
        """Where the absolute path ``path`` of a container lives on this machine."""
        return self._by_name[container].root / path.lstrip("/")

    def root(self, container: str) -> Path:
        return self._by_name[container].root

    def volume_dir(self, volume: str) -> Path:
        return self.workdir / "volumes" / volume

    def logs(self, container: str) -> str:
        """Everything the container (all its restarts) wrote to stdout and stderr, and its preStop hook."""
        c = self._by_name[container]
        parts = [
            p.read_text(errors="replace") for p in (c.stdout_path, c.stderr_path, c.prestop_log) if p.exists()
        ]
        return "".join(parts)

    def termination_message(self, container: str) -> str | None:
        state = self._by_name[container].state.get("terminated")
        if state is None:
            return None
        message: str | None = state.get("message")
        return message

    def exit_code(self, container: str) -> int | None:
        state = self._by_name[container].state.get("terminated")
        return None if state is None else int(state["exitCode"])

    def restart_count(self, container: str) -> int:
        return self._by_name[container].restart_count

    def is_running(self, container: str) -> bool:
        return self._by_name[container].alive

    def event_index(self, container: str, what: str, *, start: int = 0) -> int:
        """Index in ``events`` of the first event ``what`` (prefix match) of ``container``; -1 if none."""
        for i in range(start, len(self.events)):
            ev = self.events[i]
            if ev.container == container and ev.what.startswith(what):
                return i
        return -1

    def _event(self, container: str, what: str) -> None:
        self.events.append(PodEvent(time.monotonic(), container, what))

    # ------------------------------------------------------------------ environment

    def _base_env(self, c: _Container) -> dict[str, str]:
        return {
            "PATH": f"{self.venv_bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(c.root / "home"),
            "TMPDIR": str(c.root / "tmp"),
            "HOSTNAME": self.name,
            "LANG": "C.UTF-8",
        }

    def _build_env(self, c: _Container) -> dict[str, str]:
        env = self._base_env(c)
        env.update(self.harness_env)
        for i, e in enumerate(c.spec.get("env") or []):
            name = e["name"]
            if "valueFrom" in e:
                value = self._resolve_value_from(c, i, e["valueFrom"])
                if value is None:
                    continue
            else:
                value = expand_var_refs(str(e.get("value", "")), env)
            if name in self.port_env_vars and value.isdigit() and int(value) in self.port_map:
                value = str(self.port_map[int(value)])
            env[name] = value
        if c.spec.get("envFrom"):
            raise PodSpecError(f"container {c.name}: envFrom is not modelled")
        env["MEMSYNC_TEST_ROOT"] = str(c.root)
        return env

    def _resolve_value_from(self, c: _Container, i: int, value_from: Mapping[str, Any]) -> str | None:
        ref = value_from.get("secretKeyRef")
        if ref is None:
            raise PodSpecError(f"container {c.name}: env[{i}].valueFrom: only secretKeyRef is modelled")
        optional = bool(ref.get("optional", False))
        secret = self.secrets.get(ref["name"])
        if secret is None:
            if optional:
                return None
            raise ContainerConfigError(f'secret "{ref["name"]}" not found')
        data = decode_secret_data(secret)
        if ref["key"] not in data:
            if optional:
                return None
            raise ContainerConfigError(
                f"couldn't find key {ref['key']} in Secret {self.namespace}/{ref['name']}"
            )
        return data[ref["key"]]

    def _argv(self, spec: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
        return [expand_var_refs(str(a), env) for a in [*spec.get("command", []), *spec.get("args", [])]]

    # ------------------------------------------------------------------ processes

    async def _spawn(self, c: _Container) -> bool:
        """Start one instance of ``c``; False (and a waiting state) on a config error."""
        try:
            env = self._build_env(c)
        except ContainerConfigError as exc:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            self._event(c.name, f"config-error:{exc}")
            return False
        argv = self._argv(c.spec, env)
        tmsg = self.host_path(c.name, c.termination_message_path)
        with contextlib.suppress(FileNotFoundError):
            tmsg.unlink()
        tmsg.write_bytes(b"")
        cwd = self.host_path(c.name, c.spec["workingDir"]) if c.spec.get("workingDir") else c.root
        cwd.mkdir(parents=True, exist_ok=True)
        offset = c.stderr_path.stat().st_size if c.stderr_path.exists() else 0
        with c.stdout_path.open("ab") as out, c.stderr_path.open("ab") as err:
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=env,
                    cwd=str(cwd),
                    start_new_session=True,
                )
            except OSError as exc:
                # The runtime could not start the process (e.g. executable not found): StartError.
                c.last_state = c.state if "terminated" in c.state else c.last_state
                c.state = {
                    "terminated": {
                        "exitCode": 128,
                        "reason": "StartError",
                        "message": str(exc),
                        "startedAt": _now_iso(),
                        "finishedAt": _now_iso(),
                    }
                }
                self._event(c.name, "exited:128")
                return True
        instance = _Instance(process=process, started_at=_now_iso(), log_offset=offset)
        if "terminated" in c.state:
            c.last_state = c.state
        c.instance = instance
        c.ever_started = True
        c.state = {"running": {"startedAt": instance.started_at}}
        c.started = c.kind != "sidecar" or c.spec.get("startupProbe") is None
        c.ready = False
        self._event(c.name, "started")
        self._track(self._reap(c, instance))
        if c.spec.get("readinessProbe") is not None or c.spec.get("startupProbe") is not None:
            self._track(self._probe_loop(c, instance))
        elif c.kind != "init":
            c.ready = True
        if self._terminating and c.name not in self._kill_tasks and self._deadline is not None:
            self._kill_tasks[c.name] = self._track(self._kill(c, self._deadline))
        return True

    async def _reap(self, c: _Container, instance: _Instance) -> None:
        code = await instance.process.wait()
        if code < 0:
            code = 128 - code  # killed by signal N -> 128+N, as container runtimes report it
        instance.exit_code = code
        instance.finished_at = _now_iso()
        c.ready = False
        c.state = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": instance.started_at,
                "finishedAt": instance.finished_at,
                **({"message": msg} if (msg := self._read_termination_message(c, instance, code)) else {}),
            }
        }
        self._event(c.name, f"exited:{code}")
        instance.exited.set()

    def _read_termination_message(self, c: _Container, instance: _Instance, code: int) -> str:
        path = self.host_path(c.name, c.termination_message_path)
        message = ""
        if path.is_file():
            with path.open("rb") as fh:
                message = fh.read(MAX_TERMINATION_MESSAGE_BYTES).decode("utf-8", errors="replace")
        if not message and code != 0 and c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            with c.stderr_path.open("rb") as fh:
                fh.seek(instance.log_offset)
                tail = fh.read()[-FALLBACK_LOG_BYTES:].decode("utf-8", errors="replace")
            message = "\n".join(tail.splitlines()[-FALLBACK_LOG_LINES:])
        return message

    async def _probe_once(self, c: _Container, probe: Mapping[str, Any]) -> bool:
        port = self.port_map[self._probe_port(c, probe)]
        if "tcpSocket" in probe:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 1.0)
            except (OSError, TimeoutError):
                return False
            writer.close()
            return True
        get = probe["httpGet"]
        url = f"http://127.0.0.1:{port}{get.get('path', '/')}"
        timeout = float(probe.get("timeoutSeconds", 1))
        try:
            async with httpx.AsyncClient(timeout=timeout) as http:
                resp = await http.get(url)
        except httpx.HTTPError:
            return False
        return 200 <= resp.status_code < 400

    async def _probe_loop(self, c: _Container, instance: _Instance) -> None:
        startup = c.spec.get("startupProbe")
        readiness = c.spec.get("readinessProbe")
        while not instance.exited.is_set():
            if not c.started and startup is not None:
                c.started = await self._probe_once(c, startup)
            elif readiness is not None:
                ok = await self._probe_once(c, readiness)
                if not instance.exited.is_set():
                    c.ready = ok
            else:
                c.ready = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(instance.exited.wait(), self.probe_interval)

    def _track(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _signal(self, c: _Container, sig: signal.Signals, *, group: bool) -> None:
        instance = c.instance
        if instance is None or instance.exited.is_set():
            return
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(instance.process.pid, sig)
            else:
                os.kill(instance.process.pid, sig)
        if sig == signal.SIGTERM:
            instance.sigterm_sent = True
        self._event(c.name, sig.name.lower())

    # ------------------------------------------------------------------ lifecycle

    def prepare(self) -> None:
        """Create the Pod's volumes and container roots (``start`` does it when not done yet).

        Call it first to plant something in a volume before the containers run.
        """
        if not self._prepared:
            self._prepare_filesystem()
            self._prepared = True

    async def start(self) -> None:
        """Prepare the Pod's directories and start its lifecycle in the background."""
        if self._lifecycle is not None:
            raise RuntimeError("the Pod was already started")
        self.prepare()
        self.start_time = _now_iso()
        self._lifecycle = self._track(self._run())

    async def _run(self) -> None:
        try:
            for c in self.containers:
                if c.kind == "main":
                    break
                if self._terminating:
                    return
                if not await self._spawn(c):
                    self.config_error = True
                    return
                if c.kind == "sidecar":
                    self._track(self._supervise_sidecar(c))
                    await self._gate(c)
                    continue
                assert c.instance is not None or "terminated" in c.state
                if c.instance is not None:
                    await c.instance.exited.wait()
                c.done = True
                if self.exit_code(c.name) != 0:
                    if not self._terminating:
                        self.phase_override = "Failed"
                        await self._terminate(self.grace_seconds)
                    return
            mains = [c for c in self.containers if c.kind == "main"]
            for c in mains:
                if self._terminating:
                    break
                if not await self._spawn(c):
                    self.config_error = True
                    # The kubelet keeps the other containers running and retries; the Pod stays Pending.
            waiters = [c.instance.exited.wait() for c in mains if c.instance is not None]
            await asyncio.gather(*waiters)
            for c in mains:
                c.done = True
            if not self._terminating and not self.config_error:
                await self._terminate(self.grace_seconds)
        finally:
            if self._terminating:
                await self._termination_done.wait()
            self._finished.set()

    async def _gate(self, c: _Container) -> None:
        """Wait until sidecar ``c`` has started (startupProbe passed, or running without one)."""
        while not self._terminating:
            if c.alive and c.started:
                return
            await asyncio.sleep(self.probe_interval / 2)

    async def _supervise_sidecar(self, c: _Container) -> None:
        backoff = self.restart_backoff
        while True:
            instance = c.instance
            if instance is not None:
                await instance.exited.wait()
            if self._terminating or self._finished.is_set():
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.max_restart_backoff)
            if self._terminating:
                return
            c.restart_count += 1
            self._event(c.name, "restarting")
            if not await self._spawn(c):
                return

    async def delete(self, grace_period_seconds: float | None = None) -> dict[str, Any]:
        """Delete the Pod: run the termination sequence and wait until every container stopped."""
        if self._lifecycle is None:
            raise RuntimeError("the Pod was never started")
        grace = self.grace_seconds if grace_period_seconds is None else float(grace_period_seconds)
        self.deletion_started = time.monotonic()
        if not self._terminating:
            self._event("", "delete")
            await self._terminate(grace)
        await self._finished.wait()
        return self.status()

    async def _terminate(self, grace: float) -> None:
        if self._terminating:
            await self._termination_done.wait()
            return
        self._terminating = True
        self._deadline = time.monotonic() + grace
        for c in self.containers:
            if c.alive and c.name not in self._kill_tasks:
                self._kill_tasks[c.name] = self._track(self._kill(c, self._deadline))
        try:
            while True:
                pending = [t for t in self._kill_tasks.values() if not t.done()]
                if not pending:
                    break
                await asyncio.gather(*pending)
        finally:
            for c in self.containers:
                c.done = True
            self._termination_done.set()

    def _turn_has_come(self, c: _Container) -> bool:
        if c.kind != "sidecar":
            return True
        for other in self.containers:
            if other.kind == "main" and other.alive:
                return False
            if other.kind == "sidecar" and other.index > c.index and other.alive:
                return False
        return True

    async def _kill(self, c: _Container, deadline: float) -> None:
        instance = c.instance
        if instance is None:
            return
        pre_stop = (c.spec.get("lifecycle") or {}).get("preStop")
        if pre_stop is not None and not instance.exited.is_set():
            await self._run_pre_stop(c, pre_stop["exec"]["command"], deadline)
        while not self._turn_has_come(c) and time.monotonic() < deadline and not instance.exited.is_set():
            await asyncio.sleep(0.02)
        remaining = max(deadline - time.monotonic(), MIN_GRACE_AFTER_HOOK_SECONDS)
        self._signal(c, signal.SIGTERM, group=False)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(instance.exited.wait(), remaining)
        if not instance.exited.is_set():
            self._signal(c, signal.SIGKILL, group=True)
            await instance.exited.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(instance.process.pid, signal.SIGKILL)  # stray children die with the container

    async def _run_pre_stop(self, c: _Container, command: list[str], deadline: float) -> None:
        try:
            env = self._build_env(c)
        except ContainerConfigError:
            return
        argv = [expand_var_refs(str(a), env) for a in command]
        self._event(c.name, "prestop-start")
        with c.prestop_log.open("ab") as log:
            try:
                hook = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=env,
                    cwd=str(c.root),
                    start_new_session=True,
                )
            except OSError as exc:
                self._event(c.name, f"prestop-end:error:{exc}")
                return
        try:
            code = await asyncio.wait_for(hook.wait(), max(deadline - time.monotonic(), 0.0))
            self._event(c.name, f"prestop-end:{code}")
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(hook.pid, signal.SIGKILL)
            await hook.wait()
            self._event(c.name, "prestop-end:timeout")

    async def kill(self, container: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` to a container now (SIGKILL: its whole process group) and wait for it to exit."""
        c = self._by_name[container]
        instance = c.instance
        if instance is None or instance.exited.is_set():
            raise RuntimeError(f"container {container} is not running")
        self._signal(c, sig, group=sig == signal.SIGKILL)
        if sig == signal.SIGKILL:
            await instance.exited.wait()

    async def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait until the Pod is done (terminal phase) or stuck (a container config error); its status."""
        assert self._lifecycle is not None, "start() first"
        await asyncio.wait_for(self._finished.wait(), timeout)
        if self._lifecycle.done() and not self._lifecycle.cancelled():
            exc = self._lifecycle.exception()
            if exc is not None:
                raise exc
        return self.status()

    async def wait_until(
        self, predicate: Callable[[PodRunner], bool], timeout: float, what: str = "condition"
    ) -> None:
        """Poll ``predicate(self)`` until true; raise TimeoutError naming ``what`` and the Pod status."""
        end = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > end:
                raise TimeoutError(
                    f"pod {self.name}: {what} not reached in {timeout}s; status={self.status()}"
                )
            await asyncio.sleep(0.05)

    @property
    def finished(self) -> bool:
        return self._finished.is_set()

    async def aclose(self) -> None:
        """Stop everything at once (SIGKILL) — for test teardown; idempotent."""
        self._terminating = True
        for c in self.containers:
            if c.instance is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(c.instance.process.pid, signal.SIGKILL)
        for c in self.containers:
            if c.instance is not None and not c.instance.exited.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(c.instance.exited.wait(), 5)
        self._termination_done.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> PodRunner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ status

    def _container_status(self, c: _Container) -> dict[str, Any]:
        status: dict[str, Any] = {
            "name": c.name,
            "image": c.spec.get("image", ""),
            "imageID": "",
            "ready": bool(c.ready and c.alive),
            "restartCount": c.restart_count,
            "state": c.state,
            "lastState": c.last_state,
        }
        if c.instance is not None:
            status["containerID"] = f"local://{c.instance.process.pid}"
        if c.kind != "init":
            status["started"] = bool(c.alive and c.started)
        return status

    def phase(self) -> str:
        mains = [c for c in self.containers if c.kind == "main"]
        all_stopped = all(not c.alive for c in self.containers)
        if self.phase_override is not None:
            return (
                self.phase_override if all_stopped else "Running" if self._any_started_main() else "Pending"
            )
        if not any(c.ever_started for c in mains):
            # A Pod deleted before its main containers ran ends Failed once everything stopped.
            deleted_early = self.deletion_started is not None and all_stopped and self._finished.is_set()
            return "Failed" if deleted_early else "Pending"
        if all(c.done and not c.alive for c in mains) and all_stopped and self._finished.is_set():
            codes = [self.exit_code(c.name) for c in mains]
            return "Succeeded" if all(code == 0 for code in codes) else "Failed"
        return "Running"

    def _any_started_main(self) -> bool:
        return any(c.ever_started for c in self.containers if c.kind == "main")

    def status(self) -> dict[str, Any]:
        phase = self.phase()
        inits = [c for c in self.containers if c.kind != "main"]
        mains = [c for c in self.containers if c.kind == "main"]
        initialized = all(
            (c.kind == "init" and self.exit_code(c.name) == 0) or (c.kind == "sidecar" and c.ever_started)
            for c in inits
        ) and any(c.ever_started for c in mains)
        ready = phase == "Running" and all(c.ready and c.alive for c in self.containers if c.kind != "init")

        def cond(kind: str, ok: bool) -> dict[str, Any]:
            return {"type": kind, "status": "True" if ok else "False"}

        status: dict[str, Any] = {
            "phase": phase,
            "conditions": [
                cond("PodScheduled", True),
                cond("Initialized", initialized),
                cond("ContainersReady", ready),
                cond("Ready", ready),
            ],
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "initContainerStatuses": [self._container_status(c) for c in inits],
            "containerStatuses": [self._container_status(c) for c in mains],
        }
        if self.start_time is not None:
            status["startTime"] = self.start_time
        return status
