"""What the OpenAPI document says of routes that read their own bodies and render their own answers.

The routes parse their JSON bodies strictly themselves (``server/bodies.py``) and answer with ready JSON
(``envelope.JSONResponse``), so FastAPI sees neither: without these declarations the document would show no
request body, an untyped 200 and a 422 the server never sends. ``body(Model)`` declares a route's request
body, ``answers(Model, 404, ...)`` its statuses (the error envelope for each error, ``Retry-After`` on a
429 or 503, ``x-should-retry`` on a 409), and ``document(app)`` is the app's document without FastAPI's 422
(a request FastAPI refuses is answered 400 in the envelope, ``envelope.install_error_handlers``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from memsync.api.models import ErrorResponse

#: Every route of the API may answer these: a bad parameter or id, no or an unknown credential, and the
#: admission gate's refusals (docs/store-server.md#overload).
ALWAYS: Final = (400, 401, 429, 503)

_WHY: Final = {
    304: "Not modified: the listing's ETag still holds (If-None-Match).",
    400: "The request is invalid: the message names the field or parameter.",
    401: "No credential, or one the server does not know (or expired, or revoked).",
    403: "The credential may not do this.",
    404: "Not found (or not reachable with this credential).",
    409: "Refused by the stored state; repeating the request cannot change the answer.",
    412: "The lease is not what the request expects: error.details.current_state holds it.",
    413: "The request body is over the server's limit (1 MiB).",
    429: "This credential has too many requests in flight; retry after Retry-After seconds.",
    503: "The server is overloaded; retry after Retry-After seconds.",
}
_RETRY_AFTER: Final = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "required": True,
        "schema": {"type": "string"},
    }
}
_NO_RETRY: Final = {
    "x-should-retry": {"description": "Always 'false'.", "required": True, "schema": {"type": "string"}}
}


def answers(
    ok: type[BaseModel] | None, *errors: int, media: str | None = None
) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route: 200 with ``ok`` (None: JSON not described here; ``media``: a body of
    that type instead, the route's ``response_class`` saying so), ``ALWAYS`` and ``errors`` with the error
    envelope (304 without a body)."""
    success: dict[str, Any] = {"description": "OK"}
    if ok is not None:
        success["model"] = ok
    if media is not None:
        success["content"] = {media: {"schema": {"type": "string"}}}
    out: dict[int | str, dict[str, Any]] = {200: success}
    for status in sorted({*ALWAYS, *errors}):
        if status == 304:
            out[status] = {"description": _WHY[status]}
            continue
        entry: dict[str, Any] = {"description": _WHY[status], "model": ErrorResponse}
        if status in (429, 503):
            entry["headers"] = _RETRY_AFTER
        elif status == 409:
            entry["headers"] = _NO_RETRY
        out[status] = entry
    return out


def body(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` declaring a JSON request body of ``model`` (its schema inlined: the route reads the
    body itself, so FastAPI does not list the model among the document's schemas)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    return {
        "requestBody": {"required": required, "content": {"application/json": {"schema": inline(schema)}}}
    }


def document(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """``app.openapi``: the generated document, made once, without the 422s FastAPI adds."""

    def generate() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            for operations in doc.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            schemas = doc.get("components", {}).get("schemas", {})
            for name in ("HTTPValidationError", "ValidationError"):
                schemas.pop(name, None)
            app.openapi_schema = doc
        return app.openapi_schema

    return generate
