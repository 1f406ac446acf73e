"""The SessionMemory custom resource (docs/design.md#the-sessionmemory-resource) as pydantic v2 models.

These models are the operator's second line of validation: the CRD's OpenAPI schema and CEL rules
(``memsync.crd.schema``) make ``kubectl apply`` refuse a bad object, and these models catch whatever slipped
past (an older CRD, a rule CEL cannot express exactly) so the controller can put the SessionMemory in
``Failed`` with a message that names the field and what is allowed (:func:`describe_validation_error`).

The bounds and patterns below are the single source of truth for both: ``schema.py`` builds the CRD from the
same constants, and ``tests/unit/test_crd.py`` proves over a corpus of valid and invalid objects that the
model and the schema (structural schema + CEL rules) accept and refuse the same things.

Choices made here (each enforced identically by the CRD and by these models):

* ``sessionId`` must look like ``sesn_<letters, digits, '_' or '-'>``, end with a letter or digit and be at
  most 63 characters, because it is copied into a Pod label value (label values: <= 63 characters,
  alphanumeric at both ends).
* ``memoryStoreId`` must look like ``memstore_<letters, digits, '_' or '-'>`` (the API's id prefix), at most
  128 characters (the sync agent names state files after it).
* ``mountPath`` (optional) must be ``/mnt/memory/`` followed by one or more segments of ASCII letters, digits,
  ``.``, ``_`` or ``-`` that do not start with ``.`` (so no ``.``/``..`` segment, no hidden folder, no empty
  segment, no trailing slash). Effective mount paths (explicit, or ``/mnt/memory/<slug of name>``) must be
  unique and no store may be mounted inside another store's folder. The CRD's CEL rules check this for
  explicit paths only (CEL cannot compute the slug within the API server's cost budget); this model checks
  the effective paths, so such a collision surfaces as ``Failed`` with this model's message.
* ``sync.intervalSeconds`` is 5..3600 (default 15); ``sync.finalFlushSeconds`` is 5..300 (default 30).
* ``template`` is the sandbox Pod's template (:class:`SandboxTemplate`): labels and annotations, and a Pod
  spec subset whose Kubernetes types (the sandbox container, volumes, affinity, tolerations, ...) are the
  pinned release's core/v1 schema, generated into ``core_v1.json`` (``memsync.crd.core``); unknown fields are
  refused. The isolation guards on top (``memsync.crd.guards``) refuse host namespaces, hostPath volumes,
  host ports, mounts at or around ``/mnt/memory``, and any ``securityContext`` outside the restricted Pod
  Security Standard, so the session fails with a clear message instead of a Pod admission rejects.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from memsync.api.constants import DEFAULT_BASE_URL, MAX_STORES_PER_SESSION, MOUNT_ROOT, STORE_NAME_MAX
from memsync.api.models import Access, Deletions
from memsync.api.paths import default_mount_path, is_ancestor
from memsync.contracts.env import CONFLICT_POLICIES, ConflictPolicy
from memsync.crd import core
from memsync.crd.env_spec import (
    MEMSYNC_ENV_MAX,
    EnvVarSpec,
    env_problems,
)
from memsync.crd.guards import SANDBOX_CONTAINER_NAME, annotation_problems, pod_spec_problems
from memsync.crd.spec_base import SpecModel, checked, matched
from memsync.crd.spec_messages import InvalidSpecError, describe_validation_error, plain

# --- names -------------------------------------------------------------------------------------------------

GROUP: Final = "agents.memsync.dev"
#: The one served and stored version (docs/upgrade.md says how versions move).
VERSION: Final = "v1alpha2"
API_VERSION: Final = f"{GROUP}/{VERSION}"
PLURAL: Final = "sessionmemories"
SINGULAR: Final = "sessionmemory"
KIND: Final = "SessionMemory"
LIST_KIND: Final = "SessionMemoryList"
SHORT_NAMES: Final = ("smem",)
CATEGORIES: Final = ("memsync",)
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

FINALIZER: Final = f"{GROUP}/finalizer"
#: kopf's progress and diff-base annotations live under this prefix (configured by the controller).
ANNOTATION_PREFIX: Final = GROUP

LABEL_SESSION_ID: Final = f"{GROUP}/session-id"
LABEL_SESSIONMEMORY: Final = f"{GROUP}/sessionmemory"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "memsync"
LABEL_APP_NAME: Final = "app.kubernetes.io/name"
LABEL_APP_COMPONENT: Final = "app.kubernetes.io/component"
#: The sandbox Pod's attempt: 0, then one more per restart after an interruption.
LABEL_ATTEMPT: Final = f"{GROUP}/attempt"

# --- bounds and patterns shared with the CRD schema -------------------------------------------------------
# Patterns are written for both RE2 (the API server) and Python's re (used with fullmatch here).

SESSION_ID_PATTERN: Final = r"^sesn_[A-Za-z0-9_-]*[A-Za-z0-9]$"
SESSION_ID_MAX: Final = 63
MEMORY_STORE_ID_PATTERN: Final = r"^memstore_[A-Za-z0-9_-]+$"
MEMORY_STORE_ID_MAX: Final = 128
STORE_NAME_MIN: Final = 1
MOUNT_PATH_PATTERN: Final = r"^/mnt/memory(/[A-Za-z0-9_-][A-Za-z0-9._-]*)+$"
MOUNT_PATH_MAX: Final = 255
SECRET_NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"  # noqa: S105
SECRET_NAME_MAX: Final = 253
SECRET_KEY_PATTERN: Final = r"^[-._a-zA-Z0-9]+$"  # noqa: S105
SECRET_KEY_MAX: Final = 253
API_BASE_URL_PATTERN: Final = r"^https?://[^\s/?#]+(/[^\s?#]*)?$"
API_BASE_URL_MAX: Final = 2048
STORES_MIN: Final = 1
STORES_MAX: Final = MAX_STORES_PER_SESSION

INTERVAL_MIN: Final = 5
INTERVAL_DEFAULT: Final = 15
INTERVAL_MAX: Final = 3600
FINAL_FLUSH_MIN: Final = 5
FINAL_FLUSH_DEFAULT: Final = 30
FINAL_FLUSH_MAX: Final = 300
SIDECAR_START_MIN: Final = 10
SIDECAR_START_MAX: Final = 3600
#: ``startDeadlineSeconds``: from the SessionMemory's creation to its sandbox container running.
START_DEADLINE_MIN: Final = 10
START_DEADLINE_MAX: Final = 86400
#: A Kubernetes quantity of bytes, as emptyDir's ``sizeLimit`` and ``ephemeral-storage`` take it.
BYTES_QUANTITY_PATTERN: Final = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
BYTES_QUANTITY_MAX: Final = 32

#: ``onInterruption``: what a session interrupted by a drain, an eviction, a preemption or a lost node does.
OnInterruption = Literal["Fail", "Restart"]
ON_INTERRUPTION_VALUES: Final = get_args(OnInterruption)
#: How many times one session may be restarted after an interruption (``onInterruption: Restart``).
MAX_RESTARTS: Final = 3

ACCESS_VALUES: Final = get_args(Access)
DELETIONS_VALUES: Final = get_args(Deletions)
CONFLICT_POLICY_VALUES: Final = CONFLICT_POLICIES

#: Keys of the Pod's metadata the operator sets (a template may not set them).
DEFAULT_CONTAINER_ANNOTATION: Final = "kubectl.kubernetes.io/default-container"


class Phase(StrEnum):
    PENDING = "Pending"
    MOUNTING = "Mounting"
    RUNNING = "Running"
    FLUSHING = "Flushing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


PHASES: Final = tuple(p.value for p in Phase)

#: Condition types the controller publishes (at least these; others may follow the same conventions).
CONDITION_READY: Final = "Ready"
CONDITION_STORES_MOUNTED: Final = "StoresMounted"
CONDITION_FLUSHED: Final = "Flushed"
CONDITION_SYNCED: Final = "Synced"
#: The sandbox Pod's ``PodScheduled`` condition, mirrored while the session waits to start.
CONDITION_SCHEDULED: Final = "Scheduled"
#: False when the spec changed after the sandbox Pod was built (a Pod cannot take the change).
CONDITION_SPEC_APPLIED: Final = "SpecApplied"


# --- spec --------------------------------------------------------------------------------------------------


def checked_api_base_url(value: str) -> str:
    """An ``apiBaseUrl`` (SessionMemory, AgentEnvironment), else a ValueError saying what is allowed."""
    return matched(
        value,
        API_BASE_URL_PATTERN,
        API_BASE_URL_MAX,
        "must be an http:// or https:// URL with a host and no query or fragment "
        "(for example https://api.anthropic.com or http://memsync-store.memsync-system.svc:8080)",
    )


class StoreSpec(SpecModel):
    """One attached memory store."""

    memory_store_id: str
    name: Annotated[str, Field(min_length=STORE_NAME_MIN, max_length=STORE_NAME_MAX)]
    access: Access = "read_write"
    mount_path: str | None = None

    @field_validator("memory_store_id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        return matched(
            value,
            MEMORY_STORE_ID_PATTERN,
            MEMORY_STORE_ID_MAX,
            "must look like memstore_<letters, digits, '_' or '-'>, at most "
            f"{MEMORY_STORE_ID_MAX} characters",
        )

    @field_validator("mount_path")
    @classmethod
    def _check_mount_path(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return matched(
            value,
            MOUNT_PATH_PATTERN,
            MOUNT_PATH_MAX,
            f"must be a clean absolute path under {MOUNT_ROOT}/: segments of ASCII letters, digits, "
            f"'.', '_' or '-' that do not start with '.', no trailing '/', at most {MOUNT_PATH_MAX} "
            f"characters (for example {MOUNT_ROOT}/user-preferences)",
        )

    @property
    def effective_mount_path(self) -> str:
        """The explicit ``mountPath``, else ``/mnt/memory/<slug of name>`` (the store id when no slug)."""
        return self.mount_path or default_mount_path(self.name, self.memory_store_id)


class SyncSpec(SpecModel):
    interval_seconds: Annotated[int, Field(ge=INTERVAL_MIN, le=INTERVAL_MAX)] = INTERVAL_DEFAULT
    deletions: Deletions = "enabled"
    # None = the default, storeWins (kept unset so a stored object shows only what its author wrote)
    conflict_policy: ConflictPolicy | None = None
    final_flush_seconds: Annotated[int, Field(ge=FINAL_FLUSH_MIN, le=FINAL_FLUSH_MAX)] = FINAL_FLUSH_DEFAULT
    # None = the operator's defaults (--sidecar-start-timeout, --memory-volume-size-limit)
    sidecar_start_seconds: Annotated[int, Field(ge=SIDECAR_START_MIN, le=SIDECAR_START_MAX)] | None = None
    memory_volume_size_limit: str | None = None

    @field_validator("memory_volume_size_limit")
    @classmethod
    def _check_size_limit(cls, value: str | None) -> str | None:
        if value is None:
            return value
        return matched(
            value,
            BYTES_QUANTITY_PATTERN,
            BYTES_QUANTITY_MAX,
            "must be a quantity of bytes such as 512Mi or 2Gi",
        )


class SecretKeyRef(SpecModel):
    """A key of a Secret in the SessionMemory's namespace: the work item's secret payload."""

    name: str
    key: str

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        return matched(
            value,
            SECRET_NAME_PATTERN,
            SECRET_NAME_MAX,
            "must be a Secret name: lowercase letters, digits, '-' and '.', starting and ending with a "
            f"letter or digit, at most {SECRET_NAME_MAX} characters",
        )

    @field_validator("key")
    @classmethod
    def _check_key(cls, value: str) -> str:
        return matched(
            value,
            SECRET_KEY_PATTERN,
            SECRET_KEY_MAX,
            f"must be a Secret key: letters, digits, '-', '_' or '.', 1-{SECRET_KEY_MAX} characters",
        )


def reserved_label_keys() -> tuple[str, ...]:
    """The Pod labels the operator sets (it finds and reports on its Pods by them)."""
    return (
        LABEL_APP_NAME,
        LABEL_APP_COMPONENT,
        LABEL_MANAGED_BY,
        LABEL_SESSION_ID,
        LABEL_SESSIONMEMORY,
        LABEL_ATTEMPT,
    )


class TemplateMetadata(SpecModel):
    """Labels and annotations added to the sandbox Pod's own."""

    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None

    @field_validator("labels", "annotations")
    @classmethod
    def _check_size(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None and len(value) > core.METADATA_ENTRIES_MAX:
            raise ValueError(f"may hold at most {core.METADATA_ENTRIES_MAX} entries")
        return value

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        taken = [k for k in value or {} if k in reserved_label_keys()]
        if taken:
            raise ValueError(
                f"{', '.join(taken)}: set by the operator (a template may not set "
                f"{', '.join(reserved_label_keys())})"
            )
        return value

    @field_validator("annotations")
    @classmethod
    def _check_annotations(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        problems = annotation_problems(value or {}, "")
        if DEFAULT_CONTAINER_ANNOTATION in (value or {}):
            problems.insert(0, f"{DEFAULT_CONTAINER_ANNOTATION}: set by the operator (always sandbox)")
        if problems:
            raise ValueError("\n".join(problems))
        return value


class MemsyncContainersSpec(SpecModel):
    """The memsync containers of the Pod (the mount init container and the sync sidecar)."""

    # Extra environment (e.g. HTTPS_PROXY, NO_PROXY, SSL_CERT_FILE); an entry replaces the operator's default
    # of the same name. None: none.
    env: Annotated[list[EnvVarSpec], Field(max_length=MEMSYNC_ENV_MAX)] | None = None
    # Replaces the operator's default requests and limits when set.
    resources: dict[str, Any] | None = None

    @field_validator("env")
    @classmethod
    def _check_env(cls, entries: list[EnvVarSpec] | None) -> list[EnvVarSpec] | None:
        problems = env_problems(entries or [])
        if problems:
            raise ValueError("; ".join(problems))
        return entries

    @field_validator("resources")
    @classmethod
    def _check_resources(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return checked(value, core.resource_requirements_schema())  # type: ignore[no-any-return]


class SandboxPodSpec(SpecModel):
    """The Pod spec subset a template may set; the operator owns every other field."""

    containers: list[dict[str, Any]]
    volumes: list[dict[str, Any]] | None = None
    runtime_class_name: str | None = None
    node_selector: dict[str, str] | None = None
    affinity: dict[str, Any] | None = None
    tolerations: list[dict[str, Any]] | None = None
    service_account_name: str | None = None
    image_pull_secrets: list[dict[str, Any]] | None = None
    priority_class_name: str | None = None
    active_deadline_seconds: Annotated[int, Field(ge=1)] | None = None
    host_network: bool | None = Field(default=None, alias="hostNetwork")
    host_pid: bool | None = Field(default=None, alias="hostPID")
    host_ipc: bool | None = Field(default=None, alias="hostIPC")
    memsync: MemsyncContainersSpec | None = None

    @field_validator("containers", "volumes", "affinity", "tolerations", "image_pull_secrets")
    @classmethod
    def _check_shape(cls, value: Any, info: ValidationInfo) -> Any:
        return checked(value, core.pod_field(to_camel(info.field_name or "")))

    @model_validator(mode="after")
    def _check_guards(self) -> SandboxPodSpec:
        problems = pod_spec_problems(self.model_dump(by_alias=True, exclude_none=True), "")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def sandbox(self) -> dict[str, Any]:
        """The sandbox container (the template's one container)."""
        return self.containers[0]


class SandboxTemplate(SpecModel):
    """The sandbox Pod's template: extra metadata, and the Pod spec fields a user may set. Reused by every
    resource that starts sandboxes."""

    metadata: TemplateMetadata | None = None
    spec: SandboxPodSpec


def sandbox_template(container: Mapping[str, Any], **pod_spec: Any) -> dict[str, Any]:
    """A ``spec.template`` as plain data: ``container`` as the sandbox container (named ``sandbox``) and
    ``pod_spec`` as further Pod spec fields (``runtimeClassName=...``)."""
    return {"spec": {"containers": [{**container, "name": SANDBOX_CONTAINER_NAME}], **pod_spec}}


class SessionMemorySpec(SpecModel):
    """``spec`` of a SessionMemory."""

    session_id: str
    work_item_secret_ref: SecretKeyRef
    api_base_url: str = DEFAULT_BASE_URL
    # None: the mount step reads the stores from the session (GET /v1/sessions/{id}); given, they must agree
    # with the session's.
    stores: Annotated[list[StoreSpec], Field(min_length=STORES_MIN, max_length=STORES_MAX)] | None = None
    sync: SyncSpec = Field(default_factory=SyncSpec)
    template: SandboxTemplate
    # None: the operator's --start-deadline
    start_deadline_seconds: Annotated[int, Field(ge=START_DEADLINE_MIN, le=START_DEADLINE_MAX)] | None = None
    # None: Fail
    on_interruption: OnInterruption | None = None

    @field_validator("session_id")
    @classmethod
    def _check_session_id(cls, value: str) -> str:
        return matched(
            value,
            SESSION_ID_PATTERN,
            SESSION_ID_MAX,
            "must look like sesn_<letters, digits, '_' or '-'>, ending with a letter or digit, at most "
            f"{SESSION_ID_MAX} characters (it becomes a Pod label value)",
        )

    @field_validator("api_base_url")
    @classmethod
    def _check_api_base_url(cls, value: str) -> str:
        return checked_api_base_url(value)

    @field_validator("stores")
    @classmethod
    def _check_stores(cls, stores: list[StoreSpec] | None) -> list[StoreSpec] | None:
        if stores is None:
            return None
        problems: list[str] = []
        first_by_id: dict[str, int] = {}
        first_by_path: dict[str, int] = {}
        for i, store in enumerate(stores):
            seen = first_by_id.setdefault(store.memory_store_id, i)
            if seen != i:
                problems.append(
                    f"stores[{i}].memoryStoreId {store.memory_store_id!r} repeats stores[{seen}]: "
                    "each store may be attached once"
                )
            path = store.effective_mount_path
            seen = first_by_path.setdefault(path, i)
            if seen != i:
                problems.append(
                    f"stores[{i}] would be mounted at {path}, like stores[{seen}]: mount paths must be "
                    "unique (set a distinct mountPath)"
                )
        for i, store in enumerate(stores):
            for j, other in enumerate(stores):
                if i != j and is_ancestor(other.effective_mount_path, store.effective_mount_path):
                    problems.append(
                        f"stores[{i}] would be mounted at {store.effective_mount_path}, inside stores[{j}] "
                        f"at {other.effective_mount_path}: a store may not be mounted inside another store"
                    )
        if problems:
            raise ValueError("; ".join(problems))
        return stores


# --- status bounds (the CRD's status schema is built from them) ------------------------------------------

CONDITION_TYPE_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_TYPE_MAX: Final = 316
CONDITION_REASON_PATTERN: Final = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
CONDITION_REASON_MAX: Final = 1024
MESSAGE_MAX: Final = 32768


# --- validation ------------------------------------------------------------------------------------------


def validate_spec(raw: Mapping[str, Any]) -> SessionMemorySpec:
    """Validate a SessionMemory's ``spec`` as read from the API; raise :class:`InvalidSpecError`."""
    try:
        return SessionMemorySpec.model_validate(plain(raw))
    except ValidationError as exc:
        raise InvalidSpecError(describe_validation_error(exc, prefix="spec")) from None
