"""The fence: no write leaves this process once it may no longer be the leader.

The elector (``elector.py``) extends the fence each time a renewal of the Lease succeeds, to the moment the
renewal's request was sent plus the renew deadline. Every write the operator makes checks the fence first:
its own Kubernetes calls (``KubeApi``), kopf's requests (a hook on kopf's HTTP session), and every call to
an environment's work queue. A check after the deadline trips the fence: the process stops at once, before
the write, and before another replica can have taken the Lease (the deadline is shorter than the Lease's
duration). That covers a process frozen mid-write (SIGSTOP, a stalled node) and resumed later: the first
thing any of its pending writes does is find the fence past its deadline.

Stopping is an exit of the whole process (``on_trip``; the kubelet starts the container again, as a
standby): that is the only way to be sure no task of it acts any more. Tests pass their own ``on_trip``.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Final, NoReturn

logger = logging.getLogger("memsync.operator.leadership")

#: The operator's exit status when it stops because it lost the Lease (docs/cli.md).
EXIT_LEADERSHIP_LOST: Final = 8
#: Methods that read; every other one writes.
READS: Final = frozenset({"GET", "HEAD", "OPTIONS"})


class LeadershipLost(Exception):
    """Raised by a fence whose ``on_trip`` returns (tests): the write was not made."""


def exit_process(reason: str) -> NoReturn:
    """The default ``on_trip``: flush the logs and leave at once, without running any cleanup that could
    still act (no kopf shutdown handlers, no finalizers of objects in flight)."""
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:  # noqa: S110 (nothing may stop the exit)
            pass
    sys.stderr.flush()
    os._exit(EXIT_LEADERSHIP_LOST)


class Fence:
    """Whether this process may still write: until ``valid_until`` on the monotonic clock."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_trip: Callable[[str], object] = exit_process,
        elected: bool = True,
    ) -> None:
        self.clock = clock
        self.on_trip = on_trip
        # Without leader election the fence never closes; with it, nothing may be written before the Lease
        # is first held.
        self.valid_until = 0.0 if elected else math.inf
        self.tripped: str | None = None

    def extend(self, until: float) -> None:
        """A renewal sent at ``until - renew_deadline`` succeeded: writes may go until ``until``."""
        if self.tripped is None:
            self.valid_until = max(self.valid_until, until)

    @property
    def open(self) -> bool:
        return self.tripped is None and self.clock() < self.valid_until

    def check(self, method: str = "POST", what: str = "") -> None:
        """Before a request to the Kubernetes API: a write (any method but a read) after the deadline trips
        the fence."""
        if method.upper() not in READS:
            self.require(f"{method.upper()} {what}".rstrip())

    def require(self, what: str) -> None:
        """Before anything that acts (a write; any call to a work queue, whose polls claim work): after the
        deadline it trips the fence."""
        if not self.open:
            self.trip(f"a {what} was about to be sent after the leadership deadline")

    def trip(self, reason: str) -> None:
        """Stop acting: log why, then ``on_trip`` (the process exits); raises if ``on_trip`` returns."""
        if self.tripped is None:
            self.tripped = reason
            logger.critical(
                "leadership lost: this replica stops acting now and exits (another replica takes over)",
                extra={"reason": reason},
            )
        self.on_trip(reason)
        raise LeadershipLost(reason)
