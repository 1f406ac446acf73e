"""``memsync store``: run the self-hosted store server, and administer one over HTTP.

``serve`` runs the server. ``create``, ``list``, ``import``, ``export`` and ``token`` talk to a running
server with the store client and the admin key. The admin key is never a command-line value (it would show
in ``ps``): it comes from ``MEMSYNC_ADMIN_KEY`` or a file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import stat
import sys
from collections.abc import Awaitable, Callable, Iterator
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
from memsync.server import create_app
from memsync.server.protocol import DEFAULT_READ_TIMEOUT_S, uvicorn_config
from memsync.server.work_items import DEFAULT_LEASE_TTL_S, LEASE_TTL_MAX_S, LEASE_TTL_MIN_S

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
    "db_path",
    default="./memsync-store.db",
    show_default=True,
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="MEMSYNC_STORE_DB",
    help="SQLite file (created if missing).",
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
    help=f"File holding the admin key. Default: ${ADMIN_KEY_ENV}, else a key generated into DB.admin-key.",
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
    "--lease-ttl",
    default=DEFAULT_LEASE_TTL_S,
    show_default=True,
    type=click.IntRange(LEASE_TTL_MIN_S, LEASE_TTL_MAX_S),
    envvar="MEMSYNC_LEASE_TTL",
    help="Seconds a work item's lease lasts without a heartbeat (self-hosted environments).",
)
@click.option(
    "--request-read-timeout",
    default=DEFAULT_READ_TIMEOUT_S,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    envvar="MEMSYNC_REQUEST_READ_TIMEOUT",
    help="Seconds a request (headers and body) may take to arrive; slower connections are dropped.",
)
def serve(
    *,
    host: str,
    port: int,
    db_path: Path,
    public_url: str | None,
    admin_key_file: Path | None,
    cursor_ttl: int,
    max_memories: int,
    lease_ttl: int,
    request_read_timeout: float,
) -> None:
    """Run the store server (FastAPI + uvicorn over one SQLite file)."""
    if admin_key_file is not None:
        admin_key = read_key_file(admin_key_file)
    elif os.environ.get(ADMIN_KEY_ENV, "").strip():
        admin_key = os.environ[ADMIN_KEY_ENV].strip()
    else:
        key_path = db_path.with_name(db_path.name + ".admin-key")
        admin_key, created = load_or_create_key_file(key_path)
        logger.info(
            "generated a new admin key" if created else "using the admin key file",
            extra={"admin_key_file": str(key_path)},
        )
    url = public_url or f"http://{host}:{port}"
    app = create_app(
        db_path,
        admin_key,
        url,
        cursor_ttl_s=cursor_ttl,
        max_memories_per_store=max_memories,
        lease_ttl_s=lease_ttl,
    )
    logger.info("store server listening", extra={"host": host, "port": port, "db": str(db_path)})
    uvicorn.Server(uvicorn_config(app, host=host, port=port, read_timeout_s=request_read_timeout)).run()


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


@store.command("import")
@click.argument("store_id")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--concurrency", default=16, show_default=True, type=click.IntRange(1, 64))
@admin_options
def import_(
    *, store_id: str, directory: Path, concurrency: int, url: str, admin_key_file: Path | None
) -> None:
    """Upload a directory tree into a store: each UTF-8 file becomes the memory at its relative path."""
    plan = plan_import(directory)
    for rel, why in plan.skipped:
        click.echo(f"skipped {rel}: {why}", err=True)

    async def work(client: StoreClient) -> ImportResult:
        with click.progressbar(
            length=len(plan.files), label="importing", file=sys.stderr, show_pos=True
        ) as bar:
            return await import_files(
                client, store_id, plan.files, concurrency=concurrency, on_done=lambda: bar.update(1)
            )

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
@admin_options
def export(*, store_id: str, directory: Path, url: str, admin_key_file: Path | None) -> None:
    """Write every memory of a store as a file below DIRECTORY (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    root_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    written = 0
    refused: list[tuple[str, str]] = []

    async def work(client: StoreClient) -> None:
        nonlocal written
        async for item in client.list_memories(store_id, view="full", limit=20):
            if not isinstance(item, Memory):
                continue
            try:
                segments = export_segments(item.path)
                write_below(root_fd, segments, (item.content or "").encode("utf-8"))
                written += 1
            except (UnsafePathError, OSError) as exc:
                refused.append((item.path, str(exc)))

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


@store.command()
@click.option("--session", "session_id", default=None, help="Session id (sesn_...); generated when omitted.")
@click.option(
    "--store",
    "stores",
    multiple=True,
    required=True,
    help="memstore_...[:read_only]; repeat for more stores (at most 8).",
)
@admin_options
def token(*, session_id: str | None, stores: tuple[str, ...], url: str, admin_key_file: Path | None) -> None:
    """Mint a session with the given stores attached; print its work-item secret (and nothing else) on
    stdout."""
    specs = [parse_store_spec(s) for s in stores]

    async def work(client: StoreClient) -> str:
        resources = [
            MemoryStoreResource.model_validate({"memory_store_id": sid, "access": acc}) for sid, acc in specs
        ]
        session, secret = await client.mint_session(resources, session_id=session_id)
        click.echo(f"minted session {session.id}", err=True)
        for res in session.resources:
            click.echo(f"  {res.memory_store_id} at {res.mount_path} ({res.access})", err=True)
        return secret

    secret = run_with_client(url, admin_key_file, work)
    click.echo(secret)
