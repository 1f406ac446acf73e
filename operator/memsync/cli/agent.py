"""``memsync mount``, ``memsync sync`` and ``memsync flush``: the sync agent in every sandbox Pod.

Every setting is an environment variable (docs/design.md#the-sync-agents-contract) and an equal flag. The
work-item secret is read from ``ANTHROPIC_WORK_SECRET`` (or a file named by ``--work-secret-file``), never
from a plain flag, so it cannot show up in a process listing. Exit codes: 0 success; 1 mount failed / final
flush left files unsent / the secret yields no sessions token; 2 bad configuration; 143 ``mount`` ended by
SIGTERM (it runs as its container's PID 1 and handles the signal: ``memsync.pid1``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from memsync import pid1
from memsync.agent.commands import (
    EXIT_CONFIG,
    EXIT_FAILED,
    AgentFailure,
    run_flush,
    run_mount,
    run_sync,
    write_termination_log,
)
from memsync.agent.config import AgentConfig, ConfigError, load_config
from memsync.contracts import env
from memsync.contracts.report import MountFailure

F = TypeVar("F", bound=Callable[..., Any])
logger = logging.getLogger("memsync.agent")


def _common(func: F) -> F:
    options = [
        click.option(
            "--stores",
            envvar=env.STORES,
            show_envvar=True,
            help="JSON array of {memory_store_id, name, mount_path, access} (1-8 stores).",
        ),
        click.option(
            "--interval",
            envvar=env.SYNC_INTERVAL,
            show_envvar=True,
            help="Seconds between syncs (>= 5, default 15).",
        ),
        click.option(
            "--deletions",
            envvar=env.SYNC_DELETIONS,
            show_envvar=True,
            help="enabled (default) | log_only | disabled: what a confirmed local deletion does.",
        ),
        click.option(
            "--conflict-policy",
            envvar=env.CONFLICT_POLICY,
            show_envvar=True,
            help="storeWins (default): a local edit that conflicts loses to the store's version; "
            "keepLocalCopy: it is also kept beside the file as <name>.conflict-<session>-<UTC time><ext>.",
        ),
        click.option(
            "--flush-timeout",
            envvar=env.FLUSH_TIMEOUT,
            show_envvar=True,
            help="Seconds for each shutdown pass (default 30).",
        ),
        click.option(
            "--state-dir",
            envvar=env.STATE_DIR,
            show_envvar=True,
            help="Where the baseline is kept (default /var/lib/memsync).",
        ),
        click.option(
            "--base-url",
            envvar=env.BASE_URL,
            show_envvar=True,
            help="The memory store API (default: hosted API).",
        ),
        click.option(
            "--work-secret-file",
            type=click.Path(dir_okay=False, path_type=Path),
            help=f"Read the work-item secret from this file (else from {env.WORK_SECRET}).",
        ),
        click.option(
            "--termination-log",
            envvar=env.TERMINATION_LOG,
            show_envvar=True,
            help="One-line JSON outcome, written only if its folder exists (default /dev/termination-log).",
        ),
        click.option(
            "--session-id",
            envvar=env.SESSION_ID,
            show_envvar=True,
            help="The session (informational, logged).",
        ),
        click.option("--test-root", envvar=env.TEST_ROOT, hidden=True),
        click.option("--test-delete-window", envvar=env.TEST_DELETE_WINDOW, hidden=True),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _config(
    params: dict[str, Any],
    *,
    command: str,
    metrics_port: str | None = None,
    early_sync: str | None = None,
) -> AgentConfig:
    secret_file: Path | None = params.pop("work_secret_file", None)
    secret = os.environ.get(env.WORK_SECRET)
    if secret_file is not None:
        try:
            secret = secret_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            _fail_config(f"work_secret_file: cannot read {secret_file}: {exc.strerror}", command, params)
    try:
        return load_config(
            stores=params.get("stores"),
            interval=params.get("interval"),
            early_sync=early_sync,
            deletions=params.get("deletions"),
            conflict_policy=params.get("conflict_policy"),
            flush_timeout=params.get("flush_timeout"),
            state_dir=params.get("state_dir"),
            base_url=params.get("base_url"),
            work_secret=secret,
            termination_log=params.get("termination_log"),
            metrics_port=metrics_port,
            session_id=params.get("session_id"),
            test_root=params.get("test_root"),
            delete_window=params.get("test_delete_window"),
        )
    except ConfigError as exc:
        _fail_config(str(exc), command, params)


def _fail_config(message: str, command: str, params: dict[str, Any]) -> NoReturn:
    click.echo(f"memsync {command}: invalid configuration: {message}", err=True)
    if command == "mount":
        _termination_log_best_effort(params, MountFailure(store=None, error=message))
    sys.exit(EXIT_CONFIG)


def _termination_log_best_effort(params: dict[str, Any], report: MountFailure) -> None:
    """Even with a bad configuration, tell the operator why (if the termination log path is usable)."""
    raw = params.get("termination_log") or "/dev/termination-log"
    if not raw.startswith("/"):
        return
    root = params.get("test_root")
    path = Path(root) / raw.lstrip("/") if root else Path(raw)
    write_termination_log(None, report, path)


def _run(coro_fn: Callable[[], Any]) -> NoReturn:
    """Run the command and exit with its code; a documented failure (no sessions token...) exits 1."""
    try:
        code: int = asyncio.run(coro_fn())
    except AgentFailure as exc:
        logger.error(exc.message)
        sys.exit(EXIT_FAILED)
    sys.exit(code)


@click.command()
@_common
def mount(**params: Any) -> None:
    """Materialise every attached store under its mount path (the Pod's init container)."""
    config = _config(params, command="mount")
    _run(functools.partial(pid1.until_signalled, functools.partial(run_mount, config), what="the mount"))


@click.command()
@_common
@click.option("--once", is_flag=True, help="Run exactly one pass and exit (tests and debugging).")
@click.option(
    "--early-sync",
    envvar=env.EARLY_SYNC,
    show_envvar=True,
    help="true (default) | false: a change in a store's folder starts a pass once it settles (at most "
    "one pass per store every 5 s; the periodic pass stays).",
)
@click.option(
    "--metrics-port",
    envvar=env.METRICS_PORT,
    show_envvar=True,
    help="Serve /metrics, /readyz and /healthz on this port (the Pod uses 9477).",
)
def sync(once: bool, early_sync: str | None, metrics_port: str | None, **params: Any) -> None:
    """Keep every store in two-way sync until SIGTERM, then run the final sync and flush (the sidecar)."""
    config = _config(params, command="sync", metrics_port=metrics_port, early_sync=early_sync)
    _run(functools.partial(run_sync, config, once=once))


@click.command()
@_common
@click.option(
    "--final", is_flag=True, help="The final sync (delete window waived), then the push-only flush."
)
def flush(final: bool, **params: Any) -> None:
    """Push what changed now, bounded by the flush timeout (the preStop hook)."""
    config = _config(params, command="flush")
    _run(functools.partial(run_flush, config, final=final))
