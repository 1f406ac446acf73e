"""The store client against a scripted httpx transport: headers, auth, query and body of every endpoint,
pagination, typed errors, secrets. Against the real server: tests/integration/test_client_server.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest

from memsync.api.models import Memory, MemoryPrefix, MemoryStoreResource
from memsync.api.secret import WorkSecretError, encode_work_secret
from memsync.client import StoreClient, errors

API_KEY = "sk-ant-api03-unit-test-admin-key-0123456789"
TOKEN = "sk-ant-req-unit-test-session-token-abcdef"
BASE = "http://store.test"
SHA = "a" * 64
TS = "2026-07-30T12:00:00Z"

Handler = Callable[[httpx.Request], httpx.Response]


def store_json(store_id: str = "memstore_1", name: str = "notes") -> dict[str, Any]:
    return {
        "type": "memory_store",
        "id": store_id,
        "name": name,
        "description": "",
        "metadata": {},
        "created_at": TS,
        "updated_at": TS,
        "archived_at": None,
    }


def memory_json(memory_id: str = "mem_1", path: str = "/a.md", content: str | None = None) -> dict[str, Any]:
    return {
        "type": "memory",
        "id": memory_id,
        "memory_store_id": "memstore_1",
        "path": path,
        "content": content,
        "content_sha256": SHA,
        "content_size_bytes": 3,
        "memory_version_id": "memver_1",
        "created_at": TS,
        "updated_at": TS,
    }


def version_json(version_id: str = "memver_1", operation: str = "created") -> dict[str, Any]:
    return {
        "type": "memory_version",
        "id": version_id,
        "memory_id": "mem_1",
        "memory_store_id": "memstore_1",
        "operation": operation,
        "content": None,
        "content_sha256": SHA,
        "content_size_bytes": 3,
        "path": "/a.md",
        "created_at": TS,
        "created_by": {"type": "api_actor", "api_key_id": "apikey_1"},
        "redacted_at": None,
        "redacted_by": None,
    }


def session_json(session_id: str = "sesn_1") -> dict[str, Any]:
    return {
        "type": "session",
        "id": session_id,
        "resources": [
            {
                "type": "memory_store",
                "memory_store_id": "memstore_1",
                "name": "notes",
                "mount_path": "/mnt/memory/notes",
                "access": "read_only",
            }
        ],
    }


def error_response(status: int, error_type: str, message: str, **extra: Any) -> httpx.Response:
    body = {
        "type": "error",
        "error": {"type": error_type, "message": message, **extra},
        "request_id": "req_42",
    }
    return httpx.Response(status, json=body)


class Recorder:
    """A real httpx transport answering from a script; it keeps every request it saw."""

    def __init__(self, *responses: httpx.Response | Handler | Exception) -> None:
        self.script = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(step, Exception):
            raise step
        if isinstance(step, httpx.Response):
            return httpx.Response(step.status_code, headers=step.headers, content=step.content)
        return step(request)

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]

    def body(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)

    def query(self, index: int = -1) -> list[tuple[str, str]]:
        return list(self.requests[index].url.params.multi_items())


class FakeSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def make_client(recorder: Recorder, *, base_url: str = BASE, **kw: Any) -> StoreClient:
    kw.setdefault("api_key", API_KEY)
    kw.setdefault("sleep", FakeSleep())
    return StoreClient(base_url, transport=httpx.MockTransport(recorder), **kw)


def ok(body: Any) -> httpx.Response:
    return httpx.Response(200, json=body)


# --- headers, auth, beta marker -------------------------------------------------------------------------


async def _every_endpoint(client: StoreClient) -> None:
    """Call every method once (the recorder answers each with an object of the right shape)."""
    await client.create_store("notes")
    [s async for s in client.list_stores()]
    await client.get_store("memstore_1")
    await client.update_store("memstore_1", name="n")
    await client.delete_store("memstore_1")
    await client.archive_store("memstore_1")
    await client.create_memory("memstore_1", "/a.md", "abc")
    [m async for m in client.list_memories("memstore_1")]
    await client.get_memory("memstore_1", "mem_1")
    await client.update_memory("memstore_1", "mem_1", content="x")
    await client.delete_memory("memstore_1", "mem_1")
    [v async for v in client.list_versions("memstore_1")]
    await client.get_version("memstore_1", "memver_1")
    await client.redact_version("memstore_1", "memver_1")
    await client.get_session("sesn_1")
    await client.mint_session([MemoryStoreResource(memory_store_id="memstore_1")])


def _shape_for(request: httpx.Request) -> httpx.Response:
    path = request.url.path.removeprefix("/proxy")
    if path == "/v1/memsync/sessions":
        return ok({"session": session_json(), "work_secret": encode_work_secret(TOKEN)})
    if path.startswith("/v1/sessions/"):
        return ok(session_json())
    return _store_shape_for(path, request.method)


def _store_shape_for(path: str, method: str) -> httpx.Response:
    """The answer's shape for a path under ``/v1/memory_stores``."""
    if path.endswith("/memories") and method == "GET":
        return ok({"data": [memory_json()], "next_page": None})
    if path.endswith("/memory_versions"):
        return ok({"data": [version_json()], "next_page": None})
    if "/memory_versions/" in path:
        return ok(version_json())
    if "/memories" in path:
        if method == "DELETE":
            return ok({"type": "memory_deleted", "id": "mem_1"})
        return ok(memory_json())
    if path == "/v1/memory_stores" and method == "GET":
        return ok({"data": [store_json()], "next_page": None})
    if method == "DELETE":
        return ok({"type": "memory_store_deleted", "id": "memstore_1"})
    return ok(store_json())


@pytest.mark.parametrize("auth", ["api_key", "bearer"])
async def test_every_call_sends_version_beta_marker_and_exactly_one_credential(auth: str) -> None:
    recorder = Recorder(_shape_for)
    kw: dict[str, Any] = (
        {"api_key": API_KEY} if auth == "api_key" else {"api_key": None, "bearer_token": TOKEN}
    )
    async with make_client(recorder, workspace_id="wrkspc_1", **kw) as client:
        await _every_endpoint(client)
        assert client.request_count == 16
    assert len(recorder.requests) == 16
    for request in recorder.requests:
        assert request.headers["anthropic-version"] == "2023-06-01"
        expected_beta = (
            "managed-agents-2026-04-01"
            if request.url.path.startswith("/v1/sessions/")
            else "agent-memory-2026-07-22"
        )
        assert request.headers.get_list("anthropic-beta") == [expected_beta]
        assert request.headers["anthropic-workspace-id"] == "wrkspc_1"
        assert request.url.params.get_list("beta") == ["true"]
        if auth == "api_key":
            assert request.headers["x-api-key"] == API_KEY
            assert "authorization" not in request.headers
        else:
            assert request.headers["authorization"] == f"Bearer {TOKEN}"
            assert "x-api-key" not in request.headers


async def test_base_url_path_prefix_is_kept() -> None:
    recorder = Recorder(_shape_for)
    async with make_client(recorder, base_url="http://proxy.test:8080/proxy/") as client:
        await _every_endpoint(client)
    assert {r.url.host for r in recorder.requests} == {"proxy.test"}
    assert all(r.url.path.startswith("/proxy/v1/") for r in recorder.requests)


def test_both_credentials_refused_and_repr_has_no_credential() -> None:
    with pytest.raises(ValueError, match="not both"):
        StoreClient(BASE, api_key=API_KEY, bearer_token=TOKEN)
    client = StoreClient(BASE, bearer_token=TOKEN)
    assert TOKEN not in repr(client)
    assert TOKEN not in str(client)
    assert "bearer" in repr(client)
    client2 = StoreClient(BASE, api_key=API_KEY)
    assert API_KEY not in repr(client2)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"timeout": 0}, "timeout"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_connections": 0}, "max_connections"),
        ({"api_key": " "}, "api_key"),
    ],
)
def test_bad_settings_name_the_setting(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StoreClient(BASE, **kw)


def test_base_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="base_url"):
        StoreClient("ftp://x", api_key=API_KEY)


# --- the work-item secret -------------------------------------------------------------------------------


async def test_from_work_secret_uses_bearer_and_the_secrets_base_url_first() -> None:
    recorder = Recorder(ok(store_json()))
    secret = encode_work_secret(TOKEN, "http://from-secret.test:9000")
    client = StoreClient.from_work_secret(
        secret, base_url="http://from-arg.test", transport=httpx.MockTransport(recorder)
    )
    async with client:
        await client.get_store("memstore_1")
    assert recorder.last.url.host == "from-secret.test"
    assert recorder.last.url.port == 9000
    assert recorder.last.headers["authorization"] == f"Bearer {TOKEN}"
    assert "x-api-key" not in recorder.last.headers
    assert TOKEN not in repr(client)


async def test_from_work_secret_falls_back_to_base_url_then_default() -> None:
    secret = encode_work_secret(TOKEN)
    recorder = Recorder(ok(store_json()))
    async with StoreClient.from_work_secret(
        secret + "==", base_url="http://from-arg.test", transport=httpx.MockTransport(recorder)
    ) as client:
        await client.get_store("memstore_1")
    assert recorder.last.url.host == "from-arg.test"
    async with StoreClient.from_work_secret(secret, transport=httpx.MockTransport(recorder)) as client:
        assert client.base_url == "https://api.anthropic.com"
        await client.get_store("memstore_1")
    assert recorder.last.url.host == "api.anthropic.com"


@pytest.mark.parametrize(
    "secret",
    [
        "",
        "not base64 at all!!" + TOKEN,
        encode_work_secret(TOKEN)[:-3] + "%%%",
        __import__("base64").urlsafe_b64encode(json.dumps({"token": TOKEN}).encode()).decode(),
        __import__("base64").urlsafe_b64encode(json.dumps([TOKEN]).encode()).decode(),
        __import__("base64").urlsafe_b64encode(json.dumps({"sessions_token": " "}).encode()).decode(),
    ],
)
def test_bad_secret_is_a_clear_error_that_never_echoes_it(secret: str) -> None:
    with pytest.raises(WorkSecretError) as caught:
        StoreClient.from_work_secret(secret)
    text = str(caught.value) + repr(caught.value)
    assert "the work item carried no sessions token" in text
    assert TOKEN not in text
    if secret.strip():
        assert secret not in text


# --- query and body encoding of every endpoint ----------------------------------------------------------


async def test_store_endpoints_encoding() -> None:
    recorder = Recorder(_shape_for)
    async with make_client(recorder) as client:
        store = await client.create_store("notes", description="d", metadata={"team": "x"})
        assert store.id == "memstore_1"
        assert (recorder.last.method, recorder.last.url.path) == ("POST", "/v1/memory_stores")
        assert recorder.body() == {"name": "notes", "description": "d", "metadata": {"team": "x"}}

        await client.create_store("bare")
        assert recorder.body() == {"name": "bare"}

        gte = datetime(2026, 7, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
        lte = datetime(2026, 7, 31, 0, 0, 0, 500, tzinfo=UTC)
        stores = [
            s
            async for s in client.list_stores(
                include_archived=True, limit=5, created_at_gte=gte, created_at_lte=lte
            )
        ]
        assert [s.id for s in stores] == ["memstore_1"]
        assert (recorder.last.method, recorder.last.url.path) == ("GET", "/v1/memory_stores")
        assert recorder.query() == [
            ("beta", "true"),
            ("limit", "5"),
            ("include_archived", "true"),
            ("created_at[gte]", "2026-07-01T12:00:00Z"),
            ("created_at[lte]", "2026-07-31T00:00:00.000500Z"),
        ]
        [s async for s in client.list_stores()]
        assert recorder.query() == [("beta", "true")]

        await client.get_store("memstore_1")
        assert (recorder.last.method, recorder.last.url.path) == ("GET", "/v1/memory_stores/memstore_1")

        await client.update_store("memstore_1", name="new", description="", metadata={"a": "1", "gone": None})
        assert (recorder.last.method, recorder.last.url.path) == ("POST", "/v1/memory_stores/memstore_1")
        assert recorder.body() == {"name": "new", "description": "", "metadata": {"a": "1", "gone": None}}
        await client.update_store("memstore_1", description="only")
        assert recorder.body() == {"description": "only"}

        deleted = await client.delete_store("memstore_1")
        assert deleted.type == "memory_store_deleted"
        assert (recorder.last.method, recorder.last.url.path) == ("DELETE", "/v1/memory_stores/memstore_1")

        await client.archive_store("memstore_1")
        assert (recorder.last.method, recorder.last.url.path) == (
            "POST",
            "/v1/memory_stores/memstore_1/archive",
        )
        assert recorder.last.content == b""


async def test_naive_datetime_filter_is_refused_with_the_parameter_name() -> None:
    recorder = Recorder(_shape_for)
    async with make_client(recorder) as client:
        with pytest.raises(ValueError, match="created_at_gte"):
            [s async for s in client.list_stores(created_at_gte=datetime(2026, 7, 1))]
    assert recorder.requests == []


async def test_memory_endpoints_encoding() -> None:
    recorder = Recorder(_shape_for)
    async with make_client(recorder) as client:
        await client.create_memory("memstore_1", "/notes/ü.md", "héllo\n", view="full")
        assert (recorder.last.method, recorder.last.url.path) == (
            "POST",
            "/v1/memory_stores/memstore_1/memories",
        )
        assert recorder.query() == [("beta", "true"), ("view", "full")]
        assert recorder.body() == {"path": "/notes/ü.md", "content": "héllo\n"}
        assert "héllo".encode() in recorder.last.content  # UTF-8 JSON, not ASCII escapes

        await client.create_memory("memstore_1", "/empty", "")
        assert recorder.query() == [("beta", "true")]
        assert recorder.body() == {"path": "/empty", "content": ""}

        page = await client.list_memories_page(
            "memstore_1", view="full", limit=7, page="page_x", path_prefix="/notes/", depth=1
        )
        assert isinstance(page.data[0], Memory)
        assert recorder.last.url.path == "/v1/memory_stores/memstore_1/memories"
        assert recorder.query() == [
            ("beta", "true"),
            ("view", "full"),
            ("limit", "7"),
            ("page", "page_x"),
            ("path_prefix", "/notes/"),
            ("depth", "1"),
        ]
        await client.list_memories_page("memstore_1")
        assert recorder.query() == [("beta", "true"), ("view", "basic")]

        await client.get_memory("memstore_1", "mem_1")
        assert (recorder.last.method, recorder.last.url.path) == (
            "GET",
            "/v1/memory_stores/memstore_1/memories/mem_1",
        )
        assert recorder.query() == [("beta", "true"), ("view", "full")]
        await client.get_memory("memstore_1", "mem_1", view="basic")
        assert recorder.query() == [("beta", "true"), ("view", "basic")]

        await client.update_memory("memstore_1", "mem_1", content="new", expected_sha256=SHA, view="full")
        assert (recorder.last.method, recorder.last.url.path) == (
            "POST",
            "/v1/memory_stores/memstore_1/memories/mem_1",
        )
        assert recorder.query() == [("beta", "true"), ("view", "full")]
        assert recorder.body() == {
            "content": "new",
            "precondition": {"type": "content_sha256", "content_sha256": SHA},
        }
        await client.update_memory("memstore_1", "mem_1", path="/renamed.md")
        assert recorder.body() == {"path": "/renamed.md"}
        assert recorder.query() == [("beta", "true")]
        await client.update_memory("memstore_1", "mem_1", content="")
        assert recorder.body() == {"content": ""}
        with pytest.raises(ValueError, match="content and/or path"):
            await client.update_memory("memstore_1", "mem_1")

        deleted = await client.delete_memory("memstore_1", "mem_1", expected_sha256=SHA)
        assert deleted.id == "mem_1"
        assert (recorder.last.method, recorder.last.url.path) == (
            "DELETE",
            "/v1/memory_stores/memstore_1/memories/mem_1",
        )
        assert recorder.query() == [("beta", "true"), ("expected_content_sha256", SHA)]
        await client.delete_memory("memstore_1", "mem_1")
        assert recorder.query() == [("beta", "true")]


async def test_bad_precondition_hash_is_refused_before_sending() -> None:
    recorder = Recorder(_shape_for)
    async with make_client(recorder) as client:
        with pytest.raises(ValueError, match="content_sha256"):
            await client.update_memory("memstore_1", "mem_1", content="x", expected_sha256="ABC")
    assert recorder.requests == []


async def test_version_endpoints_encoding() -> None:
    recorder = Recorder(_shape_for)
    async with make_client(recorder) as client:
        versions = [
            v
            async for v in client.list_versions(
                "memstore_1",
                memory_id="mem_1",
                operation="modified",
                session_id="sesn_1",
                api_key_id="apikey_1",
                service_account_id="svac_1",
                created_at_gte=datetime(2026, 1, 1, tzinfo=UTC),
                created_at_lte=datetime(2026, 2, 1, tzinfo=UTC),
                view="full",
                limit=3,
            )
        ]
        assert versions[0].created_by is not None
        assert (recorder.last.method, recorder.last.url.path) == (
            "GET",
            "/v1/memory_stores/memstore_1/memory_versions",
        )
        assert recorder.query() == [
            ("beta", "true"),
            ("memory_id", "mem_1"),
            ("operation", "modified"),
            ("session_id", "sesn_1"),
            ("api_key_id", "apikey_1"),
            ("service_account_id", "svac_1"),
            ("view", "full"),
            ("created_at[gte]", "2026-01-01T00:00:00Z"),
            ("created_at[lte]", "2026-02-01T00:00:00Z"),
            ("limit", "3"),
        ]
        # the bracketed names travel percent-encoded and decode to the literal names
        assert "created_at%5Bgte%5D=2026-01-01T00%3A00%3A00Z" in str(recorder.last.url)

        await client.get_version("memstore_1", "memver_1")
        assert (recorder.last.method, recorder.last.url.path) == (
            "GET",
            "/v1/memory_stores/memstore_1/memory_versions/memver_1",
        )
        assert recorder.query() == [("beta", "true")]
        await client.get_version("memstore_1", "memver_1", view="basic")
        assert recorder.query() == [("beta", "true"), ("view", "basic")]

        await client.redact_version("memstore_1", "memver_1")
        assert (recorder.last.method, recorder.last.url.path) == (
            "POST",
            "/v1/memory_stores/memstore_1/memory_versions/memver_1/redact",
        )
        assert recorder.last.content == b""


@pytest.mark.parametrize("body", [b"[" * 3000, b'{"id": ' + b"[" * 3000, b"not json"])
async def test_a_session_that_is_not_json_is_an_invalid_response(body: bytes) -> None:
    """A body nested past the recursion limit raised RecursionError out of get_session, where a mount reads
    its stores (found by review of the client_page fuzz target's property; its corpus holds it now)."""
    async with make_client(Recorder(httpx.Response(200, content=body))) as client:
        with pytest.raises(errors.InvalidResponse):
            await client.get_session("sesn_1")


async def test_session_endpoints() -> None:
    hosted = session_json()
    hosted["resources"].insert(0, {"type": "github_repository", "url": "https://example.test/r"})
    recorder = Recorder(ok(hosted))
    async with make_client(recorder, api_key=None, bearer_token=TOKEN) as client:
        session = await client.get_session("sesn_1")
    assert recorder.last.url.path == "/v1/sessions/sesn_1"
    assert [(r.memory_store_id, r.access, r.mount_path) for r in session.resources] == [
        ("memstore_1", "read_only", "/mnt/memory/notes")
    ]

    secret = encode_work_secret(TOKEN, "http://127.0.0.1:1")
    recorder = Recorder(ok({"session": session_json("sesn_9"), "work_secret": secret}))
    async with make_client(recorder) as client:
        minted, work_secret = await client.mint_session(
            [
                MemoryStoreResource(memory_store_id="memstore_1", access="read_only"),
                MemoryStoreResource(memory_store_id="memstore_2"),
            ],
            session_id="sesn_9",
        )
    assert (recorder.last.method, recorder.last.url.path) == ("POST", "/v1/memsync/sessions")
    assert recorder.body() == {
        "session_id": "sesn_9",
        "resources": [
            {"type": "memory_store", "memory_store_id": "memstore_1", "access": "read_only"},
            {"type": "memory_store", "memory_store_id": "memstore_2", "access": "read_write"},
        ],
    }
    assert minted.id == "sesn_9"
    assert work_secret == secret


async def test_ids_are_quoted_as_one_path_segment() -> None:
    recorder = Recorder(_shape_for)
    async with make_client(recorder) as client:
        await client.get_memory("memstore_1", "../../memory_stores")
        with pytest.raises(ValueError, match="empty"):
            await client.get_store("")
    assert recorder.last.url.raw_path.startswith(
        b"/v1/memory_stores/memstore_1/memories/..%2F..%2Fmemory_stores"
    )


@pytest.mark.parametrize(
    ("store_id", "message"),
    [
        ("..", "'.' or '..'"),
        (".", "'.' or '..'"),
        # found by the ids fuzz target: a lone surrogate raised UnicodeEncodeError (with the value in it)
        ("\ud800sk-" + "a" * 100, "lone surrogate at position 1"),
    ],
)
async def test_an_id_that_is_not_one_segment_is_refused_before_sending(store_id: str, message: str) -> None:
    """'..' quoted is still '..', and the URL's dot segments are normalised away: it would climb to
    /v1/memories. Refused, like an empty id, with a plain ValueError that does not repeat the value."""
    recorder = Recorder(_shape_for)
    async with make_client(recorder) as client:
        with pytest.raises(ValueError, match=re.escape(message)) as caught:
            await client.list_memories_page(store_id)
    assert type(caught.value) is ValueError
    assert "sk-" not in str(caught.value)
    assert recorder.requests == []


# --- pagination -----------------------------------------------------------------------------------------


async def test_list_memories_follows_next_page_until_null() -> None:
    pages = {
        None: {
            "data": [memory_json("mem_1", "/a"), {"type": "memory_prefix", "path": "/b/"}],
            "next_page": "page_2",
        },
        "page_2": {"data": [memory_json("mem_3", "/c")], "next_page": "page_3"},
        "page_3": {"data": [], "next_page": None},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return ok(pages[request.url.params.get("page")])

    recorder = Recorder(handler)
    async with make_client(recorder) as client:
        items = [i async for i in client.list_memories("memstore_1", limit=2, path_prefix="/", depth=1)]
    assert [type(i) for i in items] == [Memory, MemoryPrefix, Memory]
    assert [i.path for i in items] == ["/a", "/b/", "/c"]
    assert [r.url.params.get("page") for r in recorder.requests] == [None, "page_2", "page_3"]
    for request in recorder.requests:
        assert request.url.params["limit"] == "2"
        assert request.url.params["depth"] == "1"
        assert request.url.params["path_prefix"] == "/"


async def test_list_stores_and_versions_follow_next_page() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        page = request.url.params.get("page")
        if request.url.path.endswith("memory_versions"):
            item = version_json(f"memver_{page or 0}")
        else:
            item = store_json(f"memstore_{page or 0}")
        return ok({"data": [item], "next_page": {None: "page_a", "page_a": "page_b"}.get(page)})

    recorder = Recorder(handler)
    async with make_client(recorder) as client:
        assert [s.id async for s in client.list_stores()] == [
            "memstore_0",
            "memstore_page_a",
            "memstore_page_b",
        ]
        assert [v.id async for v in client.list_versions("memstore_1", memory_id="mem_1")] == [
            "memver_0",
            "memver_page_a",
            "memver_page_b",
        ]
        assert client.request_count == 6
    assert all(r.url.params["memory_id"] == "mem_1" for r in recorder.requests[3:])


async def test_a_cursor_that_repeats_stops_the_listing() -> None:
    recorder = Recorder(ok({"data": [store_json()], "next_page": "page_same"}))
    async with make_client(recorder) as client:
        with pytest.raises(errors.InvalidResponse, match="page cursor it had returned before"):
            [s async for s in client.list_stores()]
    assert len(recorder.requests) == 2


async def test_cursors_that_go_round_stop_the_listing() -> None:
    """Found by the client_page fuzz target: a server answering next_page 'page_c', then 'page_a', then
    'page_c' again had the walk go round for ever (only the same cursor twice in a row was caught)."""
    cursors = iter(["page_c", "page_a"] * 50)
    recorder = Recorder(lambda _: ok({"data": [], "next_page": next(cursors)}))
    async with make_client(recorder) as client:
        with pytest.raises(errors.InvalidResponse, match="page cursor it had returned before"):
            [m async for m in client.list_memories("memstore_1")]
    assert len(recorder.requests) == 3


# --- errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type", "cls"),
    [
        (400, "invalid_request_error", errors.BadRequest),
        (401, "authentication_error", errors.AuthenticationFailed),
        (403, "permission_error", errors.PermissionDenied),
        (404, "not_found_error", errors.NotFound),
        (409, "memory_precondition_failed_error", errors.PreconditionFailed),
        (409, "memory_path_conflict_error", errors.PathConflict),
        (409, "conflict_error", errors.Conflict),
        (412, "precondition_failed", errors.PreconditionFailed),
        (413, "request_too_large", errors.RequestTooLarge),
        (429, "rate_limit_error", errors.RateLimited),
        (500, "api_error", errors.ServerError),
        (504, "timeout_error", errors.ServerError),
        (529, "overloaded_error", errors.ServerError),
        (402, "billing_error", errors.StoreError),
    ],
)
async def test_error_status_maps_to_its_class_with_message_and_request_id(
    status: int, error_type: str, cls: type[errors.StoreError]
) -> None:
    recorder = Recorder(error_response(status, error_type, f"the server says {status}"))
    async with make_client(recorder, max_retries=0) as client:
        with pytest.raises(errors.StoreError) as caught:
            await client.get_store("memstore_1")
    error = caught.value
    assert type(error) is cls
    assert (error.status, error.error_type, error.message, error.request_id) == (
        status,
        error_type,
        f"the server says {status}",
        "req_42",
    )
    assert str(status) in str(error)
    assert error_type in str(error)
    assert f"the server says {status}" in str(error)
    assert error.is_refusal == (status in (400, 413))
    assert API_KEY not in str(error) + repr(error)


@pytest.mark.parametrize(
    "answer",
    [
        # found by the client_page fuzz target: a 204 (no page) whose request-id header echoed the key
        httpx.Response(204, headers={"request-id": API_KEY}),
        httpx.Response(
            403,
            json={
                "type": "error",
                "error": {"type": f"denied {API_KEY}", "message": "no"},
                "request_id": API_KEY,
            },
        ),
        httpx.Response(502, headers={"x-request-id": f"proxy/{API_KEY}"}, content=b"bad gateway"),
    ],
)
async def test_no_text_the_server_chose_carries_the_key_into_an_error(answer: httpx.Response) -> None:
    """A proxy may echo a request's headers back in any field; the error's message, type and request id are
    all scrubbed of the client's credential."""
    async with make_client(Recorder(answer), max_retries=0) as client:
        with pytest.raises(errors.StoreError) as caught:
            await client.list_memories_page("memstore_1")
    assert API_KEY not in str(caught.value) + repr(caught.value)
    assert API_KEY not in " ".join(str(a) for a in caught.value.args)


async def test_path_conflict_names_the_blocker() -> None:
    recorder = Recorder(
        error_response(
            409,
            "memory_path_conflict_error",
            "path is taken",
            conflicting_memory_id="mem_9",
            conflicting_path="/a/b",
        )
    )
    async with make_client(recorder) as client:
        with pytest.raises(errors.PathConflict) as caught:
            await client.create_memory("memstore_1", "/a/b/c", "x")
    assert caught.value.conflicting_memory_id == "mem_9"
    assert caught.value.conflicting_path == "/a/b"
    assert isinstance(caught.value, errors.Conflict)
    assert len(recorder.requests) == 1


async def test_path_conflict_with_unidentified_blocker() -> None:
    recorder = Recorder(error_response(409, "memory_path_conflict_error", "taken", conflicting_memory_id=""))
    async with make_client(recorder) as client:
        with pytest.raises(errors.PathConflict) as caught:
            await client.create_memory("memstore_1", "/a", "x")
    assert caught.value.conflicting_memory_id is None
    assert caught.value.conflicting_path is None


@pytest.mark.parametrize(
    ("response", "cls", "message"),
    [
        (
            httpx.Response(
                502, text="<html><body>Bad   gateway</body></html>", headers={"request-id": "req_h"}
            ),
            errors.ServerError,
            "<html><body>Bad gateway</body></html>",
        ),
        (httpx.Response(404), errors.NotFound, "Not Found"),
        (httpx.Response(400, json={"error": "nope"}), errors.BadRequest, '{"error":"nope"}'),
    ],
)
async def test_non_envelope_error_bodies_fall_back_gracefully(
    response: httpx.Response, cls: type[errors.StoreError], message: str
) -> None:
    recorder = Recorder(response)
    async with make_client(recorder, max_retries=0) as client:
        with pytest.raises(errors.StoreError) as caught:
            await client.get_store("memstore_1")
    assert type(caught.value) is cls
    assert caught.value.message == message
    assert (
        caught.value.error_type
        == {502: "api_error", 404: "not_found_error", 400: "invalid_request_error"}[response.status_code]
    )
    if response.status_code == 502:
        assert caught.value.request_id == "req_h"


async def test_a_message_that_echoes_the_credential_is_scrubbed() -> None:
    recorder = Recorder(error_response(401, "authentication_error", f"bad key {API_KEY}"))
    async with make_client(recorder) as client:
        with pytest.raises(errors.AuthenticationFailed) as caught:
            await client.get_store("memstore_1")
    text = str(caught.value) + repr(caught.value) + repr(caught.value.args)
    assert API_KEY not in text
    assert "<redacted>" in text


async def test_a_2xx_body_that_is_not_the_object_is_invalid_response() -> None:
    recorder = Recorder(httpx.Response(200, text="<html>captive portal</html>"))
    async with make_client(recorder) as client:
        with pytest.raises(errors.InvalidResponse, match="MemoryStore"):
            await client.get_store("memstore_1")
    recorder = Recorder(ok({"session": session_json()}))
    async with make_client(recorder) as client:
        with pytest.raises(errors.InvalidResponse, match="minted session"):
            await client.mint_session([])
