"""The store server's /metrics (requests by route template and status, latency histograms, the database
pool) and its access log (one structured line per request, never a credential)."""

from __future__ import annotations

import re
import time

import pytest

from conftest import RunningStoreServer, StoreApi

pytestmark = pytest.mark.both_backends

LISTING = "/v1/memory_stores/{store_id}/memories"


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the Prometheus text; 0 when absent."""
    for line in text.splitlines():
        match = re.fullmatch(re.escape(name) + r"\{(.*)\} (\S+)", line)
        if match is None:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match.group(2))
    return 0.0


def _wait_for_log(store_server: RunningStoreServer, marker: str) -> None:
    """Until the server's log holds ``marker`` (its access-log line is written after the response)."""
    deadline = time.monotonic() + 10
    while marker not in store_server.log_text():
        assert time.monotonic() < deadline, f"no access-log line with {marker}"
        time.sleep(0.05)


def test_metrics_count_requests_by_route_and_status(
    store_api: StoreApi, store_server: RunningStoreServer
) -> None:
    before = store_api.anon("GET", "/metrics").text
    store = store_api.new_store()
    store_api.create(store, "/a.md", "alpha")
    etag = store_api.admin("GET", f"/v1/memory_stores/{store}/memories").headers["etag"]
    for _ in range(3):
        resp = store_api.admin("GET", f"/v1/memory_stores/{store}/memories", headers={"if-none-match": etag})
        assert resp.status_code == 304
    assert store_api.anon("GET", f"/v1/memory_stores/{store}").status_code == 401
    after = store_api.anon("GET", "/metrics")
    assert after.status_code == 200 and after.headers["content-type"].startswith("text/plain")
    text = after.text

    def delta(name: str, **labels: str) -> float:
        return _sample(text, name, **labels) - _sample(before, name, **labels)

    assert delta("memsync_store_requests_total", route=LISTING, method="GET", status="304") == 3
    assert delta("memsync_store_requests_total", route=LISTING, method="GET", status="200") == 1
    assert delta("memsync_store_requests_total", route="/v1/memory_stores/{store_id}", status="401") == 1
    assert delta("memsync_store_request_duration_seconds_count", route=LISTING, method="GET") == 4
    assert store.encode() not in after.content  # route templates, never ids
    if store_server.backend == "postgresql":
        assert _sample(text, "memsync_store_db_pool_connections", state="max") >= 1


def test_access_log_has_one_line_per_request_and_no_secret(
    store_api: StoreApi, store_server: RunningStoreServer
) -> None:
    store = store_api.new_store()
    token = store_api.session_token([(store, "read_write")])
    marker = f"/v1/memory_stores/{store}/memories"
    assert store_api.bearer(token, "GET", marker, params={"path_prefix": "/secret-ish/"}).status_code == 200
    _wait_for_log(store_server, marker)
    lines = [line for line in store_server.log_text().splitlines() if f"path={marker}" in line]
    assert len(lines) == 1, lines
    line = lines[0]
    assert f"route={LISTING}" in line and "status=200" in line and "method=GET" in line
    assert re.search(r"request_id=req_[0-9a-f]{24}", line) and "duration_ms=" in line
    log = store_server.log_text()
    assert token not in log and store_server.admin_key not in log
    assert "secret-ish" not in line  # no query string


def test_a_credential_pasted_as_an_id_never_reaches_the_access_log(
    store_api: StoreApi, store_server: RunningStoreServer
) -> None:
    """The sessions token given as a store id: the server answers, and logs the path redacted."""
    store = store_api.new_store()
    token = store_api.session_token([(store, "read_write")])
    mistaken = f"/v1/memory_stores/{token}/memories"
    response = store_api.bearer(token, "GET", mistaken, params={"page": token, "path_prefix": "/a/"})
    assert response.status_code in (400, 403, 404)  # the page cursor or the store is refused
    _wait_for_log(store_server, "path=/v1/memory_stores/[redacted]/memories")
    log = store_server.log_text()
    assert token not in log and token.removeprefix("sk-ant-req-") not in log
