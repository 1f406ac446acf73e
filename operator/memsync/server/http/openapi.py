"""The store server's OpenAPI document: the memory store API, the admin routes and the environment routes.

Each route declares what it takes and answers next to its path, with ``documented(...)`` in its decorator;
FastAPI assembles the document from the routes, so a route and its description cannot part. How to get it:

- in a process: ``app.openapi()`` on the app ``create_app`` returns (a dict, built once and kept: this is what
  a tool such as schemathesis loads, e.g. ``schemathesis.openapi.from_dict(app.openapi())``);
- over HTTP: ``GET /openapi.json`` with an admin key or a viewer key (``x-api-key``), or signed in to the
  store browser, whose ``/docs`` shows it as a reference page (``server/ui/reference.py``).

Request bodies are read raw (``deps.Body``: the size cap applies while streaming, and the service parses
them strictly), so their schemas are declared here rather than inferred. Answers are JSON objects rendered by
the services; their schemas are the project's wire models (``memsync.api.models``), with every field the
server always sends marked required, or, for the environment routes, the official SDK's own models, which
the server's answers are tested to validate as strictly (tests/integration/test_sdk_types.py). Those SDK
models load only when the document is built (``SdkModel``), never when the server starts. Every route that
takes a credential may answer 401, and 429 or 503 with ``Retry-After`` when the admission gate sheds it; a 409
carries ``x-should-retry: false``. The schema-driven tests (tests/api_schema) hold the server to all of it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, TypeAdapter

import memsync
from memsync.api.models import ErrorResponse

REF: Final = "#/components/schemas/{model}"
_BODIES: dict[str, type[BaseModel]] = {}  # every request body model a route declares, by schema name
_SDK_KEY: Final = "x-memsync-sdk-response"

_ERRORS: Final = {
    400: "The request is malformed: a parameter or a body field is invalid (the message names it).",
    401: "No credential, or not a current one.",
    403: "The credential may not do this (a sessions token or a viewer key on an admin route, a read_only "
    "store).",
    404: "No such object, or not one this credential reaches.",
    409: "Refused by the stored state: a precondition, a path conflict, an archived store "
    "(`x-should-retry: false`).",
    412: "The heartbeat's precondition failed: the lease changed since `expected_last_heartbeat`.",
    413: "The request body is over 1 MiB.",
    429: "This credential already has its share of the requests in flight; retry after `Retry-After`.",
    503: "The server is overloaded; retry after `Retry-After`.",
}
_RETRY_AFTER: Final = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "required": True,
        "schema": {"type": "integer"},
    }
}
_NO_RETRY: Final = {
    "x-should-retry": {
        "description": "Always `false`: repeating the request cannot change the answer.",
        "required": True,
        "schema": {"type": "string", "enum": ["false"]},
    }
}
#: Answered by every route that takes a credential.
_ALWAYS: Final = (400, 401, 429, 503)


@dataclass(frozen=True)
class SdkModel:
    """A model of the official ``anthropic`` SDK, by module and name, loaded when the document is built;
    ``page``: a ``{"data": [...], "next_page": ...}`` page of it; ``nullable``: it may be ``null``."""

    module: str
    name: str
    page: bool = False
    nullable: bool = False


def documented(
    *,
    ok: type[Any] | SdkModel | None = None,
    body: type[BaseModel] | None = None,
    body_required: bool = True,
    errors: Iterable[int] = (),
    summary: str | None = None,
    ok_description: str = "The object.",
    extra: dict[int, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of a route decorator that describe the route in the OpenAPI document: the model
    of its 200 answer (``ok``), its request body, and the error statuses it may answer besides
    ``_ALWAYS``."""
    responses: dict[int | str, dict[str, Any]] = {}
    openapi_extra: dict[str, Any] = {}
    if isinstance(ok, SdkModel):
        responses[200] = {"description": ok_description}
        openapi_extra[_SDK_KEY] = asdict(ok)  # FastAPI copies the extras as JSON
    elif ok is not None:
        responses[200] = {"model": ok, "description": ok_description}
    for status, response in (extra or {}).items():
        responses[status] = response
    for status in sorted({*_ALWAYS, *errors}):
        entry: dict[str, Any] = {"model": ErrorResponse, "description": _ERRORS[status]}
        if status in (429, 503):
            entry["headers"] = _RETRY_AFTER
        elif status == 409:
            entry["headers"] = _NO_RETRY
        responses[status] = entry
    if body is not None:
        _BODIES[body.__name__] = body
        openapi_extra["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": {"$ref": REF.format(model=body.__name__)}}},
        }
    kwargs: dict[str, Any] = {"responses": responses, "openapi_extra": openapi_extra}
    if summary is not None:
        kwargs["summary"] = summary
    return kwargs


SECURITY_SCHEMES: Final = {
    "ApiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
        "description": "An admin key, or a viewer key (reads only).",
    },
    "Bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "A sessions token (its session's stores), an environment key (its environment's work "
        "queue), or an admin or viewer key.",
    },
}


def build_document(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document of ``app``'s routes (those in the schema: not the browser, metrics, health)."""
    document = get_openapi(
        title="memsync store server",
        version=memsync.__version__,
        openapi_version="3.1.0",
        summary="The memory store API, the memsync admin routes and the self-hosted environment routes.",
        routes=app.routes,
    )
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    for name, model in _BODIES.items():
        _add_schema(schemas, name, TypeAdapter(model), "validation")
    for item in document.get("paths", {}).values():
        for operation in item.values():
            # FastAPI documents 422 for a parameter it cannot parse; this server answers 400 (its envelope)
            operation["responses"].pop("422", None)
            ok = operation["responses"].get("200", {}).get("content", {})
            if len(ok) > 1 and ok.get("application/json", {}).get("schema") == {}:
                del ok["application/json"]  # FastAPI's default, beside the route's own (the event stream)
            sdk = operation.pop(_SDK_KEY, None)
            if sdk is not None:
                operation["responses"]["200"]["content"] = {
                    "application/json": {"schema": _sdk_schema(schemas, SdkModel(**sdk))}
                }
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    document["components"]["securitySchemes"] = SECURITY_SCHEMES
    document["security"] = [{"ApiKey": []}, {"Bearer": []}]
    return document


def install(app: FastAPI) -> None:
    """``app.openapi()`` answers ``build_document(app)``, built on the first call and kept."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _add_schema(schemas: dict[str, Any], name: str, adapter: TypeAdapter[Any], mode: str) -> dict[str, Any]:
    """``adapter``'s schema entered as ``name`` (with the models it refers to); a reference to it."""
    schema = adapter.json_schema(mode=mode, ref_template=REF)  # type: ignore[arg-type]
    schemas.update(schema.pop("$defs", {}))
    if "$ref" not in schema:
        schemas[name] = schema
        return {"$ref": REF.format(model=name)}
    return {"$ref": schema["$ref"]}


def _sdk_schema(schemas: dict[str, Any], sdk: SdkModel) -> dict[str, Any]:
    model = getattr(importlib.import_module(sdk.module), sdk.name)
    ref = _add_schema(schemas, sdk.name, TypeAdapter(model), "serialization")
    if sdk.page:
        return {
            "type": "object",
            "required": ["data", "next_page"],
            "properties": {
                "data": {"type": "array", "items": ref},
                "next_page": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            },
        }
    return {"anyOf": [ref, {"type": "null"}]} if sdk.nullable else ref
