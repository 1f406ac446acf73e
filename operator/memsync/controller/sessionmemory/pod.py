"""The sandbox Pod of one SessionMemory (docs/design.md#the-sandbox-pod), as a pure function of the spec.

``build_sandbox_pod`` returns the Pod manifest the controller creates (or adopts: the name is deterministic
and the Pod carries the SessionMemory's labels and a controller owner reference). It never reads the
cluster, the clock or the environment, so the same SessionMemory always yields the same Pod.

Shape (docs/design.md#the-sandbox-pod; the environment is the sync agent's contract):

* volumes ``memory`` (emptyDir, ``/mnt/memory`` in every container) and ``memsync-state`` (emptyDir,
  ``/var/lib/memsync`` in the two memsync containers only: the agent can neither see nor alter the baseline);
* init container ``memsync-mount`` (``memsync mount``), then the native sidecar ``memsync-sync``
  (``restartPolicy: Always``, ``memsync sync``, startup and readiness probes on ``/readyz`` :9477,
  ``preStop: memsync flush``): the kubelet starts the sandbox only once the startupProbe passed;
* container ``sandbox`` from ``spec.template.spec.containers[0]``, with ``/mnt/memory`` mounted before the
  template's own mounts and a restricted security context merged into the user's; the template's volumes
  after memsync's two; the template's labels and annotations, and its scheduling fields
  (:data:`TEMPLATE_POD_FIELDS`), as they are.

Choices made here:

* ``ANTHROPIC_WORK_SECRET`` (from ``secretKeyRef`` only) goes to the two memsync containers, **not** to the
  sandbox: the sessions token lets its holder write the stores directly, past the sync agent's safety rails,
  so the agent gets it only when the user adds it to the sandbox container's ``env`` themselves (as a
  ``secretKeyRef``).
* ``terminationGracePeriodSeconds`` = max(sandbox shutdown allowance, F) + 2 x F + margin, where F is
  ``sync.finalFlushSeconds``, the allowance is 30 s and the margin 10 s. Why: the sidecar's ``preStop`` flush
  (bounded by F) runs at the start of termination, alongside the sandbox's own shutdown; SIGTERM reaches the
  sidecar only after both, and then runs the final sync and the push-only flush, each bounded by F.
* No liveness probe on the sidecar: a liveness kill during the final flush would cost the agent's last
  edits; a crashed sidecar restarts by itself (``restartPolicy: Always``) and resumes from ``memsync-state``.
* The Pod does not mount a service-account token and gets no service-link environment variables.
* Every container runs as uid/gid 65532 with fsGroup 65532; the sandbox may not choose another uid, because
  the sync agent keeps the store files private to its own (0600 files, 0700 folders).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kubernetes.utils.quantity import parse_quantity
from pydantic.alias_generators import to_snake

from memsync.api.constants import MOUNT_ROOT
from memsync.contracts import env
from memsync.contracts.stores import StoreEntry, encode_stores
from memsync.crd import guards
from memsync.crd.env_spec import EnvVarSpec
from memsync.crd.guards import ALLOWED_ADDED_CAPABILITIES, SANDBOX_CONTAINER_NAME, SANDBOX_UID
from memsync.crd.models import (
    API_VERSION,
    DEFAULT_CONTAINER_ANNOTATION,
    GROUP,
    KIND,
    LABEL_APP_COMPONENT,
    LABEL_APP_NAME,
    LABEL_ATTEMPT,
    LABEL_MANAGED_BY,
    LABEL_SESSION_ID,
    LABEL_SESSIONMEMORY,
    MANAGED_BY,
    MemsyncContainersSpec,
    SessionMemorySpec,
)

MOUNT_CONTAINER: Final = "memsync-mount"
SYNC_CONTAINER: Final = "memsync-sync"
SANDBOX_CONTAINER: Final = SANDBOX_CONTAINER_NAME
MEMORY_VOLUME: Final = guards.MEMORY_VOLUME
STATE_VOLUME: Final = guards.STATE_VOLUME
STATE_DIR: Final = "/var/lib/memsync"
METRICS_PORT: Final = 9477
TERMINATION_MESSAGE_PATH: Final = "/dev/termination-log"
RUN_AS_ID: Final = SANDBOX_UID

#: Seconds the sandbox container is allowed for its own shutdown (part of the grace period formula).
SANDBOX_SHUTDOWN_SECONDS: Final = 30
#: Extra seconds on top of the shutdown passes (process start-up, the kubelet's bookkeeping).
GRACE_MARGIN_SECONDS: Final = 10
#: The sidecar's startupProbe: up to 2 x 90 = 180 s for it to serve /readyz before the kubelet restarts it.
STARTUP_PROBE_PERIOD_SECONDS: Final = 2
STARTUP_PROBE_FAILURES: Final = 90

POD_NAME_SUFFIX: Final = "-sandbox"
DNS_LABEL_MAX: Final = 63
_HASH_LEN: Final = 8

#: The stores' folder's emptyDir ``sizeLimit`` unless the SessionMemory or the operator sets one: 8 stores
#: of 2,000 memories of a few kB fit many times over. The memsync containers request as much ephemeral
#: storage (unless the operator sets another request), so the Pod's own memory never counts as usage above
#: its request when the kubelet ranks Pods to evict.
DEFAULT_MEMORY_VOLUME_SIZE_LIMIT: Final = "1Gi"
#: The memsync containers' ephemeral-storage limit unless the operator sets one (never below the request).
#: A limit is set so that a LimitRange's default limit (lower than the request) is never applied to them,
#: and a ``limits.ephemeral-storage`` quota finds one.
DEFAULT_EPHEMERAL_STORAGE_LIMIT: Final = "2Gi"
EPHEMERAL_STORAGE: Final = "ephemeral-storage"
#: The Pod annotation of a hash of the spec the Pod was built from (``spec_hash``).
ANNOTATION_SPEC_HASH: Final = f"{GROUP}/spec-hash"

MEMSYNC_RESOURCES: Final[dict[str, dict[str, str]]] = {
    "requests": {"cpu": "50m", "memory": "128Mi"},
    "limits": {"cpu": "1", "memory": "512Mi"},
}

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:_HASH_LEN]


def pod_name_for(smem_name: str, attempt: int = 0) -> str:
    """The sandbox Pod's name: ``<name>-sandbox`` (``<name>-sandbox-<attempt>`` for a restart), a DNS label
    of at most 63 characters.

    A SessionMemory name is a DNS subdomain (up to 253 characters, dots allowed). When it is already a short
    DNS label the Pod is simply ``<name>-sandbox``; otherwise dots become hyphens, the name is cut to fit and
    an 8-hex-digit hash of the full name is added, so two different names never share a Pod name.
    """
    suffix = POD_NAME_SUFFIX if attempt <= 0 else f"{POD_NAME_SUFFIX}-{attempt}"
    candidate = smem_name + suffix
    if len(candidate) <= DNS_LABEL_MAX and _DNS_LABEL.match(candidate):
        return candidate
    base = re.sub(r"[^a-z0-9-]+", "-", smem_name.lower())
    room = DNS_LABEL_MAX - len(suffix) - _HASH_LEN - 1
    base = base[:room].strip("-")
    prefix = f"{base}-" if base else ""
    return f"{prefix}{_short_hash(smem_name)}{suffix}"


def attempt_of_pod(pod: Mapping[str, Any]) -> int:
    """The attempt a sandbox Pod serves (its ``LABEL_ATTEMPT``; 0 for a Pod without one)."""
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    value = labels.get(LABEL_ATTEMPT) if isinstance(labels, Mapping) else None
    return int(value) if isinstance(value, str) and value.isdigit() else 0


#: The spec fields a sandbox Pod is built from (the others are read by the operator while it runs).
_POD_SPEC_FIELDS: Final = frozenset(
    {"session_id", "work_item_secret_ref", "api_base_url", "stores", "sync", "template"}
)


def spec_hash(spec: SessionMemorySpec) -> str:
    """A hash of the parts of a SessionMemory's spec a sandbox Pod is built from: a spec change the running
    Pod cannot take changes it (and changing the spec back restores it)."""
    parts = spec.model_dump(by_alias=True, exclude_none=True, include=set(_POD_SPEC_FIELDS))
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _bytes(quantity: str) -> int:
    return int(parse_quantity(quantity))  # type: ignore[no-untyped-call]


def with_ephemeral_storage(resources: Mapping[str, Any], request: str, limit: str) -> dict[str, Any]:
    """``resources`` with an ephemeral-storage request and limit: the ones given there, else ``request``
    and ``limit``; a limit is never below its request (a LimitRange's lower default limit would make the
    Pod invalid, and a ``limits.ephemeral-storage`` quota refuses a container without one)."""
    out: dict[str, Any] = copy.deepcopy(dict(resources))
    requests: dict[str, Any] = dict(out.get("requests") or {})
    limits: dict[str, Any] = dict(out.get("limits") or {})
    given_request, given_limit = requests.get(EPHEMERAL_STORAGE), limits.get(EPHEMERAL_STORAGE)
    if given_request is None:
        given_request = request
        if given_limit is not None and _bytes(str(given_limit)) < _bytes(request):
            given_request = given_limit
    if given_limit is None:
        given_limit = limit if _bytes(limit) >= _bytes(str(given_request)) else given_request
    requests[EPHEMERAL_STORAGE], limits[EPHEMERAL_STORAGE] = given_request, given_limit
    out["requests"], out["limits"] = requests, limits
    return out


def owner_label_value(smem_name: str) -> str:
    """The SessionMemory's name as a label value (<= 63 characters; cut with a hash suffix when longer)."""
    if len(smem_name) <= DNS_LABEL_MAX:
        return smem_name
    room = DNS_LABEL_MAX - _HASH_LEN - 1
    return f"{smem_name[:room].rstrip('-.')}-{_short_hash(smem_name)}"


#: The template's Pod spec fields copied into the Pod as they are (the operator owns every other one).
TEMPLATE_POD_FIELDS: Final = (
    "runtimeClassName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "serviceAccountName",
    "imagePullSecrets",
    "priorityClassName",
    "activeDeadlineSeconds",
)


_TEMPLATE_ATTRS: Final = {to_snake(f) for f in TEMPLATE_POD_FIELDS}


def pod_labels(smem_name: str, spec: SessionMemorySpec, attempt: int = 0) -> dict[str, str]:
    """Labels of the sandbox Pod: the template's, then the operator's (the model refuses a template that sets
    one of those); the controller watches Pods by ``app.kubernetes.io/managed-by=memsync``."""
    meta = spec.template.metadata
    return {
        **((meta.labels if meta else None) or {}),
        LABEL_APP_NAME: "memsync-sandbox",
        LABEL_APP_COMPONENT: "sandbox",
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_SESSION_ID: spec.session_id,
        LABEL_SESSIONMEMORY: owner_label_value(smem_name),
        LABEL_ATTEMPT: str(attempt),
    }


def grace_period_seconds(final_flush_seconds: int) -> int:
    """``terminationGracePeriodSeconds``: max(sandbox allowance, F) + 2 x F + margin (see module doc)."""
    flush = final_flush_seconds
    return max(SANDBOX_SHUTDOWN_SECONDS, flush) + 2 * flush + GRACE_MARGIN_SECONDS


def stores_env(spec: SessionMemorySpec) -> str:
    """``MEMSYNC_STORES``: a compact JSON array of {memory_store_id, name, mount_path, access}; without
    ``spec.stores``, ``session`` (the mount step reads them from the session)."""
    if spec.stores is None:
        return env.STORES_FROM_SESSION
    return encode_stores(
        [
            StoreEntry(
                memory_store_id=s.memory_store_id,
                name=s.name,
                mount_path=s.effective_mount_path,
                access=s.access,
            )
            for s in spec.stores
        ]
    )


def memsync_env(spec: SessionMemorySpec) -> list[dict[str, Any]]:
    """The environment of both memsync containers; the secret only as a ``secretKeyRef``."""
    out: list[dict[str, Any]] = [
        {"name": env.SESSION_ID, "value": spec.session_id},
        {"name": env.STORES, "value": stores_env(spec)},
        {"name": env.SYNC_INTERVAL, "value": str(spec.sync.interval_seconds)},
        {"name": env.SYNC_DELETIONS, "value": spec.sync.deletions},
        {"name": env.FLUSH_TIMEOUT, "value": str(spec.sync.final_flush_seconds)},
        {"name": env.STATE_DIR, "value": STATE_DIR},
        {"name": env.TERMINATION_LOG, "value": TERMINATION_MESSAGE_PATH},
        {"name": env.LOG_FORMAT, "value": "json"},
        {"name": env.BASE_URL, "value": spec.api_base_url},
        {
            "name": env.WORK_SECRET,
            "valueFrom": {
                "secretKeyRef": {
                    "name": spec.work_item_secret_ref.name,
                    "key": spec.work_item_secret_ref.key,
                    "optional": False,
                }
            },
        },
    ]
    if spec.sync.conflict_policy not in (None, "storeWins"):
        out.insert(4, {"name": env.CONFLICT_POLICY, "value": spec.sync.conflict_policy})
    return out


def memsync_security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_ID,
        "runAsGroup": RUN_AS_ID,
    }


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_ID,
        "runAsGroup": RUN_AS_ID,
        "fsGroup": RUN_AS_ID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def sandbox_security_context(user: Mapping[str, Any] | None) -> dict[str, Any]:
    """The user's ``securityContext`` with the restricted profile's requirements merged in.

    Raises ValueError naming the field when the user's asks for something restricted forbids (the model
    refuses those first; this keeps the builder safe for a spec built without validation).
    """
    problems = guards.security_context_problems(user or {}, "securityContext")
    if problems:
        raise ValueError("; ".join("spec.template.spec.containers[0]." + p for p in problems))
    merged: dict[str, Any] = copy.deepcopy(dict(user or {}))
    merged["allowPrivilegeEscalation"] = False
    merged["privileged"] = False
    merged["runAsNonRoot"] = True
    caps: dict[str, Any] = dict(merged.get("capabilities") or {})
    drop = [c for c in caps.get("drop") or [] if c != "ALL"]
    caps["drop"] = ["ALL", *drop]
    if caps.get("add"):
        caps["add"] = [c for c in caps["add"] if c in ALLOWED_ADDED_CAPABILITIES]
    else:
        caps.pop("add", None)
    merged["capabilities"] = caps
    return merged


def _memsync_spec(spec: SessionMemorySpec) -> MemsyncContainersSpec:
    return spec.template.spec.memsync or MemsyncContainersSpec()


def extra_env(spec: SessionMemorySpec, defaults: Sequence[EnvVarSpec] = ()) -> list[dict[str, Any]]:
    """The extra environment of the memsync containers: the operator's defaults, then the template's
    ``spec.memsync.env`` (an entry of the template replaces a default of the same name)."""
    entries = _memsync_spec(spec).env or []
    own = {e.name for e in entries}
    merged = [e for e in defaults if e.name not in own] + list(entries)
    return [e.manifest() for e in merged]


def memsync_resources(spec: SessionMemorySpec) -> dict[str, Any]:
    """The memsync containers' resources: the template's ``spec.memsync.resources``, else the default."""
    return copy.deepcopy(_memsync_spec(spec).resources or MEMSYNC_RESOURCES)


def _memsync_container(
    name: str,
    command: list[str],
    *,
    spec: SessionMemorySpec,
    image: str,
    pull_policy: str,
    defaults: Sequence[EnvVarSpec],
) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": command,
        "env": memsync_env(spec) + extra_env(spec, defaults),
        "volumeMounts": [
            {"name": MEMORY_VOLUME, "mountPath": MOUNT_ROOT},
            {"name": STATE_VOLUME, "mountPath": STATE_DIR},
        ],
        "resources": memsync_resources(spec),
        "securityContext": memsync_security_context(),
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


@dataclass(frozen=True)
class PodSettings:
    """The operator's settings of every sandbox Pod (each SessionMemory's spec may replace some):

    - ``agent_image_pull_policy`` of the memsync containers' image;
    - ``memsync_env_defaults``: extra environment of the memsync containers
      (``spec.template.spec.memsync.env`` replaces an entry of the same name);
    - ``memory_volume_size_limit``: the stores' folder's size (``spec.sync.memoryVolumeSizeLimit``
      replaces it);
    - ``ephemeral_storage_request`` (None: the folder's size) and ``ephemeral_storage_limit`` of the memsync
      containers, unless ``spec.template.spec.memsync.resources`` sets them.
    """

    agent_image_pull_policy: str = "IfNotPresent"
    memsync_env_defaults: Sequence[EnvVarSpec] = ()
    memory_volume_size_limit: str = DEFAULT_MEMORY_VOLUME_SIZE_LIMIT
    ephemeral_storage_request: str | None = None
    ephemeral_storage_limit: str = DEFAULT_EPHEMERAL_STORAGE_LIMIT


def build_sandbox_pod(
    *,
    name: str,
    namespace: str,
    uid: str,
    spec: SessionMemorySpec,
    agent_image: str,
    settings: PodSettings = PodSettings(),
    attempt: int = 0,
) -> dict[str, Any]:
    """The sandbox Pod manifest of SessionMemory ``namespace/name`` (uid ``uid``), with the operator's
    ``settings``; ``attempt``: 0, or the restart this Pod serves (its name and ``LABEL_ATTEMPT``)."""
    template = spec.template.spec
    problems = guards.pod_spec_problems(template.model_dump(by_alias=True, exclude_none=True), "")
    if problems:
        raise ValueError("; ".join("spec.template.spec" + p for p in problems))

    container = functools.partial(
        _memsync_container,
        spec=spec,
        image=agent_image,
        pull_policy=settings.agent_image_pull_policy,
        defaults=settings.memsync_env_defaults,
    )
    mount = container(MOUNT_CONTAINER, ["memsync", "mount"])
    sync = container(SYNC_CONTAINER, ["memsync", "sync"])
    sync["restartPolicy"] = "Always"
    size_limit = spec.sync.memory_volume_size_limit or settings.memory_volume_size_limit
    request = settings.ephemeral_storage_request or size_limit
    for memsync_container in (mount, sync):
        memsync_container["resources"] = with_ephemeral_storage(
            memsync_container["resources"], request, settings.ephemeral_storage_limit
        )
    sync["env"].insert(len(memsync_env(spec)), {"name": env.METRICS_PORT, "value": str(METRICS_PORT)})
    sync["ports"] = [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]
    # The kubelet starts the next container (the sandbox) once this sidecar has *started*; readiness gates
    # nothing. The startupProbe makes "started" mean "serving, every store verified": until it passes the
    # sandbox waits, and if it never passes the kubelet restarts the sidecar and the agent never runs.
    sync["startupProbe"] = {
        "httpGet": {"path": "/readyz", "port": METRICS_PORT},
        "periodSeconds": STARTUP_PROBE_PERIOD_SECONDS,
        "timeoutSeconds": 3,
        "failureThreshold": STARTUP_PROBE_FAILURES,
    }
    sync["readinessProbe"] = {
        "httpGet": {"path": "/readyz", "port": METRICS_PORT},
        "periodSeconds": 5,
        "timeoutSeconds": 3,
        "failureThreshold": 3,
    }
    sync["lifecycle"] = {"preStop": {"exec": {"command": ["memsync", "flush"]}}}

    sandbox: dict[str, Any] = copy.deepcopy(template.sandbox)
    sandbox["name"] = SANDBOX_CONTAINER
    sandbox["volumeMounts"] = [
        {"name": MEMORY_VOLUME, "mountPath": MOUNT_ROOT},
        *(sandbox.get("volumeMounts") or []),
    ]
    sandbox["securityContext"] = sandbox_security_context(template.sandbox.get("securityContext"))
    meta = spec.template.metadata
    annotations = {
        **((meta.annotations if meta else None) or {}),
        DEFAULT_CONTAINER_ANNOTATION: SANDBOX_CONTAINER,
        ANNOTATION_SPEC_HASH: spec_hash(spec),
    }
    scheduling = template.model_dump(by_alias=True, exclude_none=True, include=_TEMPLATE_ATTRS)

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name_for(name, attempt),
            "namespace": namespace,
            "labels": pod_labels(name, spec, attempt),
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            **copy.deepcopy(scheduling),
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": grace_period_seconds(spec.sync.final_flush_seconds),
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": pod_security_context(),
            "volumes": [
                {"name": MEMORY_VOLUME, "emptyDir": {"sizeLimit": size_limit}},
                {"name": STATE_VOLUME, "emptyDir": {}},
                *copy.deepcopy(template.volumes or []),
            ],
            "initContainers": [mount, sync],
            "containers": [sandbox],
        },
    }
