"""Bad input over real HTTP: each gets the documented status and a message naming the problem, and nothing is
stored."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import API_HEADERS, RunningStoreServer, StoreApi, launch_on_backend

pytestmark = pytest.mark.both_backends


def _error(resp: httpx.Response, status: int, error_type: str) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert body["request_id"].startswith("req_")
    assert resp.headers["request-id"] == body["request_id"]
    message: str = body["error"]["message"]
    return message


def _nothing_stored(api: StoreApi, store: str, expected_paths: list[str] | None = None) -> None:
    assert api.paths(store) == (expected_paths or [])
    versions = api.admin("GET", f"/v1/memory_stores/{store}/memory_versions", params={"limit": 100}).json()[
        "data"
    ]
    assert len(versions) == len(expected_paths or [])


BAD_PATHS = [
    ("no-leading-slash.md", "must start with '/'"),
    ("/", "at least one segment"),
    ("/" + "x" * 1024, "at most 1024 bytes"),
    ("/" + "é" * 512, "at most 1024 bytes"),  # 1,025 bytes in 513 characters
    ("/" + "/".join(["s"] * 21), "at most 20 segments"),
    ("/a//b", "empty segments"),
    ("/a/", "empty segments"),
    ("/a/./b", "'.' or '..'"),
    ("/a/../b", "'.' or '..'"),
    ("/..", "'.' or '..'"),
    ("/a\x00b", "control character U+0000"),
    ("/a\nb", "control character U+000A"),
    ("/a\x7fb", "control character U+007F"),
    ("/a\u200db", "format character U+200D"),
    ("/\ufeffbom", "format character U+FEFF"),
    ("/a\u2028b", "U+2028/U+2029"),
    ("/a\u2029b", "U+2028/U+2029"),
    ("/cafe\u0301", "NFC"),
]


@pytest.mark.parametrize(("path", "needle"), BAD_PATHS)
def test_every_path_rule_on_create_and_rename(store_api: StoreApi, path: str, needle: str) -> None:
    store = store_api.new_store()
    resp = store_api.admin("POST", f"/v1/memory_stores/{store}/memories", json={"path": path, "content": "x"})
    message = _error(resp, 400, "invalid_request_error")
    assert needle in message
    assert message.startswith("path: ")
    mem = store_api.create(store, "/ok", "x")
    resp = store_api.admin("POST", f"/v1/memory_stores/{store}/memories/{mem['id']}", json={"path": path})
    assert needle in _error(resp, 400, "invalid_request_error")
    _nothing_stored(store_api, store, ["/ok"])


def test_lone_surrogate_in_json_is_a_400(store_api: StoreApi) -> None:
    store = store_api.new_store()
    for raw in (b'{"path": "/a\\ud800", "content": "x"}', b'{"path": "/a", "content": "x\\udc00"}'):
        resp = store_api.admin(
            "POST",
            f"/v1/memory_stores/{store}/memories",
            content=raw,
            headers={"content-type": "application/json"},
        )
        assert "lone surrogate" in _error(resp, 400, "invalid_request_error")
    _nothing_stored(store_api, store)


@pytest.mark.parametrize(
    ("route", "raw"),
    [
        # found by the server_bodies fuzz target: a 500 (the database driver could not encode the id)
        ("/v1/memsync/sessions", b'{"resources": [], "environment_id": "\\ud800"}'),
        ("/v1/environments", b'{"name": "e", "metadata": {"k": "\\udfff"}}'),
        ("/v1/memsync/sessions", b'{"resources": [{"type": "memory_store", "memory_store_id": "\\udc00"}]}'),
    ],
)
def test_lone_surrogate_in_any_field_is_a_400_not_a_500(store_api: StoreApi, route: str, raw: bytes) -> None:
    resp = store_api.admin("POST", route, content=raw, headers={"content-type": "application/json"})
    assert "lone surrogate" in _error(resp, 400, "invalid_request_error")


@pytest.mark.parametrize(
    ("method", "path", "params", "named"),
    [
        ("GET", "/v1/memory_stores/a%00b", None, "store_id"),
        ("GET", "/v1/memory_stores/{store}/memories/a%00b", None, "memory_id"),
        ("GET", "/v1/memory_stores/{store}/memories/%2E%2E", None, "memory_id"),
        ("GET", "/v1/memory_stores/{store}/memory_versions", {"memory_id": "a\x00"}, "memory_id"),
        ("GET", "/v1/memory_stores/{store}/memory_versions", {"session_id": "sesn_\x00"}, "session_id"),
        ("GET", "/v1/memory_stores/{store}/memories", None, None),  # an id is fine
        ("GET", "/v1/sessions/a%00b", None, "session_id"),
        ("DELETE", "/v1/sessions/a%00b", None, "session_id"),
        ("GET", "/v1/environments/a%00b", None, "env_id"),
        ("POST", "/v1/memsync/admin_keys/a%00b/revoke", None, "key_id"),
        ("GET", "/v1/memory_stores/sk-ant-api03-pasted-here", None, "store_id"),
    ],
)
def test_an_id_that_is_not_an_id_is_a_400_naming_it(
    store_api: StoreApi, method: str, path: str, params: dict[str, str] | None, named: str | None
) -> None:
    """On PostgreSQL each of these was a 500: an id with a U+0000 (as %00 in the path or the query) reached
    a query, and PostgreSQL refuses that character in any text. Found by reviewing the class of the
    server_bodies fuzz target's finding (a NUL accepted into an environment's name) on PostgreSQL; every id
    a request names now passes the id rule first."""
    store = store_api.new_store()
    resp = store_api.admin(method, path.format(store=store), params=params)
    if named is None:
        assert resp.status_code == 200, resp.text
        return
    message = _error(resp, 400, "invalid_request_error")
    assert message.startswith(f"{named}: ")
    assert "sk-ant" not in message
    assert "unhandled error" not in store_api.server.log_text()


@pytest.mark.parametrize(
    ("route", "body", "named"),
    [
        (
            "/v1/memsync/sessions",
            {"resources": [{"type": "memory_store", "memory_store_id": "a\x00"}]},
            "resources[0]",
        ),
        ("/v1/memsync/sessions", {"resources": [], "environment_id": "env\x00"}, "environment_id"),
        ("/v1/environments", {"name": "\x00"}, "name"),
        ("/v1/environments", {"name": "e", "description": "a\x00"}, "description"),
        ("/v1/environments", {"name": "e", "metadata": {"k\x00": "v"}}, "metadata key"),
        ("/v1/environments", {"name": "e", "metadata": {"k": "\x00"}}, "metadata['k']"),
    ],
)
def test_a_nul_no_column_can_hold_is_a_400(
    store_api: StoreApi, route: str, body: dict[str, Any], named: str
) -> None:
    """Found by the server_bodies fuzz target: an environment named "\\u0000" was accepted (SQLite stores
    it; PostgreSQL answered 500); the ids a mint names reached a PostgreSQL query the same way."""
    message = _error(store_api.admin("POST", route, json=body), 400, "invalid_request_error")
    assert message.startswith(named), message
    assert "unhandled error" not in store_api.server.log_text()


def test_path_prefix_rules(store_api: StoreApi) -> None:
    store = store_api.new_store()
    url = f"/v1/memory_stores/{store}/memories"
    assert "must end with '/'" in _error(
        store_api.admin("GET", url, params={"path_prefix": "/notes"}), 400, "invalid_request_error"
    )
    assert "'.' or '..'" in _error(
        store_api.admin("GET", url, params={"path_prefix": "/../"}), 400, "invalid_request_error"
    )
    for depth in ("2", "-1", "deep"):
        message = _error(store_api.admin("GET", url, params={"depth": depth}), 400, "invalid_request_error")
        assert "depth" in message
    for limit in ("0", "101", "x"):
        message = _error(store_api.admin("GET", url, params={"limit": limit}), 400, "invalid_request_error")
        assert "limit" in message
    assert "view" in _error(
        store_api.admin("GET", url, params={"view": "everything"}), 400, "invalid_request_error"
    )


def test_content_limit(store_api: StoreApi) -> None:
    store = store_api.new_store()
    url = f"/v1/memory_stores/{store}/memories"
    at_limit = store_api.admin("POST", url, json={"path": "/max", "content": "x" * 102_400})
    assert at_limit.status_code == 200
    assert at_limit.json()["content_size_bytes"] == 102_400
    message = _error(
        store_api.admin("POST", url, json={"path": "/over", "content": "x" * 102_401}),
        400,
        "invalid_request_error",
    )
    assert "102401 bytes" in message
    assert "102400" in message
    # counted in UTF-8 bytes, not characters
    _error(
        store_api.admin("POST", url, json={"path": "/wide", "content": "é" * 51_201}),
        400,
        "invalid_request_error",
    )
    mem_id = at_limit.json()["id"]
    _error(
        store_api.admin("POST", f"{url}/{mem_id}", json={"content": "y" * 102_401}),
        400,
        "invalid_request_error",
    )
    _nothing_stored(store_api, store, ["/max"])
    got = store_api.admin("GET", f"{url}/{mem_id}").json()
    assert got["content"] == "x" * 102_400


def test_oversized_body_is_413(store_api: StoreApi) -> None:
    store = store_api.new_store()
    url = f"/v1/memory_stores/{store}/memories"
    big = b'{"path": "/big", "content": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    resp = store_api.admin("POST", url, content=big, headers={"content-type": "application/json"})
    assert "bytes" in _error(resp, 413, "request_too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap applies while reading
        yield b'{"path": "/big", "content": "'
        for _ in range(40):
            yield b"y" * 65_536
        yield b'"}'

    resp = store_api.admin("POST", url, content=chunks(), headers={"content-type": "application/json"})
    assert "exceeds" in _error(resp, 413, "request_too_large")
    _nothing_stored(store_api, store)


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"path": "/a", "content": "x",}', "not valid JSON"),
        (b"", "empty"),
        (b"[]", "must be a JSON object"),
        (b'{"path": "/a", "content": "x", "overwrite": true}', "unknown field 'overwrite'"),
        (b'{"content": "x"}', "missing required field 'path'"),
        (b'{"path": 5, "content": "x"}', "'path'"),
        (b'{"path": "/a", "content": ["x"]}', "'content'"),
        (b'{"path": "/a"}', "missing required field 'content'"),
    ],
)
def test_malformed_create_bodies(store_api: StoreApi, raw: bytes, needle: str) -> None:
    store = store_api.new_store()
    resp = store_api.admin(
        "POST",
        f"/v1/memory_stores/{store}/memories",
        content=raw,
        headers={"content-type": "application/json"},
    )
    assert needle in _error(resp, 400, "invalid_request_error")
    _nothing_stored(store_api, store)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"content": "y", "if_match": "x"}, "unknown field 'if_match'"),
        ({"content": "y", "precondition": {"type": "content_sha256"}}, "precondition.content_sha256"),
        (
            {"content": "y", "precondition": {"type": "content_sha256", "content_sha256": "ABC"}},
            "content_sha256",
        ),
        (
            {"content": "y", "precondition": {"type": "version", "content_sha256": "0" * 64}},
            "precondition.type",
        ),
        ({"content": "y", "precondition": {"content_sha256": "0" * 64, "extra": 1}}, "precondition.extra"),
    ],
)
def test_malformed_update_bodies(store_api: StoreApi, body: dict[str, Any], needle: str) -> None:
    store = store_api.new_store()
    mem = store_api.create(store, "/a", "x")
    resp = store_api.admin("POST", f"/v1/memory_stores/{store}/memories/{mem['id']}", json=body)
    assert needle in _error(resp, 400, "invalid_request_error")
    got = store_api.admin("GET", f"/v1/memory_stores/{store}/memories/{mem['id']}").json()
    assert got["content"] == "x"
    _nothing_stored(store_api, store, ["/a"])


def _first_page(api: StoreApi, store: str, **params: Any) -> dict[str, Any]:
    resp = api.admin("GET", f"/v1/memory_stores/{store}/memories", params={"limit": 1, **params})
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def test_forged_and_tampered_cursors(store_api: StoreApi) -> None:
    store = store_api.new_store()
    for i in range(3):
        store_api.create(store, f"/m{i}", "x")
    url = f"/v1/memory_stores/{store}/memories"
    cursor = _first_page(store_api, store)["next_page"]
    payload, sig = cursor[len("page_") :].split(".")
    for forged, needle in [
        ("page_Zm9yZ2Vk", "malformed"),
        ("notacursor", "malformed"),
        (
            f"page_{payload}.{sig[:-2]}AA" if not sig.endswith("AA") else f"page_{payload}.{sig[:-2]}BB",
            "signature",
        ),
        (f"page_{payload[:-3]}xyz.{sig}", "page cursor"),
    ]:
        message = _error(store_api.admin("GET", url, params={"page": forged}), 400, "invalid_request_error")
        assert needle in message
        assert forged not in message


def test_cursor_is_bound_to_its_query(store_api: StoreApi) -> None:
    store = store_api.new_store()
    other = store_api.new_store()
    for i in range(3):
        store_api.create(store, f"/d/m{i}", "x")
    cursor = _first_page(store_api, store)["next_page"]
    url = f"/v1/memory_stores/{store}/memories"
    for params in ({"path_prefix": "/d/"}, {"depth": 1}, {"view": "full"}):
        message = _error(
            store_api.admin("GET", url, params={"page": cursor, **params}), 400, "invalid_request_error"
        )
        assert "different query" in message
    message = _error(
        store_api.admin("GET", f"/v1/memory_stores/{other}/memories", params={"page": cursor}),
        400,
        "invalid_request_error",
    )
    assert "different query" in message
    # a store-listing cursor is not a memory-listing cursor
    stores_cursor = store_api.admin("GET", "/v1/memory_stores", params={"limit": 1}).json()["next_page"]
    assert stores_cursor
    _error(store_api.admin("GET", url, params={"page": stores_cursor}), 400, "invalid_request_error")
    # the limit may change between pages
    ok = store_api.admin("GET", url, params={"page": cursor, "limit": 50})
    assert [m["path"] for m in ok.json()["data"]] == ["/d/m1", "/d/m2"]


@pytest.fixture(scope="module")
def strict_server(
    store_backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningStoreServer]:
    """A private server with a 1-second cursor lifetime and a 5-memory cap."""
    server = launch_on_backend(
        store_backend,
        request,
        Path(tmp_path_factory.mktemp("strict-server")),
        ("--cursor-ttl", "1", "--max-memories", "5"),
    )
    try:
        yield server
    finally:
        server.stop()


def test_expired_cursor(strict_server: RunningStoreServer) -> None:
    api = StoreApi(strict_server)
    try:
        store = api.new_store()
        for i in range(3):
            api.create(store, f"/m{i}", "x")
        cursor = _first_page(api, store)["next_page"]
        time.sleep(2.2)
        message = _error(
            api.admin("GET", f"/v1/memory_stores/{store}/memories", params={"page": cursor}),
            400,
            "invalid_request_error",
        )
        assert "expired" in message
    finally:
        api.close()


def test_memory_cap_per_store(strict_server: RunningStoreServer) -> None:
    api = StoreApi(strict_server)
    try:
        store = api.new_store()
        mems = [api.create(store, f"/m{i}", "x") for i in range(5)]
        resp = api.admin("POST", f"/v1/memory_stores/{store}/memories", json={"path": "/m5", "content": "x"})
        message = _error(resp, 400, "invalid_request_error")
        assert "maximum of 5 memories" in message
        assert api.paths(store) == [f"/m{i}" for i in range(5)]
        # existing memories stay editable at the cap, and deleting one makes room
        upd = api.admin("POST", f"/v1/memory_stores/{store}/memories/{mems[0]['id']}", json={"content": "y"})
        assert upd.status_code == 200
        api.admin("DELETE", f"/v1/memory_stores/{store}/memories/{mems[1]['id']}")
        assert api.create(store, "/m5", "x")["path"] == "/m5"
        # the cap is per store
        assert api.create(api.new_store(), "/m0", "x")["path"] == "/m0"
    finally:
        api.close()


# --- hostile JSON and out-of-range filters: 400s naming the problem, never a 500 ----------------------------

HOSTILE_BODIES = [
    (b'{"name": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "deeper than 16 levels"),
    (b'{"metadata": ' + b'{"a": ' * 5_000 + b'"x"' + b"}" * 5_000 + b"}", "deeper than 16 levels"),
    # just past the limit: the decoder copes, the depth check names where it happens
    (
        b'{"metadata": ' + b'{"k": ' * 16 + b'"x"' + b"}" * 16 + b"}",
        "at field 'metadata.k.k.k.k.k.k.k.k.k.k.k.k.k.k.k'",
    ),
    (b'{"name": ' + b"1" * 5_000 + b"}", "5000-digit number"),
    (b'{"name": 1.' + b"5" * 5_000 + b"}", "5002-character number"),
    (b'{"name": NaN}', "NaN is not a JSON value"),
    (b'{"name": "a", "metadata": {"k": Infinity}}', "Infinity is not a JSON value"),
    (b'{"name": -Infinity}', "-Infinity is not a JSON value"),
]


def _body_endpoints(api: StoreApi) -> list[str]:
    store = api.new_store()
    mem = api.create(store, "/a", "x")
    return [
        "/v1/memory_stores",
        f"/v1/memory_stores/{store}",
        f"/v1/memory_stores/{store}/memories",
        f"/v1/memory_stores/{store}/memories/{mem['id']}",
        "/v1/memsync/sessions",
    ]


@pytest.mark.parametrize(("raw", "needle"), HOSTILE_BODIES)
def test_hostile_json_bodies_are_400_on_every_endpoint(store_api: StoreApi, raw: bytes, needle: str) -> None:
    for url in _body_endpoints(store_api):
        resp = store_api.admin("POST", url, content=raw, headers={"content-type": "application/json"})
        assert needle in _error(resp, 400, "invalid_request_error"), url
    assert "unhandled error" not in store_api.server.log_text()


def test_nesting_within_the_limit_is_judged_by_the_schema(store_api: StoreApi) -> None:
    raw = b'{"name": "n", "metadata": ' + b'{"k": ' * 15 + b'"x"' + b"}" * 15 + b"}"
    resp = store_api.admin(
        "POST", "/v1/memory_stores", content=raw, headers={"content-type": "application/json"}
    )
    assert "field 'metadata.k'" in _error(resp, 400, "invalid_request_error")


OUT_OF_RANGE_TIMESTAMPS = [
    "0001-01-01T00:00:00+01:00",  # before year 1 once in UTC
    "9999-12-31T23:59:59-01:00",  # after year 9999 once in UTC
    "0001-01-01T00:30:00+23:59",
]


@pytest.mark.parametrize("value", OUT_OF_RANGE_TIMESTAMPS)
@pytest.mark.parametrize("bound", ["created_at[gte]", "created_at[lte]"])
def test_out_of_range_created_at_filters_are_400(store_api: StoreApi, bound: str, value: str) -> None:
    store = store_api.new_store()
    for url in ("/v1/memory_stores", f"/v1/memory_stores/{store}/memory_versions"):
        message = _error(store_api.admin("GET", url, params={bound: value}), 400, "invalid_request_error")
        assert message.startswith(f"{bound} is out of range"), message
    assert "unhandled error" not in store_api.server.log_text()


def test_extreme_but_valid_created_at_filters_still_work(store_api: StoreApi) -> None:
    store = store_api.new_store()
    store_api.create(store, "/a", "x")
    url = f"/v1/memory_stores/{store}/memory_versions"
    wide = {"created_at[gte]": "0001-01-01T00:00:00Z", "created_at[lte]": "9999-12-31T23:59:59Z"}
    assert len(store_api.admin("GET", url, params=wide).json()["data"]) == 1
    future = {"created_at[gte]": "9999-12-31T23:59:59Z"}
    assert store_api.admin("GET", url, params=future).json()["data"] == []
    # a year before 1000 (found by the server_listing fuzz target: it sorted after every real time)
    early = "0999-12-31T23:59:59Z"
    assert len(store_api.admin("GET", url, params={"created_at[gte]": early}).json()["data"]) == 1
    assert store_api.admin("GET", url, params={"created_at[lte]": early}).json()["data"] == []


@pytest.mark.parametrize(
    ("name", "value"),
    [("limit", "9" * 5_000), ("limit", "1e3"), ("depth", "9" * 5_000), ("include_archived", "9" * 5_000)],
)
def test_huge_and_odd_numeric_query_values_are_400_naming_the_parameter(
    store_api: StoreApi, name: str, value: str
) -> None:
    store = store_api.new_store()
    url = f"/v1/memory_stores/{store}/memories" if name == "depth" else "/v1/memory_stores"
    message = _error(store_api.admin("GET", url, params={name: value}), 400, "invalid_request_error")
    assert name in message


async def test_memory_cap_cannot_be_raced_past(strict_server: RunningStoreServer) -> None:
    """Twenty concurrent creates into an empty store capped at 5: exactly five land, whatever the backend."""
    api = StoreApi(strict_server)
    try:
        store = api.new_store()
    finally:
        api.close()
    async with httpx.AsyncClient(
        base_url=strict_server.url,
        headers={**API_HEADERS, "x-api-key": strict_server.admin_key},
        params={"beta": "true"},
        timeout=60.0,
    ) as http:
        answers = await asyncio.gather(
            *(
                http.post(f"/v1/memory_stores/{store}/memories", json={"path": f"/race/{i}", "content": "x"})
                for i in range(20)
            )
        )
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [200] * 5 + [400] * 15, [r.text for r in answers if r.status_code not in (200, 400)]
    api = StoreApi(strict_server)
    try:
        assert len(api.paths(store)) == 5
    finally:
        api.close()


def test_a_query_parameter_given_twice_is_refused_naming_it(store_api: StoreApi) -> None:
    """Every query parameter of the API is one value: a repeated one is a 400 naming it (the framework took
    the last value without a word), on every route."""
    store = store_api.new_store()
    admin = {"x-api-key": store_api.server.admin_key}
    for path in ("/v1/memsync/admin_keys", "/v1/memory_stores", f"/v1/memory_stores/{store}/memories"):
        query = [("beta", "true"), ("limit", "5"), ("limit", "6")]
        resp = store_api.http.get(path, params=query, headers=admin)
        message = _error(resp, 400, "invalid_request_error")
        assert "query parameter limit given more than once" in message, message
    resp = store_api.http.get(
        "/v1/memsync/viewer_keys", params=[("beta", "true"), ("beta", "x")], headers=admin
    )
    assert "query parameter beta given more than once" in _error(resp, 400, "invalid_request_error")
    assert (
        store_api.admin("GET", f"/v1/memory_stores/{store}/memories", params={"limit": 5}).status_code == 200
    )
