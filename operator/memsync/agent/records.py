"""The records a pass makes of what actually happened, and the journal that keeps them until they are applied.

Listing and transfers return records (a memory written locally, an upload the store saved, a send whose
answer was lost, a refusal, a delete that went out...); the engine puts each transfer's records in the
pass's ``Journal`` as soon as that transfer finishes, so a pass cut off midway still saves what was done.
``apply.apply_outcomes`` turns them into the next state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memsync.agent.localfs import RootId
from memsync.agent.merge import SyncPlan
from memsync.agent.state import StoreState
from memsync.contracts.report import SAMPLE_MAX, StoreCounts


def sample(paths: Iterable[str]) -> list[str]:
    """The first few paths, printable (a local name that is not UTF-8 shows with U+FFFD)."""
    out: list[str] = []
    for path in paths:
        if len(out) == SAMPLE_MAX:
            break
        out.append(path.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
    return out


@dataclass(frozen=True, kw_only=True)
class Problems:
    """What is not synced now: refused paths, unreadable files and (after a sync) held deletes (None: as the
    last sync left them)."""

    refused: tuple[str, ...]
    unreadable: tuple[str, ...]
    held: tuple[str, ...] | None = None

    def into(self, counts: StoreCounts) -> None:
        counts.refused, counts.refused_paths = len(self.refused), sample(self.refused)
        counts.unreadable, counts.unreadable_paths = len(self.unreadable), sample(self.unreadable)
        if self.held is not None:
            counts.held_deletes, counts.held_delete_paths = len(self.held), sample(self.held)


@dataclass(frozen=True, kw_only=True)
class Mounted:
    """The store was materialised into its new folder (the root and the directory it was mounted into)."""

    root: RootId | None
    parent: RootId | None
    at: float


@dataclass(frozen=True, kw_only=True)
class RootSeen:
    """The folder's identity, first recorded by a pass (a state saved before identities were)."""

    root: RootId | None


@dataclass(frozen=True, kw_only=True)
class Recovering:
    """The folder was re-created for a recovery: what was agreed moves to the prior baseline, the rest is
    forgotten (docs/sync-semantics.md#the-trust-check)."""

    root: RootId | None


@dataclass(frozen=True, kw_only=True)
class Planned:
    """A sync plan was made: the merged baseline, ids, refusals, pending deletes and prior baseline."""

    baseline: Mapping[str, str]
    remote_ids: Mapping[str, str]
    refused: Mapping[str, str]
    pending: Mapping[str, float]
    sent: Mapping[str, str]
    prior: Mapping[str, str]

    @classmethod
    def of(cls, plan: SyncPlan) -> Planned:
        return cls(
            baseline=plan.baseline,
            remote_ids=plan.remote_ids,
            refused=plan.refused,
            pending=plan.pending,
            sent=plan.sent,
            prior=plan.prior,
        )


@dataclass(frozen=True, kw_only=True)
class Listed:
    """A full listing: the store paths that can never become a local file (remote path -> why)."""

    unmappable: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class Written:
    """A memory's content was written into the folder (mount, recovery or pull)."""

    rel: str
    sha: str
    memory_id: str


@dataclass(frozen=True, kw_only=True)
class Sending:
    """These bytes are about to be sent; until an answer settles it, the outcome is unknown."""

    rel: str
    sha: str


@dataclass(frozen=True, kw_only=True)
class Uploaded:
    """The store holds these bytes for this path (uploaded, or adopted as already there)."""

    rel: str
    sha: str
    memory_id: str


@dataclass(frozen=True, kw_only=True)
class Refused:
    """The server (or a local check) refused this content for good; tried again once the file changes."""

    rel: str
    sha: str


@dataclass(frozen=True, kw_only=True)
class SendSettled:
    """A send got a definite answer that saved nothing (lost to a remote change, path taken, 4xx)."""

    rel: str


@dataclass(frozen=True, kw_only=True)
class Gone:
    """The path is gone on both sides: its delete went out (or it was already gone from the store), or the
    local file of a memory deleted in the store was removed."""

    rel: str


@dataclass(frozen=True, kw_only=True)
class DeleteDropped:
    """A pending local deletion is over: the file came back, or the store changed it (the store wins)."""

    rel: str


@dataclass(frozen=True, kw_only=True)
class Counted:
    """Counts since the last save, added to the session's running totals."""

    delta: StoreCounts


@dataclass(frozen=True, kw_only=True)
class Noted:
    """What is not synced now (refused, unreadable, held deletes), as the session's totals show it."""

    problems: Problems


@dataclass(frozen=True, kw_only=True)
class PassEnded:
    """A pass ended at ``at``; ``clean`` when it synced (or recovered) with no failed transfer."""

    at: float
    clean: bool


Record = (
    Mounted
    | RootSeen
    | Recovering
    | Planned
    | Listed
    | Written
    | Sending
    | Uploaded
    | Refused
    | SendSettled
    | Gone
    | DeleteDropped
    | Counted
    | Noted
    | PassEnded
)


class Journal:
    """The records of the current pass not yet applied, in the order they happened. The engine adds each
    transfer's records as that transfer finishes (``execute.Transfers``); the pass applies them
    (``apply_outcomes``) when it saves, so a pass cut off midway still saves what was done."""

    def __init__(self) -> None:
        self._records: list[Record] = []

    def add(self, *records: Record) -> None:
        self._records.extend(records)

    def take(self) -> list[Record]:
        records, self._records = self._records, []
        return records

    def baseline(self, state: StoreState, rel: str) -> str | None:
        """``rel``'s baseline once the records so far are applied to ``state``."""
        for o in reversed(self._records):
            if isinstance(o, Written | Uploaded) and o.rel == rel:
                return o.sha
            if (isinstance(o, Gone) and o.rel == rel) or isinstance(o, Recovering):
                return None
            if isinstance(o, Planned):
                return o.baseline.get(rel)
        return state.baseline.get(rel)
