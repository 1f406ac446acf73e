"""The 403 tolerance of kopf's watch (``controller/forbidden.py``): installed over the pinned kopf's
stream function, once; a 403 ends one stream quietly (logged, the gauge set) and access back clears it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kopf._cogs.clients import errors, watching

from memsync.controller import forbidden, metrics
from memsync.controller.sessionmemory.registry import build_registry
from memsync.controller.settings import ControllerConfig


def test_it_wraps_kopfs_watch_stream_once() -> None:
    build_registry(ControllerConfig())
    build_registry(ControllerConfig())
    wrapped = watching.continuous_watch
    assert getattr(wrapped, "_memsync_tolerates_forbidden", False)
    assert wrapped.__closure__ is not None
    inner = [c.cell_contents for c in wrapped.__closure__ if callable(c.cell_contents)]
    assert not any(getattr(f, "_memsync_tolerates_forbidden", False) for f in inner)  # not wrapped twice


async def test_a_403_pauses_one_stream_and_access_back_clears_it(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    async def stream(**_: Any) -> AsyncIterator[Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise errors.APIForbiddenError({"message": "forbidden"}, status=403, headers={})  # type: ignore[arg-type]
        yield {"type": "ADDED"}

    guarded = forbidden.tolerant(stream, retry_s=0.01)
    gauge = metrics.WATCH_FORBIDDEN.labels(namespace="gone-ns", resource="pods")

    class Resource:
        plural = "pods"

    events = [e async for e in guarded(namespace="gone-ns", resource=Resource())]
    # forbidden before its first listing: it counts as listed, or kopf would hold up every namespace
    assert events == [watching.Bookmark.LISTED] and gauge._value.get() == 1
    assert "forbids watching" in caplog.text
    events = [e async for e in guarded(namespace="gone-ns", resource=Resource())]
    assert events == [{"type": "ADDED"}] and gauge._value.get() == 0
    await asyncio.sleep(0)
