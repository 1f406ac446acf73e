"""The Pod watcher's coalesced work: one run at a time per key, asks during a run coalesce into one more."""

from __future__ import annotations

import asyncio
import logging

import pytest

from memsync.controller.coalescing import Coalescer


async def _settle(coalescer: Coalescer[str]) -> None:
    for _ in range(200):
        if not coalescer.pending:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the coalesced work never ended")


async def test_asks_during_a_run_coalesce_into_one_more_run() -> None:
    coalescer: Coalescer[str] = Coalescer()
    release = asyncio.Event()
    runs: list[str] = []

    async def action(key: str) -> None:
        runs.append(key)
        await release.wait()

    coalescer.ask("a", action)
    await asyncio.sleep(0)
    for _ in range(5):
        coalescer.ask("a", action)
    assert coalescer.pending == 1
    release.set()
    await _settle(coalescer)
    assert runs == ["a", "a"]


async def test_keys_run_side_by_side_and_never_twice_at_once() -> None:
    coalescer: Coalescer[str] = Coalescer()
    running: dict[str, int] = {"a": 0, "b": 0}
    most = {"a": 0, "b": 0}

    async def action(key: str) -> None:
        running[key] += 1
        most[key] = max(most[key], running[key])
        await asyncio.sleep(0.01)
        running[key] -= 1

    for _ in range(3):
        coalescer.ask("a", action)
        coalescer.ask("b", action)
    assert coalescer.pending == 2
    await _settle(coalescer)
    assert most == {"a": 1, "b": 1}


async def test_a_failing_run_is_logged_and_the_key_can_be_asked_for_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    coalescer: Coalescer[str] = Coalescer()
    calls: list[str] = []

    async def failing(key: str) -> None:
        calls.append(key)
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="memsync.controller.coalescing"):
        coalescer.ask("a", failing)
        await _settle(coalescer)
    assert "coalesced work failed" in caplog.text
    coalescer.ask("a", failing)
    await _settle(coalescer)
    assert calls == ["a", "a"]


async def test_close_cancels_what_waits() -> None:
    coalescer: Coalescer[str] = Coalescer()
    started = asyncio.Event()
    finished: list[str] = []

    async def forever(key: str) -> None:
        started.set()
        await asyncio.Event().wait()
        finished.append(key)

    coalescer.ask("a", forever)
    await started.wait()
    await coalescer.close()
    assert coalescer.pending == 0
    assert finished == []
