"""A click group whose subcommands are imported only when one of them runs (or shows its own help).

Listing the subcommands (``memsync --help``, ``memsync store --help``) imports none of them: each entry
carries its one-line help, which ``tests/unit/test_cli_startup.py`` keeps equal to the command's own. So the
help of the whole CLI never loads kopf, the Kubernetes client, the store server or the SDK.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem


@dataclass(frozen=True)
class Lazy:
    """Where a subcommand lives, and its one-line help for listings."""

    module: str
    attribute: str
    short_help: str

    def load(self) -> click.Command:
        command: click.Command = getattr(importlib.import_module(self.module), self.attribute)
        return command


class LazyGroup(click.Group):
    """A group over a table ``name -> Lazy``; ``lazy_commands`` is set by each subclass."""

    lazy_commands: Mapping[str, Lazy] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.lazy_commands)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy_commands.get(cmd_name)
        return None if target is None else target.load()

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """Subcommand names from the table (completing ``memsync <TAB>`` imports no command), then the
        group's own options."""
        from click.shell_completion import CompletionItem  # noqa: PLC0415 (only when completing)

        names = [
            CompletionItem(name, help=entry.short_help)
            for name, entry in sorted(self.lazy_commands.items())
            if name.startswith(incomplete)
        ]
        return names + click.Command.shell_complete(self, ctx, incomplete)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        # A stand-in command carries the line, so it is shortened exactly as click shortens a command's own.
        rows = [
            (name, click.Command(name, help=self.lazy_commands[name].short_help).get_short_help_str(limit))
            for name in names
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def lazy_group(table: Mapping[str, Lazy]) -> type[LazyGroup]:
    """A ``LazyGroup`` class over ``table`` (pass it as ``cls=`` to ``click.group``)."""
    return type("LazyGroup", (LazyGroup,), {"lazy_commands": dict(table)})
