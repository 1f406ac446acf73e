"""The SessionMemory CustomResourceDefinition, built from the same constants as the pydantic models.

``build_crd()`` returns the CRD (apiextensions.k8s.io/v1) as a dict; ``render_crd_yaml()`` is the text checked
in at ``crds/sessionmemories.agents.memsync.dev.yaml``. Regenerate it with::

    python -m memsync.crd.schema > crds/sessionmemories.agents.memsync.dev.yaml   # or: make crds

CEL rules (``x-kubernetes-validations``) cover what spans fields:

* ``stores``: unique ``memoryStoreId``; unique explicit ``mountPath``; no explicit ``mountPath`` inside
  another. CEL cannot compute the default path's slug within the API server's cost budget (``join`` over a
  ``findAll`` result has no bounded cost estimate, so the CRD would be refused), so uniqueness and nesting of
  *effective* mount paths (explicit, or ``/mnt/memory/<slug of name>``) are enforced by the operator's model:
  such an object is accepted by ``kubectl`` and then goes to ``Failed`` with the model's message.
* ``mountPath``: a clean absolute path under ``/mnt/memory/`` (``matches``).
* ``sessionId`` and ``stores`` are immutable (transition rules ``self == oldSelf``; ``stores`` may be omitted,
  and then cannot be added later): the Pod's mounts and its session are fixed when it starts.
* ``template``: the isolation guards of ``memsync.crd.guards`` (no host namespaces, hostPath volumes or host
  ports, nothing mounted at or around ``/mnt/memory``, a ``securityContext`` within the restricted profile,
  the operator-owned container fields). Its Kubernetes types come from ``memsync.crd.core`` (generated from
  the pinned release's OpenAPI document), with no ``x-kubernetes-preserve-unknown-fields`` anywhere.

Rules use only operations whose cost the API server can bound (``all``, ``exists_one``, ``has``, ``size``,
``matches`` with a constant pattern, ``startsWith``, comparisons), and every list and string they walk has
``maxItems``/``maxLength``; ``tests/unit/test_crd.py`` holds the rules to that.
"""

from __future__ import annotations

import sys
from typing import Any, Final

import yaml
from pydantic.alias_generators import to_camel

from memsync.api.constants import DEFAULT_BASE_URL, MOUNT_ROOT, STORE_NAME_MAX
from memsync.contracts.report import CUMULATIVE, SAMPLE_MAX, count_fields
from memsync.crd import core
from memsync.crd import guards as g
from memsync.crd import models as m

SYNC_WAVE_ANNOTATION: Final = "argocd.argoproj.io/sync-wave"
CRD_SYNC_WAVE: Final = "-1"


def _rule(
    rule: str, message: str, *, reason: str = "FieldValueInvalid", field_path: str | None = None
) -> Any:
    out: dict[str, Any] = {"rule": rule, "message": message, "reason": reason}
    if field_path:
        out["fieldPath"] = field_path
    return out


def _string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _count(description: str) -> dict[str, Any]:
    return {"type": "integer", "format": "int64", "minimum": 0, "description": description}


def _paths(description: str) -> dict[str, Any]:
    return {
        "type": "array",
        "description": description,
        "maxItems": SAMPLE_MAX,
        "items": {"type": "string", "maxLength": 1024},
    }


def store_count_properties() -> dict[str, Any]:
    """The counts of ``status.stores[]``: the report's counts in camelCase (cumulative ones are session
    totals)."""
    out: dict[str, Any] = {}
    for name, description, is_paths in count_fields():
        session = "Session total: " if name in CUMULATIVE else ""
        out[to_camel(name)] = _paths(description) if is_paths else _count(session + description)
    return out


def _open_object(description: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "x-kubernetes-preserve-unknown-fields": True,
        **extra,
    }


def store_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "One attached memory store.",
        "required": ["memoryStoreId", "name"],
        "properties": {
            "memoryStoreId": _string(
                "The store's id (memstore_...).",
                pattern=m.MEMORY_STORE_ID_PATTERN,
                maxLength=m.MEMORY_STORE_ID_MAX,
            ),
            "name": _string(
                "The store's display name; the default mount path is /mnt/memory/<slug of name>.",
                minLength=m.STORE_NAME_MIN,
                maxLength=STORE_NAME_MAX,
            ),
            "access": _string(
                "read_write (default) or read_only: a read-only store is never pushed.",
                enum=list(m.ACCESS_VALUES),
                default="read_write",
            ),
            "mountPath": _string(
                "Where the store appears in the sandbox; a clean absolute path under /mnt/memory/.",
                maxLength=m.MOUNT_PATH_MAX,
                **{
                    "x-kubernetes-validations": [
                        _rule(
                            f"self.matches('{m.MOUNT_PATH_PATTERN}')",
                            f"mountPath must be a clean absolute path under {MOUNT_ROOT}/: segments of ASCII "
                            "letters, digits, '.', '_' or '-' that do not start with '.', no trailing '/'",
                        )
                    ]
                },
            ),
        },
    }


def stores_schema() -> dict[str, Any]:
    return {
        "type": "array",
        "description": f"The session's memory stores ({m.STORES_MIN}-{m.STORES_MAX}); immutable. Omitted: "
        "the mount step reads them from the session (GET /v1/sessions/{id} with the sessions token); given, "
        "they must attach the session's stores with its access.",
        "minItems": m.STORES_MIN,
        "maxItems": m.STORES_MAX,
        "items": store_schema(),
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["memoryStoreId"],
        "x-kubernetes-validations": [
            _rule(
                "self.all(x, self.exists_one(y, y.memoryStoreId == x.memoryStoreId))",
                "memoryStoreId must be unique: each store may be attached once",
                reason="FieldValueDuplicate",
            ),
            _rule(
                "self.all(x, has(x.mountPath) ? "
                "self.exists_one(y, has(y.mountPath) && y.mountPath == x.mountPath) : true)",
                "mount paths must be unique: two stores have the same mountPath",
                reason="FieldValueDuplicate",
            ),
            _rule(
                "self.all(x, has(x.mountPath) ? "
                "self.all(y, has(y.mountPath) ? !x.mountPath.startsWith(y.mountPath + '/') : true) : true)",
                "a store may not be mounted inside another store's folder",
            ),
            _rule("self == oldSelf", "stores is immutable: create a new SessionMemory to change the stores"),
        ],
    }


def sync_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "How the sidecar syncs.",
        "default": {},
        "properties": {
            "intervalSeconds": {
                "type": "integer",
                "description": "Seconds between two-way syncs.",
                "minimum": m.INTERVAL_MIN,
                "maximum": m.INTERVAL_MAX,
                "default": m.INTERVAL_DEFAULT,
            },
            "deletions": _string(
                "enabled (default): local deletions are pushed after confirmation; log_only: logged, not "
                "pushed; disabled: ignored.",
                enum=list(m.DELETIONS_VALUES),
                default="enabled",
            ),
            "conflictPolicy": _string(
                "storeWins (default): a local edit that conflicts with a change in the store loses to the "
                "store's version; keepLocalCopy: the losing local content is also written beside the file as "
                "<name>.conflict-<session>-<UTC time><ext>, which then syncs like any new file.",
                enum=list(m.CONFLICT_POLICY_VALUES),
            ),
            "finalFlushSeconds": {
                "type": "integer",
                "description": "Budget, in seconds, of each shutdown pass (preStop flush, final sync, final "
                "flush).",
                "minimum": m.FINAL_FLUSH_MIN,
                "maximum": m.FINAL_FLUSH_MAX,
                "default": m.FINAL_FLUSH_DEFAULT,
            },
            "sidecarStartSeconds": {
                "type": "integer",
                "description": "Seconds memsync-sync may take to start (its startupProbe to pass) after the "
                "stores were mounted; past them the session fails with SidecarNotStarted and its Pod is "
                "deleted. Unset: the operator's --sidecar-start-timeout (300).",
                "minimum": m.SIDECAR_START_MIN,
                "maximum": m.SIDECAR_START_MAX,
            },
            "memoryVolumeSizeLimit": _string(
                "The size limit of the stores' folder (the emptyDir at /mnt/memory), also memsync-sync's "
                "ephemeral-storage request, so disk-pressure evictions do not pick the session first. "
                "Unset: the operator's --memory-volume-size-limit (1Gi).",
                pattern=m.BYTES_QUANTITY_PATTERN,
                maxLength=m.BYTES_QUANTITY_MAX,
            ),
        },
    }


def _validations(node: dict[str, Any], *rules: Any) -> None:
    node.setdefault("x-kubernetes-validations", []).extend(rules)


def _forbidden(rule: str, message: str, field: str | None = None) -> Any:
    return _rule(rule, message, reason="FieldValueForbidden", field_path=f".{field}" if field else None)


def security_context_rules(sc: dict[str, Any]) -> None:
    """The restricted Pod Security Standard over a container's ``securityContext`` (mirrors
    ``guards.security_context_problems``)."""
    props = sc["properties"]
    caps = ", ".join(g.ALLOWED_ADDED_CAPABILITIES)
    allowed_caps = ", ".join(f"'{c}'" for c in g.ALLOWED_ADDED_CAPABILITIES)
    _validations(
        props["capabilities"],
        _forbidden(
            f"!has(self.add) || self.add.all(c, c in [{allowed_caps}])",
            f"capabilities.add may only contain {caps}; every other capability is dropped",
            "add",
        ),
    )
    _validations(
        props["seccompProfile"],
        _forbidden(
            f"!has(self.type) || self.type in {list(g.ALLOWED_SECCOMP_TYPES)!r}",
            "seccompProfile.type must be RuntimeDefault or Localhost",
            "type",
        ),
    )
    _validations(
        props["seLinuxOptions"],
        _forbidden(
            f"!has(self.type) || self.type in {list(g.ALLOWED_SELINUX_TYPES)!r}",
            "seLinuxOptions.type must be unset, empty, or one of "
            + ", ".join(t for t in g.ALLOWED_SELINUX_TYPES if t),
            "type",
        ),
        _forbidden("!has(self.user) || self.user == ''", "seLinuxOptions.user must not be set", "user"),
        _forbidden("!has(self.role) || self.role == ''", "seLinuxOptions.role must not be set", "role"),
    )
    _validations(
        props["appArmorProfile"],
        _forbidden(
            f"!has(self.type) || self.type != '{g.APPARMOR_UNCONFINED}'",
            "appArmorProfile.type must not be Unconfined (RuntimeDefault or Localhost)",
            "type",
        ),
    )
    _validations(
        props["windowsOptions"],
        _forbidden(
            "!has(self.hostProcess) || !self.hostProcess",
            "windowsOptions.hostProcess must not be true",
            "hostProcess",
        ),
    )
    _validations(
        sc,
        _forbidden(
            "!has(self.privileged) || !self.privileged",
            "securityContext.privileged must not be true: privileged containers are forbidden",
            "privileged",
        ),
        _forbidden(
            "!has(self.allowPrivilegeEscalation) || !self.allowPrivilegeEscalation",
            "securityContext.allowPrivilegeEscalation must not be true",
            "allowPrivilegeEscalation",
        ),
        _forbidden(
            "!has(self.runAsNonRoot) || self.runAsNonRoot",
            "securityContext.runAsNonRoot must not be false: the sandbox runs as non-root",
            "runAsNonRoot",
        ),
        _forbidden(
            f"!has(self.runAsUser) || self.runAsUser == {g.SANDBOX_UID}",
            f"securityContext.runAsUser must be {g.SANDBOX_UID} or unset: the memory files under "
            f"{MOUNT_ROOT} belong to uid {g.SANDBOX_UID} and are private to it",
            "runAsUser",
        ),
        _forbidden(
            "!has(self.procMount) || self.procMount == 'Default'",
            "securityContext.procMount must be Default",
            "procMount",
        ),
    )


def container_schema(container: dict[str, Any]) -> dict[str, Any]:
    """The sandbox container: core/v1 Container, with the guards of ``guards.container_problems``."""
    props = container["properties"]
    reserved = list(g.RESERVED_VOLUMES)
    _validations(
        props["ports"],
        _forbidden(
            "self.all(p, !has(p.hostPort) || p.hostPort == 0)",
            "ports[].hostPort must not be set: host ports are forbidden",
        ),
    )
    _validations(
        props["volumeMounts"]["items"],
        _forbidden(
            f"!(self.name in {reserved!r})",
            f"volumeMounts[].name must not name memsync's own volumes {', '.join(reserved)}",
            "name",
        ),
        _rule(
            f"self.mountPath.matches('{g.CLEAN_PATH_PATTERN}')",
            "volumeMounts[].mountPath must be a clean absolute path (no empty, '.' or '..' segment, no "
            "trailing '/')",
            field_path=".mountPath",
        ),
        _forbidden(
            f"!(self.mountPath in {g.mount_root_ancestors()!r}) "
            f"&& !self.mountPath.startsWith('{MOUNT_ROOT}/')",
            f"volumeMounts[].mountPath must not be at, above or below {MOUNT_ROOT}: only memsync's own "
            "volume is mounted there",
            "mountPath",
        ),
    )
    security_context_rules(props["securityContext"])
    _validations(
        container,
        _forbidden(
            f"self.name == '{g.SANDBOX_CONTAINER_NAME}'",
            f"name must be '{g.SANDBOX_CONTAINER_NAME}': the operator adds its own containers beside it",
            "name",
        ),
        *(
            _forbidden(f"!has(self.{field})", f"{field} must not be set: the operator owns it", field)
            for field in g.OWNED_CONTAINER_FIELDS
        ),
        *(handler_host_rule(handler) for handler in g.handler_paths()),
    )
    return container


def handler_host_rule(handler: str) -> Any:
    """No ``host`` in the probe or hook handler at ``handler`` (``livenessProbe.httpGet``, ...)."""
    parts = handler.split(".")
    present = " && ".join(f"has(self.{'.'.join(parts[: i + 1])})" for i in range(len(parts)))
    return _forbidden(
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
    _validations(
        volume,
        _forbidden(
            "!has(self.hostPath)",
            "hostPath volumes are not allowed (configMap, csi, downwardAPI, emptyDir, ephemeral, "
            "persistentVolumeClaim, projected or secret are)",
            "hostPath",
        ),
        _forbidden(
            f"!(self.name in {list(g.RESERVED_VOLUMES)!r})",
            f"volume names {', '.join(g.RESERVED_VOLUMES)} are memsync's own",
            "name",
        ),
    )
    _validations(
        spec,
        *(
            _forbidden(
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
    _validations(
        meta["properties"]["labels"],
        _forbidden(
            f"[{reserved}].all(k, !(k in self))",
            "labels must not set " + ", ".join(m.reserved_label_keys()) + ": the operator sets them",
        ),
    )
    _validations(
        meta["properties"]["annotations"],
        _forbidden(
            f"!('{m.DEFAULT_CONTAINER_ANNOTATION}' in self)",
            f"annotations must not set {m.DEFAULT_CONTAINER_ANNOTATION}: the operator sets it",
        ),
        _forbidden(
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


def spec_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "One agent session's memory stores, sync settings, work-item secret and sandbox.",
        "required": ["sessionId", "workItemSecretRef", "template"],
        "x-kubernetes-validations": [
            _rule(
                "has(self.stores) == has(oldSelf.stores)",
                "stores is immutable: it cannot be added or removed; create a new SessionMemory instead",
            )
        ],
        "properties": {
            "sessionId": _string(
                "The agent session (sesn_...); immutable.",
                pattern=m.SESSION_ID_PATTERN,
                maxLength=m.SESSION_ID_MAX,
                **{
                    "x-kubernetes-validations": [
                        _rule("self == oldSelf", "sessionId is immutable: create a new SessionMemory instead")
                    ]
                },
            ),
            "workItemSecretRef": {
                "type": "object",
                "description": "The Secret key (in this namespace) holding the work item's secret payload; "
                "it reaches the memsync containers as ANTHROPIC_WORK_SECRET via secretKeyRef.",
                "required": ["name", "key"],
                "properties": {
                    "name": _string(
                        "Secret name.", pattern=m.SECRET_NAME_PATTERN, maxLength=m.SECRET_NAME_MAX
                    ),
                    "key": _string(
                        "Key in the Secret.", pattern=m.SECRET_KEY_PATTERN, maxLength=m.SECRET_KEY_MAX
                    ),
                },
            },
            "apiBaseUrl": _string(
                "The memory store API: the hosted API or the in-cluster store server.",
                pattern=m.API_BASE_URL_PATTERN,
                maxLength=m.API_BASE_URL_MAX,
                default=DEFAULT_BASE_URL,
            ),
            "stores": stores_schema(),
            "sync": sync_schema(),
            "template": template_schema(),
        },
    }


def memsync_env_schema() -> dict[str, Any]:
    item = core.env_var_schema(m.ENV_VALUE_SOURCES)
    item["properties"]["name"].update(pattern=m.ENV_NAME_PATTERN, maxLength=m.ENV_NAME_MAX)
    item["properties"]["value"]["maxLength"] = 32768
    return {
        "type": "array",
        "description": "Extra environment of the memsync containers, e.g. HTTPS_PROXY, NO_PROXY or "
        "SSL_CERT_FILE; an entry replaces the operator's default of the same name. Names starting with "
        "MEMSYNC_ or ANTHROPIC_ are memsync's own and are refused; valueFrom may name a secretKeyRef or a "
        "configMapKeyRef (in this namespace).",
        "maxItems": m.MEMSYNC_ENV_MAX,
        "items": item,
    }


def condition_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["type", "status", "reason", "message", "lastTransitionTime"],
        "properties": {
            "type": _string(
                "Condition type (CamelCase).",
                maxLength=m.CONDITION_TYPE_MAX,
                pattern=m.CONDITION_TYPE_PATTERN,
            ),
            "status": _string("True, False or Unknown.", enum=["True", "False", "Unknown"]),
            "reason": _string(
                "Programmatic reason (CamelCase).",
                minLength=1,
                maxLength=m.CONDITION_REASON_MAX,
                pattern=m.CONDITION_REASON_PATTERN,
            ),
            "message": _string("Human-readable details.", maxLength=m.MESSAGE_MAX),
            "lastTransitionTime": _string("When the status last changed.", format="date-time"),
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        },
    }


def status_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "What the operator observed.",
        "properties": {
            "phase": _string("Lifecycle phase.", enum=list(m.PHASES)),
            "podName": _string("The sandbox Pod."),
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            "message": _string("The latest human-readable status.", maxLength=m.MESSAGE_MAX),
            "lastSyncTime": _string(
                "When the sidecar last completed a sync of every store without errors.", format="date-time"
            ),
            "storeCount": _count("How many stores the session attaches (the Stores column)."),
            "conditions": {
                "type": "array",
                "items": condition_schema(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "stores": {
                "type": "array",
                "description": "Per store, what the Pod reported in its termination messages.",
                "items": {
                    "type": "object",
                    "required": ["memoryStoreId"],
                    "properties": {
                        "memoryStoreId": _string("The store."),
                        "mountPath": _string("Where it was mounted."),
                        "memoriesMounted": _count("Memories downloaded by memsync mount."),
                        **store_count_properties(),
                    },
                },
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["memoryStoreId"],
            },
            "kopf": _open_object("kopf's own bookkeeping, if it ever writes any to status."),
        },
    }


def printer_columns() -> list[dict[str, Any]]:
    return [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Synced", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Synced")].status'},
        {"name": "Stores", "type": "integer", "jsonPath": ".status.storeCount"},
        {"name": "Last Sync", "type": "date", "jsonPath": ".status.lastSyncTime"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Session", "type": "string", "jsonPath": ".spec.sessionId", "priority": 1},
        {"name": "Pod", "type": "string", "jsonPath": ".status.podName", "priority": 1},
        {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
    ]


def crd_document(
    *,
    names: dict[str, Any],
    version: str,
    description: str,
    spec: dict[str, Any],
    status: dict[str, Any],
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    """One of memsync's CustomResourceDefinitions (apiextensions.k8s.io/v1): namespaced, one served and
    stored version with the status subresource. ``names`` holds kind, listKind, plural, singular and
    shortNames."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{names['plural']}.{m.GROUP}",
            "labels": {"app.kubernetes.io/name": "memsync", "app.kubernetes.io/part-of": "memsync"},
            # Argo CD applies the CRD before the operator and any object of it (lower waves first). GitOps
            # never prunes it: deleting the CRD deletes every object of it and so every running session.
            "annotations": {
                SYNC_WAVE_ANNOTATION: CRD_SYNC_WAVE,
                "argocd.argoproj.io/sync-options": "Prune=false",
                "kustomize.toolkit.fluxcd.io/prune": "disabled",
            },
        },
        "spec": {
            "group": m.GROUP,
            "scope": "Namespaced",
            "names": {**names, "categories": list(m.CATEGORIES)},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def build_crd() -> dict[str, Any]:
    """The SessionMemory CustomResourceDefinition (apiextensions.k8s.io/v1)."""
    return crd_document(
        names={
            "kind": m.KIND,
            "listKind": m.LIST_KIND,
            "plural": m.PLURAL,
            "singular": m.SINGULAR,
            "shortNames": list(m.SHORT_NAMES),
        },
        version=m.VERSION,
        description="SessionMemory gives one agent session's sandbox Pod its memory stores under "
        "/mnt/memory, kept in two-way sync and flushed when it ends.",
        spec=spec_schema(),
        status=status_schema(),
        columns=printer_columns(),
    )


HEADER: Final = (
    "# Generated from operator/memsync/crd/schema.py: do not edit by hand.\n"
    "# Regenerate: python -m memsync.crd.schema > crds/sessionmemories.agents.memsync.dev.yaml\n"
    "#         or: make crds\n"
)


def render_crd_yaml() -> str:
    """The checked-in CRD file's exact text."""
    return HEADER + yaml.safe_dump(build_crd(), sort_keys=False, width=120, allow_unicode=True)


def main() -> None:
    sys.stdout.write(render_crd_yaml())


if __name__ == "__main__":
    main()
