"""The pure sync decisions of docs/sync-semantics.md (merge, deletes, flush): one test per case."""

from __future__ import annotations

import logging

import pytest

from memsync.agent import messages
from memsync.agent.merge import (
    LocalRemove,
    Pull,
    Remote,
    RemoteDelete,
    SyncInput,
    Upload,
    delete_cap,
    plan_flush,
    plan_sync,
    trust,
)

A, B, C = "a" * 64, "b" * 64, "c" * 64


def msgs(plan) -> list[tuple[str, str | None]]:
    return [(e.message, e.rel) for e in plan.events]


# --- step 1 and 3: trust ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("root", "marker", "entries", "baseline", "expected"),
    [
        ("ok", True, 3, 3, "sync"),
        ("ok", False, 1, 3, "leave"),  # marker bad, files present
        ("ok", False, 0, 3, "recover"),  # marker bad, folder emptied
        ("missing", False, 0, 3, "recover"),  # folder gone
        ("ok", True, 0, 2, "recover"),  # wipe: marker intact, no files, baseline > 1
        ("ok", True, 0, 1, "sync"),  # a single missing file is an ordinary deletion
        ("ok", True, 0, 0, "sync"),
        ("replaced", False, 0, 3, "leave"),  # now a symlink or another non-empty directory
        ("replaced_empty", False, 0, 3, "recover"),
    ],
)
def test_trust(root, marker, entries, baseline, expected) -> None:
    assert trust(root, marker, entries, baseline) == expected


# --- step 2: settle sent shas -----------------------------------------------------------------------------


def test_sent_sha_held_remotely_enters_the_baseline_then_local_edit_uploads() -> None:
    plan = plan_sync(
        SyncInput(remote={"f": Remote("m1", B)}, local={"f": C}, baseline={"f": A}, sent={"f": B})
    )
    assert plan.sent == {}
    assert plan.uploads == [Upload(rel="f", local_sha=C, remote_id="m1", expected_sha=B, base_sha=B)]
    assert not plan.conflicts


def test_sent_sha_not_held_remotely_is_dropped() -> None:
    plan = plan_sync(
        SyncInput(remote={"f": Remote("m1", A)}, local={"f": B}, baseline={"f": A}, sent={"f": B})
    )
    assert plan.sent == {}
    assert plan.uploads == [Upload(rel="f", local_sha=B, remote_id="m1", expected_sha=A, base_sha=A)]


# --- step 4: remote missing -------------------------------------------------------------------------------


def test_remote_and_local_missing_drops_the_path() -> None:
    plan = plan_sync(SyncInput(remote={}, local={}, baseline={"f": A}, pending={"f": 1.0}))
    assert plan.baseline == {} and plan.pending == {} and plan.is_noop


def test_remote_missing_local_unchanged_removes_locally() -> None:
    plan = plan_sync(SyncInput(remote={}, local={"f": A}, baseline={"f": A}))
    assert plan.local_removals == [LocalRemove(rel="f", expected_sha=A)]
    assert not plan.uploads


def test_remote_missing_local_edited_recreates_with_warning() -> None:
    plan = plan_sync(SyncInput(remote={}, local={"f": B}, baseline={"f": A}))
    assert plan.uploads == [Upload(rel="f", local_sha=B, remote_id=None, expected_sha=None, base_sha=A)]
    assert (messages.RECREATING, "f") in msgs(plan)


def test_remote_missing_new_local_file_is_created_without_warning() -> None:
    plan = plan_sync(SyncInput(remote={}, local={"f": B}, baseline={}))
    assert plan.uploads == [Upload(rel="f", local_sha=B, remote_id=None, expected_sha=None, base_sha=None)]
    assert plan.events == []


def test_remote_missing_local_edited_read_only_keeps_and_warns_once() -> None:
    plan = plan_sync(SyncInput(remote={}, local={"f": B}, baseline={"f": A}, read_only=True))
    assert plan.is_noop
    (event,) = plan.events
    assert event.message == messages.READ_ONLY_LOCAL_EDIT and event.once is not None


def test_remote_missing_refused_content_is_not_retried() -> None:
    plan = plan_sync(SyncInput(remote={}, local={"f": B}, baseline={}, refused={"f": B}))
    assert plan.is_noop and plan.refused == {"f": B}


# --- step 4: remote present -------------------------------------------------------------------------------


def test_local_missing_remote_changed_restores_with_warning() -> None:
    plan = plan_sync(SyncInput(remote={"f": Remote("m", B)}, local={}, baseline={"f": A}))
    assert plan.pulls == [Pull(rel="f", id="m", sha=B, local_sha=None)]
    assert (messages.RESTORING, "f") in msgs(plan)
    assert plan.baseline["f"] == A  # stays until the pull writes


def test_remote_changed_local_equal_adopts_without_fetching() -> None:
    plan = plan_sync(SyncInput(remote={"f": Remote("m", B)}, local={"f": B}, baseline={"f": A}))
    assert plan.is_noop and plan.baseline["f"] == B and plan.adopted == ["f"]


def test_both_changed_remote_wins_with_warning() -> None:
    plan = plan_sync(SyncInput(remote={"f": Remote("m", B)}, local={"f": C}, baseline={"f": A}))
    assert plan.pulls == [Pull(rel="f", id="m", sha=B, local_sha=C)]
    assert plan.conflicts == ["f"]
    assert (messages.BOTH_CHANGED, "f") in msgs(plan)


def test_both_changed_read_only_warns_too() -> None:
    plan = plan_sync(
        SyncInput(remote={"f": Remote("m", B)}, local={"f": C}, baseline={"f": A}, read_only=True)
    )
    assert plan.pulls and (messages.BOTH_CHANGED, "f") in msgs(plan)


def test_only_remote_changed_pulls_quietly() -> None:
    plan = plan_sync(SyncInput(remote={"f": Remote("m", B)}, local={"f": A}, baseline={"f": A}))
    assert plan.pulls == [Pull(rel="f", id="m", sha=B, local_sha=A)] and plan.events == []


def test_new_remote_file_is_pulled() -> None:
    plan = plan_sync(SyncInput(remote={"f": Remote("m", B)}, local={}, baseline={}))
    assert plan.pulls == [Pull(rel="f", id="m", sha=B, local_sha=None)] and plan.events == []


def test_only_local_changed_uploads_with_the_listed_sha_as_precondition() -> None:
    plan = plan_sync(SyncInput(remote={"f": Remote("m", A)}, local={"f": B}, baseline={"f": A}))
    assert plan.uploads == [Upload(rel="f", local_sha=B, remote_id="m", expected_sha=A, base_sha=A)]


def test_only_local_changed_read_only_does_not_upload() -> None:
    plan = plan_sync(
        SyncInput(remote={"f": Remote("m", A)}, local={"f": B}, baseline={"f": A}, read_only=True)
    )
    assert plan.is_noop and plan.events[0].message == messages.READ_ONLY_LOCAL_EDIT


def test_only_local_changed_refused_sha_is_skipped_until_the_file_changes() -> None:
    inp = SyncInput(remote={"f": Remote("m", A)}, local={"f": B}, baseline={"f": A}, refused={"f": B})
    assert plan_sync(inp).is_noop
    changed = plan_sync(
        SyncInput(remote={"f": Remote("m", A)}, local={"f": C}, baseline={"f": A}, refused={"f": B})
    )
    assert (
        changed.uploads == [Upload(rel="f", local_sha=C, remote_id="m", expected_sha=A, base_sha=A)]
        and changed.refused == {}
    )


def test_nothing_changed_sets_the_baseline_to_the_remote() -> None:
    plan = plan_sync(SyncInput(remote={"f": Remote("m", A)}, local={"f": A}, baseline={"f": A}))
    assert plan.is_noop and plan.baseline == {"f": A} and plan.remote_ids == {"f": "m"}


def test_blocked_paths_and_paths_below_them_are_left_alone() -> None:
    plan = plan_sync(
        SyncInput(
            remote={"link": Remote("m1", B), "dir/x": Remote("m2", A)},
            local={},
            baseline={"link": A, "dir/x": A},
            blocked=frozenset({"link", "dir"}),
            now=100,
            final=True,
        )
    )
    assert plan.is_noop and plan.pending == {}
    assert plan.baseline == {"link": A, "dir/x": A}


def test_below_an_unreadable_file_nothing_is_there_so_a_synced_path_there_is_deleted() -> None:
    """A folder replaced by a file that cannot be read: the file itself is left alone, but no path below it
    can exist locally, so the memories that were there are ordinary local deletions."""
    plan = plan_sync(
        SyncInput(
            remote={"d/x": Remote("m2", A)},
            local={},
            baseline={"d/x": A},
            blocked=frozenset({"d"}),
            blocked_files=frozenset({"d"}),
            now=100,
            final=True,
        )
    )
    assert [d.rel for d in plan.deletes] == ["d/x"]


# --- step 5: corroborated deletes -------------------------------------------------------------------------


def cand(**kw) -> SyncInput:
    base = {"remote": {"f": Remote("m", A)}, "local": {}, "baseline": {"f": A}}
    return SyncInput(**{**base, **kw})


def test_delete_candidate_waits_for_the_window() -> None:
    plan = plan_sync(cand(now=100.0, delete_window=30))
    assert plan.deletes == [] and plan.pending == {"f": 100.0} and plan.waiting_deletes == 1
    later = plan_sync(cand(now=131.0, delete_window=30, pending={"f": 100.0}))
    assert later.deletes == [RemoteDelete(rel="f", id="m", expected_sha=A)]


def test_final_sync_waives_the_window() -> None:
    plan = plan_sync(cand(now=100.0, final=True))
    assert plan.deletes == [RemoteDelete(rel="f", id="m", expected_sha=A)]


def test_clock_going_backwards_restarts_the_window() -> None:
    plan = plan_sync(cand(now=50.0, pending={"f": 100.0}))
    assert plan.pending == {"f": 50.0} and plan.deletes == []


def test_disabled_suppresses_and_keeps_the_baseline() -> None:
    plan = plan_sync(cand(deletions="disabled", final=True))
    assert plan.deletes == [] and plan.suppressed_deletes == 1 and plan.baseline == {"f": A}
    assert plan.events[0].level == logging.DEBUG and messages.DELETES_DISABLED in plan.events[0].message


def test_log_only_logs_and_keeps_the_baseline() -> None:
    plan = plan_sync(cand(deletions="log_only", final=True))
    assert plan.deletes == [] and plan.log_only_deletes == ["f"] and plan.baseline == {"f": A}
    assert (messages.LOG_ONLY_DELETE, "f") in msgs(plan)


def test_read_only_local_deletion_is_not_a_candidate() -> None:
    plan = plan_sync(cand(read_only=True, final=True))
    assert plan.deletes == [] and plan.pending == {}


def test_reappeared_file_clears_pending() -> None:
    plan = plan_sync(
        SyncInput(remote={"f": Remote("m", A)}, local={"f": A}, baseline={"f": A}, pending={"f": 1.0})
    )
    assert plan.pending == {}


@pytest.mark.parametrize(("size", "cap"), [(0, 8), (10, 8), (40, 10), (200, 50), (10_000, 50)])
def test_delete_cap(size: int, cap: int) -> None:
    assert delete_cap(size) == cap


@pytest.mark.parametrize(("mode", "verb"), [("enabled", "sent"), ("log_only", "would send")])
def test_over_the_cap_is_held_with_the_documented_warning(mode: str, verb: str) -> None:
    baseline = {f"f{i:02d}": A for i in range(12)}
    remote = {rel: Remote(f"m{rel}", A) for rel in baseline}
    plan = plan_sync(SyncInput(remote=remote, local={}, baseline=baseline, deletions=mode, final=True))
    assert plan.held_deletes == 4
    assert f"{messages.DELETE_CAP}: {verb} 8 deletes, held 4 for later syncs" in [
        e.message for e in plan.events
    ]
    assert len(plan.deletes if mode == "enabled" else plan.log_only_deletes) == 8
    assert len(plan.pending) == 12  # the held ones stay pending


# --- the push-only flush ---------------------------------------------------------------------------


def test_flush_uploads_changed_files_conditionally_on_the_baseline() -> None:
    uploads = plan_flush(
        local={"same": A, "edited": B, "new": C, "refused": B},
        baseline={"same": A, "edited": A, "refused": A},
        refused={"refused": B},
        remote_ids={"same": "m1", "edited": "m2", "refused": "m3"},
        read_only=False,
    )
    assert uploads == [
        Upload(rel="edited", local_sha=B, remote_id="m2", expected_sha=A, base_sha=A),
        Upload(rel="new", local_sha=C, remote_id=None, expected_sha=None, base_sha=None),
    ]


def test_flush_without_a_known_id_creates() -> None:
    assert plan_flush(local={"f": B}, baseline={"f": A}, refused={}, remote_ids={}, read_only=False) == [
        Upload(rel="f", local_sha=B, remote_id=None, expected_sha=None, base_sha=A)
    ]


def test_flush_skips_read_only_stores() -> None:
    assert plan_flush(local={"f": B}, baseline={}, refused={}, remote_ids={}, read_only=True) == []


# --- after an unfinished recovery: the prior baseline ------------------------------------------------------


def test_prior_baseline_tells_an_edit_from_a_conflict_and_never_deletes() -> None:
    plan = plan_sync(
        SyncInput(
            remote={"edited": Remote("m1", A), "moved_on": Remote("m2", B), "gone": Remote("m3", A)},
            local={"edited": C, "moved_on": C},
            baseline={},
            prior={"edited": A, "moved_on": A, "gone": A},
            final=True,
        )
    )
    # the store still holds what we last agreed on: the local file is an edit, uploaded on that sha
    assert plan.uploads == [Upload(rel="edited", local_sha=C, remote_id="m1", expected_sha=A, base_sha=A)]
    # the store changed since: a conflict as usual (the store wins, with the warning)
    assert plan.conflicts == ["moved_on"]
    assert (messages.BOTH_CHANGED, "moved_on") in msgs(plan)
    # a prior entry is never a deletion candidate, even in the final sync: the missing file is restored
    assert not plan.deletes and not plan.log_only_deletes
    assert [p.rel for p in plan.pulls] == ["gone", "moved_on"]
    # prior entries last while the store keeps those bytes and the path is not back in the baseline
    assert plan.prior == {"edited": A, "gone": A}


def test_prior_baseline_read_only_keeps_the_edit_without_pushing() -> None:
    plan = plan_sync(
        SyncInput(remote={"f": Remote("m1", A)}, local={"f": C}, baseline={}, prior={"f": A}, read_only=True)
    )
    assert not plan.uploads and not plan.pulls and not plan.conflicts
    assert msgs(plan) == [(messages.READ_ONLY_LOCAL_EDIT, "f")]


def test_flush_settles_a_create_against_the_prior_baseline() -> None:
    uploads = plan_flush(
        local={"f": C}, baseline={}, refused={}, remote_ids={}, read_only=False, prior={"f": A}
    )
    assert uploads == [Upload(rel="f", local_sha=C, remote_id=None, expected_sha=None, base_sha=A)]
