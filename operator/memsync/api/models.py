"""pydantic v2 models of every object on the memory store wire (see docs/store-api.md).

Response models ignore unknown fields (the hosted API may add some); request models forbid them, so the store
server answers an unknown field with a 400 that names it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
View = Literal["basic", "full"]
Access = Literal["read_write", "read_only"]
#: How the sync agent treats a local deletion: propagate it, only log it, or never delete in the store.
Deletions = Literal["enabled", "log_only", "disabled"]
Operation = Literal["created", "modified", "deleted"]


class WireModel(BaseModel):
    """A response object: unknown fields are ignored, so a newer server does not break an older client. Its
    JSON schema (the store server's OpenAPI document) marks every field required: the server sends them
    all, defaults or not."""

    model_config = ConfigDict(
        extra="ignore", populate_by_name=True, json_schema_serialization_defaults_required=True
    )


class RequestModel(BaseModel):
    """A request body: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


# --- stores ---------------------------------------------------------------------------------------------


class MemoryStore(WireModel):
    type: Literal["memory_store"] = "memory_store"
    id: str
    name: str
    description: str = ""
    metadata: dict[str, str] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None = None


class MemoryStoreDeleted(WireModel):
    type: Literal["memory_store_deleted"] = "memory_store_deleted"
    id: str


class CreateStoreRequest(RequestModel):
    name: str
    description: str | None = None
    metadata: dict[str, str] | None = None


class UpdateStoreRequest(RequestModel):
    name: str | None = None
    description: str | None = None
    # A patch: a string upserts the key, null deletes it, an absent field keeps the bag.
    metadata: dict[str, str | None] | None = None


# --- memories -------------------------------------------------------------------------------------------


class Memory(WireModel):
    type: Literal["memory"] = "memory"
    id: str
    memory_store_id: str
    path: str
    content: str | None = None
    content_sha256: str
    content_size_bytes: int
    memory_version_id: str
    created_at: datetime
    updated_at: datetime


class MemoryPrefix(WireModel):
    type: Literal["memory_prefix"] = "memory_prefix"
    path: str


MemoryListItem = Annotated[Memory | MemoryPrefix, Field(discriminator="type")]


class MemoryDeleted(WireModel):
    type: Literal["memory_deleted"] = "memory_deleted"
    id: str


class ContentSha256Precondition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["content_sha256"] = "content_sha256"
    content_sha256: Sha256Hex


class CreateMemoryRequest(RequestModel):
    path: str
    content: str | None


class UpdateMemoryRequest(RequestModel):
    content: str | None = None
    path: str | None = None
    precondition: ContentSha256Precondition | None = None


# --- versions and actors --------------------------------------------------------------------------------


class SessionActor(WireModel):
    type: Literal["session_actor"] = "session_actor"
    session_id: str


class ApiActor(WireModel):
    type: Literal["api_actor"] = "api_actor"
    api_key_id: str


class UserActor(WireModel):
    type: Literal["user_actor"] = "user_actor"
    user_id: str


class ServiceAccountActor(WireModel):
    type: Literal["service_account_actor"] = "service_account_actor"
    service_account_id: str


Actor = Annotated[SessionActor | ApiActor | UserActor | ServiceAccountActor, Field(discriminator="type")]


class MemoryVersion(WireModel):
    type: Literal["memory_version"] = "memory_version"
    id: str
    memory_id: str
    memory_store_id: str
    operation: Operation
    content: str | None = None
    content_sha256: str | None = None
    content_size_bytes: int | None = None
    path: str | None = None
    created_at: datetime
    created_by: Actor | None = None
    redacted_at: datetime | None = None
    redacted_by: Actor | None = None


# --- pages ----------------------------------------------------------------------------------------------

T = TypeVar("T")


class Page(WireModel, Generic[T]):
    data: list[T]
    next_page: str | None = None


# --- sessions (the worker's view of a session: only what memory sync needs) ----------------------------


class MemoryStoreResource(WireModel):
    type: Literal["memory_store"] = "memory_store"
    memory_store_id: str
    name: str | None = None
    description: str | None = None
    mount_path: str | None = None
    access: Access | None = "read_write"
    instructions: str | None = None


class Session(WireModel):
    type: Literal["session"] = "session"
    id: str
    resources: list[MemoryStoreResource] = Field(default_factory=list)
    created_at: datetime | None = None


# --- errors ---------------------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    message: str = ""
    conflicting_memory_id: str | None = None
    conflicting_path: str | None = None


class ErrorResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["error"] = "error"
    error: ErrorDetail
    request_id: str | None = None
