"""``memsync dev`` at stop: what is moved aside (pure plan, then the renames), and the status line's words."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from memsync.api.models import MemoryStore
from memsync.api.secret import encode_work_secret
from memsync.cli.dev import DevRun, _agent_config, dev
from memsync.cli.dev_keep import Kept, describe, move_aside, plan_keep
from memsync.cli.dev_status import DevNumbers, format_status


def test_plan_keeps_refused_blocked_and_unsaved_files_and_nothing_saved() -> None:
    files = {"saved.md": "s1", "big.md": "b1", "edited.md": "e2", "new.md": "n1", "dir/x.md": "x1"}
    baseline = {"saved.md": "s1", "edited.md": "e1", "dir/x.md": "x1"}
    refused = {"big.md": "b1", "gone.md": "g1"}
    blocked = {"link.md": "symlink", "odd": "directory that cannot be opened safely", "odd/in.md": "?"}
    plan = plan_keep(files, baseline, refused, blocked)
    assert plan == {
        "big.md": "refused",
        "link.md": "refused",
        "odd": "refused",  # its contents go with it
        "edited.md": "conflicts",
        "new.md": "conflicts",
    }


def test_plan_refused_content_that_changed_since_is_not_taken_for_refused() -> None:
    assert plan_keep({"a.md": "new"}, {"a.md": "new"}, {"a.md": "old"}, {}) == {}


def test_move_aside_keeps_the_path_and_never_overwrites_an_earlier_copy(tmp_path: Path) -> None:
    folder, base = tmp_path / "mnt", tmp_path / "dev"
    (folder / "notes").mkdir(parents=True)
    (folder / "notes" / "a.md").write_text("second")
    os.symlink("/etc/passwd", folder / "link.md")
    (base / "refused" / "notes").mkdir(parents=True)
    (base / "refused" / "notes" / "a.md").write_text("first")
    kept = move_aside(folder, base, {"notes/a.md": "refused", "link.md": "conflicts", "gone.md": "refused"})
    assert kept == [
        Kept("link.md", "conflicts", base / "conflicts" / "link.md"),
        Kept("notes/a.md", "refused", base / "refused" / "notes" / "a.md~1"),
    ]
    assert (base / "refused" / "notes" / "a.md").read_text() == "first"
    assert (base / "refused" / "notes" / "a.md~1").read_text() == "second"
    assert os.readlink(base / "conflicts" / "link.md") == "/etc/passwd"  # the link itself, not its target
    assert not os.path.lexists(folder / "link.md") and not (folder / "notes" / "a.md").exists()


def test_describe_names_each_kept_file_printably() -> None:
    name = os.fsdecode(b"caf\xe9.md")
    lines = describe(
        [Kept(name, "refused", Path("/d/refused") / name), Kept("b.md", "conflicts", Path("/x"))]
    )
    assert lines[0] == "  2 file(s) the store did not take were moved aside, not deleted:"
    assert lines[1] == "    caf\ufffd.md (refused) -> /d/refused/caf\ufffd.md"
    assert lines[2] == "    b.md (lost a conflict) -> /x"
    "\n".join(lines).encode("utf-8")  # printable: no lone surrogates
    assert describe([]) == []


def test_status_line_shows_refused_unreadable_and_pending_deletes_with_seconds_left() -> None:
    counts = DevNumbers(
        passes=3, last_sync=100.0, deletes=1, refused=2, unreadable=1, pending=2, pending_due=130.0
    )
    text = format_status("Demo", counts, now=105.5, tty=False)
    assert "deletes 1 (+2 pending, confirmed in 25s)" in text
    assert "refused 2, unreadable 1" in text
    quiet = format_status("Demo", DevNumbers(), now=0.0, tty=False)
    assert "deletes 0, conflicts 0, refused 0, unreadable 0" in quiet and "pending" not in quiet


def test_conflict_policy_reaches_the_agent_configuration(tmp_path: Path) -> None:
    run = DevRun(base=tmp_path, port=8700, interval=5.0, flush_timeout=30.0, conflict_policy="keepLocalCopy")
    store = MemoryStore.model_validate(
        {
            "id": "memstore_01abc",
            "name": "Demo",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
    )
    config = _agent_config(
        run, store, "demo", encode_work_secret("sk-ant-tok", "http://127.0.0.1:8700"), "http://127.0.0.1:8700"
    )
    assert config.conflict_policy == "keepLocalCopy"
    refused = CliRunner().invoke(dev, ["--conflict-policy", "mine"])
    assert refused.exit_code == 2 and "storeWins" in refused.output and "keepLocalCopy" in refused.output
