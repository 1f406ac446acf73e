"""The control-plane processes: etcd, kube-apiserver, kube-controller-manager and kube-scheduler, started
from the built binaries with certificates made at start. etcd, the controller manager and the scheduler
listen on 127.0.0.1 only; the API server listens on the tier's bridge address, the one address both this
machine and the Pods' network namespaces reach."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .pki import APISERVER_DNS_NAMES, Identity, Pki

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "controlplane" / "build.sh"
SERVICE_CIDR = "10.96.0.0/24"
SERVICE_IP = "10.96.0.1"
ADMIN = Identity("admin", "memsync-tier-admin", ("system:masters",))
KCM = Identity("kube-controller-manager", "system:kube-controller-manager")
SCHEDULER = Identity("kube-scheduler", "system:kube-scheduler")


# One audit event per request made by the operator's ServiceAccount (the scale benchmark counts them).
OPERATOR_USER = "system:serviceaccount:memsync-system:memsync-operator"
AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: Metadata
    users: ["{OPERATOR_USER}"]
  - level: None
"""


def node_identity(node: str) -> Identity:
    return Identity("node", f"system:node:{node}", ("system:nodes",))


def built_binaries() -> tuple[Path | None, str]:
    """The directory of the built binaries, or None and why (never builds: ``make controlplane`` does)."""
    try:
        proc = subprocess.run([str(BUILD_SCRIPT), "--check"], capture_output=True, text=True, check=False)
    except OSError as exc:
        return None, f"cannot run {BUILD_SCRIPT}: {exc}"
    if proc.returncode != 0:
        if shutil.which("go") is None:
            return (
                None,
                "Go is not installed: the control plane cannot be built (`make controlplane` needs it)",
            )
        return None, (proc.stderr.strip() or "not built") + " (run `make controlplane`)"
    return Path(proc.stdout.strip().splitlines()[-1]), ""


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(what: str, check: Callable[[], bool], timeout: float, alive: Callable[[], str | None]) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        dead = alive()
        if dead:
            raise RuntimeError(f"{what}: {dead}")
        with contextlib.suppress(httpx.HTTPError, OSError):
            if check():
                return
        time.sleep(0.2)
    raise RuntimeError(f"{what}: not ready after {timeout:.0f} s")


@dataclass
class ControlPlane:
    bin_dir: Path
    state: Path
    host: str  # the API server's address
    pki: Pki = field(init=False)
    api_port: int = 0
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://{self.host}:{self.api_port}"

    @property
    def audit_log(self) -> Path:
        return self.state / "logs" / "audit.log"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.pki.dir / f"{ADMIN.file_stem}.kubeconfig"

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.state / "logs").joinpath(f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [str(self.bin_dir / name), *args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def _dead(self) -> str | None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                tail = (self.state / "logs" / f"{name}.log").read_text(errors="replace")[-3000:]
                return f"{name} exited with {proc.returncode}:\n{tail}"
        return None

    def admin_http(self) -> httpx.Client:
        context = ssl.create_default_context(cafile=str(self.pki.ca_crt))
        crt, key = self.pki.dir / "admin.crt", self.pki.dir / "admin.key"
        context.load_cert_chain(str(crt), str(key))
        return httpx.Client(base_url=self.server, verify=context, timeout=10)

    def start(self, node: str) -> None:
        (self.state / "logs").mkdir(parents=True, exist_ok=True)
        self.pki = Pki(self.state / "pki")
        serving_crt, serving_key = self.pki.serving(
            "apiserver", [self.host, "127.0.0.1", SERVICE_IP], APISERVER_DNS_NAMES
        )
        self.api_port = free_port(self.host)
        for identity in (ADMIN, KCM, SCHEDULER, node_identity(node)):
            self.pki.kubeconfig(identity, self.server)
        etcd_port, peer_port = free_port("127.0.0.1"), free_port("127.0.0.1")
        etcd_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
        self._spawn(
            "etcd",
            "--name=tier",
            f"--data-dir={self.state / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=tier={peer_url}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        )
        wait_for(
            "etcd", lambda: httpx.get(f"{etcd_url}/health", timeout=2).status_code == 200, 60, self._dead
        )
        pki = self.pki.dir
        policy = self.state / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        self._spawn(
            "kube-apiserver",
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            f"--etcd-servers={etcd_url}",
            f"--bind-address={self.host}",
            f"--advertise-address={self.host}",
            f"--secure-port={self.api_port}",
            f"--cert-dir={self.state / 'apiserver'}",
            f"--tls-cert-file={serving_crt}",
            f"--tls-private-key-file={serving_key}",
            f"--client-ca-file={self.pki.ca_crt}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.pki.sa_pub}",
            f"--service-account-signing-key-file={self.pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
        )
        with self.admin_http() as http:
            wait_for("kube-apiserver", lambda: http.get("/readyz").status_code == 200, 120, self._dead)
        self._spawn(
            "kube-controller-manager",
            f"--kubeconfig={pki / 'kube-controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={pki / 'kube-controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={pki / 'kube-controller-manager.kubeconfig'}",
            f"--service-account-private-key-file={self.pki.sa_key}",
            f"--root-ca-file={self.pki.ca_crt}",
            "--use-service-account-credentials=true",
            "--controllers=*",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
        )
        self._spawn(
            "kube-scheduler",
            f"--kubeconfig={pki / 'kube-scheduler.kubeconfig'}",
            f"--authentication-kubeconfig={pki / 'kube-scheduler.kubeconfig'}",
            f"--authorization-kubeconfig={pki / 'kube-scheduler.kubeconfig'}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port('127.0.0.1')}",
        )
        with self.admin_http() as http:
            wait_for(
                "kube-controller-manager (the default ServiceAccount)",
                lambda: http.get("/api/v1/namespaces/default/serviceaccounts/default").status_code == 200,
                120,
                self._dead,
            )

    def check_alive(self) -> None:
        dead = self._dead()
        if dead:
            raise RuntimeError(dead)

    def stop(self) -> None:
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self.processes.get(name)
            if proc is None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
