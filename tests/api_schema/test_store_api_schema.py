"""Schema-driven tests of the store server: schemathesis generates requests from the server's own OpenAPI
document (FastAPI's, generated from the routes) and sends them to a real server, on SQLite and PostgreSQL,
with each credential of ``world.CREDENTIALS`` (the admin key, a viewer key: read-only, and a sessions token).

Every answer to every generated request (schema-valid or not, with ids that exist or not):
- is never a 5xx (but the admission gate's documented 503, which a loaded machine may draw); its status is
  one the document declares for the route, its body matches the schema the document declares for that
  status, and its headers the headers it declares;
- if it is an error, it is the API's envelope, whose ``request_id`` is the ``request-id`` header; a 409
  carries ``x-should-retry: false``, a 429 or 503 ``Retry-After: 1`` (docs/store-api.md,
  docs/store-server.md);
- never holds what the credential may not see: another session's store id or memory content, or any
  credential but the caller's own; and a viewer key's request that would change anything never succeeds.
A request the schema says is invalid is refused (a 4xx). And the two sessions of the world stay apart: what
one writes, the other cannot read, list or change. ``MEMSYNC_SCHEMA_EXAMPLES`` sets the examples per
operation and credential (default 30), ``MEMSYNC_SCHEMA_SEQUENCES`` the linked sequences per credential
(default 30, up to 10 calls each): the CI budget. The generation is derandomized (each test draws the same
requests on every run, so a commit's result cannot change between two runs; a wider search raises the
counts).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from world import CREDENTIALS, Credential, World, openapi_document, seed

from conftest import API_HEADERS, RunningStoreServer, StoreApi, launch_store_server
from support.overload import SlowUpload, wait_in_flight

pytestmark = [pytest.mark.api_schema, pytest.mark.both_backends, pytest.mark.timeout(900)]

EXAMPLES = int(os.environ.get("MEMSYNC_SCHEMA_EXAMPLES", "30"))
SCHEMA = schemathesis.openapi.from_dict(openapi_document())
OPERATIONS = {op.label: op for op in (result.ok() for result in SCHEMA.get_all_operations())}
STATEFUL_RUNS = int(os.environ.get("MEMSYNC_SCHEMA_SEQUENCES", "30"))
#: An open stream answers for as long as it is open: only its refusals are generated (its 200: below).
ENDLESS = frozenset({"GET /v1/sessions/{session_id}/events/stream"})
STATEFUL = SCHEMA.exclude(path_regex="/stream$")  # a sequence would open the stream and wait on it
# schemathesis's not_a_server_error is documented_answer's: no 5xx but the gate's documented 503 (a loaded
# machine may shed a request, with Retry-After: 1, as the document says).
CHECKS = [
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    negative_data_rejection,
]


@pytest.fixture
def world(store_server: RunningStoreServer) -> Iterator[World]:
    yield seed(store_server.url, store_server.admin_key)


def header(response: schemathesis.Response, name: str) -> str | None:
    values = response.headers.get(name.lower())
    return values[0] if values else None


def documented_answer(response: schemathesis.Response, foreign: list[str], *, writes: bool = True) -> None:
    """What every answer must be beyond its schema: nothing ``foreign`` (what its caller may not see), no
    change made by a credential that may not write (``writes``: a viewer key), the envelope, the retry
    headers."""
    text = response.text
    if not writes and response.request.method not in ("GET", "HEAD"):
        assert response.status_code >= 400, (
            f"a read-only key changed something: {response.request.url} {text}"
        )
    for secret in foreign:
        assert secret not in text, f"the answer holds {secret[:12]}...: {text[:300]}"
    if response.status_code < 400:
        return
    envelope = response.json()
    overloaded = response.status_code == 503 and envelope["error"]["type"] == "overloaded_error"
    assert response.status_code < 500 or overloaded, f"a server error: {response.status_code} {text}"
    assert envelope["type"] == "error", text
    assert isinstance(envelope["error"]["type"], str) and isinstance(envelope["error"]["message"], str), text
    assert envelope["request_id"] == header(response, "request-id"), text
    if response.status_code == 409:
        assert header(response, "x-should-retry") == "false", response.headers
    if response.status_code in (429, 503):
        assert header(response, "retry-after") == "1", response.headers


def cases(label: str, world: World) -> st.SearchStrategy[Any]:
    """Generated requests for one operation: with generated path ids, and with ids that exist (so the
    request reaches past the lookup), schema-valid or not."""
    operation = OPERATIONS[label]
    names = [p.name for p in operation.path_parameters]
    real = {name: world.ids[name] for name in names if name in world.ids and label not in ENDLESS}
    modes = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
    strategies = [operation.as_strategy(generation_mode=mode) for mode in modes]
    if real:
        strategies += [operation.as_strategy(generation_mode=mode, path_parameters=real) for mode in modes]
    return st.one_of(strategies)


@pytest.mark.parametrize("credential", CREDENTIALS, ids=lambda c: c.name)
@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_every_generated_request_gets_a_documented_answer(
    world: World, credential: Credential, label: str
) -> None:
    headers = {**API_HEADERS, **credential.headers(world)}
    session = requests.Session()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        case = data.draw(cases(label, world))
        response = case.call(base_url=world.url, session=session, headers=headers, timeout=30)
        case.validate_response(response, checks=CHECKS, headers=headers)
        documented_answer(response, world.foreign(credential.name), writes=credential.writes)

    run()


@pytest.mark.parametrize("credential", CREDENTIALS, ids=lambda c: c.name)
def test_linked_sequences_of_requests_get_documented_answers(world: World, credential: Credential) -> None:
    """Schemathesis's stateful phase: sequences of calls, each using what an earlier answer returned (a store
    created, then a memory in it, its versions, an update, a redaction...), by the links it infers from the
    document; every answer is checked as above."""
    headers = {**API_HEADERS, **credential.headers(world)}
    session = requests.Session()

    class Sequences(STATEFUL.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"base_url": world.url, "session": session, "headers": headers, "timeout": 30}

        def validate_response(
            self, response: schemathesis.Response, case: schemathesis.Case, *args: Any, **kwargs: Any
        ) -> None:
            case.validate_response(response, checks=CHECKS, headers=headers)
            documented_answer(response, world.foreign(credential.name), writes=credential.writes)

    Sequences.run(
        settings=settings(
            max_examples=STATEFUL_RUNS,
            stateful_step_count=10,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
    )


def test_what_one_session_writes_the_other_cannot_reach(world: World) -> None:
    """A memory created with one session's token is never readable, listed or changeable with another
    store's token: every way in answers 404 (the store is not there for it), and nothing of it shows."""
    mine = world.ids["store_id"]
    as_first = {**API_HEADERS, "authorization": f"Bearer {world.token}"}
    as_other = {**API_HEADERS, "authorization": f"Bearer {world.other_token}"}
    with requests.Session() as http:
        created = http.post(
            f"{world.url}/v1/memory_stores/{mine}/memories",
            headers=as_first,
            json={"path": "/private/plan.md", "content": "first session's plan"},
            timeout=30,
        )
        assert created.status_code == 200, created.text
        memory = created.json()["id"]
        base = f"{world.url}/v1/memory_stores/{mine}"
        attempts = [
            ("GET", f"{base}/memories/{memory}", None),
            ("GET", f"{base}/memories", None),
            ("GET", f"{base}/memory_versions", None),
            ("GET", base, None),
            ("POST", f"{base}/memories/{memory}", {"content": "overwritten"}),
            ("DELETE", f"{base}/memories/{memory}", None),
            ("POST", f"{base}/memories", {"path": "/planted.md", "content": "x"}),
            ("GET", f"{world.url}/v1/sessions/{world.session_id}", None),
        ]
        for method, url, body in attempts:
            answer = http.request(method, url, headers=as_other, json=body, timeout=30)
            assert answer.status_code == 404, f"{method} {url}: {answer.status_code} {answer.text}"
            assert "first session's plan" not in answer.text and memory not in answer.text
        still = http.get(f"{base}/memories/{memory}", headers=as_first, timeout=30)
        assert still.json()["content"] == "first session's plan"
        listed = http.get(f"{base}/memories", headers=as_first, params={"limit": 100}, timeout=30).json()
        assert "/planted.md" not in json.dumps(listed)


def test_the_event_stream_answers_as_documented(world: World) -> None:
    """The one route whose 200 the generated tests leave out (it stays open): its documented type."""
    content_type = SCHEMA.raw_schema["paths"]["/v1/sessions/{session_id}/events/stream"]["get"]["responses"][
        "200"
    ]["content"]
    url = f"{world.url}/v1/sessions/{world.session_id}/events/stream"
    headers = {**API_HEADERS, "authorization": f"Bearer {world.token}"}
    with requests.get(url, headers=headers, stream=True, timeout=30) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].split(";")[0] in content_type


def test_the_admission_gates_refusals_are_documented_answers(tmp_path: Path) -> None:
    """The generated requests never fill a server; here one is held full on purpose (uploads whose bodies are
    held back keep its slots), and its 429 and 503 are checked against the document like any answer."""
    server = launch_store_server(
        tmp_path / "srv", ("--max-in-flight", "2", "--max-queued", "1", "--max-in-flight-per-credential", "1")
    )
    api = StoreApi(server)
    try:
        store = api.new_store()
        tokens = [api.session_token([(store, "read_write")]) for _ in range(3)]
        path = f"/v1/memory_stores/{store}/memories"
        admin = {**API_HEADERS, "x-api-key": server.admin_key}
        listing = OPERATIONS["GET /v1/memory_stores/{store_id}/memories"]
        held = [
            SlowUpload(server, path, ("x-api-key", server.admin_key), "held0"),
            SlowUpload(server, path, ("authorization", f"Bearer {tokens[0]}"), "held1"),
        ]
        wait_in_flight(api, 2)
        calls = {429: admin, 503: {**API_HEADERS, "authorization": f"Bearer {tokens[2]}"}}
        for status, headers in calls.items():
            if status == 503:
                held.append(SlowUpload(server, path, ("authorization", f"Bearer {tokens[1]}"), "queued"))
                wait_in_flight(api, 2, queued=1)
            case = listing.Case(path_parameters={"store_id": store}, query={"beta": "true"})
            response = case.call(base_url=server.url, headers=headers, timeout=30)
            assert response.status_code == status, response.text
            case.validate_response(response, checks=CHECKS, headers=headers)
            others = [server.admin_key, *tokens]
            documented_answer(response, [c for c in others if c not in str(headers)])
        assert [upload.finish() for upload in held] == [200, 200, 200]
    finally:
        api.close()
        server.stop()
