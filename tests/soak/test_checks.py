"""The soak's verdict functions on hand-made data: each violation is found, each legitimate outcome is not."""

from __future__ import annotations

from memsync.agent import messages
from memsync.api.hashing import content_sha256

from .checks import (
    LocalOp,
    Report,
    Version,
    audit_write,
    check_local_ops,
    check_overwrites,
    check_store_shape,
    check_terminations,
    held_at_end,
    waiting_behind,
)

S = "memstore_a"
SESSIONS = {"p1": "sesn_1", "p2": "sesn_2"}


def _kinds(violations: list) -> list[str]:
    return [v.kind for v in violations]


def test_a_local_edit_must_reach_the_store_or_be_reported() -> None:
    ops = {("p1", S, "a.md"): LocalOp("write", "sha-new", 100.0, 7)}
    local = {("p1", S): {"a.md": "x"}}
    saved = {S: [Version("a.md", "sha-new", 101.0, "sesn_1")]}
    assert check_local_ops(ops, local, {S: {}}, saved, {}, SESSIONS) == []
    lost = check_local_ops(
        ops, local, {S: {}}, {S: [Version("a.md", "sha-old", 90.0, "sesn_1")]}, {}, SESSIONS
    )
    assert _kinds(lost) == ["lost_edit"]
    reported = {"p1": [Report(S, "a.md", messages.BOTH_CHANGED, 105.0)]}
    assert check_local_ops(ops, local, {S: {}}, {S: []}, reported, SESSIONS) == []
    stale = {"p1": [Report(S, "a.md", messages.BOTH_CHANGED, 50.0)]}  # before the edit: does not cover it
    assert _kinds(check_local_ops(ops, local, {S: {}}, {S: []}, stale, SESSIONS)) == ["lost_edit"]
    elsewhere = {"p2": [Report(S, "a.md", messages.BOTH_CHANGED, 105.0)]}  # another session's report
    assert _kinds(check_local_ops(ops, local, {S: {}}, {S: []}, elsewhere, SESSIONS)) == ["lost_edit"]


def test_an_unreadable_file_at_the_end_must_be_named() -> None:
    ops = {("p1", S, "a.md"): LocalOp("write", "sha", 100.0, 1)}
    local = {("p1", S): {"a.md": None}}
    assert _kinds(check_local_ops(ops, local, {S: {}}, {S: []}, {}, SESSIONS)) == ["unreadable_unreported"]
    other = {"p1": [Report(S, "a.md", messages.BOTH_CHANGED, 120.0)]}
    assert _kinds(check_local_ops(ops, local, {S: {}}, {S: []}, other, SESSIONS)) == ["unreadable_unreported"]
    # the agent warns once per path: a warning from before the last write names it too
    named = {"p1": [Report(S, "a.md", messages.UNREADABLE, 50.0)]}
    assert check_local_ops(ops, local, {S: {}}, {S: []}, named, SESSIONS) == []


def test_a_local_delete_must_reach_the_store_unless_someone_else_changed_the_memory() -> None:
    ops = {("p1", S, "a.md"): LocalOp("delete", None, 100.0, 3)}
    still = {S: {"a.md": "x"}}
    assert check_local_ops(ops, {}, {S: {}}, {S: []}, {}, SESSIONS) == []
    assert _kinds(check_local_ops(ops, {}, still, {S: []}, {}, SESSIONS)) == ["delete_not_applied"]
    own_later = {S: [Version("a.md", "s", 110.0, "sesn_1")]}
    assert _kinds(check_local_ops(ops, {}, still, own_later, {}, SESSIONS)) == ["delete_not_applied"]
    other_later = {S: [Version("a.md", "s", 110.0, "sesn_2")]}
    assert check_local_ops(ops, {}, still, other_later, {}, SESSIONS) == []
    restored = {"p1": [Report(S, "a.md", messages.RESTORING, 104.0)]}
    assert check_local_ops(ops, {}, still, {S: []}, restored, SESSIONS) == []


def test_a_file_deleted_unreadable_excuses_only_other_writers_since_it_became_unreadable() -> None:
    blind = {("p1", S, "a.md"): LocalOp("delete", None, 100.0, 3, "delete", blind_since=50.0)}
    still = {S: {"a.md": "x"}}
    other_while_blind = {S: [Version("a.md", "s", 70.0, "apikey_admin")]}
    assert check_local_ops(blind, {}, still, other_while_blind, {}, SESSIONS) == []
    other_before = {S: [Version("a.md", "s", 40.0, "apikey_admin")]}
    assert _kinds(check_local_ops(blind, {}, still, other_before, {}, SESSIONS)) == ["delete_not_applied"]
    own_while_blind = {S: [Version("a.md", "s", 70.0, "sesn_1")]}
    assert _kinds(check_local_ops(blind, {}, still, own_while_blind, {}, SESSIONS)) == ["delete_not_applied"]


def test_a_file_created_and_deleted_before_it_reached_the_store_leaves_another_writers_memory_alone() -> None:
    """The test created a.md (where the admin had just created a memory the agent had not pulled yet) and
    deleted it before any pass uploaded it: the admin's memory stays, and rightly so."""
    mine = content_sha256("mine")
    gone = {("p1", S, "a.md"): LocalOp("delete", mine, 100.0, 3, "swap", written_at=95.0, created_at=95.0)}
    admin = {S: {"a.md": "admin"}}
    admin_first = {S: [Version("a.md", content_sha256("admin"), 90.0, "apikey_admin")]}
    assert check_local_ops(gone, {}, admin, admin_first, {}, SESSIONS) == []
    # Uploaded before the delete: the session's memory was there to delete.
    uploaded = {S: [*admin_first[S], Version("a.md", mine, 97.0, "sesn_1")]}
    assert _kinds(check_local_ops(gone, {}, admin, uploaded, {}, SESSIONS)) == ["delete_not_applied"]
    # The file held the store's content when deleted (the agent had pulled it over the test's): it must go.
    held = content_sha256("admin")
    pulled = {("p1", S, "a.md"): LocalOp("delete", held, 100.0, 3, "swap", written_at=95.0, created_at=95.0)}
    assert _kinds(check_local_ops(pulled, {}, admin, admin_first, {}, SESSIONS)) == ["delete_not_applied"]
    # Not created by the test (an edit of a synced file): no such excuse.
    edited = {("p1", S, "a.md"): LocalOp("delete", mine, 100.0, 3, "swap", written_at=95.0)}
    assert _kinds(check_local_ops(edited, {}, admin, admin_first, {}, SESSIONS)) == ["delete_not_applied"]


def test_duplicates_and_strays() -> None:
    local = {("p1", S): {"a.md": "1", "b.md": "2"}, ("p2", S): {"c.md": "3"}}
    attached = {S: ["p1", "p2"]}
    assert check_store_shape({S: {"a.md": "1", "b.md": "2", "c.md": "3"}}, local, attached) == []
    dup = check_store_shape({S: {"a.md": "1", "b.md": "1"}}, local, attached)
    assert _kinds(dup) == ["duplicate"]
    stray = check_store_shape({S: {"a.md": "1", "old.md": "9"}}, local, attached)
    assert _kinds(stray) == ["stray"]


def test_a_duplicate_is_excused_only_where_the_test_wrote_each_copy() -> None:
    """Both sessions renamed the same synced file, each to its own path: two copies, both written locally."""
    local = {("p1", S): {"a.md": "1"}, ("p2", S): {"b.md": "1"}}
    attached = {S: ["p1", "p2"]}
    both = {
        ("p1", S, "a.md"): LocalOp("write", content_sha256("1"), 100.0, 1),
        ("p2", S, "b.md"): LocalOp("write", content_sha256("1"), 101.0, 2),
    }
    assert check_store_shape({S: {"a.md": "1", "b.md": "1"}}, local, attached, {}, both) == []
    one = {("p1", S, "a.md"): both[("p1", S, "a.md")], ("p2", S, "b.md"): LocalOp("delete", None, 102.0, 3)}
    assert _kinds(check_store_shape({S: {"a.md": "1", "b.md": "1"}}, local, attached, {}, one)) == [
        "duplicate"
    ]


def test_every_overwrite_and_delete_needs_its_precondition() -> None:
    url = "/v1/memory_stores/memstore_a/memories/mem_1"
    assert (
        audit_write("POST", url + "?beta=true", b'{"content": "x", "precondition": {"content_sha256": "ab"}}')
        is None
    )
    assert "precondition" in (audit_write("POST", url, b'{"content": "x"}') or "")
    assert audit_write("DELETE", url + "?expected_content_sha256=ab", b"") is None
    assert "expected_content_sha256" in (audit_write("DELETE", url, b"") or "")
    assert (
        audit_write("POST", "/v1/memory_stores/memstore_a/memories", b'{"path": "/a", "content": "x"}')
        is None
    )


def test_the_flush_must_be_complete() -> None:
    good = {"phase": "flushed", "complete": True, "stores": {S: {"unsent": 0}}}
    assert check_terminations({"p1": 0}, {"p1": good}) == []
    assert _kinds(check_terminations({"p1": 1}, {"p1": good})) == ["flush_incomplete"]
    unsent = {"phase": "flushed", "complete": True, "stores": {S: {"unsent": 2}}}
    assert _kinds(check_terminations({"p1": 0}, {"p1": unsent})) == ["flush_incomplete"]


def test_a_session_version_must_follow_one_whose_hash_it_sent() -> None:
    history = [
        Version("a.md", "h1", 1.0, "apikey_x", "mem_1", "created"),
        Version("a.md", "h2", 2.0, "sesn_1", "mem_1", "modified"),
        Version("a.md", None, 3.0, "sesn_2", "mem_1", "deleted"),
    ]
    assert check_overwrites({S: history}, {"mem_1": {"h1", "h2"}}, SESSIONS) == []
    blind = check_overwrites(
        {S: history}, {"mem_1": {"h1"}}, SESSIONS
    )  # sesn_2 deleted h2 without sending it
    assert _kinds(blind) == ["overwrite_without_precondition"]
    assert "sesn_2 deleted memory mem_1" in blind[0].detail
    admin_after = [*history[:2], Version("a.md", "h3", 3.0, "apikey_x", "mem_1", "modified")]
    assert check_overwrites({S: admin_after}, {"mem_1": {"h1"}}, SESSIONS) == []  # only sessions are judged


def test_files_left_unreadable_are_exactly_the_unsent_ones_and_named() -> None:
    left = {("p1", S): {"a.md", "b.md"}}
    named = {"unsent": 2, "unreadable": 2, "unreadable_paths": ["a.md", "b.md"]}
    report = {"phase": "flushed", "complete": False, "stores": {S: named}}
    assert check_terminations({"p1": 1}, {"p1": report}, left) == []
    assert _kinds(check_terminations({"p1": 0}, {"p1": report}, left)) == ["flush_incomplete"]
    one_more = {**named, "unsent": 3}  # a readable file was not saved either
    assert _kinds(check_terminations({"p1": 1}, {"p1": {**report, "stores": {S: one_more}}}, left)) == [
        "flush_incomplete"
    ]
    unnamed = {**named, "unreadable_paths": ["a.md"]}
    assert _kinds(check_terminations({"p1": 1}, {"p1": {**report, "stores": {S: unnamed}}}, left)) == [
        "flush_incomplete"
    ]
    # nothing left unreadable: the same report is a violation
    assert _kinds(check_terminations({"p1": 1}, {"p1": report}, {})) == ["flush_incomplete"]


def test_deletes_held_by_the_cap_at_the_end_are_excused_only_as_reported() -> None:
    ops = {
        ("p1", S, "a.md"): LocalOp("delete", None, 100.0, 3),
        ("p1", S, "b.md"): LocalOp("delete", None, 100.0, 4),
    }
    still = {S: {"a.md": "x", "b.md": "y"}}
    local = {("p1", S): {}}
    reported = {("p1", S): (2, ["a.md"])}
    assert check_local_ops(ops, local, still, {S: []}, {}, SESSIONS, reported) == []
    excused = held_at_end(ops, still, {S: []}, {}, SESSIONS, reported)
    assert check_store_shape(still, local, {S: ["p1"]}, excused) == []
    too_few = {("p1", S): (1, ["a.md"])}
    assert _kinds(check_local_ops(ops, local, still, {S: []}, {}, SESSIONS, too_few)) == [
        "delete_not_applied",
        "delete_not_applied",
    ]
    wrong_name = {("p1", S): (2, ["c.md"])}
    assert len(check_local_ops(ops, local, still, {S: []}, {}, SESSIONS, wrong_name)) == 2


def test_a_held_delete_another_writer_changed_meanwhile_is_among_the_held() -> None:
    """The cap held both deletes and named both; b.md was also changed by another writer after its delete
    (so its delete is excused anyway): it still counts among the held ones, and is no stray."""
    ops = {
        ("p1", S, "a.md"): LocalOp("delete", None, 100.0, 3),
        ("p1", S, "b.md"): LocalOp("delete", None, 100.0, 4),
    }
    still = {S: {"a.md": "x", "b.md": "y"}}
    versions = {S: [Version("b.md", content_sha256("y"), 150.0, "admin")]}
    local = {("p1", S): {}}
    reported = {("p1", S): (2, ["a.md", "b.md"])}
    excused = held_at_end(ops, still, versions, {}, SESSIONS, reported)
    assert excused == {("p1", S): {"a.md", "b.md"}}
    assert check_store_shape(still, local, {S: ["p1"]}, excused) == []
    assert _kinds(check_store_shape(still, local, {S: ["p1"]}, {})) == ["stray", "stray"]
    assert _kinds(check_store_shape(still, local, {S: ["p1"]}, {})) == ["stray", "stray"]


def test_new_files_behind_a_held_delete_are_unsent_only_as_named() -> None:
    held = {("p1", S): {"a.md", "notes/c.md"}}
    local = {("p1", S): {"a.md/inside.md": "1", "notes": "2", "other.md": "3"}}
    waiting = waiting_behind(held, local)
    assert waiting == {("p1", S): {"a.md/inside.md", "notes"}}
    report = {"phase": "flushed", "complete": False, "stores": {S: {"unsent": 2}}}
    assert check_terminations({"p1": 1}, {"p1": report}, {}, waiting) == []
    assert _kinds(check_terminations({"p1": 1}, {"p1": report}, {}, {})) == ["flush_incomplete"]


def test_a_delete_after_both_wrote_the_path_may_lose_to_the_store() -> None:
    mine = content_sha256("mine")
    op = {("p1", S, "a.md"): LocalOp("delete", mine, 100.0, 3, "delete", written_at=50.0)}
    admin_between = {S: [Version("a.md", "s", 70.0, "apikey_admin")]}
    assert check_local_ops(op, {}, {S: {"a.md": "theirs"}}, admin_between, {}, SESSIONS) == []
    # the store holds what the file held (the agent had it): the delete had to go
    assert _kinds(check_local_ops(op, {}, {S: {"a.md": "mine"}}, admin_between, {}, SESSIONS)) == [
        "delete_not_applied"
    ]
    admin_before = {S: [Version("a.md", "s", 40.0, "apikey_admin")]}
    assert _kinds(check_local_ops(op, {}, {S: {"a.md": "theirs"}}, admin_before, {}, SESSIONS)) == [
        "delete_not_applied"
    ]


def test_a_stray_is_excused_only_when_a_session_named_it_refused() -> None:
    """An unreadable local file in the way of a memory: the agent never removes it, so the memory cannot be
    written locally; the session's end names it among the refused paths."""
    local = {("p1", S): {"a.md": "1"}}
    live = {S: {"a.md": "1", "e/f.md": "2"}}
    assert check_store_shape(live, local, {S: ["p1"]}, {}, {}, {S: {"e/f.md"}}) == []
    assert _kinds(check_store_shape(live, local, {S: ["p1"]}, {}, {}, {S: {"other.md"}})) == ["stray"]


def test_held_deletes_beyond_the_sample_with_more_deletes_still_live_than_held() -> None:
    """Three local deletes still live; the cap held two (one named); the third was changed by another writer
    after the delete (excused anyway): the unexcused one and the named one are the held ones."""
    ops = {(("p1", S, r)): LocalOp("delete", None, 100.0, i) for i, r in enumerate(("a.md", "b.md", "c.md"))}
    still = {S: {"a.md": "x", "b.md": "y", "c.md": "z"}}
    versions = {S: [Version("b.md", content_sha256("y"), 150.0, "admin")]}
    versions[S].append(Version("c.md", content_sha256("z"), 150.0, "admin"))
    reported = {("p1", S): (2, ["b.md"])}
    assert held_at_end(ops, still, versions, {}, SESSIONS, reported) == {("p1", S): {"a.md", "b.md"}}
    assert held_at_end(ops, still, versions, {}, SESSIONS, {("p1", S): (2, ["d.md"])}) == {}


def test_deletes_restored_in_the_folder_are_not_among_the_held() -> None:
    """Three local deletes still live; the cap held two (the count names one); c.md was changed by another
    writer within a second of its delete and restored into the folder, a.md too close to call: the two the
    folder does not hold again are the held ones, however the timing excuses a.md."""
    ops = {(("p1", S, r)): LocalOp("delete", None, 100.0, i) for i, r in enumerate(("a.md", "b.md", "c.md"))}
    still = {S: {"a.md": "x", "b.md": "y", "c.md": "z"}}
    versions = {S: [Version(r, content_sha256(c), 99.5, "admin") for r, c in still[S].items() if r != "b.md"]}
    reported = {("p1", S): (2, ["b.md"])}
    restored = {("p1", S): {"c.md": content_sha256("z")}}
    excused = held_at_end(ops, still, versions, {}, SESSIONS, reported, restored)
    assert excused == {("p1", S): {"a.md", "b.md"}}
    assert check_store_shape(still, restored, {S: ["p1"]}, excused) == []
    # Without knowing the folder, a.md (excused by the timing) is left out and becomes a stray.
    blind = held_at_end(ops, still, versions, {}, SESSIONS, reported)
    assert _kinds(check_store_shape(still, restored, {S: ["p1"]}, blind)) == ["stray"]


def test_a_held_delete_another_session_carried_out_still_names_the_held() -> None:
    """Both sessions of a shared store deleted b.md; this one's cap held it (named) while the other deleted
    it: a.md, also held, is excused although b.md is no longer live, and a new file of this session behind
    b.md still waits for it (it was not created by this session's end)."""
    ops = {
        ("p1", S, "a.md"): LocalOp("delete", None, 100.0, 3),
        ("p1", S, "b.md"): LocalOp("delete", None, 100.0, 4),
    }
    live = {S: {"a.md": "x"}}
    held, folder = {("p1", S): (2, ["b.md"])}, {("p1", S): {}}
    excused = held_at_end(ops, live, {S: []}, {}, SESSIONS, held, folder)
    assert excused == {("p1", S): {"a.md", "b.md"}}
    assert check_local_ops(ops, folder, live, {S: []}, {}, SESSIONS, held) == []
    assert waiting_behind(excused, {("p1", S): {"b.md/inner.md": "new"}}) == {("p1", S): {"b.md/inner.md"}}
    never = held_at_end(ops, live, {S: []}, {}, SESSIONS, {("p1", S): (2, ["c.md"])}, folder)
    assert never == {}


def test_a_pulled_file_deleted_after_a_sidecar_kill_may_come_back() -> None:
    """The agent pulled a.md; its sidecar was SIGKILLed before the state recorded the pull; the test deleted
    the file: the restarted agent cannot tell it was its own and keeps the store's memory."""
    theirs = content_sha256("theirs")
    ops = {("p1", S, "a.md"): LocalOp("delete", theirs, 100.0, 3)}
    live = {S: {"a.md": "theirs"}}
    history = {S: [Version("a.md", theirs, 90.0, "apikey_admin")]}
    assert check_local_ops(ops, {}, live, history, {}, SESSIONS, None, {"p1": [95.0]}) == []
    # Killed before the memory existed, after the delete, or another pod: the delete had to go.
    for kills in ({"p1": [80.0]}, {"p1": [105.0]}, {"p2": [95.0]}):
        assert _kinds(check_local_ops(ops, {}, live, history, {}, SESSIONS, None, kills)) == [
            "delete_not_applied"
        ]
    # The test had written the file itself: not the agent's pull.
    written = {("p1", S, "a.md"): LocalOp("delete", theirs, 100.0, 3, written_at=92.0)}
    assert _kinds(check_local_ops(written, {}, live, history, {}, SESSIONS, None, {"p1": [95.0]})) == [
        "delete_not_applied"
    ]


def test_a_delete_of_an_older_version_loses_to_another_writers_newer_one() -> None:
    """The file held the admin's first version; the admin changed the memory again; then the test deleted the
    file: the newer version stays. Had nobody changed it since (or only this session), the delete must go."""
    first, second = content_sha256("first"), content_sha256("second")
    ops = {("p1", S, "a.md"): LocalOp("delete", first, 100.0, 3)}
    live = {S: {"a.md": "second"}}
    newer = {S: [Version("a.md", first, 50.0, "apikey_admin"), Version("a.md", second, 60.0, "apikey_admin")]}
    assert check_local_ops(ops, {}, live, newer, {}, SESSIONS) == []
    by_us = {S: [Version("a.md", first, 50.0, "apikey_admin"), Version("a.md", second, 60.0, "sesn_1")]}
    assert _kinds(check_local_ops(ops, {}, live, by_us, {}, SESSIONS)) == ["delete_not_applied"]
    same = {S: [Version("a.md", first, 50.0, "apikey_admin")]}
    assert _kinds(check_local_ops(ops, {}, {S: {"a.md": "first"}}, same, {}, SESSIONS)) == [
        "delete_not_applied"
    ]


def test_memories_below_a_file_unreadable_at_the_end_are_no_strays() -> None:
    """d1 is a local file the agent cannot read: the store's d1/... memories cannot be written in the folder
    (counted as refused, a sample named); anything elsewhere missing from every folder is still a stray."""
    local = {("p1", S): {"d1": None, "a.md": "1"}}
    live = {S: {"a.md": "1", "d1/x.md": "2", "d1/e/y.md": "3"}}
    assert check_store_shape(live, local, {S: ["p1"]}, {}, {}, {S: {"d1/x.md"}}) == []
    elsewhere = {S: {**live[S], "d10.md": "4"}}
    assert _kinds(check_store_shape(elsewhere, local, {S: ["p1"]}, {}, {}, {})) == ["stray"]


def test_a_delete_of_a_file_that_lost_to_the_store_leaves_the_store_version() -> None:
    """The test wrote a new file where another writer had just created a memory; the agent reported that the
    store's version won; the test then deleted its file (still holding its own content): the store keeps the
    other writer's memory. Had the file held the store's version when deleted, the delete must have gone."""
    written = LocalOp("delete", content_sha256("mine"), 200.0, 9, written_at=100.0)
    ops = {("p1", S, "a.md"): written}
    live = {S: {"a.md": "theirs"}}
    versions = {S: [Version("a.md", content_sha256("theirs"), 90.0, "admin")]}
    lost = {"p1": [Report(S, "a.md", messages.BOTH_CHANGED, 150.0)]}
    local = {("p1", S): {}}
    assert check_local_ops(ops, local, live, versions, lost, SESSIONS) == []
    assert _kinds(check_local_ops(ops, local, live, versions, {}, SESSIONS)) == ["delete_not_applied"]
    held_theirs = {("p1", S, "a.md"): LocalOp("delete", content_sha256("theirs"), 200.0, 9, written_at=100.0)}
    assert _kinds(check_local_ops(held_theirs, local, live, versions, lost, SESSIONS)) == [
        "delete_not_applied"
    ]
