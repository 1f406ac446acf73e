"""The AgentEnvironment custom resource: one self-hosted environment whose work queue the operator serves.

For every ``session`` work item it claims, the operator creates a Secret (the item's secret) and a
SessionMemory owned by the AgentEnvironment, built from this spec: the same sandbox Pod template type
(``models.SandboxTemplate``) and the same sync settings a SessionMemory has. The bounds below are shared
with the CRD schema (:mod:`memsync.crd.agentenv_schema`); ``tests/unit/test_agentenv_crd.py`` proves the
two agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Final

from pydantic import Field, ValidationError, field_validator

from memsync.api.constants import DEFAULT_BASE_URL
from memsync.crd.models import (
    GROUP,
    START_DEADLINE_MAX,
    START_DEADLINE_MIN,
    SandboxTemplate,
    SecretKeyRef,
    SyncSpec,
    checked_api_base_url,
)
from memsync.crd.spec_base import SpecModel, matched
from memsync.crd.spec_messages import InvalidSpecError, describe_validation_error, plain

KIND: Final = "AgentEnvironment"
LIST_KIND: Final = "AgentEnvironmentList"
PLURAL: Final = "agentenvironments"
SINGULAR: Final = "agentenvironment"
SHORT_NAMES: Final = ("aenv",)
CRD_NAME: Final = f"{PLURAL}.{GROUP}"
# Its own version: the AgentEnvironment is younger than the SessionMemory (which is at models.VERSION).
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

#: Labels on what the operator creates for a work item.
LABEL_ENVIRONMENT: Final = f"{GROUP}/agentenvironment"
LABEL_WORK_ID: Final = f"{GROUP}/work-id"  # cut to a label's 63 characters; the annotation is exact
ANNOTATION_WORK_ID: Final = f"{GROUP}/work-id"
#: In the AgentEnvironment's status, work id -> the last heartbeat value the operator holds the item's lease
#: with, so a new leader of the operator can go on holding from there (``controller/environment/holder.py``).
STATUS_HELD_HEARTBEATS: Final = "heldHeartbeats"

ENVIRONMENT_ID_PATTERN: Final = r"^env_[A-Za-z0-9_-]+$"
ENVIRONMENT_ID_MAX: Final = 128
WORKER_ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
WORKER_ID_MAX: Final = 128
MAX_CONCURRENT_MIN: Final = 1
MAX_CONCURRENT_DEFAULT: Final = 10
MAX_CONCURRENT_MAX: Final = 1000
RETENTION_MIN: Final = 0
RETENTION_DEFAULT: Final = 3600
RETENTION_MAX: Final = 30 * 24 * 3600


class EnvironmentPhase(StrEnum):
    PENDING = "Pending"
    POLLING = "Polling"
    DEGRADED = "Degraded"
    FAILED = "Failed"


ENVIRONMENT_PHASES: Final = tuple(p.value for p in EnvironmentPhase)
CONDITION_POLLING: Final = "Polling"
CONDITION_READY: Final = "Ready"


class AgentEnvironmentSpec(SpecModel):
    """``spec`` of an AgentEnvironment."""

    environment_id: str
    environment_key_secret_ref: SecretKeyRef
    api_base_url: str = DEFAULT_BASE_URL
    template: SandboxTemplate
    sync: SyncSpec = Field(default_factory=SyncSpec)
    max_concurrent_sessions: Annotated[int, Field(ge=MAX_CONCURRENT_MIN, le=MAX_CONCURRENT_MAX)] = (
        MAX_CONCURRENT_DEFAULT
    )
    finished_retention_seconds: Annotated[int, Field(ge=RETENTION_MIN, le=RETENTION_MAX)] = RETENTION_DEFAULT
    # None: the operator's --start-deadline
    start_deadline_seconds: Annotated[int, Field(ge=START_DEADLINE_MIN, le=START_DEADLINE_MAX)] | None = None
    # The worker id's prefix (None: "<namespace>.<name>"); each operator replica and start adds its host
    # name and a new token, so two replicas or a restarted operator are never one worker.
    worker_id: str | None = None

    @field_validator("environment_id")
    @classmethod
    def _check_environment_id(cls, value: str) -> str:
        return matched(
            value,
            ENVIRONMENT_ID_PATTERN,
            ENVIRONMENT_ID_MAX,
            f"must look like env_<letters, digits, '_' or '-'>, at most {ENVIRONMENT_ID_MAX} characters",
        )

    @field_validator("api_base_url")
    @classmethod
    def _check_api_base_url(cls, value: str) -> str:
        return checked_api_base_url(value)

    @field_validator("worker_id")
    @classmethod
    def _check_worker_id(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return matched(
            value,
            WORKER_ID_PATTERN,
            WORKER_ID_MAX,
            "must be letters, digits, '.', '_' or '-', starting with a letter or digit, "
            f"at most {WORKER_ID_MAX} characters",
        )


def validate_environment_spec(raw: Mapping[str, Any]) -> AgentEnvironmentSpec:
    """Validate an AgentEnvironment's ``spec``; raise :class:`InvalidSpecError` naming every bad field."""
    try:
        return AgentEnvironmentSpec.model_validate(plain(raw))
    except ValidationError as exc:
        text = describe_validation_error(exc, prefix="spec").replace(
            "SessionMemory schema", "AgentEnvironment schema"
        )
        raise InvalidSpecError(text) from None
