"""``memsync.pid1``: SIGTERM and SIGINT cancel the command, its cleanup runs, and the exit code is the
signal's (the handler a container's first process needs to be signalled at all)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from memsync import pid1


async def test_the_command_s_own_code_without_a_signal() -> None:
    async def main() -> int:
        return 3

    assert await pid1.until_signalled(main, what="test") == 3


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_cancels_the_command_after_its_cleanup(sig: signal.Signals) -> None:
    cleaned: list[str] = []

    async def main() -> int:
        try:
            os.kill(os.getpid(), sig)
            await asyncio.sleep(30)
            return 0
        finally:
            await asyncio.sleep(0.05)  # cleanup that awaits still runs to its end
            cleaned.append("done")

    assert await pid1.until_signalled(main, what="test") == 128 + int(sig)
    assert cleaned == ["done"]
    assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]


async def test_a_second_signal_does_not_cut_the_cleanup_short() -> None:
    cleaned: list[str] = []

    async def main() -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(30)
            return 0
        finally:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(0.1)
            cleaned.append("done")

    assert await pid1.until_signalled(main, what="test") == 143
    assert cleaned == ["done"]


async def test_a_command_that_swallows_the_cancellation_still_exits_with_the_signal() -> None:
    async def main() -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return 0
        return 0

    assert await pid1.until_signalled(main, what="test") == 143


async def test_a_cancellation_that_is_not_a_signal_propagates() -> None:
    async def main() -> int:
        await asyncio.sleep(30)
        return 0

    task = asyncio.create_task(pid1.until_signalled(main, what="test"))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # the handlers are gone again: SIGTERM's disposition is back to what it was
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signal.default_int_handler)
