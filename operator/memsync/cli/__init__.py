"""The one ``memsync`` command line.

Subcommands are imported only when they run, so the sync agent's commands (``mount``, ``sync``, ``flush``,
run in every sandbox Pod and in preStop hooks) start without loading the operator or the server.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from memsync import __version__
from memsync.contracts import env
from memsync.logs import configure_logging

# command name -> (module, attribute); each module owns its part's commands.
_COMMANDS: dict[str, tuple[str, str]] = {
    "mount": ("memsync.cli.agent", "mount"),
    "sync": ("memsync.cli.agent", "sync"),
    "flush": ("memsync.cli.agent", "flush"),
    "store": ("memsync.cli.store", "store"),
    "status": ("memsync.cli.status", "status"),
    "operator": ("memsync.cli.operator", "operator"),
    "dev": ("memsync.cli.dev", "dev"),
    "session": ("memsync.cli.session", "session"),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module = importlib.import_module(target[0])
        command: click.Command = getattr(module, target[1])
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memsync")
@click.option(
    "--log-level",
    envvar=env.LOG_LEVEL,
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@click.option(
    "--log-format",
    envvar=env.LOG_FORMAT,
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="json: one object per line, for log pipelines.",
)
def cli(log_level: str, log_format: Any) -> None:
    """memsync: memory stores for self-hosted agent sandboxes, kept in two-way sync."""
    configure_logging(log_level, log_format)


def main() -> None:
    cli()


def kubectl_plugin() -> None:
    """``kubectl-memsync`` on PATH makes ``kubectl memsync ...`` (e.g. ``kubectl memsync status``) run
    these same commands."""
    cli(prog_name="kubectl memsync")
