"""The only place the saved sync state changes: outcome records in, a new state out.

Listing and transfers never touch the state: they return records of what actually happened
(``records``). ``apply_outcomes`` is a pure function from (state, records) to the next state, and
``check_invariants`` names what must hold of every state before it is saved. The baseline rules of
docs/sync-semantics.md#the-baseline live here, beside the pure plans of ``merge``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from memsync.agent.records import (
    Counted,
    DeleteDropped,
    Gone,
    Listed,
    Mounted,
    Noted,
    PassEnded,
    Planned,
    Record,
    Recovering,
    Refused,
    RootSeen,
    Sending,
    SendSettled,
    Uploaded,
    Written,
)
from memsync.agent.state import StoreState
from memsync.contracts.report import StoreCounts

_MAPS = ("baseline", "remote_ids", "refused_shas", "pending_deletes", "sent_shas", "prior_baseline")


@dataclass
class _Draft:
    """A shallow copy of the state whose maps are copied the first time they change (the input is never
    touched: ``apply_outcomes`` is pure, and a no-change pass copies nothing large)."""

    state: StoreState
    copied: set[str] = field(default_factory=set)
    totals_copied: bool = False

    def map(self, name: str) -> dict[str, object]:
        if name not in self.copied:
            setattr(self.state, name, dict(getattr(self.state, name)))
            self.copied.add(name)
        out: dict[str, object] = getattr(self.state, name)
        return out

    def totals(self) -> StoreCounts:
        if not self.totals_copied:
            self.state.totals = self.state.totals.copy()
            self.totals_copied = True
        return self.state.totals


def apply_outcomes(state: StoreState, outcomes: Iterable[Record]) -> StoreState:
    """The state after ``outcomes``, in order. ``state`` itself is left as it was."""
    draft = _Draft(state.model_copy())
    for outcome in outcomes:
        _apply(draft, outcome)
    return draft.state


def _apply(d: _Draft, o: Record) -> None:
    if not _apply_transfer(d, o):
        _apply_pass(d, o)


def _apply_transfer(d: _Draft, o: Record) -> bool:
    """A transfer's record (what happened to one path); False, changing nothing, for any other record."""
    if isinstance(o, Written | Uploaded):
        d.map("baseline")[o.rel] = o.sha
        d.map("remote_ids")[o.rel] = o.memory_id
        if isinstance(o, Uploaded):
            d.map("refused_shas").pop(o.rel, None)
            d.map("sent_shas").pop(o.rel, None)
    elif isinstance(o, Sending):
        d.map("sent_shas")[o.rel] = o.sha
    elif isinstance(o, Refused):
        d.map("refused_shas")[o.rel] = o.sha
        d.map("sent_shas").pop(o.rel, None)
    elif isinstance(o, SendSettled):
        d.map("sent_shas").pop(o.rel, None)
    elif isinstance(o, Gone):
        for name in ("baseline", "remote_ids", "pending_deletes"):
            d.map(name).pop(o.rel, None)
    elif isinstance(o, DeleteDropped):
        d.map("pending_deletes").pop(o.rel, None)
    else:
        return False
    return True


def _apply_pass(d: _Draft, o: Record) -> None:
    """A pass's record: its plan, listing, counts, end, or the root's recovery, sighting or mount."""
    s = d.state
    if isinstance(o, Planned):
        s.baseline, s.remote_ids = dict(o.baseline), dict(o.remote_ids)
        s.refused_shas, s.pending_deletes = dict(o.refused), dict(o.pending)
        s.sent_shas, s.prior_baseline = dict(o.sent), dict(o.prior)
        d.copied.update(_MAPS)
    elif isinstance(o, Listed):
        s.unmappable = dict(o.unmappable)
    elif isinstance(o, Counted):
        d.totals().add(o.delta)
    elif isinstance(o, Noted):
        o.problems.into(d.totals())
    elif isinstance(o, PassEnded):
        s.last_pass_at = o.at
        if o.clean:
            s.last_success_at = o.at
    elif isinstance(o, Recovering):
        s.set_root(o.root)
        # What was agreed stays known (never as a reason to delete) until paths are back in the baseline: if
        # the download is cut short, an edit made after the wipe is not taken for a conflict.
        s.prior_baseline = {**s.prior_baseline, **s.baseline}
        s.baseline, s.remote_ids, s.pending_deletes, s.sent_shas, s.refused_shas = {}, {}, {}, {}, {}
        d.copied.update(_MAPS)
    elif isinstance(o, RootSeen):
        s.set_root(o.root)
    elif isinstance(o, Mounted):
        s.set_root(o.root)
        s.set_parent(o.parent)
        s.mounted_at = s.last_success_at = o.at
    else:
        raise TypeError(f"not a pass's record: {type(o).__name__}")


class StateInvariantError(ValueError):
    """A state about to be saved breaks a rule that always holds (a bug: it is never saved)."""


_HEX_DIGITS = b"0123456789abcdef"
# In the joined keys (NUL between them) a bad key shows one of these; only then is each key looked at.
_SUSPECT = ("\x00\x00", "\x00/", "/\x00", "//", "\x00.", "/.")


def _bad_path(rel: str) -> bool:
    return not rel or "\x00" in rel or bool({"", ".", ".."} & set(rel.split("/")))


def _bad_paths(keys: Iterable[str]) -> list[str]:
    """Relative paths that could escape the folder or are not paths: empty, absolute, an empty, ``.`` or
    ``..`` segment, a trailing slash, a NUL. (Checked on the joined keys first: a pass over 10,000 paths stays
    cheap.)"""
    keys = list(keys)
    blob = "\x00" + "\x00".join(keys) + "\x00"
    if blob.count("\x00") == len(keys) + 1 and not any(s in blob for s in _SUSPECT):
        return []
    return [k for k in keys if _bad_path(k)]


def _all_sha256(values: Iterable[str]) -> bool:
    """Every value is a SHA-256 digest in lowercase hex."""
    values = list(values)
    joined = "".join(values)
    return (
        set(map(len, values)) <= {64}
        and joined.isascii()
        and not joined.encode("ascii").translate(None, _HEX_DIGITS)
    )


def state_problems(state: StoreState) -> list[str]:
    """What is wrong with ``state`` (nothing, normally):

    - every path key is a safe relative path; every content hash is a SHA-256 hex digest;
    - a pending deletion is of a path in the baseline (only a synced file can be deleted);
    - pending times are finite; memory ids are not empty; unmappable entries are store paths (``/...``);
    - the running totals are not negative.
    """
    problems = []
    for name in _MAPS:
        bad = _bad_paths(getattr(state, name))
        if bad:
            problems.append(f"{name} holds a path that is not a safe relative path: {bad[0]!r}")
    for name in ("baseline", "refused_shas", "sent_shas", "prior_baseline"):
        values: dict[str, str] = getattr(state, name)
        if not _all_sha256(values.values()):
            problems.append(f"{name} holds a value that is not a SHA-256 hex digest")
    if not state.pending_deletes.keys() <= state.baseline.keys():
        extra = sorted(state.pending_deletes.keys() - state.baseline.keys())
        problems.append(f"pending_deletes holds a path that is not in the baseline: {extra[0]!r}")
    if not all(math.isfinite(t) for t in state.pending_deletes.values()):
        problems.append("pending_deletes holds a time that is not finite")
    if not all(state.remote_ids.values()):
        problems.append("remote_ids holds an empty memory id")
    if any(not p.startswith("/") for p in state.unmappable):
        problems.append("unmappable holds a path that is not a store path")
    totals = state.totals
    if min(totals.uploaded, totals.downloaded, totals.deleted, totals.conflicts) < 0:
        problems.append("totals hold a negative count")
    return problems


def check_invariants(state: StoreState) -> None:
    """Raise StateInvariantError naming the first broken rule (before a save: a bug never reaches disk)."""
    problems = state_problems(state)
    if problems:
        raise StateInvariantError(f"sync state of memory store {state.memory_store_id}: {problems[0]}")
