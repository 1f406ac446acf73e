"""The errors the store server answers with, as plain data (the app renders the documented envelope)."""

from __future__ import annotations

from typing import Any

from memsync.api import errors as et


class ApiError(Exception):
    """One error response: HTTP status, ``error.type``, a message naming the problem, extra fields."""

    def __init__(
        self,
        status: int,
        error_type: str,
        message: str,
        *,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.extra = dict(extra or {})
        self.headers = dict(headers or {})

    def body(self, request_id: str | None) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": self.error_type, "message": self.message, **self.extra},
            "request_id": request_id,
        }

    def __repr__(self) -> str:
        return f"ApiError({self.status}, {self.error_type!r}, {self.message!r})"


def invalid(message: str) -> ApiError:
    return ApiError(400, et.INVALID_REQUEST, message)


def unauthenticated(message: str) -> ApiError:
    return ApiError(401, et.AUTHENTICATION, message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, et.PERMISSION, message)


def not_found(message: str) -> ApiError:
    return ApiError(404, et.NOT_FOUND, message)


# Every 409 this server gives is decided by stored state, so repeating the request cannot change the answer:
# tell SDKs (which retry 409 by default) not to.
_NO_RETRY = {"x-should-retry": "false"}


def conflict(message: str) -> ApiError:
    return ApiError(409, et.CONFLICT, message, headers=_NO_RETRY)


def precondition_failed(message: str) -> ApiError:
    return ApiError(409, et.PRECONDITION_FAILED, message, headers=_NO_RETRY)


def path_conflict(message: str, conflicting_memory_id: str, conflicting_path: str) -> ApiError:
    return ApiError(
        409,
        et.PATH_CONFLICT,
        message,
        extra={"conflicting_memory_id": conflicting_memory_id, "conflicting_path": conflicting_path},
        headers=_NO_RETRY,
    )


def too_large(message: str) -> ApiError:
    return ApiError(413, et.REQUEST_TOO_LARGE, message)
