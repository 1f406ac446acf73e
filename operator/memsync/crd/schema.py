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
from memsync.contracts.report import CUMULATIVE, count_fields
from memsync.crd import models as m
from memsync.crd.sandbox_schema import template_schema
from memsync.crd.schema_nodes import count_node, open_object, paths_node, rule, string_node

SYNC_WAVE_ANNOTATION: Final = "argocd.argoproj.io/sync-wave"
CRD_SYNC_WAVE: Final = "-1"


def store_count_properties() -> dict[str, Any]:
    """The counts of ``status.stores[]``: the report's counts in camelCase (cumulative ones are session
    totals)."""
    out: dict[str, Any] = {}
    for name, description, is_paths in count_fields():
        session = "Session total: " if name in CUMULATIVE else ""
        out[to_camel(name)] = paths_node(description) if is_paths else count_node(session + description)
    return out


def store_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "One attached memory store.",
        "required": ["memoryStoreId", "name"],
        "properties": {
            "memoryStoreId": string_node(
                "The store's id (memstore_...).",
                pattern=m.MEMORY_STORE_ID_PATTERN,
                maxLength=m.MEMORY_STORE_ID_MAX,
            ),
            "name": string_node(
                "The store's display name; the default mount path is /mnt/memory/<slug of name>.",
                minLength=m.STORE_NAME_MIN,
                maxLength=STORE_NAME_MAX,
            ),
            "access": string_node(
                "read_write (default) or read_only: a read-only store is never pushed.",
                enum=list(m.ACCESS_VALUES),
                default="read_write",
            ),
            "mountPath": string_node(
                "Where the store appears in the sandbox; a clean absolute path under /mnt/memory/.",
                maxLength=m.MOUNT_PATH_MAX,
                **{
                    "x-kubernetes-validations": [
                        rule(
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
            rule(
                "self.all(x, self.exists_one(y, y.memoryStoreId == x.memoryStoreId))",
                "memoryStoreId must be unique: each store may be attached once",
                reason="FieldValueDuplicate",
            ),
            rule(
                "self.all(x, has(x.mountPath) ? "
                "self.exists_one(y, has(y.mountPath) && y.mountPath == x.mountPath) : true)",
                "mount paths must be unique: two stores have the same mountPath",
                reason="FieldValueDuplicate",
            ),
            rule(
                "self.all(x, has(x.mountPath) ? "
                "self.all(y, has(y.mountPath) ? !x.mountPath.startsWith(y.mountPath + '/') : true) : true)",
                "a store may not be mounted inside another store's folder",
            ),
            rule("self == oldSelf", "stores is immutable: create a new SessionMemory to change the stores"),
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
            "deletions": string_node(
                "enabled (default): local deletions are pushed after confirmation; log_only: logged, not "
                "pushed; disabled: ignored.",
                enum=list(m.DELETIONS_VALUES),
                default="enabled",
            ),
            "conflictPolicy": string_node(
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
            "memoryVolumeSizeLimit": string_node(
                "The size limit of the stores' folder (the emptyDir at /mnt/memory), also the memsync "
                "containers' ephemeral-storage request, so disk-pressure evictions do not pick the session "
                "first. "
                "Unset: the operator's --memory-volume-size-limit (1Gi).",
                pattern=m.BYTES_QUANTITY_PATTERN,
                maxLength=m.BYTES_QUANTITY_MAX,
            ),
        },
    }


def start_deadline_node() -> dict[str, Any]:
    return {
        "type": "integer",
        "description": "Seconds from the SessionMemory's creation (or restart) to its sandbox container "
        "running (scheduling, quota waits, image pulls and the mount included); past them the session fails "
        "with StartTimeout and its Pod is deleted. Unset: the operator's --start-deadline (600).",
        "minimum": m.START_DEADLINE_MIN,
        "maximum": m.START_DEADLINE_MAX,
    }


def spec_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "One agent session's memory stores, sync settings, work-item secret and sandbox.",
        "required": ["sessionId", "workItemSecretRef", "template"],
        "x-kubernetes-validations": [
            rule(
                "has(self.stores) == has(oldSelf.stores)",
                "stores is immutable: it cannot be added or removed; create a new SessionMemory instead",
            )
        ],
        "properties": {
            "sessionId": string_node(
                "The agent session (sesn_...); immutable.",
                pattern=m.SESSION_ID_PATTERN,
                maxLength=m.SESSION_ID_MAX,
                **{
                    "x-kubernetes-validations": [
                        rule("self == oldSelf", "sessionId is immutable: create a new SessionMemory instead")
                    ]
                },
            ),
            "workItemSecretRef": {
                "type": "object",
                "description": "The Secret key (in this namespace) holding the work item's secret payload; "
                "it reaches the memsync containers as ANTHROPIC_WORK_SECRET via secretKeyRef.",
                "required": ["name", "key"],
                "properties": {
                    "name": string_node(
                        "Secret name.", pattern=m.SECRET_NAME_PATTERN, maxLength=m.SECRET_NAME_MAX
                    ),
                    "key": string_node(
                        "Key in the Secret.", pattern=m.SECRET_KEY_PATTERN, maxLength=m.SECRET_KEY_MAX
                    ),
                },
            },
            "apiBaseUrl": string_node(
                "The memory store API: the hosted API or the in-cluster store server.",
                pattern=m.API_BASE_URL_PATTERN,
                maxLength=m.API_BASE_URL_MAX,
                default=DEFAULT_BASE_URL,
            ),
            "stores": stores_schema(),
            "sync": sync_schema(),
            "template": template_schema(),
            "startDeadlineSeconds": start_deadline_node(),
            "onInterruption": string_node(
                "What a session interrupted by a drain, an eviction, a preemption or a lost node "
                "does: Fail (unset) ends it as Interrupted or NodeLost; Restart starts a new sandbox "
                "Pod that mounts the stores again, after the old Pod's final flush (a lost node's Pod: "
                f"once it is gone), at most {m.MAX_RESTARTS} times (status.restarts counts them).",
                enum=list(m.ON_INTERRUPTION_VALUES),
            ),
        },
    }


def condition_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["type", "status", "reason", "message", "lastTransitionTime"],
        "properties": {
            "type": string_node(
                "Condition type (CamelCase).",
                maxLength=m.CONDITION_TYPE_MAX,
                pattern=m.CONDITION_TYPE_PATTERN,
            ),
            "status": string_node("True, False or Unknown.", enum=["True", "False", "Unknown"]),
            "reason": string_node(
                "Programmatic reason (CamelCase).",
                minLength=1,
                maxLength=m.CONDITION_REASON_MAX,
                pattern=m.CONDITION_REASON_PATTERN,
            ),
            "message": string_node("Human-readable details.", maxLength=m.MESSAGE_MAX),
            "lastTransitionTime": string_node("When the status last changed.", format="date-time"),
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        },
    }


def status_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "What the operator observed.",
        "properties": {
            "phase": string_node("Lifecycle phase.", enum=list(m.PHASES)),
            "podName": string_node("The sandbox Pod."),
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            "message": string_node("The latest human-readable status.", maxLength=m.MESSAGE_MAX),
            "lastSyncTime": string_node(
                "When the sidecar last completed a sync of every store without errors.", format="date-time"
            ),
            "storeCount": count_node("How many stores the session attaches (the Stores column)."),
            "restarts": count_node(
                "How many new sandbox Pods were started after interruptions (spec.onInterruption: Restart)."
            ),
            "lastRestartTime": string_node(
                "When the latest restart was decided: its start deadline counts from here.",
                format="date-time",
            ),
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
                        "memoryStoreId": string_node("The store."),
                        "mountPath": string_node("Where it was mounted."),
                        "memoriesMounted": count_node("Memories downloaded by memsync mount."),
                        **store_count_properties(),
                    },
                },
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["memoryStoreId"],
            },
            "kopf": open_object("kopf's own bookkeeping, if it ever writes any to status."),
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
        {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts", "priority": 1},
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
