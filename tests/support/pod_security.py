"""The restricted Pod Security Standard as a pure check, so tests hold any generated Pod to it offline.

A re-statement of the policy (kubernetes.io/docs/concepts/security/pod-security-standards), baseline checks
included. Test support: the operator itself never needs it (the namespace's admission enforces the policy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from memsync.crd.guards import ALLOWED_ADDED_CAPABILITIES, ALLOWED_SELINUX_TYPES, APPARMOR_UNCONFINED

_RESTRICTED_VOLUME_TYPES: Final = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_SAFE_SYSCTLS: Final = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)


#: The Pod-annotation form of a container's AppArmor profile (before the appArmorProfile field).
_APPARMOR_ANNOTATION: Final = "container.apparmor.security.beta.kubernetes.io/"


def _selinux_violations(where: str, sc: Mapping[str, Any]) -> list[str]:
    selinux: Mapping[str, Any] = sc.get("seLinuxOptions") or {}
    out: list[str] = []
    if selinux.get("user") or selinux.get("role"):
        out.append(f"{where}.seLinuxOptions must not set user or role")
    if selinux.get("type", "") not in ALLOWED_SELINUX_TYPES:
        out.append(f"{where}.seLinuxOptions.type {selinux['type']!r} is not an allowed type")
    return out


def _apparmor_violations(where: str, sc: Mapping[str, Any]) -> list[str]:
    if (sc.get("appArmorProfile") or {}).get("type") == APPARMOR_UNCONFINED:
        return [f"{where}.appArmorProfile.type must not be Unconfined"]
    return []


def restricted_violations(pod: Mapping[str, Any]) -> list[str]:
    """Every way ``pod`` breaks the restricted Pod Security Standard (baseline checks included); [] if none.

    A pure re-statement of the policy (kubernetes.io/docs/concepts/security/pod-security-standards), so
    tests can hold any generated Pod to it without an API server.
    """
    spec: Mapping[str, Any] = pod.get("spec") or {}
    psc: Mapping[str, Any] = spec.get("securityContext") or {}
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    out = _pod_violations(pod, spec, psc, pod_seccomp)
    containers = [("initContainers", c) for c in spec.get("initContainers") or []] + [
        ("containers", c) for c in spec.get("containers") or []
    ]
    containers += [("ephemeralContainers", c) for c in spec.get("ephemeralContainers") or []]
    for group, c in containers:
        out += _container_violations(f"spec.{group}[{c.get('name')}]", c, psc, pod_seccomp)
    return out


def _pod_violations(
    pod: Mapping[str, Any], spec: Mapping[str, Any], psc: Mapping[str, Any], pod_seccomp: str | None
) -> list[str]:
    out: list[str] = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(f"spec.{field} must not be true")
    for vol in spec.get("volumes") or []:
        kinds = [k for k in vol if k != "name"]
        if any(k not in _RESTRICTED_VOLUME_TYPES for k in kinds):
            out.append(f"volume {vol.get('name')!r} has a type restricted forbids: {kinds}")
    for sysctl in psc.get("sysctls") or []:
        if sysctl.get("name") not in _SAFE_SYSCTLS:
            out.append(f"spec.securityContext.sysctls: {sysctl.get('name')!r} is not a safe sysctl")
    if psc.get("runAsUser") == 0:
        out.append("spec.securityContext.runAsUser must not be 0")
    if pod_seccomp is not None and pod_seccomp not in ("RuntimeDefault", "Localhost"):
        out.append("spec.securityContext.seccompProfile.type must be RuntimeDefault or Localhost")
    out += _selinux_violations("spec.securityContext", psc)
    out += _apparmor_violations("spec.securityContext", psc)
    annotations: Mapping[str, Any] = (pod.get("metadata") or {}).get("annotations") or {}
    for key, value in annotations.items():
        if key.startswith(_APPARMOR_ANNOTATION) and not (
            value in ("runtime/default", "") or str(value).startswith("localhost/")
        ):
            out.append(f"metadata.annotations[{key}] must be runtime/default or localhost/* (got {value!r})")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("spec.securityContext.windowsOptions.hostProcess must not be true")
    return out


def _container_violations(
    where: str, c: Mapping[str, Any], psc: Mapping[str, Any], pod_seccomp: str | None
) -> list[str]:
    out: list[str] = []
    sc: Mapping[str, Any] = c.get("securityContext") or {}
    if sc.get("privileged"):
        out.append(f"{where}.securityContext.privileged must not be true")
    if sc.get("allowPrivilegeEscalation") is not False:
        out.append(f"{where}.securityContext.allowPrivilegeEscalation must be false")
    caps: Mapping[str, Any] = sc.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []):
        out.append(f"{where}.securityContext.capabilities.drop must include ALL")
    extra = [a for a in caps.get("add") or [] if a not in ALLOWED_ADDED_CAPABILITIES]
    if extra:
        out.append(f"{where}.securityContext.capabilities.add must not add {extra}")
    non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
    if non_root is not True:
        out.append(f"{where}: runAsNonRoot must be true (on the container or the Pod)")
    if sc.get("runAsUser") == 0:
        out.append(f"{where}.securityContext.runAsUser must not be 0")
    seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
    if seccomp not in ("RuntimeDefault", "Localhost"):
        out.append(f"{where}: seccompProfile.type must be RuntimeDefault or Localhost")
    if sc.get("procMount", "Default") != "Default":
        out.append(f"{where}.securityContext.procMount must be Default")
    if (sc.get("windowsOptions") or {}).get("hostProcess"):
        out.append(f"{where}.securityContext.windowsOptions.hostProcess must not be true")
    out += _selinux_violations(f"{where}.securityContext", sc)
    out += _apparmor_violations(f"{where}.securityContext", sc)
    for port in c.get("ports") or []:
        if port.get("hostPort"):
            out.append(f"{where}: hostPort must not be set")
    return out
