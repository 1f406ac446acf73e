"""``memsync completion bash|zsh|fish``: the shell completion script (docs/cli.md#shell-completion)."""

from __future__ import annotations

from typing import Final

import click

#: The variable click's completion protocol reads: ``_<PROG>_COMPLETE`` for the ``memsync`` command.
COMPLETE_VAR: Final = "_MEMSYNC_COMPLETE"


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for bash, zsh or fish.

    \b
    bash:  eval "$(memsync completion bash)"   (in ~/.bashrc; bash 4.4 or newer)
    zsh:   eval "$(memsync completion zsh)"    (in ~/.zshrc)
    fish:  memsync completion fish > ~/.config/fish/completions/memsync.fish
    """
    from click.shell_completion import get_completion_class  # noqa: PLC0415 (only this command)

    from memsync.cli import cli  # noqa: PLC0415 (the root imports this module's table, not the module)

    complete = get_completion_class(shell)
    if complete is None:  # pragma: no cover - the choice above lists only the shells click supports
        raise click.UsageError(f"no completion for {shell}")
    click.echo(complete(cli, {}, "memsync", COMPLETE_VAR).source())
