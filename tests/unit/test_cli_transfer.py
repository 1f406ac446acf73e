"""The decisions behind ``store import``/``export`` and ``store serve``'s checks, as pure functions: what an
import leaves out, how long a silent server is waited for, which paths and settings are refused."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from memsync.cli import cli, params
from memsync.cli.dev_folder import holding
from memsync.cli.failures import CliError, ExitCode, interrupted
from memsync.cli.store.exporting import check_target
from memsync.cli.store.importing import LocalFile, change_of, exclusions, plan_import
from memsync.cli.store.serve_checks import is_wildcard, long_enough, sqlite_problem
from memsync.cli.store.transfer import GaveUp, Patience, time_left
from memsync.client import errors


def test_an_import_leaves_vcs_folders_out_unless_asked_and_takes_gitignore_patterns(tmp_path: Path) -> None:
    for rel in (".git/config", ".hg/store", "sub/.svn/entries", "a.md", "logs/x.log", "keep.log", "d/e.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    (tmp_path / "sub" / ".git").write_text("gitdir: ../.git/worktrees/sub\n")  # a worktree's .git file
    plan = plan_import(tmp_path)
    assert sorted(f.path for f in plan.files) == ["/a.md", "/d/e.md", "/keep.log", "/logs/x.log"]
    assert sorted(plan.excluded) == [".git/", ".hg/", "sub/.git", "sub/.svn/"]
    patterns = plan_import(tmp_path, exclusions(["*.log", "!keep.log", "/d"], vcs=False))
    assert sorted(f.path for f in patterns.files) == [
        "/.git/config",
        "/.hg/store",
        "/a.md",
        "/keep.log",
        "/sub/.git",
        "/sub/.svn/entries",
    ]
    assert sorted(patterns.excluded) == ["d/", "logs/x.log"]


def test_a_link_to_a_folder_is_skipped_and_said(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "n.md").write_text("n")
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    plan = plan_import(tmp_path)
    assert [f.path for f in plan.files] == ["/real/n.md"]
    assert plan.skipped == [("alias", "symbolic link (not followed)")]


def test_what_an_import_does_to_each_file() -> None:
    listed = {"/same.md": ("mem_1", "a" * 64)}
    assert change_of(LocalFile("/new.md", "x"), listed) == "create"
    assert change_of(LocalFile("/same.md", "x"), listed) == "update"
    from memsync.api.hashing import content_sha256

    assert change_of(LocalFile("/same.md", "x"), {"/same.md": ("mem_1", content_sha256("x"))}) == "unchanged"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def unreachable() -> errors.TransportError:
    return errors.TransportError(0, "connection_error", "GET http://127.0.0.1:1/x: refused")


async def test_patience_rides_out_a_short_outage_and_gives_up_after_its_budget() -> None:
    clock = Clock()
    patience = Patience(10.0, clock=clock, sleep=clock.sleep)
    outcomes: list[object] = ["answer", unreachable(), unreachable(), "answer"]

    async def request() -> object:
        clock.now += 1.0  # each try takes a second
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert await patience.call(request) == "answer"
    assert await patience.call(request) == "answer"  # two failures, then an answer: no error
    assert patience.since is None

    async def never() -> object:
        clock.now += 1.0
        raise unreachable()

    start = clock.now
    with pytest.raises(GaveUp) as gave_up:
        await patience.call(never)
    assert 10.0 <= clock.now - start <= 10.0 + 4.0 + 1.0  # the budget, plus at most one pause and try
    assert gave_up.value.waited_s >= 10.0


async def test_a_server_that_never_answered_is_not_waited_for() -> None:
    patience = Patience(30.0)

    async def never() -> object:
        raise unreachable()

    with pytest.raises(errors.TransportError):
        await patience.call(never)


def test_time_left() -> None:
    assert time_left(None, 100.0, 30.0) == 30.0
    assert time_left(80.0, 100.0, 30.0) == 10.0
    assert time_left(60.0, 100.0, 30.0) < 0


def test_export_refuses_a_folder_that_holds_anything_unless_told(tmp_path: Path) -> None:
    check_target(tmp_path / "missing", "refuse")
    check_target(tmp_path, "refuse")  # empty
    (tmp_path / ".git").mkdir()
    with pytest.raises(CliError) as refused:
        check_target(tmp_path, "refuse")
    assert refused.value.exit_code == ExitCode.USAGE and "--merge" in refused.value.message
    check_target(tmp_path, "merge")
    check_target(tmp_path, "force")


@pytest.mark.parametrize(
    "argv",
    [
        ["store", "export", "memstore_1", ""],
        ["store", "import", "memstore_1", ""],
        ["store", "serve", "--db", ""],
        ["store", "backup", "x.db", "--db", " "],
        ["dev", "--dir", ""],
    ],
)
def test_an_empty_path_is_a_usage_error(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, argv, env={"MEMSYNC_ADMIN_KEY": "sk-" + "k" * 40})
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "must not be empty" in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_memory_path_or_prefix_without_its_slash_is_taken_from_the_root(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(params, "_said_from_root", [])
    assert params.MEMORY_REF.convert("a.md", None, None) == "/a.md"
    assert params.MEMORY_REF.convert("notes/b.md", None, None) == "/notes/b.md"
    assert params.MEMORY_REF.convert("mem_01abc", None, None) == "mem_01abc"
    assert capsys.readouterr().err.count("taken from the store's root") == 1  # said once
    with pytest.raises(click.BadParameter):
        params.MEMORY_REF.convert("sk-ant-pasted", None, None)
    ctx = click.Context(click.Command("x"))
    option = click.Option(["--prefix"])
    for given in ("sub", "sub/", "/sub", "/sub/"):
        assert params.normalise_prefix(ctx, option, given) == "/sub/"
    assert params.normalise_prefix(ctx, option, "/") is None


def test_serve_checks() -> None:
    assert is_wildcard("0.0.0.0") and is_wildcard("::") and is_wildcard("[::]") and is_wildcard("")
    assert not is_wildcard("127.0.0.1") and not is_wildcard("store.example")
    assert long_enough("k" * 32, "MEMSYNC_ADMIN_KEY") == "k" * 32
    with pytest.raises(CliError) as short:
        long_enough("hunter2", "MEMSYNC_ADMIN_KEY")
    assert short.value.exit_code == ExitCode.USAGE and "hunter2" not in short.value.message


def test_a_database_path_is_checked_without_writing(tmp_path: Path) -> None:
    assert sqlite_problem(tmp_path / "new.db") is None
    (tmp_path / "empty.db").write_bytes(b"")
    assert sqlite_problem(tmp_path / "empty.db") is None
    (tmp_path / "junk.db").write_text("not a database at all")
    assert "not an SQLite database" in (sqlite_problem(tmp_path / "junk.db") or "")
    assert "folder" in (sqlite_problem(tmp_path) or "")
    assert f"the folder {tmp_path / 'missing'} does not exist" in (
        sqlite_problem(tmp_path / "missing" / "x.db") or ""
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "junk.db"]


def test_a_second_holder_of_the_dev_folder_is_refused(tmp_path: Path) -> None:
    base = tmp_path / ".memsync"
    with holding(base):
        with pytest.raises(CliError) as refused, holding(base):
            pass
        assert refused.value.exit_code == ExitCode.CONFLICT
        assert f"pid {os.getpid()}" in refused.value.message
    with holding(base):  # released when the first ended
        pass


def test_an_interrupt_is_said_and_exits_with_the_shell_s_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert interrupted(signal.SIGINT, "3 done").exit_code == 130
    assert interrupted(signal.SIGTERM).exit_code == 143
    assert capsys.readouterr().err.splitlines() == ["interrupted by SIGINT: 3 done", "interrupted by SIGTERM"]


def test_ctrl_c_in_any_command_is_exit_130_never_aborted(monkeypatch: pytest.MonkeyPatch) -> None:
    import memsync.cli.status_cluster

    def pressed(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(memsync.cli.status_cluster, "connect", pressed)
    result = CliRunner().invoke(cli, ["status"])
    assert result.exit_code == 130
    assert "Aborted" not in result.output and "interrupted by SIGINT" in result.output
