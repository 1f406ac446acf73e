"""Pydantic models of a SessionMemory's ``status`` and of a whole object, for tests only.

The controller writes its status as plain dicts (typed in ``memsync.crd.status_types``, whose fields these
models hold too); these models let the tests hold what it writes to Kubernetes' conventions (metav1.Condition,
metav1.Time) and to the CRD's status schema.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, field_validator
from pydantic.alias_generators import to_camel

from memsync.crd.models import (
    API_VERSION,
    CONDITION_REASON_MAX,
    CONDITION_REASON_PATTERN,
    CONDITION_TYPE_MAX,
    CONDITION_TYPE_PATTERN,
    KIND,
    MESSAGE_MAX,
    Phase,
    SessionMemorySpec,
)
from memsync.crd.spec_base import matched

ConditionStatus = Literal["True", "False", "Unknown"]


def rfc3339(value: datetime) -> str:
    """Kubernetes' time format (metav1.Time): UTC, whole seconds, ``Z``."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


#: A timestamp that always serializes the way Kubernetes writes them.
K8sTime = Annotated[datetime, PlainSerializer(rfc3339, return_type=str)]


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


class _StatusModel(BaseModel):
    # Lenient on read: the status comes back from the API server and may carry fields of a newer operator.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, camelCase, without unset (None) fields: what goes into a status patch."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def _clip(value: str | None) -> str | None:
    if value is not None and len(value) > MESSAGE_MAX:
        return value[: MESSAGE_MAX - 1] + "…"
    return value


class Condition(_StatusModel):
    """A Kubernetes condition (metav1.Condition conventions; the CRD's status schema enforces them too)."""

    type: str
    status: ConditionStatus
    reason: str
    message: str = ""
    last_transition_time: K8sTime
    observed_generation: int | None = None

    @field_validator("type")
    @classmethod
    def _check_type(cls, value: str) -> str:
        return matched(
            value,
            CONDITION_TYPE_PATTERN,
            CONDITION_TYPE_MAX,
            "must be CamelCase (optionally prefixed by a DNS subdomain and '/'), e.g. Ready",
        )

    @field_validator("reason")
    @classmethod
    def _check_reason(cls, value: str) -> str:
        return matched(
            value,
            CONDITION_REASON_PATTERN,
            CONDITION_REASON_MAX,
            "must be a CamelCase identifier (letters, digits, '_', ',' or ':'), e.g. MountFailed",
        )

    @field_validator("message")
    @classmethod
    def _check_message(cls, value: str) -> str:
        return _clip(value) or ""


class StoreStatus(_StatusModel):
    """What the Pod reported for one store: memories mounted, and the final flush's counts."""

    memory_store_id: str
    mount_path: str | None = None
    memories_mounted: int | None = None
    uploaded: int | None = None
    downloaded: int | None = None
    deleted: int | None = None
    conflicts: int | None = None
    refused: int | None = None
    unreadable: int | None = None
    held_deletes: int | None = None
    unsent: int | None = None
    refused_paths: list[str] | None = None
    unreadable_paths: list[str] | None = None
    held_delete_paths: list[str] | None = None


class SessionMemoryStatus(_StatusModel):
    phase: Phase | None = None
    pod_name: str | None = None
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    stores: list[StoreStatus] = Field(default_factory=list)
    store_count: int | None = None
    last_sync_time: K8sTime | None = None
    message: str | None = None
    restarts: int | None = Field(default=None, ge=0)
    last_restart_time: K8sTime | None = None

    @field_validator("message")
    @classmethod
    def _check_message(cls, value: str | None) -> str | None:
        return _clip(value)

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)


class SessionMemory(BaseModel):
    """A whole SessionMemory object (metadata kept as a plain mapping)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SessionMemorySpec
    status: SessionMemoryStatus | None = None
