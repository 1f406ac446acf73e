"""The CLI's help and its docs agree: every variable a flag reads is shown in ``--help`` and listed in
docs/environment.md with every other variable memsync reads; shell completion works as docs/cli.md says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import memsync
from memsync.cli import cli

REPO = Path(__file__).resolve().parents[2]
ENV_DOC = (REPO / "docs" / "environment.md").read_text()
CLI_DOC = (REPO / "docs" / "cli.md").read_text()
PACKAGE = Path(memsync.__file__).parent


def options(command: click.Command, path: str = "memsync") -> Iterator[tuple[str, click.Option]]:
    """Every option of the whole command tree, with the command line that reaches it."""
    for param in command.params:
        if isinstance(param, click.Option):
            yield path, param
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None
            yield from options(sub, f"{path} {name}")


def envvars(option: click.Option) -> list[str]:
    value = option.envvar
    return [value] if isinstance(value, str) else list(value or ())


def documented() -> set[str]:
    """The variables named in the first column of docs/environment.md's table."""
    rows = [line for line in ENV_DOC.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split(" | ")[0])}


def test_every_flag_with_a_variable_shows_it_in_help() -> None:
    hidden_or_missing = [
        f"{path} {option.opts[-1]}"
        for path, option in options(cli)
        if envvars(option) and not option.hidden and not option.show_envvar
    ]
    assert hidden_or_missing == []


def test_every_variable_a_flag_reads_is_documented() -> None:
    read = {name for _, option in options(cli) for name in envvars(option)}
    assert {"MEMSYNC_SESSION_TOKEN_TTL", "MEMSYNC_STORE_WORKERS", "MEMSYNC_ALL_NAMESPACES"} <= read
    assert sorted(read - documented()) == []


def test_every_variable_named_in_the_code_is_documented() -> None:
    named: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        named |= set(re.findall(r"[\"']((?:MEMSYNC|ANTHROPIC|PROMETHEUS)_[A-Z0-9_]+)[\"']", path.read_text()))
    assert {"MEMSYNC_LOG_LEVEL", "MEMSYNC_STORE_ACCESS_LOG", "ANTHROPIC_WORK_SECRET"} <= named
    assert sorted(named - documented()) == []


def test_the_help_shows_the_variable() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "memsync", "store", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    flat = " ".join(result.stdout.split())
    assert "env var: MEMSYNC_STORE_WORKERS" in flat and "env var: MEMSYNC_SESSION_TOKEN_TTL" in flat


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_for_each_shell(shell: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "memsync", "completion", shell],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "_MEMSYNC_COMPLETE" in result.stdout
    assert f"memsync completion {shell}" in CLI_DOC


def test_completion_completes_commands_and_their_options() -> None:
    def complete(*words: str) -> list[str]:
        env = {
            **os.environ,
            "_MEMSYNC_COMPLETE": "bash_complete",
            "COMP_WORDS": " ".join(["memsync", *words]),
            "COMP_CWORD": str(len(words)),
        }
        out = subprocess.run(
            [sys.executable, "-c", "from memsync.cli import main; main()"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout
        return [line.split(",", 1)[1] for line in out.splitlines()]

    assert complete("st") == ["status", "store"]
    assert complete("store", "se") == ["serve"]
    assert "--workers" in complete("store", "serve", "--w")


def help_of(*argv: str) -> str:
    result = CliRunner().invoke(cli, [*argv, "--help"], prog_name="memsync")
    assert result.exit_code == 0, result.output
    return result.output


def documented_commands() -> list[str]:
    """The first column of each row of docs/cli.md's tables that documents a ``memsync store`` command."""
    rows = [line for line in CLI_DOC.splitlines() if line.startswith("| `memsync store ")]
    cells = [re.split(r"(?<!\\)\|", row)[1] for row in rows]
    return [line for cell in cells for line in re.findall(r"`(memsync store [^`]+)`", cell)]


def test_docs_cli_names_only_commands_and_flags_the_real_help_has() -> None:
    documented = documented_commands()
    assert len(documented) >= 14
    names = set()
    for line in documented:
        name = line.split()[2]
        names.add(name)
        shown = help_of("store", name)
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line):
            assert flag in shown, (
                f"docs/cli.md: `{line}` names {flag}, which `memsync store {name} --help` lacks"
            )
    ctx = click.Context(cli)
    store = cli.get_command(ctx, "store")
    assert isinstance(store, click.Group)
    # serve is documented where the server is (docs/store-api.md)
    assert sorted(set(store.list_commands(click.Context(store))) - {"serve"}) == sorted(names)


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["store", "list"],
        ["store", "memories"],
        ["store", "history"],
        ["store", "admin-key", "list"],
        ["store", "create"],
        ["store", "show"],
        ["store", "archive"],
        ["store", "delete"],
        ["store", "redact"],
    ],
)
def test_every_command_that_prints_an_object_takes_o(argv: list[str]) -> None:
    flat = " ".join(help_of(*argv).split())
    assert "-o, --output [table|wide|json|yaml]" in flat
