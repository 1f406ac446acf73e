"""What ``memsync store import`` and ``export`` share: progress on stderr, a bounded patience with a store
server that stopped answering, and a listing that goes through it.

Both commands are safe to run again: an import sends only what differs, an export with ``--merge`` writes
only what is missing. So when the server has not answered for ``--give-up-after`` seconds (30 by default) they
stop, say what they did and how to resume, and exit 5, rather than retrying for as long as the tree is large.
Until a first answer the server is not waited for at all (a wrong ``--url`` fails at once).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final, TypeVar

import click

from memsync.api.models import Memory, View
from memsync.cli.failures import CliError, ExitCode
from memsync.client import StoreClient, errors

T = TypeVar("T")

DEFAULT_GIVE_UP_S: Final = 30.0
#: Pauses between two tries while the server does not answer: 0.5 s, doubling, at most 4 s.
FIRST_PAUSE_S: Final = 0.5
MAX_PAUSE_S: Final = 4.0
RESUME: Final = "run the same command again to resume"


# --- progress -------------------------------------------------------------------------------------------

PROGRESS_STEP_PERCENT = 10

progress_option = click.option(
    "--progress/--no-progress",
    default=None,
    help="Report progress on stderr (default: only when stderr is a terminal; elsewhere as a line per 10%).",
)


def crossed_step(done: int, total: int, step: int = PROGRESS_STEP_PERCENT) -> bool:
    """True when ``done`` of ``total`` is the first count at or past the next ``step`` percent."""
    if total <= 0 or done <= 0:
        return False
    return done * 100 // total // step > (done - 1) * 100 // total // step


@contextmanager
def progress_of(label: str, total: int, show: bool | None) -> Iterator[Callable[[], None]]:
    """A step function to call once per item. On a terminal, a redrawn bar with an ETA (click's: no
    extra dependency for one bar); elsewhere, with ``--progress``, a plain line per 10 % (a log stays
    readable); by default nothing off a terminal."""
    tty = sys.stderr.isatty()
    if not (tty if show is None else show):
        yield lambda: None
        return
    if tty:
        with click.progressbar(length=total, label=label, file=sys.stderr, show_pos=True) as bar:
            yield lambda: bar.update(1)
        return
    done = 0

    def step() -> None:
        nonlocal done
        done += 1
        if crossed_step(done, total):
            click.echo(f"{label}: {done}/{total} ({min(100, done * 100 // total)}%)", err=True)

    yield step


# --- a server that stops answering ----------------------------------------------------------------------

give_up_option = click.option(
    "--give-up-after",
    "give_up_after",
    default=DEFAULT_GIVE_UP_S,
    show_default=True,
    metavar="SECONDS",
    type=click.FloatRange(min=0, min_open=True),
    help="Stop when the store server has not answered for this long (exit 5); what was done is kept, and "
    "running the same command again resumes.",
)


class GaveUp(Exception):
    """The store server did not answer for the whole budget."""

    def __init__(self, last: errors.StoreError, waited_s: float) -> None:
        super().__init__(last.message)
        self.last = last
        self.waited_s = waited_s


def time_left(since: float | None, now: float, budget_s: float) -> float:
    """Seconds of the budget left in a run of failures that began at ``since`` (None: the first failure)."""
    return budget_s - (now - (now if since is None else since))


@dataclass
class Patience:
    """Calls to the store server that ride out an outage of up to ``budget_s`` seconds: a call that finds
    no server is tried again (after a pause that doubles) until it is answered or the run of failures
    has lasted the budget, when ``GaveUp`` is raised. Any answer ends a run."""

    budget_s: float
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    answered: bool = False  # the server answered once: before that, no answer is an error at once
    since: float | None = None  # when the current run of failures began
    said: bool = False

    async def call(self, request: Callable[[], Awaitable[T]]) -> T:
        pause = FIRST_PAUSE_S
        while True:
            try:
                result = await request()
            except errors.TransportError as exc:
                if not self.answered:
                    raise
                left = self._failed(exc)
                await self.sleep(min(pause, left))
                pause = min(pause * 2, MAX_PAUSE_S)
                continue
            self._answer()
            return result

    def _failed(self, exc: errors.TransportError) -> float:
        now = self.clock()
        left = time_left(self.since, now, self.budget_s)
        if self.since is None:
            self.since = now
        if left <= 0:
            raise GaveUp(exc, now - self.since)
        if not self.said:
            self.said = True
            click.echo(
                f"the store server does not answer ({exc.message}); trying again for up to "
                f"{left:.0f} s (--give-up-after)",
                err=True,
            )
        return left

    def _answer(self) -> None:
        if self.said:
            click.echo("the store server answers again; going on", err=True)
        self.answered, self.since, self.said = True, None, False


def stopped(gave_up: GaveUp, done: str, resume: str = RESUME) -> CliError:
    """The one line of a command that gave up on the server: for how long, what it did, how to resume."""
    return CliError(
        f"the store server has not answered for {gave_up.waited_s:.0f} s ({gave_up.last.message}); "
        f"stopped: {done}; {resume}",
        ExitCode.UNREACHABLE,
    )


@contextmanager
def quiet_transport_retries() -> Iterator[None]:
    """The client's own line per retry of a request that found no server is left out: ``Patience`` says
    once that the server does not answer (16 requests in flight would otherwise print a line each, twice
    a second)."""

    def keep(record: logging.LogRecord) -> bool:
        return record.msg != "retrying store request after a transport error"

    client_logger = logging.getLogger("memsync.client")
    client_logger.addFilter(keep)
    try:
        yield
    finally:
        client_logger.removeFilter(keep)


async def each_memory(
    client: StoreClient, patience: Patience, store_id: str, *, view: View, limit: int
) -> AsyncIterator[Memory]:
    """Every memory of the store, a page at a time, each page through ``patience`` (a page that finds no
    server is asked for again with the same cursor)."""
    page: str | None = None
    while True:
        result = await patience.call(
            functools.partial(client.list_memories_page, store_id, view=view, limit=limit, page=page)
        )
        for item in result.data:
            if isinstance(item, Memory):
                yield item
        if not result.next_page or result.next_page == page:
            return
        page = result.next_page
