"""SIGTERM for the commands that run as a container's first process: ``memsync mount`` (the init container)
and ``memsync session run`` (an environment's sandbox).

The kernel delivers a signal to the first process of a PID namespace only if that process installed a
handler for it; Python installs one for SIGINT, none for SIGTERM. Without one, the kubelet's SIGTERM does
nothing: the container runs out its whole grace period and is killed, and for a sandbox that is time its
sidecar needed for the final flush. ``until_signalled`` runs a command with a handler that cancels it, so the
command's own cleanup runs (``finally`` blocks, the runner's final-flush request) and the process then
exits like a shell reports a death by that signal (128 + its number; 143 for SIGTERM). The command line's
long commands (``store import``/``export``, ``dev``) stop the same way through ``cancel_on_signal``, which
raises ``Signalled`` so the command can say what it did before it exits with that code.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

logger = logging.getLogger("memsync")

HANDLED: Final = (signal.SIGTERM, signal.SIGINT)
T = TypeVar("T")


def exit_code(sig: signal.Signals) -> int:
    """The exit code of a process ended by ``sig``, as shells and the kubelet report it."""
    return 128 + int(sig)


class Signalled(Exception):
    """A command was cancelled by a signal (``cancel_on_signal``); its cleanup has run."""

    def __init__(self, sig: signal.Signals) -> None:
        super().__init__(sig.name)
        self.signal = sig

    @property
    def exit_code(self) -> int:
        return exit_code(self.signal)


async def cancel_on_signal(main: Callable[[], Awaitable[T]], *, what: str) -> T:
    """``main``'s result; on SIGTERM or SIGINT, ``main`` is cancelled (its cleanup runs) and ``Signalled``
    is raised. ``what`` names the command in the log line. Call it from the loop's main thread."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("cancel_on_signal must run inside a task")
    loop = asyncio.get_running_loop()
    received: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        if received:
            return  # one cancellation: a second signal must not cut the cleanup short
        received.append(sig)
        logger.info("%s received: stopping %s", sig.name, what, extra={"signal": sig.name})
        task.cancel()

    for sig in HANDLED:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        result = await main()
    except asyncio.CancelledError:
        if not received:
            raise
        task.uncancel()
        raise Signalled(received[0]) from None
    finally:
        for sig in HANDLED:
            loop.remove_signal_handler(sig)
    if received:  # main swallowed the cancellation: it was still ended by the signal
        raise Signalled(received[0])
    return result


async def until_signalled(main: Callable[[], Awaitable[int]], *, what: str) -> int:
    """``main``'s exit code; on SIGTERM or SIGINT, ``main`` is cancelled (its cleanup runs) and the code is
    the signal's. ``what`` names the command in the log line. Call it from the loop's main thread."""
    try:
        return await cancel_on_signal(main, what=what)
    except Signalled as signalled:
        return signalled.exit_code
