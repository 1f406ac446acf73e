"""Which requests the conditional-probe fast path takes (the rest go through the router unchanged)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import parse_qsl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.server.access import CredentialCache, Principal
from memsync.server.errors import unauthenticated
from memsync.server.http.probe import ProbeAnswers, ProbeMiddleware, probe_request, query_params
from memsync.server.storage.database import WouldWait

PATH = "/v1/memory_stores/memstore_1/memories"


def scope(
    *, method: str = "GET", path: str = PATH, query: bytes = b"beta=true&limit=1", headers: Any = None
) -> dict[str, Any]:
    if headers is None:
        headers = [(b"authorization", b"Bearer tok"), (b"if-none-match", b'W/"abc"')]
    return {"type": "http", "method": method, "path": path, "query_string": query, "headers": headers}


def test_the_sidecars_probe_is_taken() -> None:
    assert probe_request(scope()) == ("memstore_1", None, 1, 'W/"abc"', None, "Bearer tok", False)
    admin = [(b"x-api-key", b"sk-admin"), (b"if-none-match", b"*")]
    assert probe_request(scope(query=b"", headers=admin)) == (
        "memstore_1",
        None,
        None,
        "*",
        "sk-admin",
        None,
        False,
    )
    # what the store client's probe sends (memsync.client: view=basic, limit=1)
    sidecar = scope(query=b"view=basic&limit=1&beta=true")
    assert probe_request(sidecar) == ("memstore_1", "basic", 1, 'W/"abc"', None, "Bearer tok", False)
    assert probe_request(scope(query=b"view=full")) == (
        "memstore_1",
        "full",
        None,
        'W/"abc"',
        None,
        "Bearer tok",
        False,
    )


@pytest.mark.parametrize("header", [b"x-forwarded-for", b"x-forwarded-proto"])
def test_a_probe_through_a_proxy_says_so(header: bytes) -> None:
    proxied = scope(headers=[(b"if-none-match", b'W/"abc"'), (header, b"10.0.0.1")])
    found = probe_request(proxied)
    assert found is not None and found.forwarded


@pytest.mark.parametrize(
    "changed",
    [
        {"method": "POST"},
        {"path": "/v1/memory_stores/memstore_1/memories/mem_1"},
        {"path": "/v1/memory_stores/a%2Fb/memories"},
        {"headers": [(b"authorization", b"Bearer tok")]},  # not conditional
        {"headers": [(b"if-none-match", b"a"), (b"if-none-match", b"b")]},  # repeated header
        {"query": b"beta=true&limit=1&path_prefix=/a/"},
        {"query": b"limit=1&limit=2"},
        {"query": b"limit=-1"},
        {"query": b"limit=abc"},
        {"query": b"limit=99999999"},
        {"query": b"view=everything"},
        {"query": b"view=basic&view=full"},
        {"query": b"page=abc"},
    ],
)
def test_anything_else_goes_the_ordinary_way(changed: dict[str, Any]) -> None:
    assert probe_request(scope(**changed)) is None


@given(st.lists(st.sampled_from(["view", "limit", "beta", "=", "&", "%41", "%", "+", "1", "a", ";", " "])))
def test_the_query_reads_as_parse_qsl_reads_it(parts: list[str]) -> None:
    text = "".join(parts)
    pairs = parse_qsl(text, keep_blank_values=True)
    names = [name for name, _ in pairs]
    expected = dict(pairs) if len(set(names)) == len(names) else None  # a repeated name: no probe
    assert query_params(text.encode("latin-1")) == expected


class SlowAccess:
    """Credentials looked up in the threadpool, each lookup held until ``release`` is set."""

    def __init__(self, answer: Exception | None = None) -> None:
        self.lookups = 0
        self.release = threading.Event()
        self.answered_while_held = 0
        self.cache = SimpleNamespace(generation=0)  # moved by a revocation in this process
        self.answer = answer

    def cached_and_due(
        self, x_api_key: str | None, authorization: str | None
    ) -> tuple[Principal | None, bool]:
        return None, False

    def authenticate_now(self, x_api_key: str | None, authorization: str | None) -> Principal:
        raise WouldWait("not remembered")  # PostgreSQL: a credential read needs a round trip

    def authenticate(self, x_api_key: str | None, authorization: str | None) -> Principal:
        self.lookups += 1
        assert self.release.wait(10)
        if self.answer is not None:
            raise self.answer
        return Principal("session_actor", "sesn_1")


class Unchanged:
    db = SimpleNamespace(reads_without_waiting=True, read_now_runs_statements=False)  # PostgreSQL

    def first_page_unchanged(self, p: Principal, store_id: str, **_: Any) -> str:
        assert p.actor_id == "sesn_1"
        return 'W/"abc"'


def answers_over(access: SlowAccess) -> ProbeAnswers:
    return ProbeAnswers(
        route=cast(Any, None), service=cast(Any, Unchanged()), access=cast(Any, access), access_logs=False
    )


def probe_all(access: SlowAccess, n: int) -> list[int]:
    """``n`` probes with one credential at once through the middleware; the status each got."""
    app = ProbeMiddleware(cast(Any, None), answers=answers_over(access))

    async def one() -> int:
        sent: list[dict[str, Any]] = []

        async def send(message: Any) -> None:
            sent.append(message)

        async def receive() -> Any:
            return {"type": "http.request", "body": b""}

        await app(scope(), receive, send)
        return int(sent[0]["status"])

    async def run() -> list[int]:
        probes = [asyncio.ensure_future(one()) for _ in range(n)]
        await asyncio.sleep(0.2)  # all of them arrived while the first lookup is held
        access.answered_while_held = sum(p.done() for p in probes)
        access.release.set()
        return await asyncio.gather(*probes)

    return asyncio.run(run())


def test_a_credential_not_cached_is_looked_up_once_for_the_probes_that_carry_it_meanwhile() -> None:
    access = SlowAccess()
    assert probe_all(access, 20) == [304] * 20
    assert access.lookups == 1 and access.answered_while_held == 0  # all waited for the one lookup


def test_a_refused_credential_is_every_waiting_probes_answer_and_is_not_kept() -> None:
    access = SlowAccess(unauthenticated("invalid bearer token"))
    assert probe_all(access, 5) == [401] * 5
    assert access.lookups == 1
    access.answer = None
    assert probe_all(access, 3) == [304] * 3  # the next probes look it up again
    assert access.lookups == 2


def test_a_cached_answer_is_due_again_halfway_through_its_time_and_served_until_it_ends() -> None:
    cache = CredentialCache(ttl_s=2.0)
    principal = Principal("session_actor", "sesn_1")
    cache.put("d", principal, valid_until=2.0, generation=cache.generation, now=0.0)
    assert [cache.lookup("d", t)[1] for t in (0.0, 0.9, 1.0, 1.9, 2.0)] == [False, False, True, True, False]
    assert cache.get("d", 1.9) is principal and cache.get("d", 2.0) is None
    assert not cache.lookup("unknown", 1.0)[1]


class CachedAccess(SlowAccess):
    """A credential cached and due again: every probe is answered from the cache, one refresh runs."""

    def __init__(self) -> None:
        super().__init__()
        self.refreshes = 0

    def cached_and_due(
        self, x_api_key: str | None, authorization: str | None
    ) -> tuple[Principal | None, bool]:
        return Principal("session_actor", "sesn_1"), True

    def refresh(self, x_api_key: str | None, authorization: str | None) -> None:
        self.refreshes += 1
        assert self.release.wait(10)


def test_a_credential_due_again_is_read_once_in_the_background_while_its_probes_are_answered() -> None:
    access = CachedAccess()
    assert probe_all(access, 20) == [304] * 20
    assert access.answered_while_held == 20  # none waited for the refresh
    assert access.refreshes == 1 and access.lookups == 0


def test_a_probe_after_a_revocation_does_not_join_a_lookup_begun_before_it() -> None:
    access = SlowAccess()
    app = answers_over(access)

    async def run() -> None:
        first = asyncio.ensure_future(app.authenticate_once(None, "Bearer tok"))
        await asyncio.sleep(0.1)
        joined = asyncio.ensure_future(app.authenticate_once(None, "Bearer tok"))
        await asyncio.sleep(0.1)
        assert access.lookups == 1  # the second joined the first
        access.cache.generation += 1  # a revocation committed here meanwhile
        after = asyncio.ensure_future(app.authenticate_once(None, "Bearer tok"))
        await asyncio.sleep(0.1)
        assert access.lookups == 2  # its own lookup, begun after the revocation
        access.release.set()
        await asyncio.gather(first, joined, after)
        assert app._lookups == {}

    asyncio.run(run())


class ChangedPage:
    """A store whose page changed: the 304 is never at hand, the listing is read in the threadpool."""

    db = SimpleNamespace(reads_without_waiting=True, read_now_runs_statements=False)

    def __init__(self) -> None:
        self.asked_unchanged = 0
        self.listed: list[Principal] = []

    def first_page_unchanged(self, p: Principal, store_id: str, **_: Any) -> None:
        self.asked_unchanged += 1

    def list_memories(self, p: Principal, store_id: str, **_: Any) -> tuple[dict[str, Any], str]:
        self.listed.append(p)
        return {"data": [], "next_page": None}, 'W/"new"'


class KnownCaller:
    def __init__(self) -> None:
        self.asked = 0

    def cached_and_due(
        self, x_api_key: str | None, authorization: str | None
    ) -> tuple[Principal | None, bool]:
        self.asked += 1
        return Principal("session_actor", "sesn_1"), False


def test_what_the_protocol_found_out_about_a_probe_is_not_asked_again_by_the_middleware() -> None:
    access, service = KnownCaller(), ChangedPage()
    answers = ProbeAnswers(
        route=cast(Any, None), service=cast(Any, service), access=cast(Any, access), access_logs=False
    )
    request = scope()
    assert answers.answer_now(request, []) is None  # the page changed: the app answers it
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    asyncio.run(ProbeMiddleware(cast(Any, None), answers=answers)(request, receive, send))
    assert sent[0]["status"] == 200 and (b"etag", b'W/"new"') in sent[0]["headers"]
    assert access.asked == 1 and service.asked_unchanged == 1  # once each, by the protocol
    assert service.listed == [Principal("session_actor", "sesn_1")]


def test_a_request_the_protocol_found_no_probe_goes_to_the_app() -> None:
    answers = ProbeAnswers(
        route=cast(Any, None),
        service=cast(Any, ChangedPage()),
        access=cast(Any, KnownCaller()),
        access_logs=False,
    )
    request = scope(query=b"limit=1&path_prefix=/a/")
    assert answers.answer_now(request, []) is None
    reached: list[dict[str, Any]] = []

    async def app(s: Any, receive: Any, send: Any) -> None:
        reached.append(s)

    async def nothing() -> Any:
        raise AssertionError("not read")

    asyncio.run(ProbeMiddleware(app, answers=answers)(request, nothing, cast(Any, nothing)))
    assert reached == [request]
