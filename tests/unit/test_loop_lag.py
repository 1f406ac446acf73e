"""The lag refusal's decision and its bytes: refused only past a positive bound, under a sustained load,
while refusing has taken the loop no longer than serving, never the health and metrics endpoints; the answer
is a complete HTTP/1.1 503 in the API's error envelope. When an overload stands, and when it ends."""

from __future__ import annotations

import json

import pytest

from memsync.server.http.admission import DEFAULT_RETRY_AFTER_S
from memsync.server.http.loop_lag import (
    STANDING_EXIT_S,
    STANDING_S,
    TICK_S,
    Standing,
    refusal,
    refuses,
    unparsed_path,
)

MEMORIES = "/v1/memory_stores/s/memories"


@pytest.mark.parametrize(
    ("path", "behind_s", "bound_s", "sustained", "refusing_s", "serving_s", "refused"),
    [
        (MEMORIES, 0.06, 0.05, True, 0.0, 0.0, True),
        (MEMORIES, 0.05, 0.05, True, 0.0, 0.0, False),  # at the bound: still served
        (MEMORIES, -0.01, 0.05, True, 0.0, 0.0, False),
        (MEMORIES, 0.5, 0.05, False, 0.0, 0.0, False),  # late once, not busy for long: no overload
        (MEMORIES, 5.0, 0.0, True, 0.0, 0.0, False),  # 0: the bound is off
        (MEMORIES, 0.06, 0.05, True, 0.002, 0.002, True),  # refusing as long as serving: may refuse
        (MEMORIES, 0.06, 0.05, True, 0.003, 0.002, False),  # refusing longer: this one is served
        ("/healthz", 5.0, 0.05, True, 0.0, 0.0, False),
        ("/readyz", 5.0, 0.05, True, 0.0, 0.0, False),
        ("/metrics", 5.0, 0.05, True, 0.0, 0.0, False),
    ],
)
def test_refuses(  # noqa: PLR0917 (the parametrized cases' columns)
    path: str,
    behind_s: float,
    bound_s: float,
    sustained: bool,
    refusing_s: float,
    serving_s: float,
    refused: bool,
) -> None:
    got = refuses(path, behind_s, bound_s, sustained=sustained, refusing_s=refusing_s, serving_s=serving_s)
    assert got is refused


@pytest.mark.parametrize("keep_alive", [True, False])
def test_refusal_is_a_whole_503_in_the_envelope(keep_alive: bool) -> None:
    raw = refusal([(b"server", b"uvicorn")], keep_alive=keep_alive)
    head, body = raw.split(b"\r\n\r\n", 1)
    status, *lines = head.decode("ascii").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    assert status == "HTTP/1.1 503 Service Unavailable"
    assert headers["server"] == "uvicorn"
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)
    assert headers["retry-after"] == "1"
    assert ("connection" in headers) is not keep_alive
    envelope = json.loads(body)
    assert envelope["type"] == "error"
    assert envelope["error"]["type"] == "overloaded_error"
    assert envelope["request_id"] == headers["request-id"]
    assert refusal([], keep_alive=True) != refusal([], keep_alive=True)  # a request id of its own each time


def test_the_refusal_follows_the_servers_default_headers() -> None:
    """The answer is kept between refusals, but built again for a new list of default headers (uvicorn makes
    one each second, for its date)."""
    before = refusal([(b"date", b"Sun, 06 Dec 2026 18:00:00 GMT")], keep_alive=True)
    after = refusal([(b"date", b"Sun, 06 Dec 2026 18:00:01 GMT")], keep_alive=True)
    assert b"\r\ndate: Sun, 06 Dec 2026 18:00:00 GMT\r\n" in before
    assert b"\r\ndate: Sun, 06 Dec 2026 18:00:01 GMT\r\n" in after
    assert b"connection: close" in refusal([], keep_alive=False)
    assert b"connection: close" not in refusal([], keep_alive=True)


PROBE = b"GET /v1/memory_stores/s/memories?beta=true&view=basic&limit=1 HTTP/1.1\r\nhost: a\r\n"


@pytest.mark.parametrize(
    ("data", "path"),
    [
        (PROBE + b"\r\n", "/v1/memory_stores/s/memories"),
        (PROBE + b'Connection: keep-alive\r\nif-none-match: "e"\r\n\r\n', "/v1/memory_stores/s/memories"),
        (b"GET /healthz HTTP/1.1\r\n\r\n", "/healthz"),  # a path; whether it is refused is refuses()'s call
        (PROBE, None),  # not whole yet
        (PROBE + b"\r\nGET / HTTP/1.1\r\n\r\n", None),  # pipelined: parsed and judged one by one
        (PROBE + b"\r\nx", None),
        (PROBE + b"connection: close\r\n\r\n", None),
        (PROBE + b"Connection: Upgrade\r\nupgrade: websocket\r\n\r\n", None),
        (PROBE + b"content-length: 0\r\n\r\n", None),
        (PROBE + b"Transfer-Encoding: chunked\r\n\r\n", None),
        (PROBE + b"expect: 100-continue\r\n\r\n", None),
        (PROBE.replace(b"GET ", b"HEAD ") + b"\r\n", None),
        (PROBE.replace(b"GET ", b"POST ") + b"\r\n", None),
        (PROBE.replace(b"HTTP/1.1", b"HTTP/1.0") + b"\r\n", None),
        (b"GET /v1/memory_stores/%2E%2E HTTP/1.1\r\n\r\n", None),  # escapes: parsed the ordinary way
        (b"GET http://a/v1/memory_stores HTTP/1.1\r\n\r\n", None),  # absolute form
    ],
)
def test_only_one_whole_bare_get_is_refused_unparsed(data: bytes, path: str | None) -> None:
    assert unparsed_path(data) == path


class Ticks:
    """A loop's ticks, each due ``TICK_S`` after the last ran and run ``late_s`` past that."""

    def __init__(self, standing: Standing) -> None:
        self.standing, self.now = standing, 0.0

    def run(self, late_s: float, seconds: float, *, refused: bool = False) -> bool:
        end = self.now + seconds
        while self.now < end:
            self.now += TICK_S + max(0.0, late_s)
            self.standing.tick(self.now, late_s, refused=refused)
        return self.standing.on


def test_a_loop_late_for_an_interval_is_a_standing_overload_and_its_bound_a_tenth() -> None:
    standing = Standing(0.05)
    ticks = Ticks(standing)
    assert not ticks.run(0.0, 1.0) and standing.bound == 0.05
    assert not ticks.run(0.03, STANDING_S / 2)  # late, not yet for long
    assert ticks.run(0.03, STANDING_S)
    assert standing.bound == pytest.approx(0.005)


def test_lateness_within_half_the_bound_is_ordinary_concurrency_however_long_it_lasts() -> None:
    ticks = Ticks(Standing(0.05))
    assert not ticks.run(0.02, 5.0)  # a loop with 20 ms of work a turn: every request served in time
    assert not ticks.run(0.03, STANDING_S / 2)
    assert not ticks.run(0.0, 0.0001)  # one tick on time: the count starts again
    assert not ticks.run(0.03, STANDING_S / 2)


def test_one_long_moment_is_no_standing_overload() -> None:
    ticks = Ticks(Standing(0.05))
    assert not ticks.run(3 * STANDING_S, 0.0001)  # a collection, a stall: one tick very late
    assert not ticks.run(0.0, 1.0)
    assert ticks.run(3 * STANDING_S, 3 * (TICK_S + 3 * STANDING_S))  # every tick that late: it stands


def test_an_overload_ends_only_when_the_ticks_are_on_time_with_nothing_refused_for_an_interval() -> None:
    standing = Standing(0.05)
    ticks = Ticks(standing)
    assert ticks.run(0.06, 2 * STANDING_S)
    assert ticks.run(0.01, 5.0)  # the tighter bound keeps the turns short, not yet on time
    assert ticks.run(0.0, STANDING_EXIT_S / 2)
    assert ticks.run(0.01, 0.0001)  # late again: the count starts again
    assert ticks.run(0.004, STANDING_EXIT_S / 2)
    assert not ticks.run(0.004, STANDING_EXIT_S / 2 + TICK_S)  # within the tighter bound long enough: ended
    assert standing.bound == 0.05


def test_an_overload_kept_on_time_by_refusing_still_stands() -> None:
    """Refusing keeps the loop on time: that is the overload being shed, not its end. It ends once nothing
    has been refused for longer than a refused client waits, so those clients come back to the same bound."""
    assert STANDING_EXIT_S > 1.5 * DEFAULT_RETRY_AFTER_S  # a client's wait: Retry-After and up to half again
    standing = Standing(0.05)
    ticks = Ticks(standing)
    assert ticks.run(0.06, 2 * STANDING_S)
    assert ticks.run(0.001, 10.0, refused=True)  # on time, refusing all along
    assert ticks.run(0.001, STANDING_EXIT_S - 2 * TICK_S)  # no refusal, not yet long enough
    assert ticks.run(0.001, 0.0001, refused=True)  # one more: the count starts again
    assert ticks.run(0.001, STANDING_EXIT_S - 2 * TICK_S)
    assert not ticks.run(0.001, 3 * TICK_S)
