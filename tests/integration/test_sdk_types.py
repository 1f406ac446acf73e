"""Every answer of the store server's work API and sessions API, validated strictly with the official
``anthropic`` SDK's own pydantic models, so that drift between the server and the SDK's types fails here.

The SDK builds its models without validation, so a missing field only shows when a caller reads it. This
test records every request the SDK's poller and per-item worker send while they serve a scripted session
(through a transport that sees each answer, streamed ones included) and validates each answer with the model
the SDK declares for that endpoint; then it checks that the run touched every endpoint the worker uses. The
answers the worker's run does not produce (list, stats, retrieve, a refused heartbeat, a second stop, an
archived environment) are asked for directly and validated the same way.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from anthropic.lib.environments import EnvironmentWorker
from anthropic.lib.tools.agent_toolset import AgentToolContext, beta_agent_toolset_20260401
from anthropic.types.beta import BetaEnvironment, BetaManagedAgentsSession
from anthropic.types.beta.beta_environment_archived_error_details import BetaEnvironmentArchivedErrorDetails
from anthropic.types.beta.environments import (
    BetaSelfHostedWork,
    BetaSelfHostedWorkHeartbeatResponse,
    BetaSelfHostedWorkListResponse,
    BetaSelfHostedWorkQueueStats,
)
from anthropic.types.beta.environments.beta_heartbeat_precondition_failed_error_details import (
    BetaHeartbeatPreconditionFailedErrorDetails,
)
from anthropic.types.beta.sessions import BetaManagedAgentsSendSessionEvents
from anthropic.types.beta.sessions.beta_managed_agents_session_event import BetaManagedAgentsSessionEvent
from anthropic.types.beta.sessions.beta_managed_agents_stream_session_events import (
    BetaManagedAgentsStreamSessionEvents,
)
from pydantic import BaseModel, TypeAdapter

from conftest import RunningStoreServer, launch_store_server
from memsync.api.secret import decode_work_secret

WORK = r"/v1/environments/[^/]+/work/[^/]+"
SESSION = r"/v1/sessions/[^/]+"
#: The endpoints the SDK's poller and per-item worker call (its skills endpoint only for sessions whose
#: agent has skills: this server's agent has none), each with the model its answer must validate as.
WORKER_ENDPOINTS: dict[tuple[str, str], Any] = {
    ("GET", r"/v1/environments/[^/]+/work/poll"): BetaSelfHostedWork | None,
    ("POST", WORK + "/ack"): BetaSelfHostedWork,
    ("POST", WORK + "/heartbeat"): BetaSelfHostedWorkHeartbeatResponse,
    ("POST", WORK + "/stop"): BetaSelfHostedWork,
    ("GET", SESSION): BetaManagedAgentsSession,
    ("GET", SESSION + "/events"): None,  # a page: validated item by item below
    ("POST", SESSION + "/events"): BetaManagedAgentsSendSessionEvents,
    ("GET", SESSION + "/events/stream"): None,  # server-sent events: validated frame by frame below
}


def strict(model: Any, text: str | bytes) -> Any:
    """``text`` validated strictly (no coercion) as ``model``, a model class or a type."""
    if isinstance(model, type) and issubclass(model, BaseModel):
        return model.model_validate_json(text, strict=True)
    return TypeAdapter(model).validate_json(text, strict=True)


def strict_page(text: str | bytes) -> list[Any]:
    page = json.loads(text)
    assert set(page) >= {"data", "next_page"}
    return [strict(BetaManagedAgentsSessionEvent, json.dumps(e)) for e in page["data"]]


def sse_payloads(raw: bytes) -> list[str]:
    """The ``data`` of every frame of a server-sent event stream except pings."""
    out = []
    for frame in raw.decode("utf-8").split("\n\n"):
        lines = frame.splitlines()
        if not lines or "event: ping" in lines:
            continue
        out.extend(line.removeprefix("data: ") for line in lines if line.startswith("data: "))
    return out


@dataclass
class Seen:
    method: str
    path: str
    status: int
    body: bytearray = field(default_factory=bytearray)


class _Tee(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, seen: Seen) -> None:
        self.inner, self.seen = inner, seen

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.seen.body.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class Recording(httpx2.AsyncBaseTransport):
    """Forwards every request and keeps each answer's bytes as the client reads them."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.seen: list[Seen] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        seen = Seen(request.method, request.url.path, response.status_code)
        self.seen.append(seen)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_Tee(response.stream, seen),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def endpoint_of(seen: Seen) -> tuple[str, str]:
    for method, pattern in WORKER_ENDPOINTS:
        if seen.method == method and re.fullmatch(pattern, seen.path):
            return method, pattern
    raise AssertionError(
        f"the SDK worker called {seen.method} {seen.path}, an endpoint this test does not know"
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStoreServer]:
    running = launch_store_server(tmp_path_factory.mktemp("sdk-types"), extra_args=("--lease-ttl", "4"))
    try:
        yield running
    finally:
        running.stop()


def admin(server: RunningStoreServer) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"x-api-key": server.admin_key}, timeout=30)


def environment(http: httpx.Client) -> tuple[str, str]:
    env = http.post("/v1/environments", json={"name": "strict types"}).json()
    strict(BetaEnvironment, json.dumps(env))
    key = http.post(f"/v1/memsync/environments/{env['id']}/keys").json()
    return env["id"], key["key"]


async def test_every_answer_the_sdk_worker_gets_validates_strictly(
    server: RunningStoreServer, tmp_path: Path
) -> None:
    http = admin(server)
    env_id, key = environment(http)
    store = http.post("/v1/memory_stores", json={"name": "Typed"}).json()["id"]
    root = tmp_path / "typed"
    root.mkdir()
    script = [
        {
            "type": "agent.tool_use",
            "id": "toolu_typed",
            "name": "write",
            "input": {"file_path": str(root / "a.md"), "content": "typed\n"},
        },
        {"type": "session.status_idle", "stop_reason": {"type": "end_turn"}},
        {"type": "session.status_terminated"},
    ]
    minted = http.post(
        "/v1/memsync/sessions",
        json={
            "environment_id": env_id,
            "resources": [{"type": "memory_store", "memory_store_id": store, "access": "read_write"}],
            "script": script,
        },
    ).json()
    recording = Recording()
    client = anthropic.AsyncAnthropic(
        base_url=server.url, api_key=None, max_retries=0, http_client=httpx2.AsyncClient(transport=recording)
    )
    poller = client.beta.environments.work.poller(
        environment_id=env_id, environment_key=key, auto_stop=False, drain=True, block_ms=None
    )
    item = None
    async for polled in poller:
        item = polled
        break
    assert item is not None and item.id == minted["work_id"]

    def tools(ctx: AgentToolContext) -> Any:
        ctx.allowed_roots = [root]
        return beta_agent_toolset_20260401(ctx)

    worker = EnvironmentWorker(client, workdir=tmp_path, memory_sync_interval=None, max_idle=3, tools=tools)
    await asyncio.wait_for(
        worker.handle_item(
            work_id=item.id, environment_id=env_id, session_id=item.data.id, work_secret=item.secret
        ),
        timeout=60,
    )
    await client.close()
    assert (root / "a.md").read_text() == "typed\n"  # the worker really served the session

    by_endpoint: dict[tuple[str, str], list[Seen]] = {}
    for seen in recording.seen:
        by_endpoint.setdefault(endpoint_of(seen), []).append(seen)
    assert set(by_endpoint) == set(WORKER_ENDPOINTS), "the run did not reach every endpoint of the worker"
    events_seen: list[Any] = []
    for endpoint, answers in by_endpoint.items():
        for seen in answers:
            assert seen.status == 200, (endpoint, seen.status, bytes(seen.body))
            model = WORKER_ENDPOINTS[endpoint]
            if endpoint[1].endswith("/events/stream"):
                events_seen += [
                    strict(BetaManagedAgentsStreamSessionEvents, p) for p in sse_payloads(seen.body)
                ]
            elif endpoint == ("GET", SESSION + "/events"):
                events_seen += strict_page(seen.body)
            else:
                strict(model, seen.body)
    assert {"agent.tool_use", "user.tool_result", "session.status_terminated"} <= {
        e.type for e in events_seen
    }
    session = strict(BetaManagedAgentsSession, bytes(by_endpoint[("GET", SESSION)][0].body))
    assert session.environment_id == env_id  # honest values, not placeholders
    assert [r.memory_store_id for r in session.resources] == [store]
    http.close()


async def test_the_other_answers_of_the_work_api_validate_strictly(server: RunningStoreServer) -> None:
    http = admin(server)
    env_id, key = environment(http)
    minted = http.post("/v1/memsync/sessions", json={"environment_id": env_id, "resources": []}).json()
    work = f"/v1/environments/{env_id}/work"
    as_env = {"authorization": f"Bearer {key}"}
    token = decode_work_secret(minted["work_secret"]).sessions_token
    as_session = {"authorization": f"Bearer {token}"}

    strict(BetaSelfHostedWorkQueueStats, http.get(f"{work}/stats", headers=as_env).content)
    polled = strict(BetaSelfHostedWork, http.get(f"{work}/poll", headers=as_env).content)
    assert polled.secret == minted["work_secret"]
    assert strict(BetaSelfHostedWork | None, http.get(f"{work}/poll", headers=as_env).content) is None
    strict(BetaSelfHostedWork, http.post(f"{work}/{polled.id}/ack", headers=as_env).content)
    beat = strict(
        BetaSelfHostedWorkHeartbeatResponse,
        http.post(
            f"{work}/{polled.id}/heartbeat",
            params={"expected_last_heartbeat": "NO_HEARTBEAT"},
            headers=as_session,
        ).content,
    )
    stale = http.post(
        f"{work}/{polled.id}/heartbeat",
        params={"expected_last_heartbeat": "NO_HEARTBEAT"},
        headers=as_session,
    )
    assert stale.status_code == 412
    details = strict(
        BetaHeartbeatPreconditionFailedErrorDetails, json.dumps(stale.json()["error"]["details"])
    )
    assert details.current_state.last_heartbeat == beat.last_heartbeat
    listed = strict(BetaSelfHostedWorkListResponse, http.get(work, headers=as_env).content)
    assert [w.id for w in listed.data] == [polled.id]
    assert all(w.secret is None for w in listed.data)
    strict(BetaSelfHostedWork, http.get(f"{work}/{polled.id}", headers=as_session).content)
    stopped = strict(BetaSelfHostedWork, http.post(f"{work}/{polled.id}/stop", json={"force": True}).content)
    assert stopped.state == "stopped"
    again = http.post(f"{work}/{polled.id}/stop", json={"force": True})
    assert (again.status_code, again.headers["x-should-retry"]) == (409, "false")
    strict(BetaManagedAgentsSession, http.get(f"/v1/sessions/{minted['session']['id']}").content)

    # an archived environment's queue: a 400 the SDK's poller treats as final, with the SDK's error details
    http.post(f"/v1/environments/{env_id}/archive")
    archived = http.get(f"{work}/poll", headers=as_env)
    assert archived.status_code == 400
    strict(BetaEnvironmentArchivedErrorDetails, json.dumps(archived.json()["error"]["details"]))
    client = anthropic.AsyncAnthropic(base_url=server.url, api_key=None, max_retries=0)
    poller = client.beta.environments.work.poller(environment_id=env_id, environment_key=key)
    with pytest.raises(anthropic.BadRequestError):
        await asyncio.wait_for(anext(aiter(poller)), timeout=30)  # ends at once: not retried
    await client.close()
    http.close()
