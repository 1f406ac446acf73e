"""One store's record keeping, fed from one place: what the current command did (the termination report's
``stores``), what was counted since the state was last saved (added to the session's totals there), the
numbers of the current pass (``PassStats``: tests and the benchmark read them), the live progress of a flush,
the sync health served at ``/status`` and reflected by ``/readyz``, and the Prometheus metrics."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from memsync.agent.metrics import Metrics
from memsync.agent.records import Problems
from memsync.agent.state import LockTimeout
from memsync.client import errors as store_errors
from memsync.contracts.health import ERROR_LIMIT, StoreHealth, rfc3339
from memsync.contracts.report import StoreCounts

CLEAN_OUTCOMES = ("synced", "recovered")
PassOutcome = Literal["synced", "recovered", "left", "failed", "skipped"]


def is_transient(exc: BaseException) -> bool:
    """A failure that may go away by itself: no response, a timeout, 5xx, 429, the store's lock held by
    another memsync process. The shutdown passes retry these until their deadline."""
    return isinstance(
        exc,
        store_errors.TransportError | store_errors.ServerError | store_errors.RateLimited | LockTimeout,
    )


@dataclass
class PassStats:
    """Numbers of one pass (tests and the benchmark read them)."""

    outcome: PassOutcome = "synced"
    list_requests: int = 0
    fetches: int = 0
    uploads: int = 0
    deletes: int = 0
    hashed: int = 0
    local_writes: int = 0  # pulls, local removals and conflicts: writes into the folder (early sync)
    changed: int = 0  # flush: files whose content differed from the baseline
    unsent: int = 0  # flush: of those, how many were neither saved nor settled (conflict, refusal)
    errors: int = 0  # transfers that failed and are retried (the pass then does not count as a success)
    transient: int = 0  # of those (or of a failed pass), the ones worth retrying before the shutdown deadline
    last_error: str | None = None
    seconds: float = 0.0


@dataclass
class FlushProgress:
    """Live counters of a flush, read by the command when the time budget cuts it off."""

    changed: int = 0
    settled: int = 0
    scanned: bool = False  # the flush knows what changed (``changed`` is final)

    @property
    def unsent(self) -> int:
        return max(0, self.changed - self.settled)


class Recorder:
    def __init__(self, store_id: str, metrics: Metrics) -> None:
        self.id = store_id
        self.metrics = metrics
        self.tally = StoreCounts()
        self.delta = StoreCounts()
        self.health = StoreHealth()
        self.last = PassStats()
        self.progress = FlushProgress()
        # this pass: rel -> why a memory (or a conflict copy) could not be written locally
        self.unwritable: dict[str, str] = {}

    def start_pass(self) -> None:
        self.last = PassStats()
        self.unwritable = {}

    def start_flush(self) -> None:
        self.last = PassStats()
        self.progress = FlushProgress()

    def bump(self, *, uploaded: int = 0, downloaded: int = 0, deleted: int = 0, conflicts: int = 0) -> None:
        """Count what happened, for the command, the session, the pass and the metrics."""
        for counts in (self.tally, self.delta):
            counts.uploaded += uploaded
            counts.downloaded += downloaded
            counts.deleted += deleted
            counts.conflicts += conflicts
        self.last.uploads += uploaded
        self.last.deletes += deleted
        m, store = self.metrics, self.id
        for counter, n in (
            (m.uploads, uploaded),
            (m.downloads, downloaded),
            (m.deletes, deleted),
            (m.conflicts, conflicts),
        ):
            if n:
                counter.labels(store).inc(n)

    def listed(self) -> None:
        self.last.list_requests += 1

    def fetched(self) -> None:
        self.last.fetches += 1

    def refused(self) -> None:
        self.metrics.refused.labels(self.id).inc()

    def fail(self, message: str, exc: BaseException) -> None:
        """A transfer failed and will be retried: the pass is not a clean success."""
        self.last.errors += 1
        self.last.transient += is_transient(exc)
        self.last.last_error = message[:ERROR_LIMIT]

    def take_delta(self) -> StoreCounts:
        """What was counted since the last save (to be added to the session's totals, about to be saved)."""
        delta, self.delta = self.delta, StoreCounts()
        return delta

    def problems(
        self, *, refused: Iterable[str], unreadable: Iterable[str], held: Iterable[str] | None = None
    ) -> Problems:
        """Record what is not synced now (the command's counts, the gauges); the session's totals take the
        returned record when the state is saved."""
        noted = Problems(
            refused=tuple(sorted(set(refused))),
            unreadable=tuple(sorted(set(unreadable))),
            held=None if held is None else tuple(held),
        )
        noted.into(self.tally)
        self.metrics.refused_paths.labels(self.id).set(len(noted.refused))
        self.metrics.unreadable.labels(self.id).set(len(noted.unreadable))
        if noted.held is not None:
            self.metrics.held_deletes.labels(self.id).set(len(noted.held))
        return noted

    def outcome(
        self, outcome: str, error: str | None, last_success: float | None, totals: StoreCounts | None = None
    ) -> None:
        """The health of the pass that just ended: healthy only when it synced with no error."""
        health = self.health
        healthy = outcome in CLEAN_OUTCOMES and error is None
        health.outcome = outcome
        health.healthy = healthy
        health.failing_passes = 0 if healthy else health.failing_passes + 1
        if error is not None:
            health.last_error = error[:ERROR_LIMIT]
        elif healthy:
            health.last_error = None
        if last_success is not None:
            health.last_success = rfc3339(last_success)
        if totals is not None:
            health.totals = totals.copy()
        self.metrics.set_ready(self.id, healthy)
