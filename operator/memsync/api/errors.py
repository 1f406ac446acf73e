"""Error types of the memory store API (the ``error.type`` of its error envelope) and their HTTP statuses."""

from typing import Final

INVALID_REQUEST: Final = "invalid_request_error"
AUTHENTICATION: Final = "authentication_error"
BILLING: Final = "billing_error"
PERMISSION: Final = "permission_error"
NOT_FOUND: Final = "not_found_error"
CONFLICT: Final = "conflict_error"
REQUEST_TOO_LARGE: Final = "request_too_large"
RATE_LIMIT: Final = "rate_limit_error"
API_ERROR: Final = "api_error"
TIMEOUT: Final = "timeout_error"
OVERLOADED: Final = "overloaded_error"
PRECONDITION_FAILED: Final = "memory_precondition_failed_error"
PATH_CONFLICT: Final = "memory_path_conflict_error"

STATUS_OF: Final[dict[str, int]] = {
    INVALID_REQUEST: 400,
    AUTHENTICATION: 401,
    BILLING: 402,
    PERMISSION: 403,
    NOT_FOUND: 404,
    CONFLICT: 409,
    PRECONDITION_FAILED: 409,
    PATH_CONFLICT: 409,
    REQUEST_TOO_LARGE: 413,
    RATE_LIMIT: 429,
    API_ERROR: 500,
    TIMEOUT: 504,
    OVERLOADED: 529,
}
