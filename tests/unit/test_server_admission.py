"""The store server's admission decision: admit, queue, or shed (503 for the process, 429 per credential)."""

from __future__ import annotations

import asyncio

import pytest

from memsync.server.http.admission import (
    AdmissionLimits,
    AdmissionMiddleware,
    Message,
    Receive,
    Scope,
    Send,
    credential_key,
    decide,
    shed_error,
)
from memsync.server.http.envelope import error_response

LIMITS = AdmissionLimits(max_in_flight=4, max_queued=2, per_credential=3, retry_after_s=1)


@pytest.mark.parametrize(
    ("in_flight", "queued", "held", "expected"),
    [
        (0, 0, 0, "admit"),
        (3, 0, 2, "admit"),
        (4, 0, 0, "queue"),
        (4, 1, 0, "queue"),
        (4, 2, 0, "overload"),
        (3, 1, 0, "queue"),  # someone waits already: no overtaking
        (0, 0, 3, "admit"),  # free slots and nobody waiting: idle capacity serves even a caller at its share
        (
            4,
            0,
            3,
            "credential",
        ),  # the server is full and others hold slots: the caller at its share is refused
        (4, 2, 3, "credential"),  # the caller's own excess is named before the process's
        (4, 0, 4, "queue"),  # the server is full of this one caller alone: nobody to be fair to, it waits
        (4, 2, 6, "overload"),
    ],
)
def test_decide(in_flight: int, queued: int, held: int, expected: str) -> None:
    assert decide(LIMITS, in_flight=in_flight, queued=queued, credential_held=held) == expected


def test_a_zero_bound_admits_everything() -> None:
    off = AdmissionLimits.derived(0)
    assert not off.enabled
    assert decide(off, in_flight=10_000, queued=10_000, credential_held=10_000) == "admit"


def test_no_queue_sheds_as_soon_as_the_slots_are_taken() -> None:
    limits = AdmissionLimits.derived(2, max_queued=0)
    assert decide(limits, in_flight=1, queued=0, credential_held=0) == "admit"
    assert decide(limits, in_flight=2, queued=0, credential_held=0) == "overload"


def test_derived_limits() -> None:
    assert AdmissionLimits.derived(32) == AdmissionLimits(32, 8, 16, 1)
    assert AdmissionLimits.derived(1) == AdmissionLimits(1, 0, 1, 1)
    assert AdmissionLimits.derived(8, max_queued=0, per_credential=8) == AdmissionLimits(8, 0, 8, 1)
    with pytest.raises(ValueError, match="max_in_flight"):
        AdmissionLimits.derived(-1)
    with pytest.raises(ValueError, match="credential share"):
        AdmissionLimits.derived(8, per_credential=0)


def test_shed_answers_carry_retry_after_and_the_error_type() -> None:
    overload, credential = shed_error("overload", LIMITS), shed_error("credential", LIMITS)
    assert (overload.status, overload.error_type) == (503, "overloaded_error")
    assert (credential.status, credential.error_type) == (429, "rate_limit_error")
    assert overload.headers["retry-after"] == credential.headers["retry-after"] == "1"
    assert overload.body("req_1")["error"]["type"] == "overloaded_error"


def test_credential_key_is_a_short_hash_never_the_secret() -> None:
    secret = b"Bearer sk-very-secret-token"
    key = credential_key([(b"accept", b"*/*"), (b"authorization", secret)])
    assert key is not None and len(key) == 16 and "secret" not in key
    assert key == credential_key([(b"authorization", secret)])
    assert key != credential_key([(b"x-api-key", b"another")])
    assert credential_key([(b"accept", b"*/*")]) is None
    assert credential_key([(b"x-api-key", b"")]) is None


# --- the middleware: slots, the hand-over from the queue, a waiter that gives up ---------------------------


class _Held:
    """An ASGI app whose requests stay in flight until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.started += 1
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _gate(app: _Held, limits: AdmissionLimits) -> AdmissionMiddleware:
    return AdmissionMiddleware(app, limits=limits, render=lambda err, scope: error_response(err, None))


async def _call(
    gate: AdmissionMiddleware, path: str = "/v1/x", key: bytes = b"a"
) -> tuple[int, dict[str, str]]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "path": path, "method": "GET", "headers": [(b"x-api-key", key)]}
    await gate(scope, receive, send)
    start = sent[0]
    return int(start["status"]), {k.decode(): v.decode() for k, v in start["headers"]}


async def test_the_middleware_sheds_queues_and_hands_slots_over() -> None:
    app = _Held()
    gate = _gate(app, AdmissionLimits(max_in_flight=2, max_queued=1, per_credential=2))
    held = [asyncio.create_task(_call(gate, key=k)) for k in (b"a", b"b")]
    await asyncio.sleep(0)
    assert app.started == 2 and gate.in_flight == 2
    queued = asyncio.create_task(_call(gate, key=b"c"))
    await asyncio.sleep(0)
    assert len(gate.waiters) == 1 and app.started == 2
    status, headers = await _call(gate, key=b"d")
    assert status == 503 and headers["retry-after"] == "1"
    status, _ = await _call(gate, key=b"a")  # a holds one; the queue is full, so the process refuses
    assert status == 503
    app.release.set()
    assert [s for s, _ in await asyncio.gather(*held, queued)] == [200, 200, 200]
    assert app.started == 3 and gate.in_flight == 0 and not gate.held and not gate.waiters


async def test_one_credential_gets_429_at_its_share_and_health_is_never_gated() -> None:
    app = _Held()
    gate = _gate(app, AdmissionLimits(max_in_flight=2, max_queued=0, per_credential=1))
    held = [asyncio.create_task(_call(gate, key=k)) for k in (b"noisy", b"quiet")]
    await asyncio.sleep(0)
    assert (await _call(gate, key=b"noisy"))[0] == 429  # at its share while another caller holds a slot
    assert (await _call(gate, key=b"third"))[0] == 503
    app.release.set()  # /healthz passes the gate even while it is full (and here it is let through at once)
    assert (await _call(gate, path="/healthz", key=b"quiet"))[0] == 200
    assert [s for s, _ in await asyncio.gather(*held)] == [200, 200]


async def test_a_lone_caller_uses_idle_slots_beyond_its_share_and_then_waits() -> None:
    app = _Held()
    gate = _gate(app, AdmissionLimits(max_in_flight=2, max_queued=1, per_credential=1))
    held = [asyncio.create_task(_call(gate, key=b"bulk")) for _ in range(3)]
    await asyncio.sleep(0)
    assert app.started == 2 and len(gate.waiters) == 1  # two slots taken, the third request waits: no 429
    app.release.set()
    assert [s for s, _ in await asyncio.gather(*held)] == [200, 200, 200]
    assert gate.in_flight == 0 and not gate.held and not gate.waiters


async def test_a_queued_request_that_is_cancelled_leaves_no_slot_behind() -> None:
    app = _Held()
    gate = _gate(app, AdmissionLimits(max_in_flight=1, max_queued=1, per_credential=2))
    held = asyncio.create_task(_call(gate, key=b"a"))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(_call(gate, key=b"b"))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not gate.waiters and gate.held == {credential_key([(b"x-api-key", b"a")]): 1}
    app.release.set()
    await held
    assert gate.in_flight == 0 and not gate.held
