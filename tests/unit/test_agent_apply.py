"""The one place the sync state changes (``agent/apply.py``): properties of ``apply_outcomes`` over random
states and records, and the invariants checked before every save."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.agent.apply import StateInvariantError, apply_outcomes, check_invariants, state_problems
from memsync.agent.localfs import RootId
from memsync.agent.merge import Remote, SyncInput, plan_sync
from memsync.agent.records import (
    Counted,
    DeleteDropped,
    Gone,
    Journal,
    Listed,
    Mounted,
    Noted,
    PassEnded,
    Planned,
    Problems,
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
from memsync.api.hashing import sha256_bytes
from memsync.contracts.report import StoreCounts

SHAS = [sha256_bytes(bytes([i])) for i in range(4)]
rels = st.lists(st.sampled_from(["a", "b", "notes", "x.md"]), min_size=1, max_size=3).map("/".join)
shas = st.sampled_from(SHAS)
ids = st.sampled_from(["mem_1", "mem_2", "mem_3"])
times = st.floats(min_value=0, max_value=2e9, allow_nan=False)
roots = st.none() | st.builds(RootId, st.integers(0, 9), st.integers(0, 9))


@st.composite
def states(draw: st.DrawFn) -> StoreState:
    baseline = draw(st.dictionaries(rels, shas, max_size=6))
    pending_keys = draw(st.sets(st.sampled_from(sorted(baseline)))) if baseline else set()
    return StoreState(
        memory_store_id="memstore_1",
        baseline=baseline,
        remote_ids=draw(st.dictionaries(rels, ids, max_size=6)),
        refused_shas=draw(st.dictionaries(rels, shas, max_size=3)),
        pending_deletes={rel: draw(times) for rel in pending_keys},
        sent_shas=draw(st.dictionaries(rels, shas, max_size=3)),
        prior_baseline=draw(st.dictionaries(rels, shas, max_size=3)),
        totals=StoreCounts(uploaded=draw(st.integers(0, 5))),
    )


def _problems(draw: st.DrawFn) -> Problems:
    held = draw(st.none() | st.lists(rels, max_size=3).map(tuple))
    return Problems(refused=tuple(draw(st.lists(rels, max_size=3))), unreadable=(), held=held)


@st.composite
def records(draw: st.DrawFn) -> Record:
    kind = draw(st.integers(0, 13))
    rel = draw(rels)
    options: list[Any] = [
        lambda: Written(rel=rel, sha=draw(shas), memory_id=draw(ids)),
        lambda: Uploaded(rel=rel, sha=draw(shas), memory_id=draw(ids)),
        lambda: Sending(rel=rel, sha=draw(shas)),
        lambda: Refused(rel=rel, sha=draw(shas)),
        lambda: SendSettled(rel=rel),
        lambda: Gone(rel=rel),
        lambda: DeleteDropped(rel=rel),
        lambda: Counted(delta=StoreCounts(uploaded=draw(st.integers(0, 3)), deleted=1)),
        lambda: Noted(problems=_problems(draw)),
        lambda: PassEnded(at=draw(times), clean=draw(st.booleans())),
        lambda: RootSeen(root=draw(roots)),
        lambda: Recovering(root=draw(roots)),
        lambda: Listed(unmappable={"/" + rel: "why"}),
        lambda: Mounted(root=draw(roots), parent=draw(roots), at=draw(times)),
    ]
    record: Record = options[kind]()
    return record


record_lists = st.lists(records(), max_size=12)


@given(states(), record_lists)
def test_apply_leaves_its_input_alone_and_keeps_the_invariants(state: StoreState, recs: list[Record]) -> None:
    assert state_problems(state) == []
    before = state.model_dump()
    after = apply_outcomes(state, recs)
    assert state.model_dump() == before
    assert state_problems(after) == []


@given(states(), record_lists, record_lists)
def test_applying_in_two_steps_is_applying_once(state: StoreState, a: list[Record], b: list[Record]) -> None:
    assert (
        apply_outcomes(apply_outcomes(state, a), b).model_dump() == apply_outcomes(state, a + b).model_dump()
    )


@given(states(), record_lists, rels)
def test_the_journal_knows_the_baseline_the_records_leave(
    state: StoreState, recs: list[Record], rel: str
) -> None:
    journal = Journal()
    journal.add(*recs)
    assert journal.baseline(state, rel) == apply_outcomes(state, recs).baseline.get(rel)
    assert journal.take() == recs and journal.take() == []


@given(states(), records())
def test_each_record_does_what_it_says(state: StoreState, record: Record) -> None:
    after = apply_outcomes(state, [record])
    if isinstance(record, Written | Uploaded):
        assert after.baseline[record.rel] == record.sha and after.remote_ids[record.rel] == record.memory_id
        if isinstance(record, Uploaded):
            assert record.rel not in after.sent_shas and record.rel not in after.refused_shas
        else:
            assert after.sent_shas == state.sent_shas and after.refused_shas == state.refused_shas
    elif isinstance(record, Sending):
        assert after.sent_shas[record.rel] == record.sha
    elif isinstance(record, Refused):
        assert after.refused_shas[record.rel] == record.sha and record.rel not in after.sent_shas
    elif isinstance(record, SendSettled):
        assert record.rel not in after.sent_shas and after.baseline == state.baseline
    elif isinstance(record, Gone):
        assert all(record.rel not in m for m in (after.baseline, after.remote_ids, after.pending_deletes))
    elif isinstance(record, DeleteDropped):
        assert record.rel not in after.pending_deletes and after.baseline == state.baseline
    elif isinstance(record, Recovering):
        assert after.prior_baseline == {**state.prior_baseline, **state.baseline}
        assert not (after.baseline or after.remote_ids or after.pending_deletes or after.sent_shas)
        assert not after.refused_shas and after.root_id == record.root
    elif isinstance(record, PassEnded):
        assert after.last_pass_at == record.at
        assert after.last_success_at == (record.at if record.clean else state.last_success_at)
    elif isinstance(record, Counted):
        assert after.totals.uploaded == state.totals.uploaded + record.delta.uploaded
        assert after.totals.deleted == state.totals.deleted + 1
    elif isinstance(record, Noted):
        assert after.totals.refused == len(record.problems.refused)
    elif isinstance(record, Mounted):
        assert after.mounted_at == after.last_success_at == record.at
        assert (after.root_id, after.parent_id) == (record.root, record.parent)


@st.composite
def sides(draw: st.DrawFn, state: StoreState) -> tuple[dict[str, Remote], dict[str, str]]:
    paths = sorted({*state.baseline, *draw(st.sets(rels, max_size=4))})
    remote = {p: Remote(f"m-{p}", draw(shas)) for p in paths if draw(st.booleans())}
    local = {p: draw(shas) for p in paths if draw(st.booleans())}
    return remote, local


@settings(max_examples=200)
@given(st.data(), states(), st.sampled_from(["enabled", "log_only", "disabled"]), st.booleans())
def test_a_plan_and_what_its_transfers_report_keep_the_invariants(
    data: st.DataObject, state: StoreState, deletions: Any, final: bool
) -> None:
    """The merge plan, then every pull written, every upload saved and every delete sent (the best case), or
    any subset of them (transfers fail): each state on the way can be saved."""
    remote, local = data.draw(sides(state))
    plan = plan_sync(
        SyncInput(
            remote=remote,
            local=local,
            baseline=state.baseline,
            refused=state.refused_shas,
            pending=state.pending_deletes,
            sent=state.sent_shas,
            prior=state.prior_baseline,
            deletions=deletions,
            now=1_000.0,
            final=final,
            delete_window=0.0 if final else 30.0,
        )
    )
    done: list[Record] = [
        *(Gone(rel=d.rel) for d in plan.deletes),
        *(Gone(rel=r.rel) for r in plan.local_removals),
        *(Sending(rel=u.rel, sha=u.local_sha) for u in plan.uploads),
        *(Uploaded(rel=u.rel, sha=u.local_sha, memory_id="mem_new") for u in plan.uploads),
        *(Written(rel=p.rel, sha=p.sha, memory_id=p.id) for p in plan.pulls),
    ]
    kept = data.draw(st.lists(st.sampled_from(done), unique=True) if done else st.just([]))
    planned = apply_outcomes(state, [Planned.of(plan)])
    check_invariants(planned)
    check_invariants(apply_outcomes(planned, kept))
    after = apply_outcomes(planned, done)
    check_invariants(after)
    assert all(after.baseline.get(u.rel) == u.local_sha for u in plan.uploads)
    assert not any(d.rel in after.baseline for d in plan.deletes)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"baseline": {"../escape.md": SHAS[0]}}, "baseline holds a path"),
        ({"baseline": {"/abs.md": SHAS[0]}}, "baseline holds a path"),
        ({"remote_ids": {"a//b": "mem_1"}}, "remote_ids holds a path"),
        ({"sent_shas": {"a/./b": SHAS[0]}}, "sent_shas holds a path"),
        ({"refused_shas": {"": SHAS[0]}}, "refused_shas holds a path"),
        ({"prior_baseline": {"dir/": SHAS[0]}}, "prior_baseline holds a path"),
        ({"baseline": {"a": "not-a-sha"}}, "baseline holds a value"),
        ({"sent_shas": {"a": SHAS[0].upper()}}, "sent_shas holds a value"),
        ({"pending_deletes": {"gone": 1.0}}, "pending_deletes holds a path that is not in the baseline"),
        ({"baseline": {"a": SHAS[0]}, "pending_deletes": {"a": math.inf}}, "not finite"),
        ({"remote_ids": {"a": ""}}, "empty memory id"),
        ({"unmappable": {"no-slash": "why"}}, "unmappable"),
    ],
)
def test_a_broken_state_is_never_saved(change: dict[str, Any], named: str) -> None:
    state = StoreState(memory_store_id="memstore_1").model_copy(update=change)
    with pytest.raises(StateInvariantError, match=named):
        check_invariants(state)


def test_a_sound_state_passes() -> None:
    state = StoreState(
        memory_store_id="memstore_1",
        baseline={"notes/a.md": SHAS[0], "..hidden/x": SHAS[1]},
        pending_deletes={"notes/a.md": 5.0},
        unmappable={"/bad\\name": "contains a backslash"},
    )
    check_invariants(state)
