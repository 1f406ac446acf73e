"""``memsync dev``: the whole lifecycle on one machine (``make dev``).

It starts an embedded store server (uvicorn on a background thread, SQLite under ``--dir``), makes sure a demo
store exists (found by name, so every run reuses it), mints a session for it, mounts the store into
``<dir>/mnt/memory/<slug>/`` with the sync agent's own ``mount``, and runs the agent's own ``sync`` loop with
a short interval and a status line on stderr. Ctrl-C (SIGINT) or SIGTERM runs the agent's final shutdown
(final sync, then the push-only flush), moves the files the store did not take (refused, or a local edit that
lost a conflict) under ``DIR/refused/`` and ``DIR/conflicts/`` (``memsync.cli.dev_keep``), removes the folders
this command created, stops the server, and prints where the store lives, what was kept and how to look at it.
The exit code is 7 (partial) when files were moved aside, 1 when the flush left changed files unsent.

Nothing here is a second implementation of the agent: ``memsync.agent.commands.mount`` and ``run_sync`` do the
work, with an ordinary configuration whose mount path and state directory sit under ``--dir`` (no test-only
path remapping). A run that was killed (SIGKILL) leaves its folder and state behind; the next run resumes
from them instead of refusing, so edits made before the kill are still pushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from memsync import pid1
from memsync.agent.commands import EXIT_OK, AgentFailure, mount, run_sync
from memsync.agent.config import AgentConfig, ConfigError, load_config
from memsync.agent.localfs import open_root
from memsync.agent.scan import HashCache, scan
from memsync.agent.state import load_state, lock_file, remove_state
from memsync.api.constants import MARKER_FILENAME
from memsync.api.hashing import marker_text, sha256_bytes
from memsync.api.models import MemoryStore, MemoryStoreResource
from memsync.cli.dev_folder import cli_lines, holding
from memsync.cli.dev_keep import Kept, describe, move_aside, plan_keep
from memsync.cli.dev_status import ClearStatusFirst, DevNumbers, StatusLine, format_status, read_counts
from memsync.cli.failures import CliError, ExitCode
from memsync.cli.params import NonEmptyPath
from memsync.cli.store.admin import load_or_create_key_file
from memsync.client import StoreClient
from memsync.client import errors as store_errors
from memsync.contracts.env import CONFLICT_POLICIES
from memsync.devtools.demo_store import count_memories, ensure_demo_store
from memsync.devtools.dev_server import EmbeddedServer

logger = logging.getLogger("memsync.dev")

DB_NAME = "store.db"
STATUS_REFRESH_S = 0.5


# --- the demo store and the session ---------------------------------------------------------------------


def _marker_ok(folder: Path, store_id: str) -> bool:
    try:
        data = (folder / MARKER_FILENAME).read_bytes()
    except OSError:
        return False
    return sha256_bytes(data) == sha256_bytes(marker_text(store_id).encode("utf-8"))


def _has_files(folder: Path) -> bool:
    return any(any(f != MARKER_FILENAME for f in files) for _, _, files in os.walk(folder))


# --- the command -----------------------------------------------------------------------------------------


@dataclass
class DevRun:
    base: Path
    port: int
    interval: float
    flush_timeout: float
    conflict_policy: str = "storeWins"

    @property
    def db_path(self) -> Path:
        return self.base / DB_NAME

    @property
    def key_path(self) -> Path:
        return self.base / (DB_NAME + ".admin-key")

    @property
    def state_dir(self) -> Path:
        return self.base / "state"


def _agent_config(run: DevRun, store: MemoryStore, slug: str, secret: str, base_url: str) -> AgentConfig:
    try:
        return load_config(
            stores=[
                {
                    "memory_store_id": store.id,
                    "name": store.name,
                    "mount_path": str(run.base / "mnt" / "memory" / slug),
                    "access": "read_write",
                }
            ],
            interval=run.interval,
            flush_timeout=run.flush_timeout,
            conflict_policy=run.conflict_policy,
            state_dir=str(run.state_dir),
            base_url=base_url,
            work_secret=secret,
            # The agent writes the termination log only when its folder exists: point it at one that does not.
            termination_log=str(run.base / "no-termination-log" / "termination-log"),
        )
    except ConfigError as exc:
        raise CliError(f"cannot build the sync agent's configuration: {exc}", ExitCode.USAGE) from None


async def _main(run: DevRun, status: StatusLine) -> int:
    admin_key, _ = load_or_create_key_file(run.key_path)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    received: list[signal.Signals] = []
    mounted = False

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig)
        if len(received) > 1:
            logger.warning(
                "already shutting down: the final sync and flush are bounded by the flush timeout",
                extra={"flush_timeout": run.flush_timeout},
            )
        elif mounted:
            logger.info(f"{sig.name} received: running the final sync and flush, then cleaning up")
        else:
            logger.info(f"{sig.name} received: stopping before the store folder is mounted")
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    server: EmbeddedServer | None = None
    store: MemoryStore | None = None
    code = 1
    kept: list[Kept] = []
    try:
        server = EmbeddedServer(run.db_path, admin_key, "127.0.0.1", run.port)
        await asyncio.to_thread(server.start)
        logger.info("embedded store server listening", extra={"url": server.url, "db": str(run.db_path)})
        click.echo("\n".join(cli_lines(server.url, run.key_path)), err=True)
        async with StoreClient(server.url, api_key=admin_key) as admin:
            store, created = await ensure_demo_store(admin)
            memories = await count_memories(admin, store.id)
            logger.info(
                "created the demo store" if created else "using the existing demo store",
                extra={"memory_store_id": store.id, "store_name": store.name, "memories": memories},
            )
            session, secret = await admin.mint_session(
                [MemoryStoreResource(memory_store_id=store.id, access="read_write")]
            )
        slug = Path(session.resources[0].mount_path or f"/mnt/memory/{store.id}").name
        config = _agent_config(run, store, slug, secret, server.url)
        folder = config.mount_dir(config.stores[0])
        if received:
            code = pid1.exit_code(received[0])
            return code
        await _mount_or_resume(config, folder, store.id)
        mounted = True
        click.echo(f"memsync dev: {store.name!r} ({store.id}) is mounted at {folder}", err=True)
        click.echo("memsync dev: edit the files there; Ctrl-C runs the final sync and cleans up", err=True)
        code = await _sync_with_status(config, store, stop, status)
        status.clear()
        kept = await asyncio.to_thread(_cleanup, config, folder, store.id, code, run.base)
        if kept and code == EXIT_OK:
            code = ExitCode.PARTIAL
        return code
    except AgentFailure as exc:
        status.clear()
        logger.error(exc.message)
        return 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if server is not None:
            await asyncio.to_thread(server.stop)
        status.clear()
        _print_where(run, store, code, kept)
        if received and not mounted:
            click.echo(f"interrupted by {received[0].name}: nothing was mounted", err=True)


async def _environment_main(run: DevRun) -> int:
    from memsync.devtools.environment import run_environment_demo  # noqa: PLC0415 (only this mode needs it)

    admin_key, _ = load_or_create_key_file(run.key_path)
    server = EmbeddedServer(run.db_path, admin_key, "127.0.0.1", run.port)
    await asyncio.to_thread(server.start)
    try:
        return await run_environment_demo(
            server.url,
            admin_key,
            run.base / "environment",
            run.flush_timeout,
            lambda text: click.echo(f"memsync dev: {text}", err=True),
        )
    finally:
        await asyncio.to_thread(server.stop)


def _leftover(config: AgentConfig, folder: Path, store_id: str) -> str:
    """``none`` (mount it), ``resume`` (our own folder and state from a killed run) or ``foreign``."""
    if not os.path.lexists(folder):
        return "none"
    state = load_state(config.state_path, store_id)
    if state is not None and folder.is_dir() and not folder.is_symlink() and _marker_ok(folder, store_id):
        return "resume"
    return "foreign"


async def _mount_or_resume(config: AgentConfig, folder: Path, store_id: str) -> None:
    found = await asyncio.to_thread(_leftover, config, folder, store_id)
    if found == "none":
        await mount(config)
        return
    # A folder left behind by a run that was killed: resume from its saved state (nothing unsynced is lost).
    if found == "resume":
        logger.warning(
            "resuming the store folder left by an earlier memsync dev run (it was not shut down cleanly)",
            extra={"path": str(folder)},
        )
        return
    raise AgentFailure(
        f"something already exists at the memory store's path: {folder} "
        "(not from an earlier memsync dev run this command can resume; move it away and run again)"
    )


async def _sync_with_status(
    config: AgentConfig, store: MemoryStore, stop: asyncio.Event, status: StatusLine
) -> int:
    agents: list[Any] = []

    def on_ready(agent: Any, _server: Any) -> None:
        agents.append(agent)

    def counts() -> DevNumbers:
        return read_counts(agents[0], store.id, _pending_since(config, store.id), config.delete_window)

    async def refresh() -> None:
        while True:
            if agents:
                now = await asyncio.to_thread(counts)
                status.show(format_status(store.name, now, time.time(), status.tty))
            await asyncio.sleep(STATUS_REFRESH_S)

    ticker = asyncio.create_task(refresh())
    try:
        return await run_sync(config, stop=stop, install_signals=False, on_ready=on_ready)
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        if agents:  # the last numbers, final shutdown included
            status.show(format_status(store.name, counts(), time.time(), status.tty))


def _keep_aside(config: AgentConfig, folder: Path, store_id: str, base: Path) -> list[Kept] | None:
    """Move what the store did not take out of the folder; None when the folder cannot be read as ours."""
    state = load_state(config.state_path, store_id)
    if state is None:
        return None
    try:
        root = open_root(folder, state.root_id)
    except OSError:
        return None
    try:
        result = scan(root, store_id, HashCache())
    finally:
        root.close()
    plan = plan_keep(result.files, state.baseline, state.refused_shas, result.blocked)
    return move_aside(folder, base, plan)


def _pending_since(config: AgentConfig, store_id: str) -> list[float]:
    """When each local deletion still waiting for its confirmation window was first seen (saved state)."""
    try:
        state = load_state(config.state_path, store_id)
    except (OSError, ValueError):
        return []  # being replaced right now: the next refresh reads it
    return list(state.pending_deletes.values()) if state is not None else []


def _cleanup(config: AgentConfig, folder: Path, store_id: str, code: int, base: Path) -> list[Kept]:
    """Move aside what the store did not take, then remove the folders this command created, unless
    something would be lost by doing so. Returns what was moved aside."""
    if code != EXIT_OK:
        logger.warning(
            "the final flush left changed files unsent; keeping the store folder and its state so the next "
            "memsync dev run resumes and pushes them",
            extra={"path": str(folder)},
        )
        return []
    if not _marker_ok(folder, store_id) and _has_files(folder):
        logger.warning(
            "the store folder's marker file is missing or does not match; keeping the folder as found",
            extra={"path": str(folder)},
        )
        return []
    kept = _keep_aside(config, folder, store_id, base)
    if kept is None:
        logger.warning("cannot scan the store folder; keeping it as found", extra={"path": str(folder)})
        return []
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(folder)  # fd-based on Linux: never follows a symlink inside
    remove_state(config.state_path, store_id)
    with contextlib.suppress(FileNotFoundError):
        lock_file(config.state_path, store_id).unlink()
    for empty in (folder.parent, folder.parent.parent, config.state_path):
        with contextlib.suppress(OSError):
            empty.rmdir()  # only if empty
    return kept


def _print_where(run: DevRun, store: MemoryStore | None, code: int, kept: list[Kept]) -> None:
    db, key = shlex.quote(str(run.db_path)), shlex.quote(str(run.key_path))
    url = f"http://127.0.0.1:{run.port}"
    lines = [
        "",
        f"memsync dev stopped (exit {code}). The store lives on in {run.db_path}",
        *describe(kept),
        f"  admin key file: {run.key_path}",
        f"  API (while a server runs): {url}",
        f"  serve it again:   memsync store serve --db {db} --port {run.port} --admin-key-file {key}",
    ]
    if store is not None:
        export = f"memsync store export {store.id} ./demo-export --url {url} --admin-key-file {key}"
        lines.append(f"  export it:        {export}")
    lines.append("  or run `memsync dev` again: it reuses the same store")
    click.echo("\n".join(lines), err=True)


@click.command()
@click.option(
    "--dir",
    "base",
    default="./.memsync",
    show_default=True,
    type=NonEmptyPath(file_okay=False, path_type=Path),
    help="Where the store database, the admin key, the mounted folder and the agent's state live.",
)
@click.option(
    "--port",
    default=8700,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Loopback port of the embedded store server.",
)
@click.option(
    "--interval",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=5.0),
    help="Seconds between sync passes (>= 5).",
)
@click.option(
    "--flush-timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0.0, min_open=True, max=3600.0),
    help="Seconds for each shutdown pass (final sync, then flush).",
)
@click.option(
    "--conflict-policy",
    type=click.Choice(CONFLICT_POLICIES),
    default="storeWins",
    show_default=True,
    help="A local edit that loses to a change in the store: storeWins (the store's version replaces it) or "
    "keepLocalCopy (the local version is kept beside it as a conflict copy, which syncs as a new file), as "
    "a SessionMemory's spec.conflictPolicy.",
)
@click.option(
    "--environment",
    is_flag=True,
    help="Instead: run a self-hosted environment's flow once (a scripted session writes a memory through "
    "memsync session run, the sidecar flushes it, the work item stops) and exit.",
)
def dev(
    *, base: Path, port: int, interval: float, flush_timeout: float, conflict_policy: str, environment: bool
) -> None:
    """Run the whole lifecycle on this machine: an embedded store server, a demo store, a folder under
    DIR/mnt/memory/ kept in two-way sync. Ctrl-C runs the final sync and flush, moves the files the store
    did not take under DIR/refused/ and DIR/conflicts/ (exit 7 if any), then removes the folder."""
    run = DevRun(
        base=base.resolve(),
        port=port,
        interval=interval,
        flush_timeout=flush_timeout,
        conflict_policy=conflict_policy,
    )
    with holding(run.base):
        if environment:
            sys.exit(asyncio.run(pid1.until_signalled(lambda: _environment_main(run), what="the demo")))
        status = StatusLine(sys.stderr)
        if status.tty:
            for handler in logging.getLogger().handlers:
                handler.addFilter(ClearStatusFirst(status))
        try:
            code = asyncio.run(_main(run, status))
        except store_errors.StoreError as exc:
            raise click.ClickException(f"the embedded store server refused a request: {exc}") from None
    sys.exit(code)
