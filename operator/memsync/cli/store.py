"""``memsync store``: run the self-hosted store server, and administer one over HTTP.

``serve`` runs the server; ``backup`` and ``restore`` work on its SQLite file. ``create``, ``list``,
``import``, ``export``, ``token`` and ``admin-key`` (here) and ``show``, ``delete``, ``archive``,
``memories``, ``history`` and ``redact`` (``memsync.cli.store_inspect``) talk to a running server with the
store client and the admin key. The admin key is never a command-line value (it would show in ``ps``): it
comes from ``MEMSYNC_ADMIN_KEY`` or a file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import stat
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click
import uvicorn

from memsync.agent.localfs import StoreRoot
from memsync.api.constants import MARKER_FILENAME, MAX_CONTENT_BYTES, MAX_MEMORIES_PER_STORE
from memsync.api.hashing import content_sha256
from memsync.api.models import Memory, MemoryStoreResource
from memsync.api.paths import path_violation
from memsync.client import StoreClient, errors
from memsync.server.access import DEFAULT_SESSION_TOKEN_TTL_S, MAX_SESSION_TOKEN_TTL_S
from memsync.server.environments.rules import DEFAULT_FIRST_HEARTBEAT_S
from memsync.server.environments.work import DEFAULT_LEASE_TTL_S, LEASE_TTL_MAX_S, LEASE_TTL_MIN_S
from memsync.server.http.observe import MULTIPROC_ENV
from memsync.server.protocol import DEFAULT_READ_TIMEOUT_S, uvicorn_config
from memsync.server.storage.backends import is_postgres
from memsync.server.storage.backup import BackupError, backup_sqlite, restore_sqlite
from memsync.server.worker import FACTORY, SETTINGS_ENV, ServeSettings, build_app, worker_run_kwargs

logger = logging.getLogger("memsync.store")

ADMIN_KEY_ENV = "MEMSYNC_ADMIN_KEY"
DEFAULT_URL = "http://127.0.0.1:8700"
NAME_MAX = 255  # bytes in one file name on the usual Linux filesystems

F = TypeVar("F", bound=Callable[..., Any])


@click.group("store")
def store() -> None:
    """The self-hosted memory store server and its admin commands."""


# --- admin key ------------------------------------------------------------------------------------------


def read_key_file(path: Path) -> str:
    try:
        key = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise click.ClickException(f"cannot read the admin key file {path}: {exc.strerror}") from None
    if not key:
        raise click.ClickException(f"the admin key file {path} is empty")
    return key


def load_or_create_key_file(path: Path) -> tuple[str, bool]:
    """The key in ``path``; if the file does not exist, a new random key written there with mode 0600."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return read_key_file(path), False
    key = "sk-memsync-admin-" + secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(key + "\n")
    return key, True


def admin_key_from(key_file: Path | None) -> str:
    if key_file is not None:
        return read_key_file(key_file)
    key = os.environ.get(ADMIN_KEY_ENV, "").strip()
    if not key:
        raise click.UsageError(f"no admin key: set {ADMIN_KEY_ENV} or pass --admin-key-file")
    return key


# --- serve ----------------------------------------------------------------------------------------------


@store.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="MEMSYNC_STORE_HOST")
@click.option(
    "--port", default=8700, show_default=True, type=click.IntRange(0, 65535), envvar="MEMSYNC_STORE_PORT"
)
@click.option(
    "--db",
    "database",
    default="./memsync-store.db",
    show_default=True,
    envvar="MEMSYNC_STORE_DB",
    help="An SQLite file (created if missing), or a PostgreSQL URL (postgresql://USER@HOST:PORT/DB; the "
    "password from PGPASSWORD or a passfile, never the command line).",
)
@click.option(
    "--public-url",
    envvar="MEMSYNC_PUBLIC_URL",
    help="URL clients reach this server at; put into minted work secrets. Default http://HOST:PORT.",
)
@click.option(
    "--admin-key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="MEMSYNC_ADMIN_KEY_FILE",
    help=f"File holding the admin key. Default: ${ADMIN_KEY_ENV}, else (SQLite) a key generated into "
    "DB.admin-key.",
)
@click.option(
    "--admin-key-name",
    default="default",
    show_default=True,
    envvar="MEMSYNC_ADMIN_KEY_NAME",
    help="Name the configured admin key is entered under (on first start); more keys: 'memsync store "
    "admin-key'.",
)
@click.option(
    "--cursor-ttl",
    default=3600,
    show_default=True,
    type=click.IntRange(1),
    envvar="MEMSYNC_CURSOR_TTL",
    help="Seconds a page cursor stays valid.",
)
@click.option(
    "--max-memories",
    default=MAX_MEMORIES_PER_STORE,
    show_default=True,
    type=click.IntRange(1),
    envvar="MEMSYNC_MAX_MEMORIES_PER_STORE",
    help="Memories per store (the hosted API allows 10,000; lower it to test the cap).",
)
@click.option(
    "--session-token-ttl",
    default=DEFAULT_SESSION_TOKEN_TTL_S,
    show_default=True,
    type=click.IntRange(1, MAX_SESSION_TOKEN_TTL_S),
    envvar="MEMSYNC_SESSION_TOKEN_TTL",
    help="Seconds a minted sessions token stays valid (a mint may ask for another lifetime).",
)
@click.option(
    "--lease-ttl",
    default=DEFAULT_LEASE_TTL_S,
    show_default=True,
    type=click.IntRange(LEASE_TTL_MIN_S, LEASE_TTL_MAX_S),
    envvar="MEMSYNC_LEASE_TTL",
    help="Seconds a work item's lease lasts without a heartbeat (self-hosted environments).",
)
@click.option(
    "--first-heartbeat-window",
    default=DEFAULT_FIRST_HEARTBEAT_S,
    show_default=True,
    type=click.IntRange(1, LEASE_TTL_MAX_S),
    envvar="MEMSYNC_FIRST_HEARTBEAT_WINDOW",
    help="Seconds an acknowledged work item waits for its first heartbeat before it is queued again.",
)
@click.option(
    "--request-read-timeout",
    default=DEFAULT_READ_TIMEOUT_S,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    envvar="MEMSYNC_REQUEST_READ_TIMEOUT",
    help="Seconds a request (headers and body) may take to arrive; slower connections are dropped.",
)
@click.option(
    "--db-pool-size",
    default=10,
    show_default=True,
    type=click.IntRange(1, 200),
    envvar="MEMSYNC_DB_POOL_SIZE",
    help="PostgreSQL connections per server process.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    envvar="MEMSYNC_STORE_WORKERS",
    help="Server processes sharing the port (each with its own connections to the database).",
)
@click.option(
    "--http",
    "http_impl",
    default="httptools",
    show_default=True,
    type=click.Choice(["httptools", "h11"]),
    envvar="MEMSYNC_STORE_HTTP",
    help="HTTP/1.1 parser: httptools (C) or h11 (pure Python).",
)
@click.option(
    "--ssl-certfile",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="MEMSYNC_STORE_SSL_CERTFILE",
    help="Serve HTTPS with this PEM certificate (chain); or terminate TLS at the ingress.",
)
@click.option(
    "--ssl-keyfile",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="MEMSYNC_STORE_SSL_KEYFILE",
    help="The certificate's PEM private key.",
)
@click.option(
    "--access-log/--no-access-log",
    default=True,
    show_default=True,
    envvar="MEMSYNC_STORE_ACCESS_LOG",
    help="One structured INFO line per request (no headers, no query strings).",
)
@click.pass_context
def serve(
    ctx: click.Context,
    *,
    host: str,
    port: int,
    database: str,
    public_url: str | None,
    admin_key_file: Path | None,
    admin_key_name: str,
    cursor_ttl: int,
    max_memories: int,
    lease_ttl: int,
    first_heartbeat_window: int,
    session_token_ttl: int,
    request_read_timeout: float,
    db_pool_size: int,
    workers: int,
    http_impl: str,
    ssl_certfile: Path | None,
    ssl_keyfile: Path | None,
    access_log: bool,
) -> None:
    """Run the store server (FastAPI + uvicorn over an SQLite file or PostgreSQL)."""
    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise click.UsageError("--ssl-certfile and --ssl-keyfile go together")
    if admin_key_file is not None:
        admin_key = read_key_file(admin_key_file)
    elif os.environ.get(ADMIN_KEY_ENV, "").strip():
        admin_key = os.environ[ADMIN_KEY_ENV].strip()
    elif is_postgres(database):
        raise click.UsageError(f"no admin key: on PostgreSQL set {ADMIN_KEY_ENV} or pass --admin-key-file")
    else:
        db_path = Path(database)
        key_path = db_path.with_name(db_path.name + ".admin-key")
        admin_key, created = load_or_create_key_file(key_path)
        logger.info(
            "generated a new admin key" if created else "using the admin key file",
            extra={"admin_key_file": str(key_path)},
        )
    scheme = "https" if ssl_certfile is not None else "http"
    settings = ServeSettings(
        database=database,
        public_url=public_url or f"{scheme}://{host}:{port}",
        admin_key_name=admin_key_name,
        cursor_ttl_s=cursor_ttl,
        max_memories_per_store=max_memories,
        session_token_ttl_s=session_token_ttl,
        lease_ttl_s=lease_ttl,
        first_heartbeat_s=first_heartbeat_window,
        db_pool_size=db_pool_size,
        read_timeout_s=request_read_timeout,
        http=http_impl,
        access_logs=access_log,
        log_level=logging.getLevelName(logging.getLogger().getEffectiveLevel()),
        log_format=_root_params(ctx).get("log_format") or "text",
    )
    tls: dict[str, Any] = {}
    if ssl_certfile is not None:
        tls = {"ssl_certfile": str(ssl_certfile), "ssl_keyfile": str(ssl_keyfile)}
    try:
        # Built here even with several workers: the schema is migrated and the admin key entered once,
        # and a bad setting fails before any worker starts.
        app = build_app(settings, admin_key)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    logger.info("store server listening", extra={"host": host, "port": port, "workers": workers})
    if workers == 1:
        config = uvicorn_config(
            app, host=host, port=port, read_timeout_s=request_read_timeout, http=http_impl, **tls
        )
        uvicorn.Server(config).run()
        return
    app.state.service.db.close()  # each worker opens its own
    os.environ[SETTINGS_ENV] = settings.to_env()
    # the workers share their metrics through files in a directory of this run (/metrics sums them)
    os.environ[MULTIPROC_ENV] = tempfile.mkdtemp(prefix="memsync-store-metrics-")
    os.environ[ADMIN_KEY_ENV] = admin_key
    uvicorn.run(FACTORY, host=host, port=port, **worker_run_kwargs(settings, workers), **tls)


def _root_params(ctx: click.Context) -> dict[str, Any]:
    return dict(ctx.find_root().params)


# --- admin commands -------------------------------------------------------------------------------------


def admin_options(func: F) -> F:
    func = click.option(
        "--admin-key-file",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar="MEMSYNC_ADMIN_KEY_FILE",
        help=f"File holding the admin key (default: ${ADMIN_KEY_ENV}).",
    )(func)
    func = click.option(
        "--url",
        envvar="MEMSYNC_STORE_URL",
        default=DEFAULT_URL,
        show_default=True,
        help="The store server.",
    )(func)
    return func


T = TypeVar("T")


def run_with_client(url: str, key_file: Path | None, work: Callable[[StoreClient], Awaitable[T]]) -> T:
    key = admin_key_from(key_file)

    async def main() -> T:
        async with StoreClient(url, api_key=key) as client:
            return await work(client)

    try:
        return asyncio.run(main())
    except errors.StoreError as exc:
        raise click.ClickException(str(exc)) from None


@store.command()
@click.argument("name")
@click.option("--description", default=None, help="Shown to the agent; at most 1,024 characters.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole store object as JSON.")
@admin_options
def create(
    *, name: str, description: str | None, as_json: bool, url: str, admin_key_file: Path | None
) -> None:
    """Create a memory store; print its id."""

    async def work(client: StoreClient) -> None:
        created = await client.create_store(name, description=description)
        click.echo(created.model_dump_json() if as_json else created.id)

    run_with_client(url, admin_key_file, work)


@store.command("list")
@click.option("--include-archived", is_flag=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@admin_options
def list_(*, include_archived: bool, as_json: bool, url: str, admin_key_file: Path | None) -> None:
    """List memory stores (newest first)."""

    async def work(client: StoreClient) -> None:
        async for item in client.list_stores(include_archived=include_archived, limit=100):
            if as_json:
                click.echo(item.model_dump_json())
            else:
                archived = "  (archived)" if item.archived_at else ""
                click.echo(f"{item.id}\t{item.name}\t{item.created_at.isoformat()}{archived}")

    run_with_client(url, admin_key_file, work)


# --- import ---------------------------------------------------------------------------------------------


@dataclass
class LocalFile:
    path: str  # memory path, '/'-rooted
    content: str


@dataclass
class ImportPlan:
    files: list[LocalFile] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relative path, why)


def _walk_regular_files(root: Path) -> Iterator[tuple[str, Path]]:
    """``(relative posix path, absolute path)`` of regular files below ``root``; symlinks are not followed."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            full = Path(dirpath) / name
            yield full.relative_to(root).as_posix(), full


def plan_import(root: Path) -> ImportPlan:
    """Which files of ``root`` become memories, and which are skipped and why."""
    plan = ImportPlan()
    for rel, full in _walk_regular_files(root):
        if rel == MARKER_FILENAME:
            continue
        st = full.lstat()
        if stat.S_ISLNK(st.st_mode):
            plan.skipped.append((rel, "symbolic link (not followed)"))
            continue
        if not stat.S_ISREG(st.st_mode):
            plan.skipped.append((rel, "not a regular file"))
            continue
        memory_path = "/" + rel
        violation = path_violation(memory_path)
        if violation is not None:
            plan.skipped.append((rel, f"not a valid memory path: {violation.message}"))
            continue
        if st.st_size > MAX_CONTENT_BYTES:
            plan.skipped.append((rel, f"{st.st_size} bytes; a memory holds at most {MAX_CONTENT_BYTES}"))
            continue
        data = full.read_bytes()
        if len(data) > MAX_CONTENT_BYTES:
            plan.skipped.append((rel, f"{len(data)} bytes; a memory holds at most {MAX_CONTENT_BYTES}"))
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            plan.skipped.append((rel, "not UTF-8 text"))
            continue
        plan.files.append(LocalFile(memory_path, text))
    return plan


@dataclass
class ImportResult:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)


async def import_files(
    client: StoreClient,
    store_id: str,
    files: list[LocalFile],
    *,
    concurrency: int,
    on_done: Callable[[], None] = lambda: None,
) -> ImportResult:
    """Create each file as a memory; a path that already exists is updated when its content differs
    (preconditioned on the listed hash, so a concurrent edit is never overwritten)."""
    existing: dict[str, Memory] = {}
    async for item in client.list_memories(store_id, view="basic", limit=100):
        if isinstance(item, Memory):
            existing[item.path] = item
    result = ImportResult()
    gate = asyncio.Semaphore(concurrency)

    async def one(f: LocalFile) -> None:
        async with gate:
            try:
                current = existing.get(f.path)
                if current is None:
                    await client.create_memory(store_id, f.path, f.content)
                    result.created += 1
                elif current.content_sha256 == content_sha256(f.content):
                    result.unchanged += 1
                else:
                    await client.update_memory(
                        store_id, current.id, content=f.content, expected_sha256=current.content_sha256
                    )
                    result.updated += 1
            except errors.StoreError as exc:
                result.failed.append((f.path, str(exc)))
            finally:
                on_done()

    await asyncio.gather(*(one(f) for f in files))
    return result


# --- progress -------------------------------------------------------------------------------------------

PROGRESS_STEP_PERCENT = 10

progress_option = click.option(
    "--progress/--no-progress",
    default=None,
    help="Report progress on stderr (default: only when stderr is a terminal; elsewhere as a line per 10%).",
)


def crossed_step(done: int, total: int, step: int = PROGRESS_STEP_PERCENT) -> bool:
    """True when ``done`` of ``total`` is the first count at or past the next ``step`` percent."""
    if total <= 0 or done <= 0:
        return False
    return done * 100 // total // step > (done - 1) * 100 // total // step


@contextmanager
def progress_of(label: str, total: int, show: bool | None) -> Iterator[Callable[[], None]]:
    """A step function to call once per item. On a terminal, a redrawn bar with an ETA (click's: no
    extra dependency for one bar); elsewhere, with ``--progress``, a plain line per 10 % (a log stays
    readable); by default nothing off a terminal."""
    tty = sys.stderr.isatty()
    if not (tty if show is None else show):
        yield lambda: None
        return
    if tty:
        with click.progressbar(length=total, label=label, file=sys.stderr, show_pos=True) as bar:
            yield lambda: bar.update(1)
        return
    done = 0

    def step() -> None:
        nonlocal done
        done += 1
        if crossed_step(done, total):
            click.echo(f"{label}: {done}/{total} ({min(100, done * 100 // total)}%)", err=True)

    yield step


@store.command("import")
@click.argument("store_id")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--concurrency", default=16, show_default=True, type=click.IntRange(1, 64))
@progress_option
@admin_options
def import_(
    *,
    store_id: str,
    directory: Path,
    concurrency: int,
    progress: bool | None,
    url: str,
    admin_key_file: Path | None,
) -> None:
    """Upload a directory tree into a store: each UTF-8 file becomes the memory at its relative path."""
    plan = plan_import(directory)
    for rel, why in plan.skipped:
        click.echo(f"skipped {rel}: {why}", err=True)

    async def work(client: StoreClient) -> ImportResult:
        with progress_of("importing", len(plan.files), progress) as step:
            return await import_files(client, store_id, plan.files, concurrency=concurrency, on_done=step)

    result = run_with_client(url, admin_key_file, work)
    for path, why in sorted(result.failed):
        click.echo(f"failed {path}: {why}", err=True)
    click.echo(
        f"imported into {store_id}: {result.created} created, {result.updated} updated, "
        f"{result.unchanged} unchanged, {len(plan.skipped)} skipped, {len(result.failed)} failed",
        err=True,
    )
    if result.failed:
        sys.exit(1)


# --- export ---------------------------------------------------------------------------------------------


class UnsafePathError(ValueError):
    pass


def export_segments(memory_path: str) -> list[str]:
    """The path's segments if it is safe to write below the export directory; else UnsafePathError."""
    violation = path_violation(memory_path)
    if violation is not None:
        raise UnsafePathError(violation.message)
    segments = memory_path[1:].split("/")
    for seg in segments:
        if "\x00" in seg or seg in ("", ".", ".."):
            raise UnsafePathError(f"segment {seg!r} is not allowed")
        if len(seg.encode("utf-8")) > NAME_MAX:
            raise UnsafePathError(f"segment of {len(seg.encode('utf-8'))} bytes exceeds {NAME_MAX}")
    if segments[-1] == MARKER_FILENAME and len(segments) == 1:
        raise UnsafePathError("the marker file's name is reserved")
    return segments


EXPORT_DIR_MODE = 0o755
EXPORT_FILE_MODE = 0o644


def write_below(root_fd: int, segments: list[str], data: bytes) -> None:
    """Write ``data`` at ``root/segments...`` without following any symlink, through the sync agent's safe
    filesystem layer: each directory is opened with O_NOFOLLOW relative to its parent's fd (created when
    missing), and the file is written to a temp name and renamed into place."""
    with StoreRoot(os.dup(root_fd), Path(), dir_mode=EXPORT_DIR_MODE, file_mode=EXPORT_FILE_MODE) as root:
        root.write_bytes("/".join(segments), data)


@store.command()
@click.argument("store_id")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@progress_option
@admin_options
def export(
    *, store_id: str, directory: Path, progress: bool | None, url: str, admin_key_file: Path | None
) -> None:
    """Write every memory of a store as a file below DIRECTORY (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    root_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    written = 0
    refused: list[tuple[str, str]] = []
    shown = sys.stderr.isatty() if progress is None else progress

    async def work(client: StoreClient) -> None:
        nonlocal written
        total = 0
        if shown:  # one cheap pass of ids and sizes (100 a page) sizes the bar; content comes 20 a page
            async for item in client.list_memories(store_id, view="basic", limit=100):
                total += isinstance(item, Memory)
        with progress_of("exporting", total, shown) as step:
            async for item in client.list_memories(store_id, view="full", limit=20):
                if not isinstance(item, Memory):
                    continue
                try:
                    segments = export_segments(item.path)
                    write_below(root_fd, segments, (item.content or "").encode("utf-8"))
                    written += 1
                except (UnsafePathError, OSError) as exc:
                    refused.append((item.path, str(exc)))
                step()

    try:
        run_with_client(url, admin_key_file, work)
    finally:
        os.close(root_fd)
    for path, why in refused:
        click.echo(f"refused {path!r}: {why}", err=True)
    click.echo(f"exported {written} memories of {store_id} to {directory}; {len(refused)} refused", err=True)
    if refused:
        sys.exit(1)


# --- token ----------------------------------------------------------------------------------------------


def parse_store_spec(spec: str) -> tuple[str, str]:
    """``memstore_...`` or ``memstore_...:read_only`` / ``:read_write`` → (id, access)."""
    store_id, _, access = spec.partition(":")
    access = access or "read_write"
    if not store_id.startswith("memstore_"):
        raise click.BadParameter(f"{spec!r}: expected memstore_...[:read_only|:read_write]")
    if access not in ("read_only", "read_write"):
        raise click.BadParameter(f"{spec!r}: access must be read_only or read_write")
    return store_id, access


@store.group(invoke_without_command=True)
@click.option("--session", "session_id", default=None, help="Session id (sesn_...); generated when omitted.")
@click.option(
    "--store",
    "stores",
    multiple=True,
    help="memstore_...[:read_only]; repeat for more stores (at most 8). Required to mint.",
)
@click.option(
    "--ttl",
    type=click.IntRange(1, MAX_SESSION_TOKEN_TTL_S),
    default=None,
    help="Seconds the sessions token stays valid (default: the server's --session-token-ttl).",
)
@admin_options
@click.pass_context
def token(
    ctx: click.Context,
    *,
    session_id: str | None,
    stores: tuple[str, ...],
    ttl: int | None,
    url: str,
    admin_key_file: Path | None,
) -> None:
    """Mint a session with the given stores attached; print its work-item secret (and nothing else) on
    stdout. ``token revoke SESSION_ID`` deletes a session, revoking its token."""
    if ctx.invoked_subcommand is not None:
        return
    if not stores:
        raise click.UsageError("Missing option '--store' (at least one store to attach)")
    specs = [parse_store_spec(s) for s in stores]

    async def work(client: StoreClient) -> str:
        resources = [
            MemoryStoreResource.model_validate({"memory_store_id": sid, "access": acc}) for sid, acc in specs
        ]
        session, secret = await client.mint_session(resources, session_id=session_id, token_ttl_seconds=ttl)
        click.echo(f"minted session {session.id}", err=True)
        for res in session.resources:
            click.echo(f"  {res.memory_store_id} at {res.mount_path} ({res.access})", err=True)
        return secret

    secret = run_with_client(url, admin_key_file, work)
    click.echo(secret)


@token.command("revoke")
@click.argument("session_id")
@admin_options
def token_revoke(*, session_id: str, url: str, admin_key_file: Path | None) -> None:
    """Delete a session: its sessions token stops working at once (on every replica within seconds)."""

    async def work(client: StoreClient) -> None:
        await client.delete_session(session_id)

    run_with_client(url, admin_key_file, work)
    click.echo(f"revoked the sessions token of {session_id}", err=True)


# --- admin keys -----------------------------------------------------------------------------------------


@store.group("admin-key")
def admin_key() -> None:
    """Named admin keys: several may be current at once, so a key can be rotated (create the new key,
    move the clients to it, revoke the old one)."""


@admin_key.command("create")
@click.argument("name")
@admin_options
def admin_key_create(*, name: str, url: str, admin_key_file: Path | None) -> None:
    """Create an admin key; print the key (shown only this once) on stdout, its id on stderr."""
    made = run_with_client(url, admin_key_file, lambda c: c.admin_keys("POST", body={"name": name}))
    click.echo(f"created admin key {made['id']} ({made['name']})", err=True)
    click.echo(made["key"])


@admin_key.command("list")
@admin_options
def admin_key_list(*, url: str, admin_key_file: Path | None) -> None:
    """List admin keys (ids and names; never the keys)."""
    listed = run_with_client(url, admin_key_file, lambda c: c.admin_keys("GET"))
    for row in listed["data"]:
        state = f"revoked {row['revoked_at']}" if row["revoked_at"] else "current"
        click.echo(f"{row['id']}\t{row['name']}\t{row['created_at']}\t{state}")


@admin_key.command("revoke")
@click.argument("key_id")
@admin_options
def admin_key_revoke(*, key_id: str, url: str, admin_key_file: Path | None) -> None:
    """Revoke an admin key by id (apikey_...); the last current key cannot be revoked."""
    run_with_client(url, admin_key_file, lambda c: c.admin_keys("POST", f"/{key_id}/revoke"))
    click.echo(f"revoked admin key {key_id}", err=True)


# --- backup and restore ---------------------------------------------------------------------------------

PG_BACKUP_GUIDANCE = (
    "PostgreSQL: back up with pg_dump (pg_dump --format=custom --file=store.dump URL) and restore with "
    "pg_restore into an empty database (pg_restore --dbname=URL store.dump); see docs/store-server.md"
)


@store.command()
@click.argument("destination", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--db", "database", default="./memsync-store.db", show_default=True, envvar="MEMSYNC_STORE_DB")
def backup(*, destination: Path, database: str) -> None:
    """Copy the SQLite database to DESTINATION while the server keeps running (SQLite's online backup)."""
    if is_postgres(database):
        raise click.UsageError(PG_BACKUP_GUIDANCE)
    try:
        pages = backup_sqlite(Path(database), destination)
    except BackupError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"backed up {database} to {destination} ({pages} pages)", err=True)


@store.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--db", "database", default="./memsync-store.db", show_default=True, envvar="MEMSYNC_STORE_DB")
@click.option("--force", is_flag=True, help="Replace an existing database file.")
def restore(*, source: Path, database: str, force: bool) -> None:
    """Put a backup in place of the SQLite database (stop the server first)."""
    if is_postgres(database):
        raise click.UsageError(PG_BACKUP_GUIDANCE)
    try:
        restore_sqlite(source, Path(database), force=force)
    except BackupError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"restored {source} to {database}", err=True)


# --- show, delete, archive, memories, history, redact ---------------------------------------------------

# They add themselves to the ``store`` group; importing either module first gives the whole group.
import memsync.cli.store_inspect  # noqa: E402, F401
