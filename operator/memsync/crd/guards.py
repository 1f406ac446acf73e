"""The isolation guards of the sandbox Pod template, as pure functions over plain (already well-typed) data.

The CRD's CEL rules (``memsync.crd.schema``) enforce each of these at ``kubectl apply``; the model
(``memsync.crd.models.SandboxTemplate``) runs these functions after the structural check, so an object that
slipped past an older CRD still fails with a message naming the field path and what is allowed.

What they refuse, and why:

* host namespaces (``hostNetwork``, ``hostPID``, ``hostIPC``), ``hostPath`` volumes, ``hostPort``s and
  ``privileged`` containers: the sandbox runs untrusted agent code;
* a volume mounted at or above ``/mnt/memory``, or anywhere below it, and any use of memsync's own volume
  names: only memsync's ``memory`` volume may appear there, and its state volume stays out of the agent's
  reach;
* a ``securityContext`` outside the restricted Pod Security Standard: privilege escalation, root, added
  capabilities other than ``NET_BIND_SERVICE``, an ``Unconfined`` seccomp or AppArmor profile, an SELinux
  type other than ``container_t``, ``container_init_t`` or ``container_kvm_t``, an SELinux user or role, an
  unmasked ``/proc``, Windows host processes; ``runAsUser`` other than 65532 (the sync agent keeps the store
  files private to that uid);
* the fields the operator owns: the container's ``name`` (always ``sandbox``), ``restartPolicy``,
  ``restartPolicyRules`` and ``volumeDevices``;
* a ``host`` in a probe's or lifecycle hook's ``httpGet`` or ``tcpSocket`` (the baseline Pod Security
  Standard forbids it since Kubernetes 1.34): the kubelet would connect to another host on the Pod's behalf;
* AppArmor and seccomp annotations in the template's metadata: the operator copies the template's annotations
  onto the Pod, where they would apply to memsync's own containers too; the sandbox container's
  ``securityContext.appArmorProfile`` and ``seccompProfile`` are the place for a profile.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from memsync.api.constants import MOUNT_ROOT

SANDBOX_CONTAINER_NAME: Final = "sandbox"
#: The uid and gid every container of the sandbox Pod runs as. The sync agent writes the store files under
#: /mnt/memory private to its user (0600 files, 0700 folders), so the sandbox must run as the same uid.
SANDBOX_UID: Final = 65532
#: memsync's own volumes: ``memory`` (mounted at /mnt/memory) and the sync agent's private state.
MEMORY_VOLUME: Final = "memory"
STATE_VOLUME: Final = "memsync-state"
RESERVED_VOLUMES: Final = (MEMORY_VOLUME, STATE_VOLUME)
#: Container fields the operator owns (``name`` may only repeat ``sandbox``).
OWNED_CONTAINER_FIELDS: Final = ("restartPolicy", "restartPolicyRules", "volumeDevices")
HOST_NAMESPACES: Final = ("hostNetwork", "hostPID", "hostIPC")
#: The only capability the restricted Pod Security Standard lets a container add.
ALLOWED_ADDED_CAPABILITIES: Final = ("NET_BIND_SERVICE",)
ALLOWED_SECCOMP_TYPES: Final = ("RuntimeDefault", "Localhost")
#: The SELinux types the Pod Security Standards (baseline, so restricted too) let a container run as.
ALLOWED_SELINUX_TYPES: Final = ("", "container_t", "container_init_t", "container_kvm_t")
#: The AppArmor profile type the Pod Security Standards forbid.
APPARMOR_UNCONFINED: Final = "Unconfined"
#: A clean absolute path: one or more segments, none empty, ``.`` or ``..`` (RE2 and Python alike).
CLEAN_PATH_PATTERN: Final = r"^(/([^/.]|[.][^/.]|[.][.][^/])[^/]*)+$"
#: The container fields holding probe and lifecycle-hook handlers, and the handler kinds that take a ``host``.
PROBE_FIELDS: Final = ("livenessProbe", "readinessProbe", "startupProbe")
LIFECYCLE_HOOKS: Final = ("postStart", "preStop")
HOST_HANDLERS: Final = ("httpGet", "tcpSocket")
#: Annotation keys (prefixes) that set AppArmor or seccomp profiles the old way, for every container of a Pod.
PROFILE_ANNOTATION_PREFIXES: Final = (
    "container.apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
)


def handler_paths() -> list[str]:
    """The dotted paths below a container of every handler that may name a ``host``, e.g.
    ``livenessProbe.httpGet`` or ``lifecycle.preStop.tcpSocket``."""
    owners = [*PROBE_FIELDS, *(f"lifecycle.{hook}" for hook in LIFECYCLE_HOOKS)]
    return [f"{owner}.{kind}" for owner in owners for kind in HOST_HANDLERS]


def mount_root_ancestors() -> list[str]:
    """``/mnt`` and ``/mnt/memory``: the paths at or above the memory root (``/`` is not a clean path)."""
    parts = MOUNT_ROOT.strip("/").split("/")
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def security_context_problems(sc: Mapping[str, Any], path: str) -> list[str]:
    """What in a container's ``securityContext`` (at ``path``) breaks the restricted Pod Security Standard."""
    problems: list[str] = []
    if sc.get("privileged") is True:
        problems.append(f"{path}.privileged: must not be true (privileged containers are forbidden)")
    if sc.get("allowPrivilegeEscalation") is True:
        problems.append(f"{path}.allowPrivilegeEscalation: must not be true (the operator sets it to false)")
    if sc.get("runAsNonRoot") is False:
        problems.append(f"{path}.runAsNonRoot: must not be false (the sandbox runs as a non-root user)")
    if sc.get("runAsUser") not in (None, SANDBOX_UID):
        problems.append(
            f"{path}.runAsUser: must be {SANDBOX_UID} or unset (the memory files under {MOUNT_ROOT} belong "
            f"to uid {SANDBOX_UID} and are private to it)"
        )
    if sc.get("procMount") not in (None, "Default"):
        problems.append(f"{path}.procMount: must be Default")
    added = (sc.get("capabilities") or {}).get("add") or []
    bad = [c for c in added if c not in ALLOWED_ADDED_CAPABILITIES]
    if bad:
        problems.append(
            f"{path}.capabilities.add: may only contain {', '.join(ALLOWED_ADDED_CAPABILITIES)} "
            f"(got {', '.join(bad)}); every other capability is dropped"
        )
    seccomp = (sc.get("seccompProfile") or {}).get("type")
    if seccomp is not None and seccomp not in ALLOWED_SECCOMP_TYPES:
        problems.append(f"{path}.seccompProfile.type: must be RuntimeDefault or Localhost (got {seccomp!r})")
    selinux = sc.get("seLinuxOptions") or {}
    if selinux.get("type") not in (None, *ALLOWED_SELINUX_TYPES):
        allowed = ", ".join(t for t in ALLOWED_SELINUX_TYPES if t)
        problems.append(
            f"{path}.seLinuxOptions.type: must be unset, empty, or one of {allowed} (got {selinux['type']!r})"
        )
    for field in ("user", "role"):
        if selinux.get(field):
            problems.append(f"{path}.seLinuxOptions.{field}: must not be set (the Pod Security Standards)")
    if (sc.get("appArmorProfile") or {}).get("type") == APPARMOR_UNCONFINED:
        problems.append(f"{path}.appArmorProfile.type: must not be Unconfined (RuntimeDefault or Localhost)")
    if (sc.get("windowsOptions") or {}).get("hostProcess") is True:
        problems.append(f"{path}.windowsOptions.hostProcess: must not be true")
    return problems


def mount_path_problem(mount_path: str) -> str | None:
    """Why a sandbox volume may not be mounted at ``mount_path``; None when it may."""
    if re.fullmatch(CLEAN_PATH_PATTERN.removeprefix("^").removesuffix("$"), mount_path) is None:
        return "must be a clean absolute path (no empty, '.' or '..' segment, no trailing '/')"
    if mount_path in mount_root_ancestors() or mount_path.startswith(MOUNT_ROOT + "/"):
        return (
            f"must not be at, above or below {MOUNT_ROOT} (only memsync's own volume is mounted there; "
            "pick another path)"
        )
    return None


def _at(data: Mapping[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def handler_host_problems(container: Mapping[str, Any], path: str) -> list[str]:
    """A ``host`` set in any probe or lifecycle hook handler of ``container`` (at ``path``)."""
    return [
        f"{path}.{handler}.host: must not be set (probes and hooks may only reach the Pod's own IP, "
        "the default; leave host unset or empty)"
        for handler in handler_paths()
        if _at(container, f"{handler}.host")
    ]


def annotation_problems(annotations: Mapping[str, Any], path: str) -> list[str]:
    """AppArmor or seccomp annotations among the template's ``annotations`` (at ``path``)."""
    return [
        f"{path}[{key}]: must not be set (AppArmor and seccomp annotations would apply to memsync's "
        "containers too; set containers[0].securityContext.appArmorProfile or seccompProfile instead, "
        "RuntimeDefault or Localhost)"
        for key in sorted(annotations)
        if key.startswith(PROFILE_ANNOTATION_PREFIXES)
    ]


def container_problems(container: Mapping[str, Any], path: str) -> list[str]:
    """Why ``container`` (at ``path``) cannot become the Pod's sandbox container; empty when it can."""
    problems: list[str] = []
    if container.get("name") != SANDBOX_CONTAINER_NAME:
        problems.append(
            f"{path}.name: must be {SANDBOX_CONTAINER_NAME!r} (memsync's containers run beside it)"
        )
    for field in OWNED_CONTAINER_FIELDS:
        if container.get(field) is not None:
            problems.append(f"{path}.{field}: must not be set (the operator owns it)")
    for i, port in enumerate(container.get("ports") or []):
        if port.get("hostPort"):
            problems.append(f"{path}.ports[{i}].hostPort: must not be set (host ports are forbidden)")
    for i, mount in enumerate(container.get("volumeMounts") or []):
        if mount.get("name") in RESERVED_VOLUMES:
            problems.append(
                f"{path}.volumeMounts[{i}].name: must not be {mount['name']!r} (memsync's own volume; the "
                f"operator mounts {MOUNT_ROOT} itself)"
            )
        problem = mount_path_problem(str(mount.get("mountPath", "")))
        if problem is not None:
            problems.append(f"{path}.volumeMounts[{i}].mountPath: {problem}")
    problems.extend(handler_host_problems(container, path))
    problems.extend(
        security_context_problems(container.get("securityContext") or {}, f"{path}.securityContext")
    )
    return problems


def volume_problems(volume: Mapping[str, Any], path: str) -> list[str]:
    problems: list[str] = []
    if volume.get("name") in RESERVED_VOLUMES:
        problems.append(f"{path}.name: must not be {volume['name']!r} (memsync's own volume)")
    if volume.get("hostPath") is not None:
        problems.append(
            f"{path}.hostPath: is not allowed (use configMap, csi, downwardAPI, emptyDir, ephemeral, "
            "persistentVolumeClaim, projected or secret)"
        )
    return problems


def pod_spec_problems(spec: Mapping[str, Any], path: str) -> list[str]:
    """The guards over the template's Pod spec (``path`` names it, e.g. ``spec.template.spec``)."""
    problems = [
        f"{path}.{field}: must not be true (the sandbox never shares the node's namespaces)"
        for field in HOST_NAMESPACES
        if spec.get(field) is True
    ]
    for i, container in enumerate(spec.get("containers") or []):
        problems += container_problems(container, f"{path}.containers[{i}]")
    for i, volume in enumerate(spec.get("volumes") or []):
        problems += volume_problems(volume, f"{path}.volumes[{i}]")
    return problems
