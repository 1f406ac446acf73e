"""Typed errors of the store client, one class per status (and per 409 error type).

Every error carries the HTTP ``status`` (0 when no response arrived), the server's ``error_type`` and
``message`` from the API's error envelope (``{"type": "error", "error": {"type", "message"}, "request_id"}``),
and the ``request_id``. Messages never contain a credential: the client scrubs its own credentials out of
any text before it builds an error.

The hierarchy (``is_refusal`` is true for 400 and 413: the content itself was refused)::

    StoreError                    any failed call; status, error_type, message, request_id
    ├── BadRequest                400 invalid_request_error
    ├── AuthenticationFailed      401 authentication_error
    ├── PermissionDenied          403 permission_error
    ├── NotFound                  404 not_found_error
    ├── Conflict                  409 of another type (conflict_error)
    │   ├── PreconditionFailed    409 memory_precondition_failed_error (and 412)
    │   └── PathConflict          409 memory_path_conflict_error; conflicting_memory_id, conflicting_path
    ├── RequestTooLarge           413 request_too_large
    ├── RateLimited               429 rate_limit_error, once the retries are spent
    ├── ServerError               5xx, once the retries are spent
    ├── TransportError            no response at all (status 0)
    └── InvalidResponse           a 2xx whose body is not the documented object

A work-item secret that does not decode is ``memsync.api.secret.WorkSecretError`` (a ``ValueError``), not
a ``StoreError``: no request was made.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationError

from memsync.api import errors as api_errors
from memsync.api.models import ErrorResponse

__all__ = [
    "AuthenticationFailed",
    "BadRequest",
    "Conflict",
    "InvalidResponse",
    "NotFound",
    "PathConflict",
    "PermissionDenied",
    "PreconditionFailed",
    "RateLimited",
    "RequestTooLarge",
    "ServerError",
    "StoreError",
    "TransportError",
    "error_from_response",
]

# How much of a non-JSON error body ends up in a message (a proxy's HTML page can be long).
_MAX_FALLBACK_MESSAGE = 300


class StoreError(Exception):
    """A memory store API call failed. ``str(e)`` names the status, the error type and the server message."""

    def __init__(self, status: int, error_type: str, message: str, request_id: str | None = None) -> None:
        super().__init__(status, error_type, message, request_id)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.request_id = request_id

    @property
    def is_refusal(self) -> bool:
        """The server refused the request as such (400 or 413): sending it again unchanged is useless."""
        return self.status in (400, 413)

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status else "no response"
        text = f"{where} {self.error_type}: {self.message or '(no message)'}"
        if self.request_id:
            text += f" (request_id={self.request_id})"
        return text

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status}, error_type={self.error_type!r}, "
            f"message={self.message!r}, request_id={self.request_id!r})"
        )


class BadRequest(StoreError):
    """400 ``invalid_request_error``: a path rule, oversized content, an unknown field, a bad cursor..."""


class AuthenticationFailed(StoreError):
    """401 ``authentication_error``: the credential is missing, malformed, unknown or expired."""


class PermissionDenied(StoreError):
    """403 ``permission_error``: e.g. a write through a ``read_only`` attachment, another session's store."""


class NotFound(StoreError):
    """404 ``not_found_error``."""


class Conflict(StoreError):
    """409 with an error type other than the two memory-specific ones (e.g. ``conflict_error``)."""


class PreconditionFailed(Conflict):
    """409 ``memory_precondition_failed_error``: the stored content hash is not the expected one."""


class PathConflict(Conflict):
    """409 ``memory_path_conflict_error``: the path, an ancestor or a descendant is held by another memory."""

    def __init__(
        self,
        status: int,
        error_type: str,
        message: str,
        request_id: str | None = None,
        *,
        conflicting_memory_id: str | None = None,
        conflicting_path: str | None = None,
    ) -> None:
        super().__init__(status, error_type, message, request_id)
        # ``""`` from the server means "could not identify the blocker"; keep None for that too.
        self.conflicting_memory_id = conflicting_memory_id or None
        self.conflicting_path = conflicting_path or None


class RequestTooLarge(StoreError):
    """413 ``request_too_large``: the request body is over the server's limit."""


class RateLimited(StoreError):
    """429 ``rate_limit_error``, after the retry budget was spent."""


class ServerError(StoreError):
    """5xx (``api_error``, ``timeout_error``, ``overloaded_error``...), after the retry budget was spent."""


class TransportError(StoreError):
    """No HTTP response: the connection failed or timed out on every attempt. ``status`` is 0."""

    def __init__(
        self,
        status: int = 0,
        error_type: str = "connection_error",
        message: str = "",
        request_id: str | None = None,
    ) -> None:
        super().__init__(status, error_type, message, request_id)


class InvalidResponse(StoreError):
    """A 2xx response whose body is not the documented object (a proxy page, a truncated body...)."""


def _default_error_type(status: int) -> str:
    if status == 409:
        return api_errors.CONFLICT
    for error_type, code in api_errors.STATUS_OF.items():
        if code == status:
            return error_type
    if status >= 500:
        return api_errors.API_ERROR
    return "http_error"


def _class_for(status: int, error_type: str) -> type[StoreError]:
    if status in (409, 412):
        if error_type == api_errors.PATH_CONFLICT:
            return PathConflict
        if error_type == api_errors.PRECONDITION_FAILED or status == 412:
            return PreconditionFailed
        return Conflict
    by_status: dict[int, type[StoreError]] = {
        400: BadRequest,
        401: AuthenticationFailed,
        403: PermissionDenied,
        404: NotFound,
        413: RequestTooLarge,
        429: RateLimited,
    }
    if status in by_status:
        return by_status[status]
    if status >= 500:
        return ServerError
    return StoreError


def error_from_response(
    status: int, body: bytes, headers: Mapping[str, str], *, reason: str = ""
) -> StoreError:
    """Build the typed error of a non-2xx response from its documented envelope.

    Falls back gracefully when the body is not that envelope (a proxy's HTML page, an empty body): the error
    type then comes from the status and the message from the first bytes of the body, or the reason phrase.
    The request id comes from the envelope, else from the ``request-id`` header.
    """
    header_request_id = headers.get("request-id") or headers.get("x-request-id")
    try:
        envelope = ErrorResponse.model_validate_json(body)
    except ValidationError:
        envelope = None
    if envelope is not None:
        detail = envelope.error
        error_type = detail.type or _default_error_type(status)
        message = detail.message
        request_id = envelope.request_id or header_request_id
        cls = _class_for(status, error_type)
        if cls is PathConflict:
            return PathConflict(
                status,
                error_type,
                message,
                request_id,
                conflicting_memory_id=detail.conflicting_memory_id,
                conflicting_path=detail.conflicting_path,
            )
        return cls(status, error_type, message, request_id)
    text = body[: _MAX_FALLBACK_MESSAGE * 4].decode("utf-8", errors="replace")
    text = " ".join(text.split())[:_MAX_FALLBACK_MESSAGE]
    message = text or reason or "the response carried no error body"
    error_type = _default_error_type(status)
    return _class_for(status, error_type)(status, error_type, message, header_request_id)
