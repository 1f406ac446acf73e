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
* ``sessionId`` and ``stores`` are immutable (transition rules ``self == oldSelf``): the Pod's mounts and its
  session are fixed when it starts.
* ``sandbox``: the operator-owned container fields, and a ``securityContext`` within the restricted profile.

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
        "description": f"The session's memory stores ({m.STORES_MIN}-{m.STORES_MAX}); immutable.",
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
        },
    }


def sandbox_schema() -> dict[str, Any]:
    caps = ", ".join(m.ALLOWED_ADDED_CAPABILITIES)
    security_context = _open_object(
        "Merged with the restricted profile: no privilege, no escalation, non-root, all capabilities "
        "dropped.",
        properties={
            "privileged": {"type": "boolean"},
            "allowPrivilegeEscalation": {"type": "boolean"},
            "runAsNonRoot": {"type": "boolean"},
            "runAsUser": {"type": "integer", "format": "int64"},
            "procMount": {"type": "string", "maxLength": 64},
            "capabilities": _open_object(
                "Only NET_BIND_SERVICE may be added; ALL is always dropped.",
                properties={
                    "add": {
                        "type": "array",
                        "maxItems": m.CAPABILITIES_MAX,
                        "items": {"type": "string", "maxLength": 64},
                    },
                    "drop": {"type": "array", "items": {"type": "string"}},
                },
                **{
                    "x-kubernetes-validations": [
                        _rule(
                            "!has(self.add) || self.add.all(c, c == 'NET_BIND_SERVICE')",
                            f"sandbox.securityContext.capabilities.add may only contain {caps}",
                            reason="FieldValueForbidden",
                            field_path=".add",
                        )
                    ]
                },
            ),
            "seccompProfile": _open_object(
                "RuntimeDefault (the Pod's default) or Localhost.",
                properties={"type": {"type": "string", "maxLength": 64}},
                **{
                    "x-kubernetes-validations": [
                        _rule(
                            "!has(self.type) || self.type in ['RuntimeDefault', 'Localhost']",
                            "sandbox.securityContext.seccompProfile.type must be RuntimeDefault or Localhost",
                            reason="FieldValueForbidden",
                            field_path=".type",
                        )
                    ]
                },
            ),
            "seLinuxOptions": _open_object(
                "SELinux type: unset, empty, container_t, container_init_t or container_kvm_t; no user or "
                "role.",
                properties={
                    field: {"type": "string", "maxLength": m.SECURITY_STRING_MAX}
                    for field in ("type", "user", "role")
                },
                **{
                    "x-kubernetes-validations": [
                        _rule(
                            f"!has(self.type) || self.type in {list(m.ALLOWED_SELINUX_TYPES)!r}",
                            "sandbox.securityContext.seLinuxOptions.type must be unset, empty, or one of "
                            + ", ".join(t for t in m.ALLOWED_SELINUX_TYPES if t),
                            reason="FieldValueForbidden",
                            field_path=".type",
                        ),
                        _rule(
                            "!has(self.user) || self.user == ''",
                            "sandbox.securityContext.seLinuxOptions.user must not be set",
                            reason="FieldValueForbidden",
                            field_path=".user",
                        ),
                        _rule(
                            "!has(self.role) || self.role == ''",
                            "sandbox.securityContext.seLinuxOptions.role must not be set",
                            reason="FieldValueForbidden",
                            field_path=".role",
                        ),
                    ]
                },
            ),
            "appArmorProfile": _open_object(
                "RuntimeDefault or Localhost; Unconfined is not allowed.",
                properties={"type": {"type": "string", "maxLength": m.SECURITY_STRING_MAX}},
                **{
                    "x-kubernetes-validations": [
                        _rule(
                            f"!has(self.type) || self.type != '{m.APPARMOR_UNCONFINED}'",
                            "sandbox.securityContext.appArmorProfile.type must not be Unconfined",
                            reason="FieldValueForbidden",
                            field_path=".type",
                        )
                    ]
                },
            ),
            "windowsOptions": _open_object(
                "Windows options; hostProcess is not allowed.",
                properties={"hostProcess": {"type": "boolean"}},
                **{
                    "x-kubernetes-validations": [
                        _rule(
                            "!has(self.hostProcess) || !self.hostProcess",
                            "sandbox.securityContext.windowsOptions.hostProcess must not be true",
                            reason="FieldValueForbidden",
                            field_path=".hostProcess",
                        )
                    ]
                },
            ),
        },
        **{
            "x-kubernetes-validations": [
                _rule(
                    "!has(self.privileged) || !self.privileged",
                    "sandbox.securityContext.privileged must not be true",
                    reason="FieldValueForbidden",
                    field_path=".privileged",
                ),
                _rule(
                    "!has(self.allowPrivilegeEscalation) || !self.allowPrivilegeEscalation",
                    "sandbox.securityContext.allowPrivilegeEscalation must not be true",
                    reason="FieldValueForbidden",
                    field_path=".allowPrivilegeEscalation",
                ),
                _rule(
                    "!has(self.runAsNonRoot) || self.runAsNonRoot",
                    "sandbox.securityContext.runAsNonRoot must not be false: the sandbox runs as non-root",
                    reason="FieldValueForbidden",
                    field_path=".runAsNonRoot",
                ),
                _rule(
                    f"!has(self.runAsUser) || self.runAsUser == {m.SANDBOX_UID}",
                    f"sandbox.securityContext.runAsUser must be {m.SANDBOX_UID} or unset: the memory files "
                    f"under {MOUNT_ROOT} belong to uid {m.SANDBOX_UID} and are private to it",
                    reason="FieldValueForbidden",
                    field_path=".runAsUser",
                ),
                _rule(
                    "!has(self.procMount) || self.procMount == 'Default'",
                    "sandbox.securityContext.procMount must be Default",
                    reason="FieldValueForbidden",
                    field_path=".procMount",
                ),
            ]
        },
    )
    owned = "set by the operator"
    return _open_object(
        "The agent's container (a Kubernetes container spec: image, command, args, env, resources, ...). "
        f"The operator names it 'sandbox' and mounts {MOUNT_ROOT}; volumeMounts, volumeDevices and "
        "restartPolicy are refused.",
        required=["image"],
        properties={
            "name": _string(
                f"Optional; only '{m.SANDBOX_CONTAINER_NAME}' is accepted ({owned}).", maxLength=63
            ),
            "image": _string("The sandbox container's image.", minLength=1),
            "volumeMounts": {
                "type": "array",
                "description": f"Refused: the operator mounts {MOUNT_ROOT}.",
                "items": _open_object("A volume mount."),
            },
            "volumeDevices": {
                "type": "array",
                "description": "Refused: the Pod has no block volumes.",
                "items": _open_object("A volume device."),
            },
            "restartPolicy": _string("Refused: the Pod ends when the sandbox ends.", maxLength=64),
            "ports": {
                "type": "array",
                "description": f"Container ports (at most {m.PORTS_MAX}); hostPort is not allowed.",
                "maxItems": m.PORTS_MAX,
                "items": _open_object(
                    "A container port.", properties={"hostPort": {"type": "integer", "format": "int32"}}
                ),
                "x-kubernetes-validations": [
                    _rule(
                        "self.all(p, !has(p.hostPort) || p.hostPort == 0)",
                        "sandbox.ports[].hostPort must not be set: the Pod Security Standards forbid host "
                        "ports",
                        reason="FieldValueForbidden",
                    )
                ],
            },
            "securityContext": security_context,
        },
        **{
            "x-kubernetes-validations": [
                _rule(
                    f"!has(self.name) || self.name == '{m.SANDBOX_CONTAINER_NAME}'",
                    f"sandbox.name is {owned}: omit it (the container is always named "
                    f"'{m.SANDBOX_CONTAINER_NAME}')",
                    reason="FieldValueForbidden",
                    field_path=".name",
                ),
                _rule(
                    "!has(self.volumeMounts)",
                    f"sandbox.volumeMounts must not be set: the operator mounts {MOUNT_ROOT} itself and the "
                    "Pod has no other volumes",
                    reason="FieldValueForbidden",
                    field_path=".volumeMounts",
                ),
                _rule(
                    "!has(self.volumeDevices)",
                    "sandbox.volumeDevices must not be set: the Pod has no block volumes",
                    reason="FieldValueForbidden",
                    field_path=".volumeDevices",
                ),
                _rule(
                    "!has(self.restartPolicy)",
                    "sandbox.restartPolicy must not be set: the Pod ends when the sandbox container ends",
                    reason="FieldValueForbidden",
                    field_path=".restartPolicy",
                ),
            ]
        },
    )


def spec_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "One agent session's memory stores, sync settings, work-item secret and sandbox.",
        "required": ["sessionId", "workItemSecretRef", "stores", "sandbox"],
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
            "sandbox": sandbox_schema(),
            "memsyncEnv": memsync_env_schema(),
        },
    }


def memsync_env_schema() -> dict[str, Any]:
    return {
        "type": "array",
        "description": "Extra environment of the memsync containers (the mount init container and the sync "
        "sidecar, never the sandbox), e.g. HTTPS_PROXY, NO_PROXY or SSL_CERT_FILE; an entry replaces the "
        "operator's default of the same name. Names starting with MEMSYNC_ or ANTHROPIC_ are memsync's own "
        "and are refused.",
        "maxItems": m.MEMSYNC_ENV_MAX,
        "items": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": _string("Variable name.", pattern=m.ENV_NAME_PATTERN, maxLength=m.ENV_NAME_MAX),
                "value": _string("Its value.", maxLength=32768),
                "valueFrom": _open_object(
                    "Where its value comes from: secretKeyRef or configMapKeyRef (in this namespace)."
                ),
            },
        },
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


def build_crd() -> dict[str, Any]:
    """The SessionMemory CustomResourceDefinition (apiextensions.k8s.io/v1)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": m.CRD_NAME,
            "labels": {"app.kubernetes.io/name": "memsync", "app.kubernetes.io/part-of": "memsync"},
            # Argo CD applies the CRD before the operator and any SessionMemory (lower waves first). GitOps
            # never prunes it: deleting the CRD deletes every SessionMemory and so every running session.
            "annotations": {
                SYNC_WAVE_ANNOTATION: CRD_SYNC_WAVE,
                "argocd.argoproj.io/sync-options": "Prune=false",
                "kustomize.toolkit.fluxcd.io/prune": "disabled",
            },
        },
        "spec": {
            "group": m.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": m.KIND,
                "listKind": m.LIST_KIND,
                "plural": m.PLURAL,
                "singular": m.SINGULAR,
                "shortNames": list(m.SHORT_NAMES),
                "categories": list(m.CATEGORIES),
            },
            "versions": [
                {
                    "name": m.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": printer_columns(),
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "SessionMemory gives one agent session's sandbox Pod its memory "
                            "stores under /mnt/memory, kept in two-way sync and flushed when it ends.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


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
