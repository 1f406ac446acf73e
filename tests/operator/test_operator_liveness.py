"""The operator's liveness probe broken on purpose (``controller/liveness.py``): the operator process runs
against the emulator with its probe served and short bounds; the probe answers 200 while its watches hear
from the API server (each renewed every second here) and its periodic loop turns, and 500, naming why, once
the API server stops answering its watches or the periodic loop dies."""

from __future__ import annotations

import asyncio
import base64
import socket
from typing import Any

import httpx
import pytest
from smem_harness import Cluster, eventually, fast_settings, run_operator, smem_body

from memsync.controller import periodic
from memsync.controller.liveness import Bounds


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def probe(url: str) -> tuple[int, dict[str, Any]]:
    async with httpx.AsyncClient() as http:
        response = await http.get(url, timeout=5)
    return response.status_code, response.json()


async def test_the_probe_fails_when_the_watches_go_silent(cluster: Cluster) -> None:
    url = f"http://127.0.0.1:{free_port()}/healthz"
    await cluster.create_secret("work-secret", {"secret": base64.b64encode(b"opaque").decode()})
    # The API server ends each watch after a second (the operator then watches again): a live watch is heard
    # well within the bound of 3 s.
    bounds = Bounds(watch_silence_s=3.0, periodic_stall_s=60.0)
    async with run_operator(
        cluster, settings=fast_settings(server_timeout=1), liveness_url=url, liveness_bounds=bounds
    ):
        stop = asyncio.Event()

        async def traffic() -> None:  # SessionMemories keep coming: both watches hear of them
            for i in range(1000):
                await cluster.create_smem(smem_body(f"s{i}"))
                try:
                    await asyncio.wait_for(stop.wait(), 0.5)
                    return
                except TimeoutError:
                    pass

        creating = asyncio.create_task(traffic())
        try:
            await eventually(cluster.pods, what="a sandbox Pod")
            await asyncio.sleep(4)  # longer than the bound: traffic keeps the watches heard
            code, body = await probe(url)
            assert (code, body) == (200, {"live": True}), body
            cluster.kmock.mute_watches = True  # type: ignore[attr-defined]

            async def failing() -> dict[str, Any] | None:  # each watch is judged on its own: both go silent
                code, body = await probe(url)
                silent = " ".join(body.get("problems") or []) if code == 500 else ""
                return body if "sessionmemories has received nothing for" in silent else None

            body = await eventually(failing, timeout=30, what="the probe failing, naming the silent watch")
            assert body is not None and body["live"] is False
        finally:
            stop.set()
            cluster.kmock.mute_watches = False  # type: ignore[attr-defined]
            await creating


async def test_the_probe_fails_when_the_periodic_loop_dies(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"http://127.0.0.1:{free_port()}/healthz"
    await cluster.create_secret("work-secret", {"secret": base64.b64encode(b"opaque").decode()})
    async with run_operator(cluster, liveness_url=url):
        await cluster.create_smem(smem_body("s1"))
        await eventually(lambda: cluster.smem_status("s1").get("phase"), what="a status")
        assert (await probe(url))[0] == 200

        def broken(*_: Any, **__: Any) -> int:
            raise RuntimeError("a bug in the periodic loop")

        monkeypatch.setattr(periodic, "waiting_too_long", broken)

        async def failing() -> dict[str, Any] | None:
            code, body = await probe(url)
            return body if code == 500 else None

        body = await eventually(failing, timeout=30, what="the probe failing")
        assert body is not None
        assert body["problems"] == ["the periodic loop has ended: RuntimeError: a bug in the periodic loop"]
