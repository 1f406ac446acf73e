"""The schema of ``spec.template``: the sandbox Pod's template, with the isolation guards as CEL rules.

Its Kubernetes types come from ``memsync.crd.core``; the rules mirror ``memsync.crd.guards``, which the
operator's model checks again (see ``memsync.crd.schema`` for what the rules may use).
"""

from __future__ import annotations

from typing import Any

from memsync.api.constants import MOUNT_ROOT
from memsync.crd import core, env_spec
from memsync.crd import guards as g
from memsync.crd import models as m
from memsync.crd.schema_nodes import add_validations, forbidden, rule


def security_context_rules(sc: dict[str, Any]) -> None:
    """The restricted Pod Security Standard over a container's ``securityContext`` (mirrors
    ``guards.security_context_problems``)."""
    props = sc["properties"]
    caps = ", ".join(g.ALLOWED_ADDED_CAPABILITIES)
    allowed_caps = ", ".join(f"'{c}'" for c in g.ALLOWED_ADDED_CAPABILITIES)
    add_validations(
        props["capabilities"],
        forbidden(
            f"!has(self.add) || self.add.all(c, c in [{allowed_caps}])",
            f"capabilities.add may only contain {caps}; every other capability is dropped",
            "add",
        ),
    )
    add_validations(
        props["seccompProfile"],
        forbidden(
            f"!has(self.type) || self.type in {list(g.ALLOWED_SECCOMP_TYPES)!r}",
            "seccompProfile.type must be RuntimeDefault or Localhost",
            "type",
        ),
    )
    add_validations(
        props["seLinuxOptions"],
        forbidden(
            f"!has(self.type) || self.type in {list(g.ALLOWED_SELINUX_TYPES)!r}",
            "seLinuxOptions.type must be unset, empty, or one of "
            + ", ".join(t for t in g.ALLOWED_SELINUX_TYPES if t),
            "type",
        ),
        forbidden("!has(self.user) || self.user == ''", "seLinuxOptions.user must not be set", "user"),
        forbidden("!has(self.role) || self.role == ''", "seLinuxOptions.role must not be set", "role"),
    )
    add_validations(
        props["appArmorProfile"],
        forbidden(
            f"!has(self.type) || self.type != '{g.APPARMOR_UNCONFINED}'",
            "appArmorProfile.type must not be Unconfined (RuntimeDefault or Localhost)",
            "type",
        ),
    )
    add_validations(
        props["windowsOptions"],
        forbidden(
            "!has(self.hostProcess) || !self.hostProcess",
            "windowsOptions.hostProcess must not be true",
            "hostProcess",
        ),
    )
    add_validations(
        sc,
        forbidden(
            "!has(self.privileged) || !self.privileged",
            "securityContext.privileged must not be true: privileged containers are forbidden",
            "privileged",
        ),
        forbidden(
            "!has(self.allowPrivilegeEscalation) || !self.allowPrivilegeEscalation",
            "securityContext.allowPrivilegeEscalation must not be true",
            "allowPrivilegeEscalation",
        ),
        forbidden(
            "!has(self.runAsNonRoot) || self.runAsNonRoot",
            "securityContext.runAsNonRoot must not be false: the sandbox runs as non-root",
            "runAsNonRoot",
        ),
        forbidden(
            f"!has(self.runAsUser) || self.runAsUser == {g.SANDBOX_UID}",
            f"securityContext.runAsUser must be {g.SANDBOX_UID} or unset: the memory files under "
            f"{MOUNT_ROOT} belong to uid {g.SANDBOX_UID} and are private to it",
            "runAsUser",
        ),
        forbidden(
            "!has(self.procMount) || self.procMount == 'Default'",
            "securityContext.procMount must be Default",
            "procMount",
        ),
    )


def container_schema(container: dict[str, Any]) -> dict[str, Any]:
    """The sandbox container: core/v1 Container, with the guards of ``guards.container_problems``."""
    props = container["properties"]
    reserved = list(g.RESERVED_VOLUMES)
    add_validations(
        props["ports"],
        forbidden(
            "self.all(p, !has(p.hostPort) || p.hostPort == 0)",
            "ports[].hostPort must not be set: host ports are forbidden",
        ),
    )
    add_validations(
        props["volumeMounts"]["items"],
        forbidden(
            f"!(self.name in {reserved!r})",
            f"volumeMounts[].name must not name memsync's own volumes {', '.join(reserved)}",
            "name",
        ),
        rule(
            f"self.mountPath.matches('{g.CLEAN_PATH_PATTERN}')",
            "volumeMounts[].mountPath must be a clean absolute path (no empty, '.' or '..' segment, no "
            "trailing '/')",
            field_path=".mountPath",
        ),
        forbidden(
            f"!(self.mountPath in {g.mount_root_ancestors()!r}) "
            f"&& !self.mountPath.startsWith('{MOUNT_ROOT}/')",
            f"volumeMounts[].mountPath must not be at, above or below {MOUNT_ROOT}: only memsync's own "
            "volume is mounted there",
            "mountPath",
        ),
    )
    security_context_rules(props["securityContext"])
    add_validations(
        container,
        forbidden(
            f"self.name == '{g.SANDBOX_CONTAINER_NAME}'",
            f"name must be '{g.SANDBOX_CONTAINER_NAME}': the operator adds its own containers beside it",
            "name",
        ),
        *(
            forbidden(f"!has(self.{field})", f"{field} must not be set: the operator owns it", field)
            for field in g.OWNED_CONTAINER_FIELDS
        ),
        *(handler_host_rule(handler) for handler in g.handler_paths()),
    )
    return container


def handler_host_rule(handler: str) -> Any:
    """No ``host`` in the probe or hook handler at ``handler`` (``livenessProbe.httpGet``, ...)."""
    parts = handler.split(".")
    present = " && ".join(f"has(self.{'.'.join(parts[: i + 1])})" for i in range(len(parts)))
    return forbidden(
        f"!({present} && has(self.{handler}.host)) || self.{handler}.host == ''",
        f"{handler}.host must not be set: probes and hooks may only reach the Pod's own IP (the default)",
    )


def pod_spec_schema() -> dict[str, Any]:
    """The template's Pod spec: the generated core/v1 subset, the guards, and the memsync containers."""
    spec = core.pod_spec_schema()
    props = spec["properties"]
    container_schema(props["containers"]["items"])
    props["containers"]["description"] = (
        f"The sandbox container: exactly one, named '{g.SANDBOX_CONTAINER_NAME}'. The operator mounts "
        f"{MOUNT_ROOT} in it and runs memsync's containers beside it. "
    ) + props["containers"]["description"]
    volume = props["volumes"]["items"]
    add_validations(
        volume,
        forbidden(
            "!has(self.hostPath)",
            "hostPath volumes are not allowed (configMap, csi, downwardAPI, emptyDir, ephemeral, "
            "persistentVolumeClaim, projected or secret are)",
            "hostPath",
        ),
        forbidden(
            f"!(self.name in {list(g.RESERVED_VOLUMES)!r})",
            f"volume names {', '.join(g.RESERVED_VOLUMES)} are memsync's own",
            "name",
        ),
    )
    add_validations(
        spec,
        *(
            forbidden(
                f"!has(self.{field}) || !self.{field}",
                f"{field} must not be true: the sandbox never shares the node's namespaces",
                field,
            )
            for field in g.HOST_NAMESPACES
        ),
    )
    props["memsync"] = {
        "type": "object",
        "description": "The memsync containers of the Pod (the mount init container and the sync sidecar, "
        "never the sandbox).",
        "properties": {
            "env": memsync_env_schema(),
            "resources": {
                **core.resource_requirements_schema(),
                "description": "Their compute resources; when set, replaces the operator's default (requests "
                "50m CPU and 128Mi memory, limits 1 CPU and 512Mi memory) for both containers.",
            },
        },
    }
    spec["description"] = (
        "A subset of the Pod spec (Kubernetes "
        + core.source().split("@", 1)[1].split("/", 1)[0]
        + "): the sandbox container, its extra volumes and scheduling. The operator owns the rest: "
        "restartPolicy, securityContext of the Pod, the service-account token (not mounted), memsync's "
        "containers and volumes."
    )
    spec["required"] = ["containers"]
    return spec


def template_schema() -> dict[str, Any]:
    """``spec.template``: the sandbox Pod's template (``models.SandboxTemplate``)."""
    meta = core.object_meta_schema()
    meta["description"] = "Labels and annotations added to the sandbox Pod's own."
    reserved = ", ".join(f"'{k}'" for k in m.reserved_label_keys())
    add_validations(
        meta["properties"]["labels"],
        forbidden(
            f"[{reserved}].all(k, !(k in self))",
            "labels must not set " + ", ".join(m.reserved_label_keys()) + ": the operator sets them",
        ),
    )
    add_validations(
        meta["properties"]["annotations"],
        forbidden(
            f"!('{m.DEFAULT_CONTAINER_ANNOTATION}' in self)",
            f"annotations must not set {m.DEFAULT_CONTAINER_ANNOTATION}: the operator sets it",
        ),
        forbidden(
            "self.all(k, "
            + " && ".join(f"!k.startsWith('{prefix}')" for prefix in g.PROFILE_ANNOTATION_PREFIXES)
            + ")",
            "annotations must not set AppArmor or seccomp profiles ("
            + ", ".join(f"{prefix}*" for prefix in g.PROFILE_ANNOTATION_PREFIXES)
            + "): they would apply to memsync's containers too; set containers[0].securityContext."
            "appArmorProfile or seccompProfile instead (RuntimeDefault or Localhost)",
        ),
    )
    return {
        "type": "object",
        "description": "The sandbox Pod's template: metadata, and the Pod spec fields a SessionMemory sets.",
        "required": ["spec"],
        "properties": {"metadata": meta, "spec": pod_spec_schema()},
    }


def memsync_env_schema() -> dict[str, Any]:
    item = core.env_var_schema(env_spec.ENV_VALUE_SOURCES)
    item["properties"]["name"].update(pattern=env_spec.ENV_NAME_PATTERN, maxLength=env_spec.ENV_NAME_MAX)
    item["properties"]["value"]["maxLength"] = 32768
    return {
        "type": "array",
        "description": "Extra environment of the memsync containers, e.g. HTTPS_PROXY, NO_PROXY or "
        "SSL_CERT_FILE; an entry replaces the operator's default of the same name. Names starting with "
        "MEMSYNC_ or ANTHROPIC_ are memsync's own and are refused; valueFrom may name a secretKeyRef or a "
        "configMapKeyRef (in this namespace).",
        "maxItems": env_spec.MEMSYNC_ENV_MAX,
        "items": item,
    }
