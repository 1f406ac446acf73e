"""One store's record keeping: what the current command did (the termination report's ``stores``), what was
counted since the state was last saved (added to the session's totals there), the sync health served at
``/status`` and reflected by ``/readyz``, and the Prometheus metrics, all fed from one place."""

from __future__ import annotations

from collections.abc import Iterable

from memsync.agent.metrics import Metrics
from memsync.contracts.health import ERROR_LIMIT, StoreHealth, rfc3339
from memsync.contracts.report import SAMPLE_MAX, StoreCounts

CLEAN_OUTCOMES = ("synced", "recovered")


def sample(paths: Iterable[str]) -> list[str]:
    """The first few paths, printable (a local name that is not UTF-8 shows with U+FFFD)."""
    out: list[str] = []
    for path in paths:
        if len(out) == SAMPLE_MAX:
            break
        out.append(path.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
    return out


class Recorder:
    def __init__(self, store_id: str, metrics: Metrics) -> None:
        self.id = store_id
        self.metrics = metrics
        self.tally = StoreCounts()
        self.delta = StoreCounts()
        self.health = StoreHealth()

    def bump(self, *, uploaded: int = 0, downloaded: int = 0, deleted: int = 0, conflicts: int = 0) -> None:
        """Count what happened, for the command, the session and the metrics."""
        for counts in (self.tally, self.delta):
            counts.uploaded += uploaded
            counts.downloaded += downloaded
            counts.deleted += deleted
            counts.conflicts += conflicts
        m, store = self.metrics, self.id
        for counter, n in (
            (m.uploads, uploaded),
            (m.downloads, downloaded),
            (m.deletes, deleted),
            (m.conflicts, conflicts),
        ):
            if n:
                counter.labels(store).inc(n)

    def flush_into(self, totals: StoreCounts) -> None:
        """Add what was counted since the last save to the session's totals (about to be saved)."""
        totals.add(self.delta)
        self.delta = StoreCounts()

    def problems(
        self,
        totals: StoreCounts,
        *,
        refused: Iterable[str],
        unreadable: Iterable[str],
        held: list[str] | None = None,
    ) -> None:
        """What is not synced now: refused paths, unreadable files and (after a sync) held deletes."""
        refused, unreadable = sorted(set(refused)), sorted(set(unreadable))
        for counts in (self.tally, totals):
            counts.refused, counts.refused_paths = len(refused), sample(refused)
            counts.unreadable, counts.unreadable_paths = len(unreadable), sample(unreadable)
            if held is not None:
                counts.held_deletes, counts.held_delete_paths = len(held), sample(held)
        self.metrics.refused_paths.labels(self.id).set(len(refused))
        self.metrics.unreadable.labels(self.id).set(len(unreadable))
        if held is not None:
            self.metrics.held_deletes.labels(self.id).set(len(held))

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
