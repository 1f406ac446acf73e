"""The one ``memsync`` command line.

Subcommands are imported only when they run (``memsync.cli.lazy``), so the sync agent's commands (``mount``,
``sync``, ``flush``, run in every sandbox Pod and in preStop hooks) start without loading the operator or
the server, and ``memsync --help`` loads none of them.
"""

from __future__ import annotations

import signal
import sys
import traceback
from typing import Final

import click

from memsync import __version__
from memsync.cli.lazy import Lazy, LazyGroup
from memsync.contracts import env

#: ``memsync --debug``: the command line's own variable (the others are ``memsync.contracts.env``'s).
DEBUG_ENV: Final = "MEMSYNC_DEBUG"

COMMANDS: Final = {
    "completion": Lazy(
        "memsync.cli.completion", "completion", "Print the shell completion script for bash, zsh or fish."
    ),
    "dev": Lazy(
        "memsync.cli.dev",
        "dev",
        "Run the whole lifecycle on this machine: an embedded store server, a demo store, a folder under "
        "DIR/mnt/memory/ kept in two-way sync.",
    ),
    "flush": Lazy(
        "memsync.cli.agent",
        "flush",
        "Push what changed now, bounded by the flush timeout (the preStop hook).",
    ),
    "mount": Lazy(
        "memsync.cli.agent",
        "mount",
        "Materialise every attached store under its mount path (the Pod's init container).",
    ),
    "operator": Lazy("memsync.cli.operator", "operator", "The SessionMemory controller."),
    "session": Lazy(
        "memsync.cli.session",
        "session",
        "The session runner (in a sandbox Pod that an AgentEnvironment started).",
    ),
    "status": Lazy(
        "memsync.cli.status",
        "status",
        "Show the SessionMemories of a namespace: phase, each store's health, last sync and conflicts.",
    ),
    "store": Lazy(
        "memsync.cli.store", "store", "The self-hosted memory store server and its admin commands."
    ),
    "sync": Lazy(
        "memsync.cli.agent",
        "sync",
        "Keep every store in two-way sync until SIGTERM, then run the final sync and flush (the sidecar).",
    ),
}


class _Root(LazyGroup):
    """The ``memsync`` group: what a command lets through becomes one line and an exit code
    (``memsync.cli.failures``), unless ``--debug`` asks for the traceback."""

    lazy_commands = COMMANDS

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except click.exceptions.Exit:
            raise
        except click.Abort as exc:
            if isinstance(exc.__context__, KeyboardInterrupt):  # Ctrl-C at a prompt: not "Aborted!"
                raise _interrupted(signal.SIGINT) from None
            raise
        except KeyboardInterrupt:
            raise _interrupted(signal.SIGINT) from None
        except click.ClickException as exc:
            if ctx.params.get("debug") and exc.__cause__ is not None:  # an error a command explained
                traceback.print_exception(exc.__cause__)
            raise
        except Exception as exc:
            pid1 = sys.modules.get("memsync.pid1")  # loaded already when a command was signalled
            if pid1 is not None and isinstance(exc, pid1.Signalled):
                raise _interrupted(exc.signal) from None
            if ctx.params.get("debug"):
                raise
            from memsync.cli.failures import explain  # noqa: PLC0415 (only on the way out)

            raise explain(exc) from None


def _interrupted(sig: signal.Signals) -> click.exceptions.Exit:
    from memsync.cli.failures import interrupted  # noqa: PLC0415 (only on the way out)

    return interrupted(sig)


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memsync")
@click.option(
    "--log-level",
    envvar=env.LOG_LEVEL,
    show_envvar=True,
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@click.option(
    "--log-format",
    envvar=env.LOG_FORMAT,
    show_envvar=True,
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="json: one object per line, for log pipelines.",
)
@click.option(
    "--debug",
    is_flag=True,
    envvar=DEBUG_ENV,
    show_envvar=True,
    help="Show the traceback of an error (an error is otherwise one line and an exit code: docs/cli.md).",
)
def cli(log_level: str, log_format: str, debug: bool) -> None:
    """memsync: memory stores for self-hosted agent sandboxes, kept in two-way sync."""
    from memsync.logs import configure_logging  # noqa: PLC0415 (not needed to show help)

    configure_logging(log_level, "json" if log_format == "json" else "text")


def main() -> None:
    """``memsync`` (also ``python -m memsync``): one program name in usage lines and for shell completion."""
    cli(prog_name="memsync")


def kubectl_plugin() -> None:
    """``kubectl-memsync`` on PATH makes ``kubectl memsync ...`` (e.g. ``kubectl memsync status``) run
    these same commands."""
    cli(prog_name="kubectl memsync")
