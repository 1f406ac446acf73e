"""The API reference: ``/openapi.json`` (the document, ``http/openapi.py``) and ``/docs`` (a page rendered
here from it, on the server: no script, nothing from another origin), both behind the browser's sign-in.

``/openapi.json`` also takes an admin key or a viewer key as ``x-api-key``, for tools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from memsync.server.errors import ApiError, unauthenticated
from memsync.server.http.envelope import JSONResponse
from memsync.server.ui.deps import PageRoute, SignedInBrowser, signed_in_or_none
from memsync.server.ui.render import page

GROUPS = (
    ("/v1/memory_stores", "Memory stores, memories and versions"),
    ("/v1/memsync/", "memsync extensions: sessions, admin keys, viewer keys, environment keys"),
    ("/v1/environments", "Self-hosted environments and their work queues"),
    ("/v1/sessions", "Sessions and their events"),
)


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    required: bool
    description: str


def type_label(schema: dict[str, Any]) -> str:
    """A schema's type in a few words: ``string``, ``Memory``, ``array of MemoryVersion``, ``A | null``."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "const" in schema:
        return repr(schema["const"])
    if "enum" in schema:
        return " | ".join(repr(v) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(type_label(s) for s in schema[key])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {type_label(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of {type_label(schema['additionalProperties'])}"
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    return str(kind or "any")


def fields(schema: dict[str, Any]) -> list[Field]:
    """The properties of an object schema, in order."""
    required = set(schema.get("required", []))
    return [
        Field(name, type_label(sub), name in required, str(sub.get("description", "")))
        for name, sub in schema.get("properties", {}).items()
    ]


def operations(document: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The document's operations as the page lists them: by group, each with its method and path."""
    grouped: dict[str, list[dict[str, Any]]] = {title: [] for _, title in GROUPS}
    for path, item in document.get("paths", {}).items():
        title = next((t for prefix, t in GROUPS if path.startswith(prefix)), GROUPS[-1][1])
        for method, operation in item.items():
            grouped[title].append({"method": method.upper(), "path": path, **operation})
    return [(title, ops) for title, ops in grouped.items() if ops]


def body_schema(content: dict[str, Any] | None) -> dict[str, Any] | None:
    for media in (content or {}).values():
        schema = media.get("schema")
        if isinstance(schema, dict):
            return schema
    return None


def router() -> APIRouter:
    router = APIRouter(route_class=PageRoute, include_in_schema=False)

    @router.get("/docs")
    def reference(request: Request, signed: SignedInBrowser) -> Response:
        document = request.app.openapi()
        schemas = document["components"]["schemas"]
        return page(
            "reference.html",
            {
                "signed": signed,
                "title": "API reference",
                "document": document,
                "groups": operations(document),
                "schemas": sorted(schemas.items()),
                "fields": fields,
                "type_label": type_label,
                "body_schema": body_schema,
            },
        )

    return router


def document_router() -> APIRouter:
    """``/openapi.json``: its refusal is the API's JSON error envelope, not a page."""
    router = APIRouter(include_in_schema=False)

    @router.get("/openapi.json")
    async def document(request: Request) -> Response:
        """The document, to a browser signed in or to an admin key or a viewer key (``x-api-key``)."""
        allowed = await run_in_threadpool(_may_read, request)
        if not allowed:
            raise unauthenticated(
                "sign in to the store browser (/ui/signin), or send an admin key or a viewer key as x-api-key"
            )
        openapi = await run_in_threadpool(request.app.openapi)
        return JSONResponse(openapi)

    return router


def _may_read(request: Request) -> bool:
    if signed_in_or_none(request) is not None:
        return True
    key = request.headers.get("x-api-key")
    if key is None:
        return False
    try:
        request.app.state.access.authenticate(key, None)
    except ApiError:
        return False
    return True
