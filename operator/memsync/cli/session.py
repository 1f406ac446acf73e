"""``memsync session run``: the session runner of an environment's sandbox Pod."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import click

from memsync import pid1
from memsync.session.runner import DEFAULT_FINAL_TIMEOUT_S, RunnerConfigError, config_from_env, run_session


@click.group("session")
def session() -> None:
    """The session runner (in a sandbox Pod that an AgentEnvironment started)."""


@session.command("run")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path.cwd,
    help="The agent's working directory (bash runs there; relative file paths resolve there).",
)
@click.option(
    "--max-idle",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    envvar="MEMSYNC_SESSION_MAX_IDLE",
    show_envvar=True,
    help="Seconds the session may stay idle after its turn ended before the runner ends it.",
)
@click.option(
    "--final-timeout",
    type=click.FloatRange(min=1),
    default=DEFAULT_FINAL_TIMEOUT_S,
    show_default=True,
    envvar="MEMSYNC_SESSION_FINAL_TIMEOUT",
    show_envvar=True,
    help="Seconds to wait for the sidecar's final sync and flush before the work item is stopped anyway.",
)
def run(workdir: Path, max_idle: float, final_timeout: float) -> None:
    """Serve this Pod's work item: run the agent's tool calls against the mounted memory stores, then have
    the sidecar flush them, then stop the item."""
    try:
        config = config_from_env(os.environ, workdir)
    except RunnerConfigError as exc:
        raise click.ClickException(str(exc)) from None

    async def serve() -> int:
        await run_session(config, max_idle=max_idle, final_timeout_s=final_timeout)
        return 0

    # PID 1 of the sandbox: SIGTERM ends the session the way its end does (the final flush, then the item's
    # stop) and exits 143.
    sys.exit(asyncio.run(pid1.until_signalled(serve, what="the session runner")))
