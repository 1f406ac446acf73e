"""Overload is an answer, not a queue: a real store server with a tiny in-flight bound, held full by
requests whose bodies are still arriving, answers 503 (process) or 429 (credential) at once with
``Retry-After``; ``/healthz`` and ``/metrics`` still answer; the shed counter moves; the held requests and the
queued one are served once their bodies arrive."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from test_server_observe import _sample

from conftest import API_HEADERS, RunningStoreServer, StoreApi, launch_store_server
from support.overload import SlowUpload, wait_in_flight


@pytest.fixture
def tiny_server(tmp_path: Path) -> Iterator[RunningStoreServer]:
    server = launch_store_server(
        tmp_path / "srv",
        ("--max-in-flight", "2", "--max-queued", "1", "--max-in-flight-per-credential", "1"),
    )
    try:
        yield server
    finally:
        server.stop()


def test_a_full_server_sheds_with_retry_after_and_health_still_answers(
    tiny_server: RunningStoreServer,
) -> None:
    api = StoreApi(tiny_server)
    try:
        store = api.new_store()
        token_a = api.session_token([(store, "read_write")])
        token_b = api.session_token([(store, "read_write")])
        token_c = api.session_token([(store, "read_write")])
        path = f"/v1/memory_stores/{store}/memories"
        admin = ("x-api-key", tiny_server.admin_key)
        before = api.anon("GET", "/metrics").text

        held = [
            SlowUpload(tiny_server, path, admin, "held0"),
            SlowUpload(tiny_server, path, ("authorization", f"Bearer {token_a}"), "held1"),
        ]
        wait_in_flight(api, 2)
        # the server is full and the admin key holds its share while another caller holds the other slot:
        # 429 for it at once, rather than a place in the queue
        noisy = api.admin("GET", path)
        assert noisy.status_code == 429, noisy.text
        assert noisy.headers["retry-after"] == "1"
        assert noisy.json()["error"]["type"] == "rate_limit_error" and noisy.headers["request-id"]
        # another caller waits in the one queue place; the next one is refused with 503
        queued = SlowUpload(tiny_server, path, ("authorization", f"Bearer {token_b}"), "queued")
        wait_in_flight(api, 2, queued=1)
        shed = api.bearer(token_c, "GET", path)
        assert shed.status_code == 503, shed.text
        assert shed.headers["retry-after"] == "1" and shed.json()["error"]["type"] == "overloaded_error"
        assert api.anon("GET", "/healthz").status_code == 200
        after = api.anon("GET", "/metrics").text
        for reason in ("overload", "credential"):
            delta = _sample(after, "memsync_store_requests_shed_total", reason=reason) - _sample(
                before, "memsync_store_requests_shed_total", reason=reason
            )
            assert delta == 1, (reason, delta)
        log = tiny_server.log_text()
        assert all(t not in log for t in (token_a, token_b, token_c, tiny_server.admin_key))

        assert [upload.finish() for upload in (*held, queued)] == [200, 200, 200]
        assert sorted(api.paths(store)) == ["/held0.md", "/held1.md", "/queued.md"]
        wait_in_flight(api, 0)
        with httpx.Client(base_url=tiny_server.url, headers=API_HEADERS) as fresh:
            assert fresh.get(path, params={"beta": "true"}, headers=dict([admin])).status_code == 200
    finally:
        api.close()
