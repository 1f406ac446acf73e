"""The SessionMemory CRD and the operator's pydantic model: same accept/refuse decisions, executed CEL rules.

Every corpus case goes through both the model (``validate_spec``) and the emulated API server
(``test_crd_apiserver.admit``: defaults, structural schema with strict fields, CEL rules run by cel-python),
and both must reach the expected verdict. A refusal by the model must name the field path.
"""

from __future__ import annotations

import copy
import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel, ValidationError
from test_crd_apiserver import admit, openapi_schema, structural_errors
from test_manifests import K8S_VERSION

from memsync.crd import core, models, status_types
from memsync.crd.guards import handler_paths
from memsync.crd.models import API_VERSION, KIND, Phase, SessionMemorySpec, StoreSpec, validate_spec
from memsync.crd.schema import build_crd, render_crd_yaml
from memsync.crd.spec_messages import InvalidSpecError, describe_validation_error
from support.crd_status import Condition, SessionMemory, SessionMemoryStatus, StoreStatus, now

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "sessionmemories.agents.memsync.dev.yaml"


def base_spec() -> dict[str, Any]:
    return {
        "sessionId": "sesn_011abc",
        "workItemSecretRef": {"name": "work-sesn-011abc", "key": "secret"},
        "stores": [{"memoryStoreId": "memstore_01aa", "name": "User Preferences"}],
        "template": {"spec": {"containers": [{"name": "sandbox", "image": "example.com/agent-sandbox:1.0"}]}},
    }


def full_spec() -> dict[str, Any]:
    return {
        "sessionId": "sesn_011CPMxVD3fHLUhvTqtsQA5w",
        "workItemSecretRef": {"name": "work.sesn-011abc", "key": "work_secret.b64"},
        "apiBaseUrl": "http://memsync-store.memsync-system.svc:8080",
        "stores": [
            {"memoryStoreId": "memstore_01aa", "name": "User Preferences", "access": "read_write"},
            {"memoryStoreId": "memstore_01bb", "name": "Team Notes", "access": "read_only"},
            {"memoryStoreId": "memstore_01cc", "name": "team notes", "mountPath": "/mnt/memory/team/notes"},
            {"memoryStoreId": "memstore_01dd", "name": "!!!"},
            {"memoryStoreId": "memstore_01ee", "name": "Café Notes"},
            {"memoryStoreId": "memstore_01ff", "name": "x", "mountPath": "/mnt/memory/deep/er/x.v2_final-1"},
            {"memoryStoreId": "memstore_01gg", "name": "Runbooks"},
            {"memoryStoreId": "memstore_01hh", "name": "Runbooks", "mountPath": "/mnt/memory/runbooks-2"},
        ],
        "sync": {"intervalSeconds": 5, "deletions": "log_only", "finalFlushSeconds": 300},
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "sandbox",
                        "image": "example.com/agent-sandbox:1.0",
                        "command": ["/bin/agent"],
                        "args": ["--memory", "/mnt/memory"],
                        "env": [{"name": "MODE", "value": "demo"}],
                        "resources": {
                            "requests": {"cpu": "250m", "memory": "256Mi"},
                            "limits": {"memory": "1Gi"},
                        },
                        "securityContext": {
                            "runAsUser": 65532,
                            "runAsGroup": 1000,
                            "runAsNonRoot": True,
                            "privileged": False,
                            "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True,
                            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL", "NET_RAW"]},
                            "seccompProfile": {
                                "type": "Localhost",
                                "localhostProfile": "profiles/agent.json",
                            },
                            "procMount": "Default",
                            "windowsOptions": {"hostProcess": False},
                        },
                    }
                ]
            }
        },
    }


#: Paths of the template's Pod spec and of its sandbox container, for the corpus.
POD = "template.spec"
C = f"{POD}.containers[0]"


def template_spec() -> dict[str, Any]:
    """Every field a template offers, set to something the CRD and the model accept."""
    spec = base_spec()
    spec["template"] = {
        "metadata": {"labels": {"team": "research"}, "annotations": {"example.com/owner": "me"}},
        "spec": {
            "containers": [
                {
                    "name": "sandbox",
                    "image": "example.com/agent-sandbox:1.0",
                    "command": ["/bin/agent"],
                    "env": [
                        {"name": "MODE", "value": "demo"},
                        {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "agent", "key": "key"}}},
                    ],
                    "resources": {"requests": {"cpu": 1, "memory": "1Gi"}, "limits": {"cpu": "2.5"}},
                    "volumeMounts": [
                        {"name": "work", "mountPath": "/workspace"},
                        {"name": "config", "mountPath": "/etc/agent", "readOnly": True},
                    ],
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                    "ports": [{"name": "http", "containerPort": 8080}],
                }
            ],
            "volumes": [
                {"name": "work", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "config", "configMap": {"name": "agent-config"}},
                {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            ],
            "runtimeClassName": "gvisor",
            "nodeSelector": {"sandbox": "true"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                        ]
                    }
                }
            },
            "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
            "serviceAccountName": "agent",
            "imagePullSecrets": [{"name": "registry"}],
            "priorityClassName": "agents",
            "activeDeadlineSeconds": 3600,
            "hostNetwork": False,
            "memsync": {
                "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
                "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "256Mi"}},
            },
        },
    }
    return spec


def mounting(path: str, volume: str = "data") -> Mutation:
    """A mutation that mounts an emptyDir volume ``volume`` at ``path`` in the sandbox container."""

    def apply(spec: dict[str, Any]) -> None:
        if volume not in ("memory", "memsync-state"):
            setting(f"{POD}.volumes", [{"name": volume, "emptyDir": {}}])(spec)
        setting(f"{C}.volumeMounts", [{"name": volume, "mountPath": path}])(spec)

    return apply


def smem(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "sesn-011abc", "namespace": "agents"},
        "spec": spec,
    }


Mutation = Callable[[dict[str, Any]], None]


def setting(path: str, value: Any) -> Mutation:
    """A mutation that sets (or, with ``value=DELETE``, removes) a dotted path; ``[n]`` indexes lists."""

    def apply(spec: dict[str, Any]) -> None:
        parts = path.replace("[", ".[").split(".")
        node: Any = spec
        for part in parts[:-1]:
            node = node[int(part[1:-1])] if part.startswith("[") else node.setdefault(part, {})
        last = parts[-1]
        key: Any = int(last[1:-1]) if last.startswith("[") else last
        if value is DELETE:
            del node[key]
        else:
            node[key] = copy.deepcopy(value)

    return apply


DELETE = object()


def stores(*entries: tuple[str, str] | dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for entry in entries:
        if isinstance(entry, dict):
            out.append(entry)
        else:
            out.append({"memoryStoreId": entry[0], "name": entry[1]})
    return out


#: The API server accepts it, the model refuses it: a collision of *effective* mount paths that involves a
#: default (slug) path, which CEL cannot compute within the API server's cost budget (see schema.py). The
#: operator then marks the SessionMemory Failed with the model's message.
MODEL_ONLY = "model-only"

# (case id, base, mutation, verdict: True valid / False refused by both / MODEL_ONLY, a fragment the model's
# message must contain when it refuses)
CORPUS: list[tuple[str, Callable[[], dict[str, Any]], Mutation | None, bool | str, str]] = [
    ("minimal", base_spec, None, True, ""),
    ("full", full_spec, None, True, ""),
    ("session-id-63", base_spec, setting("sessionId", "sesn_" + "a" * 58), True, ""),
    ("interval-min", base_spec, setting("sync", {"intervalSeconds": 5}), True, ""),
    ("interval-max", base_spec, setting("sync", {"intervalSeconds": 3600}), True, ""),
    ("flush-min", base_spec, setting("sync", {"finalFlushSeconds": 5}), True, ""),
    ("sidecar-start-min", base_spec, setting("sync", {"sidecarStartSeconds": 10}), True, ""),
    ("size-limit-mi", base_spec, setting("sync", {"memoryVolumeSizeLimit": "512Mi"}), True, ""),
    ("size-limit-bytes", base_spec, setting("sync", {"memoryVolumeSizeLimit": "1000000"}), True, ""),
    ("deletions-disabled", base_spec, setting("sync", {"deletions": "disabled"}), True, ""),
    (
        "eight-stores",
        base_spec,
        setting("stores", stores(*[(f"memstore_{i}", f"s{i}") for i in range(8)])),
        True,
        "",
    ),
    (
        "slug-collision-resolved-by-mountpath",
        base_spec,
        setting(
            "stores",
            stores(
                ("memstore_a", "User Preferences"),
                {
                    "memoryStoreId": "memstore_b",
                    "name": "user-preferences",
                    "mountPath": "/mnt/memory/prefs-b",
                },
            ),
        ),
        True,
        "",
    ),
    (
        "sibling-prefix-is-not-nesting",
        base_spec,
        setting("stores", stores(("memstore_a", "notes"), ("memstore_b", "notes 2"))),
        True,
        "",
    ),
    (
        "empty-slug-falls-back-to-id",
        base_spec,
        setting("stores", stores(("memstore_a", "???"), ("memstore_b", "!!"))),
        True,
        "",
    ),
    (
        "sandbox-security-fine",
        base_spec,
        setting(f"{C}.securityContext", {"runAsUser": 65532, "runAsGroup": 1000}),
        True,
        "",
    ),
    ("template-full", template_spec, None, True, ""),
    ("http-url", base_spec, setting("apiBaseUrl", "http://127.0.0.1:8080"), True, ""),
    ("url-with-path", base_spec, setting("apiBaseUrl", "https://proxy.example.com/anthropic"), True, ""),
    # --- refused ---
    ("no-session-id", base_spec, setting("sessionId", DELETE), False, "spec.sessionId: is required"),
    ("session-id-trailing-underscore", base_spec, setting("sessionId", "sesn_abc_"), False, "spec.sessionId"),
    ("session-id-no-prefix", base_spec, setting("sessionId", "011abc"), False, "spec.sessionId"),
    ("session-id-dot", base_spec, setting("sessionId", "sesn_a.b"), False, "spec.sessionId"),
    ("session-id-64", base_spec, setting("sessionId", "sesn_" + "a" * 59), False, "spec.sessionId"),
    ("session-id-newline", base_spec, setting("sessionId", "sesn_abc\n"), False, "spec.sessionId"),
    ("session-id-int", base_spec, setting("sessionId", 12), False, "spec.sessionId"),
    (
        "no-secret-ref",
        base_spec,
        setting("workItemSecretRef", DELETE),
        False,
        "spec.workItemSecretRef: is required",
    ),
    (
        "secret-ref-no-key",
        base_spec,
        setting("workItemSecretRef.key", DELETE),
        False,
        "spec.workItemSecretRef.key",
    ),
    (
        "secret-name-upper",
        base_spec,
        setting("workItemSecretRef.name", "Work"),
        False,
        "spec.workItemSecretRef.name",
    ),
    (
        "secret-key-slash",
        base_spec,
        setting("workItemSecretRef.key", "a/b"),
        False,
        "spec.workItemSecretRef.key",
    ),
    ("url-ftp", base_spec, setting("apiBaseUrl", "ftp://example.com"), False, "spec.apiBaseUrl"),
    ("url-no-host", base_spec, setting("apiBaseUrl", "https://"), False, "spec.apiBaseUrl"),
    ("url-query", base_spec, setting("apiBaseUrl", "https://example.com/?x=1"), False, "spec.apiBaseUrl"),
    ("no-stores", base_spec, setting("stores", []), False, "spec.stores"),
    ("stores-omitted-read-from-the-session", base_spec, setting("stores", DELETE), True, ""),
    (
        "nine-stores",
        base_spec,
        setting("stores", stores(*[(f"memstore_{i}", f"s{i}") for i in range(9)])),
        False,
        "spec.stores",
    ),
    (
        "duplicate-id",
        base_spec,
        setting("stores", stores(("memstore_a", "one"), ("memstore_a", "two"))),
        False,
        "repeats stores[0]",
    ),
    (
        "bad-id-prefix",
        base_spec,
        setting("stores[0].memoryStoreId", "mem_01"),
        False,
        "spec.stores[0].memoryStoreId",
    ),
    (
        "id-too-long",
        base_spec,
        setting("stores[0].memoryStoreId", "memstore_" + "a" * 120),
        False,
        "spec.stores[0].memoryStoreId",
    ),
    (
        "no-store-name",
        base_spec,
        setting("stores[0].name", DELETE),
        False,
        "spec.stores[0].name: is required",
    ),
    ("empty-store-name", base_spec, setting("stores[0].name", ""), False, "spec.stores[0].name"),
    ("store-name-256", base_spec, setting("stores[0].name", "n" * 256), False, "spec.stores[0].name"),
    ("access-rw", base_spec, setting("stores[0].access", "rw"), False, "spec.stores[0].access"),
    ("unknown-store-field", base_spec, setting("stores[0].path", "/x"), False, "spec.stores[0].path"),
    (
        "mount-root-itself",
        base_spec,
        setting("stores[0].mountPath", "/mnt/memory"),
        False,
        "spec.stores[0].mountPath",
    ),
    (
        "mount-trailing-slash",
        base_spec,
        setting("stores[0].mountPath", "/mnt/memory/a/"),
        False,
        "spec.stores[0].mountPath",
    ),
    (
        "mount-dotdot",
        base_spec,
        setting("stores[0].mountPath", "/mnt/memory/../etc"),
        False,
        "spec.stores[0].mountPath",
    ),
    (
        "mount-dot",
        base_spec,
        setting("stores[0].mountPath", "/mnt/memory/./a"),
        False,
        "spec.stores[0].mountPath",
    ),
    (
        "mount-double-slash",
        base_spec,
        setting("stores[0].mountPath", "/mnt/memory//a"),
        False,
        "spec.stores[0].mountPath",
    ),
    (
        "mount-elsewhere",
        base_spec,
        setting("stores[0].mountPath", "/mnt/other/a"),
        False,
        "spec.stores[0].mountPath",
    ),
    (
        "mount-relative",
        base_spec,
        setting("stores[0].mountPath", "mnt/memory/a"),
        False,
        "spec.stores[0].mountPath",
    ),
    (
        "mount-hidden",
        base_spec,
        setting("stores[0].mountPath", "/mnt/memory/.state"),
        False,
        "spec.stores[0].mountPath",
    ),
    (
        "mount-space",
        base_spec,
        setting("stores[0].mountPath", "/mnt/memory/a b"),
        False,
        "spec.stores[0].mountPath",
    ),
    (
        "mount-newline",
        base_spec,
        setting("stores[0].mountPath", "/mnt/memory/a\n"),
        False,
        "spec.stores[0].mountPath",
    ),
    (
        "mount-backslash",
        base_spec,
        setting("stores[0].mountPath", "/mnt/memory/a\\b"),
        False,
        "spec.stores[0].mountPath",
    ),
    (
        "same-slug",
        base_spec,
        setting("stores", stores(("memstore_a", "User Preferences"), ("memstore_b", "user-preferences!"))),
        MODEL_ONLY,
        "mount paths must be unique",
    ),
    (
        "explicit-equals-default",
        base_spec,
        setting(
            "stores",
            stores(
                ("memstore_a", "Notes"),
                {"memoryStoreId": "memstore_b", "name": "x", "mountPath": "/mnt/memory/notes"},
            ),
        ),
        MODEL_ONLY,
        "mount paths must be unique",
    ),
    (
        "explicit-duplicate",
        base_spec,
        setting(
            "stores",
            stores(
                {"memoryStoreId": "memstore_a", "name": "a", "mountPath": "/mnt/memory/shared"},
                {"memoryStoreId": "memstore_b", "name": "b", "mountPath": "/mnt/memory/shared"},
            ),
        ),
        False,
        "mount paths must be unique",
    ),
    (
        "nested-in-default",
        base_spec,
        setting(
            "stores",
            stores(
                ("memstore_a", "Notes"),
                {"memoryStoreId": "memstore_b", "name": "x", "mountPath": "/mnt/memory/notes/x"},
            ),
        ),
        MODEL_ONLY,
        "inside stores[0]",
    ),
    (
        "default-inside-explicit",
        base_spec,
        setting(
            "stores",
            stores(
                {"memoryStoreId": "memstore_a", "name": "y", "mountPath": "/mnt/memory/a/b"},
                {"memoryStoreId": "memstore_b", "name": "x", "mountPath": "/mnt/memory/a"},
            ),
        ),
        False,
        "inside stores[1]",
    ),
    ("interval-4", base_spec, setting("sync", {"intervalSeconds": 4}), False, "spec.sync.intervalSeconds"),
    (
        "interval-3601",
        base_spec,
        setting("sync", {"intervalSeconds": 3601}),
        False,
        "spec.sync.intervalSeconds",
    ),
    (
        "interval-string",
        base_spec,
        setting("sync", {"intervalSeconds": "15"}),
        False,
        "spec.sync.intervalSeconds",
    ),
    (
        "interval-fraction",
        base_spec,
        setting("sync", {"intervalSeconds": 15.5}),
        False,
        "spec.sync.intervalSeconds",
    ),
    (
        "interval-bool",
        base_spec,
        setting("sync", {"intervalSeconds": True}),
        False,
        "spec.sync.intervalSeconds",
    ),
    ("deletions-yes", base_spec, setting("sync", {"deletions": "yes"}), False, "spec.sync.deletions"),
    ("flush-4", base_spec, setting("sync", {"finalFlushSeconds": 4}), False, "spec.sync.finalFlushSeconds"),
    (
        "flush-301",
        base_spec,
        setting("sync", {"finalFlushSeconds": 301}),
        False,
        "spec.sync.finalFlushSeconds",
    ),
    (
        "sidecar-start-9",
        base_spec,
        setting("sync", {"sidecarStartSeconds": 9}),
        False,
        "spec.sync.sidecarStartSeconds",
    ),
    (
        "size-limit-words",
        base_spec,
        setting("sync", {"memoryVolumeSizeLimit": "one gig"}),
        False,
        "spec.sync.memoryVolumeSizeLimit",
    ),
    (
        "size-limit-negative",
        base_spec,
        setting("sync", {"memoryVolumeSizeLimit": "-1Gi"}),
        False,
        "spec.sync.memoryVolumeSizeLimit",
    ),
    ("unknown-sync-field", base_spec, setting("sync", {"interval": 15}), False, "spec.sync.interval"),
    ("unknown-spec-field", base_spec, setting("pod", {}), False, "spec.pod"),
    ("no-template", base_spec, setting("template", DELETE), False, "spec.template: is required"),
    ("template-not-object", base_spec, setting("template", "example.com/agent:1"), False, "spec.template"),
    (
        "template-no-spec",
        base_spec,
        setting("template", {"metadata": {}}),
        False,
        "spec.template.spec: is required",
    ),
    (
        "no-containers",
        base_spec,
        setting(f"{POD}.containers", []),
        False,
        f"spec.{POD}.containers: must list",
    ),
    (
        "two-containers",
        base_spec,
        setting(f"{POD}.containers", [{"name": "sandbox", "image": "a"}, {"name": "helper", "image": "b"}]),
        False,
        f"spec.{POD}.containers: may list at most 1",
    ),
    ("container-no-image", base_spec, setting(f"{C}.image", DELETE), False, f"spec.{C}.image: is required"),
    (
        "container-empty-image",
        base_spec,
        setting(f"{C}.image", ""),
        False,
        f"spec.{C}.image: must be at least",
    ),
    ("container-image-int", base_spec, setting(f"{C}.image", 5), False, f"spec.{C}.image: must be a string"),
    ("container-no-name", base_spec, setting(f"{C}.name", DELETE), False, f"spec.{C}.name: is required"),
    ("container-name", base_spec, setting(f"{C}.name", "agent"), False, f"spec.{C}.name: must be 'sandbox'"),
    # the issue's example: a typo and a wrong type are refused, never passed on to the Pod
    ("typo-comand", base_spec, setting(f"{C}.comand", ["run"]), False, f"spec.{C}.comand: is not a field"),
    ("env-not-list", base_spec, setting(f"{C}.env", "NOT_A_LIST"), False, f"spec.{C}.env: must be an array"),
    (
        "env-item-typo",
        base_spec,
        setting(f"{C}.env", [{"name": "A", "valu": "1"}]),
        False,
        f"{C}.env[0].valu",
    ),
    ("probe-typo", base_spec, setting(f"{C}.readinessProbe", {"exec": {"cmd": ["x"]}}), False, "exec.cmd"),
    (
        "resources-typo",
        base_spec,
        setting(f"{C}.resources", {"limit": {"cpu": "1"}}),
        False,
        "resources.limit",
    ),
    (
        "resources-bad-quantity",
        base_spec,
        setting(f"{C}.resources", {"limits": {"memory": "1 GB"}}),
        False,
        f"spec.{C}.resources.limits.memory: must match",
    ),
    (
        "pod-field-unknown",
        base_spec,
        setting(f"{POD}.initContainers", []),
        False,
        f"spec.{POD}.initContainers",
    ),
    (
        "pod-field-typo",
        base_spec,
        setting(f"{POD}.runtimeClass", "gvisor"),
        False,
        f"spec.{POD}.runtimeClass",
    ),
    (
        "metadata-typo",
        base_spec,
        setting("template.metadata.label", {"a": "b"}),
        False,
        "template.metadata.label",
    ),
    (
        "volume-devices",
        base_spec,
        setting(f"{C}.volumeDevices", [{"name": "d", "devicePath": "/d"}]),
        False,
        f"spec.{C}.volumeDevices: must not be set",
    ),
    (
        "restart-policy",
        base_spec,
        setting(f"{C}.restartPolicy", "Always"),
        False,
        f"{C}.restartPolicy: must not",
    ),
    (
        "restart-policy-rules",
        base_spec,
        setting(
            f"{C}.restartPolicyRules", [{"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}}]
        ),
        False,
        f"spec.{C}.restartPolicyRules: must not be set",
    ),
    *[
        (
            f"{field}-true",
            base_spec,
            setting(f"{POD}.{field}", True),
            False,
            f"spec.{POD}.{field}: must not be",
        )
        for field in ("hostNetwork", "hostPID", "hostIPC")
    ],
    *[
        (f"{field}-false", base_spec, setting(f"{POD}.{field}", False), True, "")
        for field in ("hostNetwork",)
    ],
    ("host-network-string", base_spec, setting(f"{POD}.hostNetwork", "true"), False, f"{POD}.hostNetwork"),
    (
        "host-path-volume",
        base_spec,
        setting(f"{POD}.volumes", [{"name": "host", "hostPath": {"path": "/var/run"}}]),
        False,
        f"spec.{POD}.volumes[0].hostPath: is not allowed",
    ),
    (
        "nfs-volume",
        base_spec,
        setting(f"{POD}.volumes", [{"name": "n", "nfs": {"server": "s", "path": "/"}}]),
        False,
        f"spec.{POD}.volumes[0].nfs: is not a field",
    ),
    *[
        (
            f"volume-named-{name}",
            base_spec,
            setting(f"{POD}.volumes", [{"name": name, "emptyDir": {}}]),
            False,
            f"spec.{POD}.volumes[0].name: must not be",
        )
        for name in ("memory", "memsync-state")
    ],
    (
        "too-many-volumes",
        base_spec,
        setting(f"{POD}.volumes", [{"name": f"v{i}", "emptyDir": {}} for i in range(33)]),
        False,
        f"spec.{POD}.volumes: may list at most 32",
    ),
    *[
        (
            f"mount-at-{path}",
            base_spec,
            mounting(path),
            False,
            f"spec.{C}.volumeMounts[0].mountPath: must not",
        )
        for path in ("/mnt", "/mnt/memory", "/mnt/memory/notes", "/mnt/memory/a/b")
    ],
    *[
        (f"mount-unclean-{path}", base_spec, mounting(path), False, "must be a clean absolute path")
        for path in ("/", "/mnt/", "/mnt//memory", "/mnt/./memory", "/data/../mnt/memory", "mnt/memory", "")
    ],
    *[
        (f"mount-fine-{path}", base_spec, mounting(path), True, "")
        for path in ("/data", "/mnt/memoryx", "/.cache")
    ],
    (
        "mount-memsync-state",
        base_spec,
        mounting("/state", volume="memsync-state"),
        False,
        f"spec.{C}.volumeMounts[0].name: must not be 'memsync-state'",
    ),
    (
        "too-many-mounts",
        base_spec,
        setting(f"{C}.volumeMounts", [{"name": "data", "mountPath": f"/d{i}"} for i in range(33)]),
        False,
        f"spec.{C}.volumeMounts: may list at most 32",
    ),
    (
        "label-of-the-operator",
        base_spec,
        setting("template.metadata", {"labels": {"app.kubernetes.io/managed-by": "me"}}),
        False,
        "spec.template.metadata.labels: app.kubernetes.io/managed-by: set by the operator",
    ),
    (
        "annotation-of-the-operator",
        base_spec,
        setting("template.metadata", {"annotations": {"kubectl.kubernetes.io/default-container": "x"}}),
        False,
        "spec.template.metadata.annotations: kubectl.kubernetes.io/default-container",
    ),
    ("label-not-string", base_spec, setting("template.metadata", {"labels": {"a": 1}}), False, "labels.a"),
    ("deadline-zero", base_spec, setting(f"{POD}.activeDeadlineSeconds", 0), False, "activeDeadlineSeconds"),
    (
        "memsync-env-field-ref",
        base_spec,
        setting(f"{POD}.memsync", {"env": [{"name": "P", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]}),
        False,
        f"spec.{POD}.memsync.env[0].valueFrom",
    ),
    (
        "memsync-env-secret-typo",
        base_spec,
        setting(f"{POD}.memsync", {"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"nam": "s"}}}]}),
        False,
        f"spec.{POD}.memsync.env[0].valueFrom.secretKeyRef.nam",
    ),
    (
        "memsync-resources-typo",
        base_spec,
        setting(f"{POD}.memsync", {"resources": {"requests": {"cpu": "1"}, "limts": {}}}),
        False,
        f"spec.{POD}.memsync.resources.limts",
    ),
    (
        "privileged",
        base_spec,
        setting(f"{C}.securityContext", {"privileged": True}),
        False,
        f"spec.{C}.securityContext.privileged: must not be true",
    ),
    (
        "privileged-string",
        base_spec,
        setting(f"{C}.securityContext", {"privileged": "true"}),
        False,
        f"spec.{C}.securityContext.privileged: must be a boolean",
    ),
    (
        "escalation",
        base_spec,
        setting(f"{C}.securityContext", {"allowPrivilegeEscalation": True}),
        False,
        "securityContext.allowPrivilegeEscalation: must not be true",
    ),
    (
        "run-as-root-allowed",
        base_spec,
        setting(f"{C}.securityContext", {"runAsNonRoot": False}),
        False,
        "securityContext.runAsNonRoot: must not be false",
    ),
    (
        "run-as-uid-0",
        base_spec,
        setting(f"{C}.securityContext", {"runAsUser": 0}),
        False,
        "runAsUser: must be",
    ),
    (
        "run-as-another-uid",
        base_spec,
        setting(f"{C}.securityContext", {"runAsUser": 1000}),
        False,
        "securityContext.runAsUser: must be 65532 or unset",
    ),
    (
        "run-as-uid-string",
        base_spec,
        setting(f"{C}.securityContext", {"runAsUser": "1000"}),
        False,
        "securityContext.runAsUser: must be an integer",
    ),
    (
        "cap-sys-admin",
        base_spec,
        setting(f"{C}.securityContext", {"capabilities": {"add": ["SYS_ADMIN"]}}),
        False,
        "capabilities.add: may only contain NET_BIND_SERVICE (got SYS_ADMIN)",
    ),
    (
        "cap-add-not-list",
        base_spec,
        setting(f"{C}.securityContext", {"capabilities": {"add": "NET_ADMIN"}}),
        False,
        "capabilities.add: must be an array",
    ),
    (
        "cap-drop-ints",
        base_spec,
        setting(f"{C}.securityContext", {"capabilities": {"drop": [1]}}),
        False,
        "capabilities.drop[0]: must be a string",
    ),
    (
        "seccomp-unconfined",
        base_spec,
        setting(f"{C}.securityContext", {"seccompProfile": {"type": "Unconfined"}}),
        False,
        "seccompProfile.type: must be RuntimeDefault or Localhost",
    ),
    (
        "proc-unmasked",
        base_spec,
        setting(f"{C}.securityContext", {"procMount": "Unmasked"}),
        False,
        "procMount: must be Default",
    ),
    (
        "host-process",
        base_spec,
        setting(f"{C}.securityContext", {"windowsOptions": {"hostProcess": True}}),
        False,
        "windowsOptions.hostProcess: must not be true",
    ),
    (
        "security-context-list",
        base_spec,
        setting(f"{C}.securityContext", ["privileged"]),
        False,
        "securityContext: must be an object",
    ),
    *[
        (
            f"selinux-{t or 'empty'}",
            base_spec,
            setting(f"{C}.securityContext.seLinuxOptions", {"type": t}),
            True,
            "",
        )
        for t in ("", "container_t", "container_init_t", "container_kvm_t")
    ],
    (
        "selinux-level-only",
        base_spec,
        setting(f"{C}.securityContext.seLinuxOptions", {"level": "s0:c123,c456"}),
        True,
        "",
    ),
    (
        "selinux-spc",
        base_spec,
        setting(f"{C}.securityContext.seLinuxOptions", {"type": "spc_t"}),
        False,
        "seLinuxOptions.type: must be unset, empty, or one of container_t",
    ),
    (
        "selinux-type-int",
        base_spec,
        setting(f"{C}.securityContext.seLinuxOptions", {"type": 7}),
        False,
        "seLinuxOptions.type: must be a string",
    ),
    (
        "selinux-type-too-long",
        base_spec,
        setting(f"{C}.securityContext.seLinuxOptions", {"type": "container_t" + "x" * 300}),
        False,
        "seLinuxOptions.type: must be at most 256 characters",
    ),
    (
        "selinux-user",
        base_spec,
        setting(f"{C}.securityContext.seLinuxOptions", {"user": "system_u"}),
        False,
        "seLinuxOptions.user: must not be set",
    ),
    (
        "selinux-role",
        base_spec,
        setting(f"{C}.securityContext.seLinuxOptions", {"role": "system_r"}),
        False,
        "seLinuxOptions.role: must not be set",
    ),
    (
        "selinux-not-object",
        base_spec,
        setting(f"{C}.securityContext.seLinuxOptions", "spc_t"),
        False,
        "seLinuxOptions: must be an object",
    ),
    (
        "apparmor-runtime-default",
        base_spec,
        setting(f"{C}.securityContext.appArmorProfile", {"type": "RuntimeDefault"}),
        True,
        "",
    ),
    (
        "apparmor-unconfined",
        base_spec,
        setting(f"{C}.securityContext.appArmorProfile", {"type": "Unconfined"}),
        False,
        "appArmorProfile.type: must not be Unconfined",
    ),
    (
        "apparmor-type-list",
        base_spec,
        setting(f"{C}.securityContext.appArmorProfile", {"type": ["Unconfined"]}),
        False,
        "appArmorProfile.type: must be a string",
    ),
    (
        "ports-fine",
        base_spec,
        setting(f"{C}.ports", [{"containerPort": 8080}, {"containerPort": 9090, "hostPort": 0}]),
        True,
        "",
    ),
    (
        "ports-host-port",
        base_spec,
        setting(f"{C}.ports", [{"containerPort": 8080}, {"containerPort": 80, "hostPort": 80}]),
        False,
        "ports[1].hostPort: must not be set",
    ),
    (
        "ports-host-port-string",
        base_spec,
        setting(f"{C}.ports", [{"containerPort": 80, "hostPort": "80"}]),
        False,
        "ports[0].hostPort: must be an integer",
    ),
    (
        "ports-not-list",
        base_spec,
        setting(f"{C}.ports", {"containerPort": 80}),
        False,
        "ports: must be an array",
    ),
    ("ports-item-not-object", base_spec, setting(f"{C}.ports", [80]), False, "ports[0]: must be an object"),
    *[
        (
            f"host-in-{handler}",
            base_spec,
            setting(f"{C}.{handler}", {"host": "10.0.0.1", "port": 80}),
            False,
            f"spec.{C}.{handler}.host: must not be set",
        )
        for handler in handler_paths()
    ],
    (
        "probe-host-empty",
        base_spec,
        setting(f"{C}.readinessProbe.httpGet", {"host": "", "port": 8080, "path": "/ready"}),
        True,
        "",
    ),
    ("probe-without-host", base_spec, setting(f"{C}.livenessProbe.tcpSocket", {"port": 8080}), True, ""),
    *[
        (
            f"profile-annotation-{key.split('.', 1)[0]}",
            base_spec,
            setting("template.metadata", {"annotations": {key: "unconfined"}}),
            False,
            f"spec.template.metadata.annotations[{key}]: must not be set",
        )
        for key in (
            "container.apparmor.security.beta.kubernetes.io/sandbox",
            "seccomp.security.alpha.kubernetes.io/pod",
            "container.seccomp.security.alpha.kubernetes.io/memsync-sync",
        )
    ],
    (
        "other-annotation",
        base_spec,
        setting("template.metadata", {"annotations": {"example.com/apparmor": "x"}}),
        True,
        "",
    ),
    (
        "ports-too-many",
        base_spec,
        setting(f"{C}.ports", [{"containerPort": 1000 + i} for i in range(core.PORTS_MAX + 1)]),
        False,
        f"ports: may list at most {core.PORTS_MAX} entries",
    ),
]


def _case(base: Callable[[], dict[str, Any]], mutate: Mutation | None) -> dict[str, Any]:
    spec = base()
    if mutate is not None:
        mutate(spec)
    return spec


@pytest.mark.parametrize(
    ("case", "base", "mutate", "verdict", "fragment"), CORPUS, ids=[c[0] for c in CORPUS]
)
def test_model_and_crd_agree(
    case: str, base: Callable[[], dict[str, Any]], mutate: Mutation | None, verdict: bool | str, fragment: str
) -> None:
    spec = _case(base, mutate)
    _, api_errors = admit(smem(spec))
    model_error = ""
    try:
        validate_spec(spec)
    except InvalidSpecError as exc:
        model_error = str(exc)
    api_accepts = verdict is True or verdict == MODEL_ONLY
    assert (api_errors == []) is api_accepts, f"{case}: API server verdict {api_errors}"
    assert (model_error == "") is (verdict is True), f"{case}: model verdict {model_error!r}"
    if verdict is not True:
        assert fragment in model_error, f"{case}: {model_error!r} does not mention {fragment!r}"


def test_model_only_refusals_are_exactly_default_path_collisions() -> None:
    """The gap between the CRD and the model is only the slug-based (default) mount paths."""
    for case, base, mutate, verdict, _ in CORPUS:
        if verdict != MODEL_ONLY:
            continue
        spec = SessionMemorySpec.model_construct(
            stores=[StoreSpec.model_validate(s) for s in _case(base, mutate)["stores"]]
        )
        defaults = [s for s in spec.stores or [] if s.mount_path is None]
        assert defaults, f"{case} involves no default path, so CEL should have caught it"


def test_corpus_covers_every_cel_rule() -> None:
    """Each CEL rule of the schema refuses at least one corpus case (so no rule is dead or untested)."""
    messages: set[str] = set()

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            for rule in node.get("x-kubernetes-validations", []):
                if "oldSelf" not in rule["rule"]:
                    messages.add(rule["message"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(openapi_schema())
    fired: set[str] = set()
    for _, base, mutate, verdict, _ in CORPUS:
        if verdict is not False:
            continue
        _, errors = admit(smem(_case(base, mutate)))
        assert not any("evaluation error" in e for e in errors), errors
        for error in errors:
            fired.update(msg for msg in messages if msg in error)
    assert fired == messages, f"rules no corpus case refuses: {messages - fired}"


def test_defaults_of_schema_and_model_agree() -> None:
    stored, errors = admit(smem(base_spec()))
    assert errors == []
    model = SessionMemorySpec.model_validate(base_spec())
    assert stored["spec"] == model.model_dump(by_alias=True, exclude_none=True)
    assert stored["spec"]["sync"] == {"intervalSeconds": 15, "deletions": "enabled", "finalFlushSeconds": 30}
    assert stored["spec"]["apiBaseUrl"] == "https://api.anthropic.com"
    assert stored["spec"]["stores"][0]["access"] == "read_write"


def test_full_spec_round_trips_through_the_model() -> None:
    model = SessionMemorySpec.model_validate(full_spec())
    stored, errors = admit(smem(full_spec()))
    assert errors == []
    assert model.model_dump(by_alias=True, exclude_none=True) == stored["spec"]
    assert [s.effective_mount_path for s in model.stores] == [
        "/mnt/memory/user-preferences",
        "/mnt/memory/team-notes",
        "/mnt/memory/team/notes",
        "/mnt/memory/memstore-01dd",
        "/mnt/memory/caf-notes",
        "/mnt/memory/deep/er/x.v2_final-1",
        "/mnt/memory/runbooks",
        "/mnt/memory/runbooks-2",
    ]


def test_whole_object_model_and_mapping_views() -> None:
    obj = smem(base_spec())
    parsed = SessionMemory.model_validate(obj)
    assert parsed.spec.session_id == "sesn_011abc"
    assert parsed.status is None
    # kopf hands the spec out as a read-only mapping view: validate_spec copies it into plain data.
    container = types.MappingProxyType({"name": "sandbox", "image": "img:1"})
    template = types.MappingProxyType({"spec": types.MappingProxyType({"containers": (container,)})})
    view = types.MappingProxyType({**base_spec(), "template": template})
    assert validate_spec(view).template.spec.sandbox == {"name": "sandbox", "image": "img:1"}


# --- CEL details --------------------------------------------------------------------------------------------


def test_session_id_is_immutable() -> None:
    old = smem(base_spec())
    same = smem(base_spec())
    assert admit(same, old)[1] == []
    changed = smem({**base_spec(), "sessionId": "sesn_other"})
    assert admit(changed)[1] == []  # as a create it is fine
    assert admit(changed, old)[1] == [
        ".spec.sessionId: sessionId is immutable: create a new SessionMemory instead"
    ]


def test_stores_are_immutable_but_sync_settings_may_change() -> None:
    old = smem(base_spec())
    more = smem(
        {**base_spec(), "stores": stores(("memstore_01aa", "User Preferences"), ("memstore_b", "More"))}
    )
    errors = admit(more, old)[1]
    assert len(errors) == 1 and "stores is immutable" in errors[0]
    read_only = base_spec()
    read_only["stores"][0]["access"] = "read_only"
    assert "stores is immutable" in " ".join(admit(smem(read_only), old)[1])
    # Spelling out a default is no change: defaults are applied to both sides before the rule runs.
    explicit = base_spec()
    explicit["stores"][0]["access"] = "read_write"
    assert admit(smem(explicit), old)[1] == []
    assert admit(smem({**base_spec(), "sync": {"intervalSeconds": 60}}), old)[1] == []
    # stores omitted (read from the session at mount) stay omitted, and given stores cannot be dropped
    without = {k: v for k, v in base_spec().items() if k != "stores"}
    assert admit(smem(without), smem(without))[1] == []
    for new, before in ((smem(base_spec()), smem(without)), (smem(without), old)):
        errors = admit(new, before)[1]
        assert errors == [
            ".spec: stores is immutable: it cannot be added or removed; create a new SessionMemory instead"
        ]


# --- the CRD object itself ----------------------------------------------------------------------------------


def test_checked_in_crd_is_generated() -> None:
    assert CRD_FILE.read_text() == render_crd_yaml(), (
        "crds/ is stale: run `python -m memsync.crd.schema > crds/sessionmemories.agents.memsync.dev.yaml`"
    )
    assert yaml.safe_load(CRD_FILE.read_text()) == build_crd()


def test_crd_validates_against_the_kubernetes_schema() -> None:
    kubernetes_validate.validate(build_crd(), K8S_VERSION, strict=True)


def test_crd_names_and_columns() -> None:
    crd = build_crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "sessionmemories.agents.memsync.dev"
    assert spec["group"] == "agents.memsync.dev" and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "SessionMemory" and spec["names"]["shortNames"] == ["smem"]
    (version,) = spec["versions"]
    assert version["name"] == models.VERSION and version["served"] and version["storage"]
    assert f"agents.memsync.dev/{models.VERSION}" == API_VERSION
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert {"Phase", "Ready", "Stores", "Last Sync", "Age"} <= set(columns)
    assert columns["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    # A count, not the first store's id (a printer column's JSONPath cannot count: the operator writes it).
    assert columns["Stores"] == {"name": "Stores", "type": "integer", "jsonPath": ".status.storeCount"}
    assert columns["Age"]["type"] == "date" and columns["Last Sync"]["type"] == "date"
    assert crd["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"] == "-1"


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node with its path (properties and items)."""
    out = [(path, node)]
    for key, sub in (node.get("properties") or {}).items():
        out += _walk(sub, f"{path}.{key}")
    if "items" in node:
        out += _walk(node["items"], f"{path}[]")
    return out


def test_schema_is_structural() -> None:
    """The rules of a structural schema (CRD docs), checked here since no API server runs in unit tests."""
    for path, node in _walk(openapi_schema()):
        if node.get("x-kubernetes-int-or-string"):  # the one exception: anyOf integer or string, no type
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}] and "type" not in node, path
            continue
        assert node.get("type") in ("object", "array", "string", "integer", "number", "boolean"), path
        assert not ({"allOf", "anyOf", "oneOf", "not", "$ref"} & set(node)), path
        # no field of the spec accepts unknown fields: a typo is refused, never pruned or passed on
        if path.startswith(".spec"):
            assert "x-kubernetes-preserve-unknown-fields" not in node, path
        if node.get("type") == "object" and path.startswith(".spec"):
            assert "properties" in node or "additionalProperties" in node, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if "default" in node:
            assert structural_errors(node, node["default"]) == [], f"{path}: default does not validate"
        if node.get("x-kubernetes-list-type") == "map":
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in node["items"].get("required", []), f"{path}: map key {key} must be required"
        for rule in node.get("x-kubernetes-validations", []):
            assert rule["message"] and rule.get("reason", "FieldValueInvalid") in (
                "FieldValueInvalid",
                "FieldValueForbidden",
                "FieldValueRequired",
                "FieldValueDuplicate",
            )
            if "fieldPath" in rule:
                assert rule["fieldPath"].lstrip(".") in node.get("properties", {}), (
                    f"{path}: {rule['fieldPath']}"
                )


def test_cel_inputs_are_bounded() -> None:
    """Every list or string a CEL rule walks has maxItems/maxLength, so the API server's cost estimate of the
    rules stays small (an unbounded one is estimated at the 3 MiB request limit and can be refused)."""
    nodes = dict(_walk(openapi_schema()))
    stores = nodes[".spec.stores"]
    assert stores["maxItems"] == 8
    for field in ("memoryStoreId", "name", "mountPath"):
        assert stores["items"]["properties"][field]["maxLength"] <= 255
    container = ".spec.template.spec.containers[]"
    assert nodes[".spec.template.spec.containers"]["maxItems"] == 1
    add = nodes[f"{container}.securityContext.capabilities.add"]
    assert add["maxItems"] <= 64 and add["items"]["maxLength"] <= 64
    assert nodes[f"{container}.ports"]["maxItems"] <= 64
    for field in ("type", "user", "role"):
        assert nodes[f"{container}.securityContext.seLinuxOptions.{field}"]["maxLength"] <= 256
    assert nodes[f"{container}.securityContext.appArmorProfile.type"]["maxLength"] <= 256
    assert nodes[f"{container}.volumeMounts"]["maxItems"] <= 32
    assert nodes[f"{container}.volumeMounts[].mountPath"]["maxLength"] <= 1024
    assert nodes[f"{container}.volumeMounts[].name"]["maxLength"] <= 63
    assert nodes[".spec.template.spec.volumes"]["maxItems"] <= 32
    assert nodes[".spec.template.spec.volumes[].name"]["maxLength"] <= 63
    for field in ("labels", "annotations"):
        assert nodes[f".spec.template.metadata.{field}"]["maxProperties"] <= 64


#: Member functions and macros whose cost the API server can bound for our bounded fields. Kubernetes
#: refuses a CRD whose rule's *estimated* cost exceeds its budget; e.g. ``findAll(...).join(...)`` is
#: estimated as unbounded (the elements of a computed list have no known size), so it may not appear here.
_BOUNDED_CALLS = {"all", "exists_one", "matches", "startsWith"}


def test_cel_rules_use_only_cost_bounded_operations() -> None:
    for path, node in _walk(openapi_schema()):
        for rule in node.get("x-kubernetes-validations", []):
            code = re.sub(r"'[^']*'", "''", rule["rule"])  # string literals are not code
            calls = set(re.findall(r"\.(\w+)\(", code))
            assert calls <= _BOUNDED_CALLS, f"{path}: {rule['rule']} calls {calls - _BOUNDED_CALLS}"
            functions = set(re.findall(r"(?<![.\w])(\w+)\(", code)) - {"has", "size"}
            assert not functions, f"{path}: {rule['rule']} calls {functions}"
            for arg in re.findall(r"\.matches\((.)", rule["rule"]):
                assert arg == "'", f"{path}: matches needs a constant (literal) pattern"
            # every string a rule reads is bounded
            for field in re.findall(r"self\.(\w+)", rule["rule"]):
                sub = (node.get("properties") or {}).get(field)
                if sub is not None and sub.get("type") == "string":
                    assert "maxLength" in sub or "enum" in sub, f"{path}.{field} is read by CEL but unbounded"


def test_status_schema_accepts_what_the_model_writes() -> None:
    status_schema = openapi_schema()["properties"]["status"]
    status = SessionMemoryStatus(
        phase=Phase.SUCCEEDED,
        pod_name="sesn-011abc-sandbox",
        observed_generation=3,
        conditions=[
            Condition(type="Ready", status="False", reason="Succeeded", last_transition_time=now()),
            Condition(
                type="Flushed",
                status="True",
                reason="FinalFlushComplete",
                message="x" * 40000,
                last_transition_time=now(),
                observed_generation=3,
            ),
        ],
        stores=[StoreStatus(memory_store_id="memstore_01aa", memories_mounted=12, uploaded=3, unsent=0)],
        last_sync_time=now(),
        message="the session ended and every store was flushed",
    )
    body = status.to_dict()
    assert structural_errors(status_schema, body) == []
    assert body["conditions"][0]["lastTransitionTime"].endswith("Z")
    assert len(body["conditions"][1]["message"]) == models.MESSAGE_MAX
    assert SessionMemoryStatus.model_validate(body).condition("Flushed") is not None
    assert status_schema["properties"]["phase"]["enum"] == [p.value for p in Phase]
    # kopf's own bookkeeping, if any, is kept rather than pruned.
    assert status_schema["properties"]["kopf"]["x-kubernetes-preserve-unknown-fields"] is True


@pytest.mark.parametrize(
    ("field", "value"), [("reason", "Mount Failed"), ("reason", ""), ("type", "not ready")]
)
def test_conditions_the_api_server_would_refuse_are_refused_by_the_model(field: str, value: str) -> None:
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "Ok",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    condition[field] = value
    status_schema = openapi_schema()["properties"]["status"]
    assert structural_errors(status_schema, {"conditions": [condition]}) != []
    with pytest.raises(ValidationError):
        Condition.model_validate(condition)


def test_describe_validation_error_names_paths_and_hides_template_values() -> None:
    spec = base_spec()
    spec["stores"][0]["access"] = "rw"
    spec["sync"] = {"intervalSeconds": 2}
    spec["template"] = {
        "spec": {"containers": [{"name": "sandbox", "env": [{"name": "TOKEN", "value": "do-not-echo-me"}]}]}
    }
    with pytest.raises(ValidationError) as info:
        SessionMemorySpec.model_validate(spec)
    text = describe_validation_error(info.value, prefix="spec")
    assert "spec.stores[0].access: input should be 'read_write' or 'read_only' (got 'rw')" in text
    assert "spec.sync.intervalSeconds: input should be greater than or equal to 5 (got 2)" in text
    assert "spec.template.spec.containers[0].image: is required" in text
    assert "do-not-echo-me" not in text
    with pytest.raises(ValidationError) as info:
        StoreSpec.model_validate({"memoryStoreId": "memstore_1"})
    assert describe_validation_error(info.value) == "name: is required"


def test_typed_status_the_test_models_and_the_crd_schema_hold_the_same_fields() -> None:
    """One shape of the status: the operator's TypedDicts (``crd/status_types.py``), the tests' validating
    models (``support/crd_status.py``) and the CRD's status schema name the same fields."""

    def aliases(model: type[BaseModel]) -> set[str]:
        return {field.alias or name for name, field in model.model_fields.items()}

    assert aliases(SessionMemoryStatus) == status_types.STATUS_FIELDS
    assert aliases(Condition) == status_types.CONDITION_FIELDS
    assert aliases(StoreStatus) == status_types.STORE_FIELDS
    [version] = build_crd()["spec"]["versions"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert set(status["properties"]) - {"kopf"} == status_types.STATUS_FIELDS  # kopf's own bookkeeping
    assert set(status["properties"]["conditions"]["items"]["properties"]) == status_types.CONDITION_FIELDS
    assert set(status["properties"]["stores"]["items"]["properties"]) == status_types.STORE_FIELDS
