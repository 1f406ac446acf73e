"""Pure decisions of the process kubelet over plain Pod dicts: which local command environment an image
maps to, the container environment, field references, probe settings, and the Pod phase and conditions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from e2e_local.podrunner import expand_var_refs
from support import image_env

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ContainerKind = Literal["init", "sidecar", "main"]


class ConfigError(Exception):
    """The container's config cannot be built (the kubelet's CreateContainerConfigError)."""


class ImageError(Exception):
    """The image is not in the image table (the kubelet's ErrImagePull)."""


@dataclass(frozen=True)
class ImageConfig:
    """What an image would bring: the environment its commands run in, its working directory, the users of
    its ``/etc/passwd`` (name, uid, gid), and whether it holds the project's environment at ``/opt/memsync``
    (``support/image_env.py``: mounted from this machine at that fixed path, never run from the clone)."""

    env: Mapping[str, str]
    working_dir: str = ""
    users: tuple[tuple[str, int, int], ...] = ()
    project: bool = False


_MEMSYNC_ENV = {
    "PATH": f"{image_env.BIN}:{SYSTEM_PATH}",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "HOME": "/tmp",
}
# image repository (the last path element, without tag or digest) -> its configuration on this machine
IMAGE_TABLE: dict[str, ImageConfig] = {
    # the project's own image (see the Dockerfile): the project's environment, user memsync (65532)
    "memsync": ImageConfig(_MEMSYNC_ENV, "/tmp", (("memsync", 65532, 65532),), project=True),
    # test sandboxes: their python is the project's
    "python": ImageConfig({"PATH": f"{image_env.BIN}:{SYSTEM_PATH}", "HOME": "/root"}, project=True),
    "busybox": ImageConfig({"PATH": SYSTEM_PATH}),
    "alpine": ImageConfig({"PATH": SYSTEM_PATH}),
    "debian": ImageConfig({"PATH": SYSTEM_PATH}),
}


def image_config(image: str) -> ImageConfig:
    repo = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    if repo not in IMAGE_TABLE:
        known = ", ".join(sorted(IMAGE_TABLE))
        raise ImageError(f'image "{image}" is not in the process kubelet\'s image table ({known})')
    return IMAGE_TABLE[repo]


def field_value(pod: Mapping[str, Any], field_path: str) -> str:
    meta = pod["metadata"]
    status = pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
    }
    if field_path in simple:
        return str(simple[field_path])
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if field_path.startswith(prefix + "['") and field_path.endswith("']"):
            return str((meta.get(source) or {}).get(field_path[len(prefix) + 2 : -2], ""))
    raise ConfigError(f"fieldRef {field_path!r} is not supported")


@dataclass(frozen=True)
class Lookups:
    """Secrets and ConfigMaps of the Pod's namespace, name -> decoded data (absent: not found)."""

    secrets: Mapping[str, Mapping[str, str]]
    config_maps: Mapping[str, Mapping[str, str]]


def _key_ref(
    kind: str, ref: Mapping[str, Any], namespace: str, data: Mapping[str, Mapping[str, str]]
) -> str | None:
    optional = bool(ref.get("optional", False))
    obj = data.get(ref["name"])
    if obj is None:
        if optional:
            return None
        raise ConfigError(f'{kind.lower()} "{ref["name"]}" not found')
    if ref["key"] not in obj:
        if optional:
            return None
        raise ConfigError(f"couldn't find key {ref['key']} in {kind} {namespace}/{ref['name']}")
    return obj[ref["key"]]


def container_env(
    pod: Mapping[str, Any], container: Mapping[str, Any], base: Mapping[str, str], lookups: Lookups
) -> dict[str, str]:
    """The environment the kubelet gives ``container``: ``base``, then envFrom, then env in order."""
    namespace = pod["metadata"].get("namespace", "default")
    env = dict(base)
    for source in container.get("envFrom") or []:
        kind, ref = (
            ("Secret", source["secretRef"])
            if "secretRef" in source
            else ("ConfigMap", source["configMapRef"])
        )
        data = (lookups.secrets if kind == "Secret" else lookups.config_maps).get(ref["name"])
        if data is None:
            if ref.get("optional"):
                continue
            raise ConfigError(f'{kind.lower()} "{ref["name"]}" not found')
        for key, value in data.items():
            env[source.get("prefix", "") + key] = value
    for entry in container.get("env") or []:
        value_from = entry.get("valueFrom")
        if value_from is None:
            env[entry["name"]] = expand_var_refs(str(entry.get("value", "")), env)
            continue
        value: str | None
        if "secretKeyRef" in value_from:
            value = _key_ref("Secret", value_from["secretKeyRef"], namespace, lookups.secrets)
        elif "configMapKeyRef" in value_from:
            value = _key_ref("ConfigMap", value_from["configMapKeyRef"], namespace, lookups.config_maps)
        elif "fieldRef" in value_from:
            value = field_value(pod, value_from["fieldRef"]["fieldPath"])
        else:
            raise ConfigError(f"env {entry['name']}: valueFrom {sorted(value_from)} is not supported")
        if value is not None:
            env[entry["name"]] = value
    return env


def referenced_names(pod: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """(Secret names, ConfigMap names) that the Pod's containers' env and envFrom refer to."""
    secrets: set[str] = set()
    maps: set[str] = set()
    spec = pod["spec"]
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for source in c.get("envFrom") or []:
            if "secretRef" in source:
                secrets.add(source["secretRef"]["name"])
            if "configMapRef" in source:
                maps.add(source["configMapRef"]["name"])
        for entry in c.get("env") or []:
            vf = entry.get("valueFrom") or {}
            if "secretKeyRef" in vf:
                secrets.add(vf["secretKeyRef"]["name"])
            if "configMapKeyRef" in vf:
                maps.add(vf["configMapKeyRef"]["name"])
    return secrets, maps


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int
    groups: tuple[int, ...]
    read_only_root: bool


def container_identity(pod: Mapping[str, Any], container: Mapping[str, Any]) -> Identity:
    psc = pod["spec"].get("securityContext") or {}
    sc = container.get("securityContext") or {}
    uid = int(sc.get("runAsUser", psc.get("runAsUser", 0)))
    gid = int(sc.get("runAsGroup", psc.get("runAsGroup", 0)))
    if (sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True) and uid == 0:
        raise ConfigError("container has runAsNonRoot and image will run as root")
    groups = [gid, *[int(g) for g in psc.get("supplementalGroups") or []]]
    if psc.get("fsGroup") is not None:
        groups.append(int(psc["fsGroup"]))
    return Identity(uid, gid, tuple(dict.fromkeys(groups)), bool(sc.get("readOnlyRootFilesystem", False)))


@dataclass(frozen=True)
class ProbeSettings:
    initial_delay: float
    period: float
    timeout: float
    failure_threshold: int
    success_threshold: int


def probe_settings(probe: Mapping[str, Any]) -> ProbeSettings:
    return ProbeSettings(
        initial_delay=float(probe.get("initialDelaySeconds", 0)),
        period=float(probe.get("periodSeconds", 10)),
        timeout=float(probe.get("timeoutSeconds", 1)),
        failure_threshold=int(probe.get("failureThreshold", 3)),
        success_threshold=int(probe.get("successThreshold", 1)),
    )


def named_port(container: Mapping[str, Any], port: int | str) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ConfigError(f"port {port!r} names no containerPort of {container['name']}")


@dataclass(frozen=True)
class ContainerView:
    """What the phase and conditions are computed from, per container."""

    kind: ContainerKind
    running: bool
    started: bool
    ready: bool
    exit_code: int | None  # of its last termination, None if it never terminated
    will_restart: bool


def pod_phase(
    restart_policy: str,
    views: Sequence[ContainerView],
    *,
    init_failed: bool,
    deleting: bool,
    all_stopped: bool,
) -> str:
    mains = [v for v in views if v.kind == "main"]
    if init_failed:
        return "Failed" if all_stopped else "Pending"
    if deleting and all_stopped:
        ran = [v for v in mains if v.exit_code is not None]
        return "Succeeded" if ran and all(v.exit_code == 0 for v in ran) else "Failed"
    if any(v.running for v in mains):
        return "Running"
    if mains and all(v.exit_code is not None and not v.will_restart for v in mains):
        if not all_stopped:
            return "Running"
        return "Succeeded" if all(v.exit_code == 0 for v in mains) else "Failed"
    if any(v.exit_code is not None for v in mains) and restart_policy != "Never":
        return "Running"
    return "Pending"


def pod_conditions(
    views: Sequence[ContainerView], *, sandbox_ready: bool, initialized: bool, phase: str
) -> list[dict[str, Any]]:
    serving = [v for v in views if v.kind != "init"]
    ready = phase == "Running" and all(v.running and v.ready for v in serving)

    def cond(kind: str, ok: bool, reason: str = "") -> dict[str, Any]:
        entry: dict[str, Any] = {"type": kind, "status": "True" if ok else "False"}
        if reason and not ok:
            entry["reason"] = reason
        return entry

    return [
        cond("PodReadyToStartContainers", sandbox_ready),
        cond("Initialized", initialized, "ContainersNotInitialized"),
        cond("ContainersReady", ready, "ContainersNotReady"),
        cond("Ready", ready, "ContainersNotReady"),
    ]
