"""``memsync store import|export``: a directory tree into a store, and a store out to one."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import click

from memsync.agent.localfs import StoreRoot
from memsync.api.constants import MARKER_FILENAME, MAX_CONTENT_BYTES
from memsync.api.hashing import content_sha256
from memsync.api.models import Memory
from memsync.api.paths import path_violation
from memsync.cli.failures import ExitCode
from memsync.cli.params import ID
from memsync.cli.store.admin import admin_options, run_with_client
from memsync.client import StoreClient, errors

NAME_MAX = 255  # bytes in one file name on the usual Linux filesystems


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


def shown_name(rel: str) -> str:
    """A file name as it can be printed: bytes that are not UTF-8 as ``\\xNN`` escapes."""
    return os.fsencode(rel).decode("utf-8", "backslashreplace")


def plan_import(root: Path) -> ImportPlan:
    """Which files of ``root`` become memories, and which are skipped and why (names as ``shown_name``)."""
    plan = ImportPlan()
    for rel, full in _walk_regular_files(root):
        if rel == MARKER_FILENAME:
            continue
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:  # os.walk keeps undecodable bytes as lone surrogates
            plan.skipped.append((shown_name(rel), "the file name is not UTF-8 (a memory path is UTF-8 text)"))
            continue
        try:
            st = full.lstat()
            data = full.read_bytes() if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_CONTENT_BYTES else b""
        except OSError as exc:
            plan.skipped.append((rel, f"cannot read it: {exc.strerror}"))
            continue
        if stat.S_ISLNK(st.st_mode):
            plan.skipped.append((rel, "symbolic link (not followed)"))
            continue
        if not stat.S_ISREG(st.st_mode):
            plan.skipped.append((rel, "not a regular file (a FIFO, device or socket)"))
            continue
        memory_path = "/" + rel
        violation = path_violation(memory_path)
        if violation is not None:
            plan.skipped.append((rel, f"not a valid memory path: {violation.message}"))
            continue
        if st.st_size > MAX_CONTENT_BYTES:
            plan.skipped.append((rel, f"{st.st_size} bytes; a memory holds at most {MAX_CONTENT_BYTES}"))
            continue
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


@click.command("import")
@click.argument("store_id", type=ID)
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
    if plan.skipped or result.failed:
        sys.exit(ExitCode.PARTIAL)


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


@click.command()
@click.argument("store_id", type=ID)
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
        sys.exit(ExitCode.PARTIAL)
