"""Retries: the pure decision (memsync.client.retry) and the client's loop over a scripted transport."""

from __future__ import annotations

import email.utils
import logging
import socket
from typing import Any

import httpx
import pytest
from test_client import API_KEY, FakeSleep, Recorder, error_response, make_client, store_json

from memsync.client import errors
from memsync.client.retry import backoff_delay, retry_delay, server_delay, should_retry

NOW = 1_800_000_000.0


# --- the pure decision ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, True),
        (408, True),
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (529, True),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (409, False),
        (412, False),
        (413, False),
    ],
)
def test_which_outcomes_are_retried(status: int | None, expected: bool) -> None:
    assert should_retry(status, {}) is expected


@pytest.mark.parametrize("status", [409, 400, 200, None])
def test_x_should_retry_true_overrides(status: int | None) -> None:
    assert should_retry(status, {"x-should-retry": "true"}) is True


@pytest.mark.parametrize("status", [500, 503, 429, 408, None])
def test_x_should_retry_false_overrides(status: int | None) -> None:
    assert should_retry(status, {"X-Should-Retry": "false"}) is False


def test_unknown_x_should_retry_value_is_ignored() -> None:
    assert should_retry(503, {"x-should-retry": "maybe"}) is True
    assert should_retry(409, {"x-should-retry": "maybe"}) is False


def test_backoff_doubles_from_half_a_second_capped_at_eight_with_up_to_25_percent_jitter() -> None:
    assert [backoff_delay(i, jitter=0.0) for i in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert backoff_delay(0, jitter=1.0) == pytest.approx(0.375)
    assert backoff_delay(10, jitter=0.5) == pytest.approx(7.0)
    assert backoff_delay(10_000, jitter=0.0) == 8.0


def test_retry_after_ms_wins_over_retry_after() -> None:
    assert server_delay({"retry-after-ms": "250", "retry-after": "7"}, now=NOW) == pytest.approx(0.25)


def test_retry_after_seconds_and_http_date() -> None:
    assert server_delay({"retry-after": "3"}, now=NOW) == 3.0
    assert server_delay({"retry-after": "1.5"}, now=NOW) == 1.5
    date = email.utils.formatdate(NOW + 4, usegmt=True)
    assert server_delay({"retry-after": date}, now=NOW) == pytest.approx(4.0)
    past = email.utils.formatdate(NOW - 100, usegmt=True)
    assert server_delay({"retry-after": past}, now=NOW) == 0.0


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"retry-after": "soon"},
        {"retry-after-ms": "-5"},
        {"retry-after": "3600"},
        {"retry-after-ms": "nan"},
        {"retry-after-ms": "inf"},
    ],
)
def test_unusable_server_delays_fall_back_to_backoff(headers: dict[str, str]) -> None:
    assert server_delay(headers, now=NOW) is None
    assert retry_delay(503, headers, 1, 2, now=NOW, jitter=0.0) == 1.0


def test_budget_is_bounded() -> None:
    assert retry_delay(503, {}, 0, 2, now=NOW, jitter=0.0) == 0.5
    assert retry_delay(503, {}, 1, 2, now=NOW, jitter=0.0) == 1.0
    assert retry_delay(503, {}, 2, 2, now=NOW, jitter=0.0) is None
    assert retry_delay(503, {}, 0, 0, now=NOW, jitter=0.0) is None
    assert retry_delay(409, {}, 0, 2, now=NOW, jitter=0.0) is None
    assert retry_delay(None, {}, 0, 2, now=NOW, jitter=0.0) == 0.5
    assert retry_delay(429, {"retry-after-ms": "20"}, 0, 2, now=NOW, jitter=0.0) == pytest.approx(0.02)


# --- the client's retry loop ----------------------------------------------------------------------------


def ok_store() -> httpx.Response:
    return httpx.Response(200, json=store_json())


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(408, "timeout_error"), (429, "rate_limit_error"), (500, "api_error"), (503, "overloaded_error")],
)
async def test_transient_status_is_retried_then_succeeds(status: int, error_type: str) -> None:
    recorder = Recorder(error_response(status, error_type, "try later"), ok_store())
    sleep = FakeSleep()
    async with make_client(recorder, sleep=sleep) as client:
        store = await client.get_store("memstore_1")
        assert client.request_count == 2
    assert store.id == "memstore_1"
    assert len(recorder.requests) == 2
    assert len(sleep.delays) == 1
    assert 0.375 <= sleep.delays[0] <= 0.5
    # the retry is the same request again
    assert recorder.requests[0].url == recorder.requests[1].url
    assert recorder.requests[1].headers["x-api-key"] == API_KEY


async def test_connection_error_is_retried() -> None:
    recorder = Recorder(httpx.ConnectError("connection refused"), httpx.ReadTimeout("slow"), ok_store())
    sleep = FakeSleep()
    async with make_client(recorder, sleep=sleep) as client:
        await client.get_store("memstore_1")
        assert client.request_count == 3
    assert len(sleep.delays) == 2
    assert 0.375 <= sleep.delays[0] <= 0.5
    assert 0.75 <= sleep.delays[1] <= 1.0


async def test_retry_after_ms_and_retry_after_are_honoured() -> None:
    recorder = Recorder(
        httpx.Response(429, headers={"retry-after-ms": "1234", "retry-after": "9"}),
        httpx.Response(503, headers={"retry-after": "2"}),
        ok_store(),
    )
    sleep = FakeSleep()
    async with make_client(recorder, sleep=sleep) as client:
        await client.get_store("memstore_1")
    assert len(sleep.delays) == 2
    assert 1.234 <= sleep.delays[0] <= 1.234 * 1.5
    assert 2.0 <= sleep.delays[1] <= 3.0


def test_a_server_given_delay_is_a_floor_spread_by_jitter() -> None:
    assert retry_delay(503, {"retry-after": "1"}, 0, 2, now=NOW, jitter=0.0) == 1.0
    assert retry_delay(503, {"retry-after": "1"}, 0, 2, now=NOW, jitter=0.5) == 1.25
    assert retry_delay(429, {"retry-after": "2"}, 1, 2, now=NOW, jitter=0.999) == pytest.approx(2.999)
    assert retry_delay(429, {"retry-after": "50"}, 0, 2, now=NOW, jitter=0.9) == 60.0  # never past the cap
    assert retry_delay(429, {"retry-after": "1"}, 2, 2, now=NOW, jitter=0.5) is None  # the budget still holds


async def test_a_shed_burst_comes_back_spread_out() -> None:
    """Twenty callers refused together with ``Retry-After: 1`` do not all retry in the same instant."""
    delays: list[float] = []
    for _ in range(20):
        recorder = Recorder(httpx.Response(503, headers={"retry-after": "1"}), ok_store())
        sleep = FakeSleep()
        async with make_client(recorder, sleep=sleep) as client:
            await client.get_store("memstore_1")
        delays += sleep.delays
    assert len(delays) == 20 and all(1.0 <= d <= 1.5 for d in delays)
    assert max(delays) - min(delays) > 0.1


@pytest.mark.parametrize(
    ("status", "error_type", "cls"),
    [
        (409, "memory_precondition_failed_error", errors.PreconditionFailed),
        (409, "memory_path_conflict_error", errors.PathConflict),
        (400, "invalid_request_error", errors.BadRequest),
        (404, "not_found_error", errors.NotFound),
    ],
)
async def test_answers_about_the_data_are_never_retried(
    status: int, error_type: str, cls: type[errors.StoreError]
) -> None:
    recorder = Recorder(error_response(status, error_type, "no"), ok_store())
    sleep = FakeSleep()
    async with make_client(recorder, sleep=sleep) as client:
        with pytest.raises(cls):
            await client.update_memory("memstore_1", "mem_1", content="x", expected_sha256="b" * 64)
        assert client.request_count == 1
    assert sleep.delays == []


async def test_x_should_retry_overrides_in_both_directions() -> None:
    recorder = Recorder(
        httpx.Response(
            409,
            headers={"x-should-retry": "true"},
            json={"type": "error", "error": {"type": "conflict_error", "message": "busy"}},
        ),
        ok_store(),
    )
    async with make_client(recorder) as client:
        await client.get_store("memstore_1")
        assert client.request_count == 2

    recorder = Recorder(httpx.Response(503, headers={"x-should-retry": "false"}), ok_store())
    async with make_client(recorder) as client:
        with pytest.raises(errors.ServerError):
            await client.get_store("memstore_1")
        assert client.request_count == 1


@pytest.mark.parametrize("max_retries", [0, 1, 3])
async def test_exhausted_budget_raises_the_last_error(max_retries: int) -> None:
    recorder = Recorder(error_response(500, "api_error", "still broken"))
    sleep = FakeSleep()
    async with make_client(recorder, sleep=sleep, max_retries=max_retries) as client:
        with pytest.raises(errors.ServerError, match="still broken") as caught:
            await client.get_store("memstore_1")
        assert client.request_count == max_retries + 1
    assert caught.value.request_id == "req_42"
    assert len(sleep.delays) == max_retries
    assert all(0.375 * 2**i <= d <= 0.5 * 2**i for i, d in enumerate(sleep.delays))


async def test_exhausted_budget_on_connection_errors_is_a_transport_error_without_credentials() -> None:
    recorder = Recorder(httpx.ConnectError(f"refused while sending {API_KEY}"))
    async with make_client(recorder) as client:
        with pytest.raises(errors.TransportError) as caught:
            await client.get_store("memstore_1")
        assert client.request_count == 3
    error = caught.value
    assert error.status == 0
    assert error.error_type == "connection_error"
    assert "/v1/memory_stores/memstore_1" in str(error)
    assert "3 attempt(s)" in str(error)
    assert API_KEY not in str(error) + repr(error)


async def test_timeouts_are_reported_as_timeouts() -> None:
    recorder = Recorder(httpx.ReadTimeout("timed out"))
    async with make_client(recorder, max_retries=1) as client:
        with pytest.raises(errors.TransportError) as caught:
            await client.get_store("memstore_1")
    assert caught.value.error_type == "timeout"


async def test_a_non_transient_transport_failure_is_not_retried() -> None:
    recorder = Recorder(httpx.UnsupportedProtocol("no"))
    async with make_client(recorder) as client:
        with pytest.raises(errors.TransportError, match="UnsupportedProtocol"):
            await client.get_store("memstore_1")
        assert client.request_count == 1


async def test_request_count_counts_attempts_across_calls() -> None:
    recorder = Recorder(httpx.Response(503), ok_store(), ok_store())
    kw: dict[str, Any] = {}
    async with make_client(recorder, **kw) as client:
        await client.get_store("memstore_1")
        await client.get_store("memstore_1")
        assert client.request_count == 3


# --- what a failed or retried call tells ----------------------------------------------------------------


def _dns_failure() -> httpx.ConnectError:
    exc = httpx.ConnectError("[Errno -2] Name or service not known")
    exc.__cause__ = socket.gaierror(-2, "Name or service not known")
    return exc


async def test_a_host_that_does_not_resolve_is_not_retried() -> None:
    recorder = Recorder(_dns_failure(), ok_store())
    sleep = FakeSleep()
    async with make_client(recorder, sleep=sleep) as client:
        with pytest.raises(errors.TransportError, match="Name or service not known"):
            await client.get_store("memstore_1")
        assert client.request_count == 1
    assert sleep.delays == []


async def test_a_transport_error_names_the_method_and_the_full_url_never_the_credential() -> None:
    recorder = Recorder(httpx.ConnectError("All connection attempts failed"))
    async with make_client(recorder, max_retries=0, base_url="https://user:pw@store.example:8443/") as client:
        with pytest.raises(errors.TransportError) as caught:
            await client.get_store("memstore_1")
    text = str(caught.value)
    assert "GET https://store.example:8443/v1/memory_stores/memstore_1?beta=true: All connection" in text
    assert API_KEY not in text + repr(caught.value)
    assert "pw" not in text


async def test_each_retry_is_logged_once_at_info_with_the_delay_rounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = Recorder(httpx.Response(503), httpx.ConnectError("refused"), ok_store())
    caplog.set_level(logging.INFO, logger="memsync.client")
    async with make_client(recorder) as client:
        await client.get_store("memstore_1")
    retries = [r for r in caplog.records if r.name == "memsync.client" and "retrying" in r.getMessage()]
    assert [r.levelno for r in retries] == [logging.INFO, logging.INFO]
    assert [getattr(r, "status", None) for r in retries] == [503, None]
    assert getattr(retries[1], "error", None) == "ConnectError"
    for record in retries:
        delay = record.delay_s  # type: ignore[attr-defined]
        assert delay == round(delay, 3)
