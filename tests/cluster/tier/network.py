"""The tier's own network: a bridge on a /24 that no interface of this machine uses yet, and one network
namespace per Pod joined to it by a veth pair. The bridge's address is the gateway; the API server and the
tests' store server listen on it, so every Pod reaches them, and the kubelet reaches each Pod's IP. Nothing
is routed off the machine: the subnet has no route but the bridge."""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SUBNET_PREFIX = "10.213"  # 10.213.<index>.0/24, index chosen free at creation
NETNS_DIR = Path("/run/netns")


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def _used_indexes() -> set[int]:
    used: set[int] = set()
    for line in ip("-o", "-4", "addr", "show").stdout.splitlines():
        for word in line.split():
            if word.startswith(f"{SUBNET_PREFIX}."):
                used.add(int(word.split(".")[2]))
    for dev in Path("/sys/class/net").iterdir():
        if dev.name.startswith("msk") and dev.name[3:].isdigit():
            used.add(int(dev.name[3:]))
    return used


@dataclass
class TierNetwork:
    index: int
    allocated: set[str] = field(default_factory=set)

    @classmethod
    def create(cls) -> TierNetwork:
        used = _used_indexes()
        index = next(i for i in range(1, 255) if i not in used)
        net = cls(index)
        ip("link", "add", net.bridge, "type", "bridge")
        ip("addr", "add", f"{net.gateway}/24", "dev", net.bridge)
        ip("link", "set", net.bridge, "up")
        return net

    @property
    def bridge(self) -> str:
        return f"msk{self.index}"

    @property
    def gateway(self) -> str:
        return f"{SUBNET_PREFIX}.{self.index}.1"

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"{SUBNET_PREFIX}.{self.index}.0/24")

    def _netns_prefix(self) -> str:
        return f"msk{self.index}-"

    def add_pod(self, pod_uid: str) -> tuple[str, str]:
        """A fresh network namespace for a Pod: (its /run/netns path, the Pod IP)."""
        address = next(str(h) for h in list(self.subnet.hosts())[1:] if str(h) not in self.allocated)
        self.allocated.add(address)
        name = f"{self._netns_prefix()}{pod_uid[:13]}"
        host_if = f"mskv{address.split('.')[-1]}x{self.index}"
        ip("netns", "add", name)
        try:
            ip("link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", name)
            ip("link", "set", host_if, "master", self.bridge, "up")
            ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
            ip("-n", name, "link", "set", "eth0", "up")
            ip("-n", name, "link", "set", "lo", "up")
            ip("-n", name, "route", "add", "default", "via", self.gateway)
        except RuntimeError:
            self.remove_pod(str(NETNS_DIR / name), address)
            raise
        return str(NETNS_DIR / name), address

    def remove_pod(self, netns_path: str, address: str) -> None:
        ip("netns", "del", Path(netns_path).name, check=False)  # its veth pair goes with it
        self.allocated.discard(address)

    def destroy(self) -> None:
        if NETNS_DIR.is_dir():
            for ns in NETNS_DIR.iterdir():
                if ns.name.startswith(self._netns_prefix()):
                    ip("netns", "del", ns.name, check=False)
        ip("link", "del", self.bridge, check=False)
