"""``memsync --help`` answers at once: the import graph of the help paths, not a clock, is what is checked.

Each case runs the CLI in a fresh interpreter and lists which heavy packages ended up in ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from memsync.cli import COMMANDS, cli
from memsync.cli.lazy import LazyGroup
from memsync.cli.store import COMMANDS as STORE_COMMANDS

#: What only the commands that use them may load (the operator, the status fetch, the server, the SDK).
HEAVY = (
    "kopf",
    "kubernetes",
    "anthropic",
    "fastapi",
    "starlette",
    "uvicorn",
    "aiohttp",
    "urllib3",
    "prometheus_client",
    "memsync.controller",
    "memsync.server",
)
#: And what the bare help of the CLI and of ``status`` never needs (the root's logging setup, which runs
#: before a subcommand's ``--help``, is all they load of memsync's own).
LIGHT_PATHS_ALSO_SKIP = ("pydantic", "httpx", "yaml", "memsync.agent", "memsync.client", "memsync.api")

PROBE = """
import json, sys
from memsync.cli import cli
try:
    cli.main(sys.argv[1:], prog_name="memsync", standalone_mode=False)
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def loaded_after(*argv: str) -> set[str]:
    """The top-level modules and ``memsync.*`` packages imported by ``memsync ARGV`` in a new process."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True, timeout=120
    )
    assert "Usage:" in out.stdout, out.stdout + out.stderr
    modules: list[str] = json.loads(out.stderr.strip().splitlines()[-1])
    return {m if m.startswith("memsync.") else m.split(".")[0] for m in modules} | {
        ".".join(m.split(".")[:2]) for m in modules if m.startswith("memsync.")
    }


@pytest.mark.parametrize("argv", [["--help"], ["status", "--help"], ["store", "--help"]])
def test_the_help_of_the_cli_and_of_status_loads_nothing_heavy(argv: list[str]) -> None:
    loaded = loaded_after(*argv)
    assert "click" in loaded  # the probe sees imports at all
    assert sorted(loaded & {*HEAVY, *LIGHT_PATHS_ALSO_SKIP}) == []


@pytest.mark.parametrize(
    "argv", [["store", "list", "--help"], ["store", "import", "--help"], ["store", "show", "--help"]]
)
def test_the_store_admin_commands_do_not_load_the_server(argv: list[str]) -> None:
    assert sorted(loaded_after(*argv) & set(HEAVY)) == []


def test_store_serve_help_is_the_one_that_loads_the_server() -> None:
    """The check above is not vacuous: the command that serves does load the server."""
    assert {"uvicorn", "fastapi", "memsync.server"} <= loaded_after("store", "serve", "--help")


@pytest.mark.parametrize(
    ("group", "table"), [(cli, COMMANDS), (cli.get_command(click.Context(cli), "store"), STORE_COMMANDS)]
)
def test_each_listed_help_line_is_the_commands_own(
    group: click.Command | None, table: dict[str, object]
) -> None:
    assert isinstance(group, LazyGroup)
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        assert group.lazy_commands[name].short_help == command.get_short_help_str(limit=500), name
    assert set(table) == set(group.list_commands(ctx))
