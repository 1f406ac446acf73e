"""``python -m cluster.tier up|down|serve [--state DIR]`` (with ``tests`` on ``PYTHONPATH``).

``serve`` runs the whole cluster in the foreground: the tier's network, the control plane, and the process
kubelet; it writes ``cluster.json`` into the state directory once the Node is Ready and untainted, and
tears everything down on SIGTERM or SIGINT. Each ``serve`` starts from an empty etcd and no Pod directories:
the process kubelet cannot adopt the Pods of an earlier run (their processes are gone), so a cluster that
came back with them bound would show them Running forever and hang every finalizer. ``up`` starts ``serve``
in the background, waits for ``cluster.json`` and prints ``KUBECONFIG=...`` and the time to ready; ``down``
stops it. The pytest fixture of ``tests/cluster`` runs ``serve`` the same way."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from support import image_env

from .controlplane import ControlPlane, built_binaries, node_identity
from .kubeapi import KubeApi
from .kubelet import ProcessKubelet
from .network import TierNetwork
from .pod import NodeContext

NODE = "memsync-node"
INFO_FILE = "cluster.json"
#: What an earlier run leaves in the state directory that a new run must not find: etcd's data (the objects,
#: Pods bound to the node among them), the process kubelet's Pod directories, and the project's environment
#: as the memsync image has it (staged again from this clone: an earlier one may be another clone's).
FRESH_EACH_START = ("etcd", "pods", "image")
DEFAULT_STATE = Path(__file__).resolve().parents[3] / ".memsync" / "cluster"


@dataclass(frozen=True)
class ClusterInfo:
    """The contract between ``serve`` and its users (``up``, ``down``, the pytest fixture)."""

    kubeconfig: str
    server: str
    gateway: str
    node: str
    pid: int
    ready_seconds: float
    state_dir: str
    kubectl: str

    @classmethod
    def load(cls, state: Path) -> ClusterInfo | None:
        path = state / INFO_FILE
        if not path.is_file():
            return None
        return cls(**json.loads(path.read_text()))

    def save(self, state: Path) -> None:
        tmp = state / f".{INFO_FILE}.tmp"
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(state / INFO_FILE)


async def _node_ready(api: KubeApi) -> bool:
    node = await api.get(f"/api/v1/nodes/{NODE}")
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
    return ready and not node["spec"].get("taints")


async def serve(state: Path) -> None:
    started = time.monotonic()
    bin_dir, why = built_binaries()
    if bin_dir is None:
        raise SystemExit(why)
    state.mkdir(parents=True, exist_ok=True)
    (state / INFO_FILE).unlink(missing_ok=True)
    for leftover in FRESH_EACH_START:
        shutil.rmtree(state / leftover, ignore_errors=True)
    network = TierNetwork.create()
    plane = ControlPlane(bin_dir, state, network.gateway)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    kubelet: ProcessKubelet | None = None
    api: KubeApi | None = None
    try:
        await asyncio.to_thread(plane.start, NODE)
        pki = plane.pki.dir
        node_id = node_identity(NODE)
        api = KubeApi(
            plane.server, plane.pki.ca_crt, pki / f"{node_id.file_stem}.crt", pki / f"{node_id.file_stem}.key"
        )
        ctx = NodeContext(
            api,
            network,
            NODE,
            network.gateway,
            plane.api_port,
            state,
            post_event=_noop_event,
            image_env=image_env.stage(state / "image"),
        )
        kubelet = ProcessKubelet(ctx)
        ctx.post_event = kubelet.post_event
        await kubelet.run()
        admin = KubeApi(plane.server, plane.pki.ca_crt, pki / "admin.crt", pki / "admin.key")
        try:
            while not await _node_ready(admin):
                plane.check_alive()
                await asyncio.sleep(0.2)
        finally:
            await admin.aclose()
        info = ClusterInfo(
            kubeconfig=str(plane.admin_kubeconfig),
            server=plane.server,
            gateway=network.gateway,
            node=NODE,
            pid=os.getpid(),
            ready_seconds=round(time.monotonic() - started, 1),
            state_dir=str(state),
            kubectl=str(bin_dir / "kubectl"),
        )
        info.save(state)
        print(f"cluster ready in {info.ready_seconds} s", flush=True)
        while not stop.is_set():
            plane.check_alive()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    finally:
        (state / INFO_FILE).unlink(missing_ok=True)
        if kubelet is not None:
            await kubelet.stop()
        if api is not None:
            await api.aclose()
        plane.stop()
        network.destroy()


async def _noop_event(*_: object) -> None:
    return None


def spawn_serve(state: Path) -> subprocess.Popen[bytes]:
    """Start ``serve`` in its own session, its output in ``<state>/serve.log``."""
    state.mkdir(parents=True, exist_ok=True)
    tests_dir = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{tests_dir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    log = (state / "serve.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "cluster.tier", "serve", "--state", str(state)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def wait_ready(state: Path, proc: subprocess.Popen[bytes], timeout: float = 300) -> ClusterInfo:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        info = ClusterInfo.load(state)
        if info is not None:
            return info
        if proc.poll() is not None:
            tail = (state / "serve.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"the cluster did not start (exit {proc.returncode}):\n{tail}")
        time.sleep(0.2)
    proc.terminate()
    raise RuntimeError(f"the cluster was not ready after {timeout:.0f} s; see {state / 'serve.log'}")


def stop_serve(pid: int, timeout: float = 60) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m cluster.tier")
    parser.add_argument("command", choices=["up", "down", "serve"])
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE)
    args = parser.parse_args()
    state: Path = args.state.resolve()
    if args.command == "serve":
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        asyncio.run(serve(state))
    elif args.command == "up":
        existing = ClusterInfo.load(state)
        if existing is not None:
            print(f"already running (pid {existing.pid})\nKUBECONFIG={existing.kubeconfig}")
            return
        info = wait_ready(state, spawn_serve(state))
        print(f"cluster ready in {info.ready_seconds} s (API server {info.server})")
        print(f"kubectl: {info.kubectl}")
        print(f"KUBECONFIG={info.kubeconfig}")
    else:
        info = ClusterInfo.load(state)
        if info is None:
            print("no cluster is running")
            return
        stop_serve(info.pid)
        print("cluster stopped")


if __name__ == "__main__":
    main()
