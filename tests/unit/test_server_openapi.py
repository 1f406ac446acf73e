"""The store server's OpenAPI document (generated from the routes, completed by server/http/openapi.py) says
what the routes do: the schema-driven tests (tests/api_schema) check the answers against it."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.routing import APIRoute

from memsync.server.app import create_app
from memsync.server.http.envelope import read_body
from memsync.server.http.openapi import ALWAYS


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = tmp_path_factory.mktemp("openapi") / "doc.db"
    return create_app(db, "sk-memsync-admin-unit-" + "x" * 24, "http://127.0.0.1:1")


def test_every_route_declares_the_statuses_every_route_answers_and_no_422(app: Any) -> None:
    document = app.openapi()
    operations = [(path, method, op) for path, ops in document["paths"].items() for method, op in ops.items()]
    assert len(operations) >= 30
    for path, method, op in operations:
        statuses = set(op["responses"])
        assert {str(s) for s in ALWAYS} <= statuses, (method, path)
        assert "422" not in statuses, (method, path)  # a refused parameter is a 400 in the envelope
        for status in statuses - {"200", "304"}:
            schema = op["responses"][status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, (method, path, status)
        for status, header in (("429", "Retry-After"), ("503", "Retry-After"), ("409", "x-should-retry")):
            if status in statuses:
                assert op["responses"][status]["headers"][header]["required"], (method, path)
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_a_route_that_reads_a_body_declares_it(app: Any) -> None:
    document = app.openapi()
    for route in app.routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        reads_body = any(dep.call is read_body for dep in route.dependant.dependencies)
        for method in route.methods:
            op = document["paths"][route.path][method.lower()]
            assert ("requestBody" in op) == reads_body, (method, route.path)
            if reads_body:
                schema = op["requestBody"]["content"]["application/json"]["schema"]
                assert schema["type"] == "object" and schema["properties"], (method, route.path)
                assert "$ref" not in str(schema), (method, route.path)  # inlined: nothing dangles
