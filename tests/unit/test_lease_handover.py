"""The lease handover between the operator and the runner (``contracts/lease.py``), and the runner's
transport that performs it under the SDK (``session/takeover.py``), against a scripted server."""

from __future__ import annotations

import json

import httpx2
import pytest

from memsync.contracts import lease
from memsync.session.takeover import TakeoverTransport

WORK = "work_1"
BEAT = f"http://api/v1/environments/env_1/work/{WORK}/heartbeat"


def refusal(state: str, last: str | None) -> dict[str, object]:
    current = {"state": state, "last_heartbeat": last, "ttl_seconds": 300, "lease_extended": False}
    return {
        "type": "error",
        "error": {"type": "precondition_failed_error", "details": {"current_state": current}},
    }


def test_what_a_first_heartbeat_may_take_over() -> None:
    assert lease.takeover_value(lease.refused_state(refusal("active", "t1"))) == "t1"
    assert lease.takeover_value(lease.refused_state(refusal("starting", "t1"))) == "t1"
    assert lease.takeover_value(lease.refused_state(refusal("queued", None))) is None  # lapsed: nothing held
    assert lease.takeover_value(lease.refused_state(refusal("stopping", "t1"))) is None
    assert lease.takeover_value(lease.refused_state(refusal("active", "NO_HEARTBEAT"))) is None
    assert lease.refused_state({"error": {"message": "no details"}}) is None


def test_the_operator_beats_more_often_than_the_sdk_and_the_gap_uses_the_servers_stamps() -> None:
    # the SDK beats every ttl/2, at most 30 s: the operator's quarter (at most 15 s) is always shorter
    for ttl in (2, 10, 60, 300, 3600):
        assert lease.operator_interval(ttl) < max(1.0, min(ttl / 2, 30.0)) or ttl <= 4
    assert lease.handover_gap("2026-01-01T00:00:00Z", "2026-01-01T00:01:30.5Z") == 90.5
    assert lease.handover_gap("2026-01-01T00:00:00Z", "opaque-value") is None


class Server:
    """A heartbeat endpoint held by someone whose value is ``held``; it records each expected value."""

    def __init__(self, state: str, held: str, moves: int = 0) -> None:
        self.state, self.held, self.moves = state, held, moves
        self.expected: list[str] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        expected = request.url.params[lease.EXPECTED_PARAM]
        self.expected.append(expected)
        if expected != self.held or self.state not in lease.TAKEOVER_STATES:
            if self.moves:  # the holder beats again in between
                self.moves -= 1
                self.held += "+"
            return httpx2.Response(412, json=refusal(self.state, self.held))
        self.held = f"r{len(self.expected)}"
        body = {"type": "work_heartbeat", "last_heartbeat": self.held, "state": "active", "ttl_seconds": 300}
        return httpx2.Response(200, json={**body, "lease_extended": True})


async def beat(transport: TakeoverTransport, expected: str) -> httpx2.Response:
    async with httpx2.AsyncClient(transport=transport) as client:
        response = await client.post(BEAT, params={lease.EXPECTED_PARAM: expected})
        await response.aread()
        return response


async def test_the_first_heartbeat_takes_the_lease_over_once() -> None:
    server = Server("active", "op1")
    transport = TakeoverTransport(httpx2.MockTransport(server), WORK)
    first = await beat(transport, lease.NO_HEARTBEAT)
    assert first.status_code == 200
    assert server.expected == [lease.NO_HEARTBEAT, "op1"]
    assert first.json()["last_heartbeat"] == "r2"
    # a later refusal is a lost lease: never taken over again
    server.held = "someone-else"
    again = await beat(transport, lease.NO_HEARTBEAT)
    assert again.status_code == 412
    assert server.expected[-1] == lease.NO_HEARTBEAT


async def test_a_newer_operator_value_is_followed_and_a_lapsed_item_is_not_taken() -> None:
    server = Server("active", "op1", moves=1)
    assert (
        await beat(TakeoverTransport(httpx2.MockTransport(server), WORK), lease.NO_HEARTBEAT)
    ).status_code == 200
    assert server.expected == [lease.NO_HEARTBEAT, "op1+"]
    lapsed = Server("queued", "op1")
    refused = await beat(TakeoverTransport(httpx2.MockTransport(lapsed), WORK), lease.NO_HEARTBEAT)
    assert refused.status_code == 412
    assert json.loads(refused.text)["error"]["details"]["current_state"]["state"] == "queued"
    assert lapsed.expected == [lease.NO_HEARTBEAT]


@pytest.mark.parametrize("path", ["/v1/environments/env_1/work/work_2/heartbeat", "/v1/sessions/s"])
async def test_other_requests_pass_through(path: str) -> None:
    server = Server("active", "op1")
    transport = TakeoverTransport(httpx2.MockTransport(server), WORK)
    async with httpx2.AsyncClient(transport=transport) as client:
        response = await client.post(f"http://api{path}", params={lease.EXPECTED_PARAM: lease.NO_HEARTBEAT})
    assert response.status_code == 412
    assert server.expected == [lease.NO_HEARTBEAT]
