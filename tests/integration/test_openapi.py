"""The store server's OpenAPI document (``app.openapi()``, served at ``/openapi.json``) agrees with its
routes, with the official SDK's requests and with the server's real answers.

- every API route is an operation, with the 200 answer's schema, the error statuses every credentialed route
  can answer (401, 429 and 503 with ``Retry-After``, each error the envelope, a 409 with ``x-should-retry``)
  and never FastAPI's 422 (the server answers 400); a route that reads a body declares it, and only those;
- every request the ``anthropic`` SDK sends for the memory store API (recorded through a transport, every
  parameter set) matches an operation: its method and path, each query parameter declared, its JSON body
  valid against the declared schema; the SDK's response models have exactly the fields the document's
  schemas require;
- answers of the real server validate against the document's schema for their status.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import jsonschema
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts

from conftest import StoreApi
from memsync.server.app import create_app
from memsync.server.http.envelope import read_body

ADMIN_KEY = "sk-ant-admin-openapi-test"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastAPI]:
    app = create_app(tmp_path_factory.mktemp("openapi") / "s.db", ADMIN_KEY, "http://store.test")
    try:
        yield app
    finally:
        app.state.service.db.close()


@pytest.fixture(scope="module")
def document(app: FastAPI) -> dict[str, Any]:
    doc: dict[str, Any] = app.openapi()
    return doc


def api_routes(app: FastAPI) -> list[APIRoute]:
    """Every route of the app in its schema (included routers' routes too)."""
    found = (context.original_route for context in iter_route_contexts(app.routes))
    return [r for r in found if isinstance(r, APIRoute) and r.include_in_schema]


def reads_body(route: APIRoute) -> bool:
    return any(d.call is read_body for d in route.dependant.dependencies)


def schema_of(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A schema of the document made standalone: its ``#/components/...`` references resolve."""
    return {**schema, "components": document["components"]}


def validate(document: dict[str, Any], schema: dict[str, Any], value: Any) -> None:
    jsonschema.Draft202012Validator(schema_of(document, schema)).validate(value)


def test_every_route_is_an_operation_with_its_answers(app: FastAPI, document: dict[str, Any]) -> None:
    routes = api_routes(app)
    assert len(routes) >= 30
    operations = {(m.lower(), p): op for p, item in document["paths"].items() for m, op in item.items()}
    assert {(m.lower(), r.path) for r in routes for m in r.methods} == set(operations)
    for route in routes:
        for method in route.methods:
            op = operations[(method.lower(), route.path)]
            where = f"{method} {route.path}"
            responses = op["responses"]
            assert "422" not in responses, where
            assert {"200", "400", "401", "429", "503"} <= set(responses), where
            for status, header in (("429", "Retry-After"), ("503", "Retry-After"), ("409", "x-should-retry")):
                if status in responses:  # required: the schema-driven tests fail an answer without it
                    assert responses[status]["headers"][header]["required"], where
            for status in set(responses) - {"200", "304"}:
                schema = responses[status]["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, (where, status)
            content = responses["200"]["content"]
            assert content and all(media.get("schema") for media in content.values()), where
            assert ("requestBody" in op) == reads_body(route), where
            for param in op.get("parameters", []):
                assert param["name"] not in ("x-api-key", "authorization"), where  # security schemes instead
    assert set(document["components"]["securitySchemes"]) == {"ApiKey", "Bearer"}
    for schema in document["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_the_document_is_served_only_behind_the_sign_in(store_api: StoreApi) -> None:
    assert store_api.anon("GET", "/openapi.json").status_code == 401
    served = store_api.admin("GET", "/openapi.json")
    assert served.status_code == 200 and served.json()["openapi"] == "3.1.0"
    assert served.headers["content-security-policy"].startswith("default-src 'none'")


class Recorder(httpx2.BaseTransport):
    """Answers every request with an empty object and keeps the request."""

    def __init__(self) -> None:
        self.requests: list[httpx2.Request] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return httpx2.Response(200, json={"data": [], "next_page": None, "id": "x", "type": "x"})


def sdk_requests() -> list[httpx2.Request]:
    """The requests the SDK sends for every memory store call, each with every parameter it takes."""
    recorder = Recorder()
    client = anthropic.Anthropic(
        api_key="k", base_url="http://store.test", http_client=httpx2.Client(transport=recorder)
    )
    stores, memories, versions = (
        client.beta.memory_stores,
        client.beta.memory_stores.memories,
        client.beta.memory_stores.memory_versions,
    )
    sha = "0" * 64
    stores.create(name="n", description="d", metadata={"k": "v"})
    stores.retrieve("memstore_1")
    stores.update("memstore_1", name="n", description="d", metadata={"k": "v", "gone": None})
    stores.list(
        created_at_gte="2026-01-01T00:00:00Z",
        created_at_lte="2026-01-02T00:00:00Z",
        include_archived=True,
        limit=5,
        page="p",
    )
    stores.delete("memstore_1")
    stores.archive("memstore_1")
    memories.create("memstore_1", path="/a.md", content="c", view="full")
    memories.retrieve("mem_1", memory_store_id="memstore_1", view="basic")
    memories.update(
        "mem_1",
        memory_store_id="memstore_1",
        view="full",
        content="c",
        path="/b.md",
        precondition={"type": "content_sha256", "content_sha256": sha},
    )
    memories.list("memstore_1", depth=1, limit=5, page="p", path_prefix="/a/", view="basic")
    memories.delete("mem_1", memory_store_id="memstore_1", expected_content_sha256=sha)
    versions.list(
        "memstore_1",
        api_key_id="apikey_1",
        created_at_gte="2026-01-01T00:00:00Z",
        created_at_lte="2026-01-02T00:00:00Z",
        limit=5,
        memory_id="mem_1",
        operation="modified",
        page="p",
        service_account_id="sa_1",
        session_id="sesn_1",
        view="full",
    )
    versions.retrieve("memver_1", memory_store_id="memstore_1", view="full")
    versions.redact("memver_1", memory_store_id="memstore_1")
    client.close()
    return recorder.requests


def operation_for(document: dict[str, Any], method: str, path: str) -> dict[str, Any] | None:
    for template, item in document["paths"].items():
        pattern = "^" + re.sub(r"\{[^/]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path) and method.lower() in item:
            operation: dict[str, Any] = item[method.lower()]
            return operation
    return None


def test_every_sdk_request_matches_an_operation(document: dict[str, Any]) -> None:
    requests = sdk_requests()
    assert len(requests) == 14
    for request in requests:
        where = f"{request.method} {request.url.path}"
        op = operation_for(document, request.method, request.url.path)
        assert op is not None, f"the document has no operation for the SDK's {where}"
        declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
        sent = set(request.url.params.keys())
        assert sent <= declared, f"{where}: undeclared query parameters {sent - declared}"
        if request.content:
            body = op["requestBody"]["content"]["application/json"]["schema"]
            validate(document, body, json.loads(request.content))
        else:
            assert not op.get("requestBody", {}).get("required"), where


@pytest.mark.parametrize(
    ("sdk_model", "schema"),
    [
        ("anthropic.types.beta.beta_managed_agents_memory_store.BetaManagedAgentsMemoryStore", "MemoryStore"),
        ("anthropic.types.beta.memory_stores.beta_managed_agents_memory.BetaManagedAgentsMemory", "Memory"),
        (
            "anthropic.types.beta.memory_stores.beta_managed_agents_memory_version.BetaManagedAgentsMemoryVersion",
            "MemoryVersion",
        ),
        (
            "anthropic.types.beta.memory_stores.beta_managed_agents_memory_prefix.BetaManagedAgentsMemoryPrefix",
            "MemoryPrefix",
        ),
    ],
)
def test_the_answers_have_the_sdk_models_fields(
    document: dict[str, Any], sdk_model: str, schema: str
) -> None:
    module, _, name = sdk_model.rpartition(".")
    fields = set(getattr(__import__(module, fromlist=[name]), name).model_fields)
    declared = document["components"]["schemas"][schema]
    assert set(declared["properties"]) == fields
    assert set(declared["required"]) == fields  # the server sends every field, null or not


def test_real_answers_validate_against_the_document(document: dict[str, Any], store_api: StoreApi) -> None:
    def check(resp: httpx.Response) -> None:
        path = resp.request.url.path
        op = operation_for(document, resp.request.method, path)
        assert op is not None, path
        answer = op["responses"][str(resp.status_code)]
        validate(document, answer["content"]["application/json"]["schema"], resp.json())

    store = store_api.new_store("openapi")
    for path in ("/a.md", "/f/b.md"):
        check(
            store_api.admin(
                "POST", f"/v1/memory_stores/{store}/memories", json={"path": path, "content": "x"}
            )
        )
    check(store_api.admin("GET", f"/v1/memory_stores/{store}"))
    check(store_api.admin("GET", "/v1/memory_stores", params={"limit": 2}))
    check(store_api.admin("GET", f"/v1/memory_stores/{store}/memories", params={"depth": 1}))
    listed = store_api.admin("GET", f"/v1/memory_stores/{store}/memories", params={"view": "full"})
    check(listed)
    memory = listed.json()["data"][0]["id"]
    check(store_api.admin("POST", f"/v1/memory_stores/{store}/memories/{memory}", json={"content": "y"}))
    check(store_api.admin("GET", f"/v1/memory_stores/{store}/memories/{memory}"))
    versions = store_api.admin("GET", f"/v1/memory_stores/{store}/memory_versions", params={"view": "full"})
    check(versions)
    first = versions.json()["data"][-1]["id"]
    check(store_api.admin("POST", f"/v1/memory_stores/{store}/memory_versions/{first}/redact"))
    check(store_api.admin("GET", f"/v1/memory_stores/{store}/memory_versions/{first}"))
    check(store_api.admin("DELETE", f"/v1/memory_stores/{store}/memories/{memory}"))
    check(store_api.admin("GET", f"/v1/memory_stores/{store}/memories/mem_nothere"))  # 404
    check(store_api.anon("GET", f"/v1/memory_stores/{store}"))  # 401
    check(store_api.admin("POST", f"/v1/memory_stores/{store}/memories", json={"path": "bad"}))  # 400
    # a session minted without an environment: the answer has no work_id (the document must not require it)
    check(
        store_api.admin(
            "POST",
            "/v1/memsync/sessions",
            json={"resources": [{"type": "memory_store", "memory_store_id": store, "access": "read_only"}]},
        )
    )
    made = store_api.admin("POST", "/v1/memsync/viewer_keys", json={"name": "openapi"})
    check(made)
    check(store_api.admin("GET", "/v1/memsync/viewer_keys"))
    check(store_api.admin("POST", f"/v1/memsync/viewer_keys/{made.json()['id']}/revoke"))
    check(store_api.admin("POST", f"/v1/memory_stores/{store}/archive"))
    check(store_api.admin("DELETE", f"/v1/memory_stores/{store}"))


def test_the_document_is_the_one_file_docs_link(document: dict[str, Any]) -> None:
    """docs/store-ui.md names how to get the document; the title and version are the package's."""
    import memsync

    assert document["info"]["version"] == memsync.__version__
    text = (Path(__file__).resolve().parents[2] / "docs" / "store-ui.md").read_text()
    assert "app.openapi()" in text and "/openapi.json" in text
