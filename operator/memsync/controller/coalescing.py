"""Work by key, coalesced: what a burst of events asks for runs once per key, from the latest state.

The Pod watcher's handler must not wait for a handler slot while kopf holds the Pod's whole body: in a
burst of 1,000 new sessions, every Pod event would wait behind the creates, and kopf's per-object workers
would keep 1,000 Pod bodies alive meanwhile. So the handler only remembers the Pod's digest
(``SessionMemories.see_pod``) and asks a :class:`Coalescer` to derive that session's status later; the
derivation reads the latest digest when it runs. A key has at most one run under way; asked for again
meanwhile, it runs once more afterwards (however often it was asked), since the state its run read may be
older than the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


Action = Callable[[K], Awaitable[None]]


class Coalescer(Generic[K]):
    """Runs an action for each key asked for, never two runs at once for one key."""

    def __init__(self) -> None:
        self._tasks: dict[K, asyncio.Task[None]] = {}
        self._again: set[K] = set()

    def ask(self, key: K, action: Action[K]) -> None:
        """Run ``action(key)`` soon; if a run for ``key`` is under way, run its action once more after it."""
        if key in self._tasks:
            self._again.add(key)
        else:
            self._tasks[key] = asyncio.create_task(self._run(key, action))

    @property
    def pending(self) -> int:
        """Keys waiting or running."""
        return len(self._tasks)

    async def _run(self, key: K, action: Action[K]) -> None:
        try:
            while True:
                self._again.discard(key)
                try:
                    await action(key)
                except Exception:
                    logger.exception("coalesced work failed", extra={"key": str(key)})
                if key not in self._again:
                    return
        finally:
            self._tasks.pop(key, None)
            self._again.discard(key)

    async def close(self) -> None:
        """Cancel what is waiting or running and wait for it to end."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
