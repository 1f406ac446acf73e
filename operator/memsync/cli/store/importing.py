"""``memsync store import``: a directory tree into a store, each UTF-8 file the memory at its relative path.

What is sent is decided first, from the tree alone (``plan_import``): version-control folders (``.git/`` and
its kind) and what ``--exclude`` names (gitignore patterns, matched by ``pathspec``, the library git-like
tools use, rather than a matcher of our own) are left out, and a file the store cannot take is skipped and
said. ``--dry-run`` then compares with the store and lists what would be sent, sending nothing. A real run
creates what is missing and updates what differs, each update preconditioned on the hash it listed; the
store server may stop answering for up to ``--give-up-after`` seconds (``memsync.cli.store.transfer``).
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import click
import pathspec

from memsync import pid1
from memsync.api.constants import MARKER_FILENAME, MAX_CONTENT_BYTES
from memsync.api.hashing import content_sha256
from memsync.api.paths import path_violation
from memsync.cli.failures import ExitCode, interrupted
from memsync.cli.params import ID, NonEmptyPath
from memsync.cli.store.admin import admin_options, run_with_client
from memsync.cli.store.transfer import (
    RESUME,
    GaveUp,
    Patience,
    each_memory,
    give_up_option,
    progress_of,
    progress_option,
    quiet_transport_retries,
    stopped,
)
from memsync.client import StoreClient, errors

#: Folders of version-control systems: their content is the tool's, never a memory (``--include-vcs``
#: sends them anyway). ``.git`` is also a file in a worktree or a submodule.
VCS_PATTERNS: Final = (".git", ".hg", ".svn", ".bzr", "_darcs", ".jj", "CVS/")


@dataclass
class LocalFile:
    path: str  # memory path, '/'-rooted
    content: str


@dataclass
class ImportPlan:
    files: list[LocalFile] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relative path, why)
    excluded: list[str] = field(default_factory=list)  # relative paths; a folder ends in '/'


def exclusions(patterns: Sequence[str], *, vcs: bool) -> pathspec.GitIgnoreSpec:
    """``patterns`` (gitignore syntax, relative to the imported folder), with the VCS folders unless
    ``vcs`` is False."""
    return pathspec.GitIgnoreSpec.from_lines([*(VCS_PATTERNS if vcs else ()), *patterns])


def _matchable(rel: str) -> str:
    """``rel`` as patterns can match it: a name that is not UTF-8 with U+FFFD where its bad bytes are."""
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _walk(root: Path, spec: pathspec.GitIgnoreSpec, excluded: list[str]) -> Iterator[tuple[str, Path]]:
    """``(relative posix path, absolute path)`` of the entries below ``root`` that are not folders, and of
    symbolic links to folders (never followed: they are skipped and said). An excluded folder is not
    entered; what is excluded goes into ``excluded``."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        kept = []
        for name in sorted(dirnames):
            rel = (here / name).relative_to(root).as_posix()
            if spec.match_file(_matchable(rel) + "/"):
                excluded.append(rel + "/")
            elif (here / name).is_symlink():
                filenames.append(name)  # os.walk lists a link to a folder among the folders
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            rel = (here / name).relative_to(root).as_posix()
            if spec.match_file(_matchable(rel)):
                excluded.append(rel)
            else:
                yield rel, here / name


def shown_name(rel: str) -> str:
    """A file name as it can be printed: bytes that are not UTF-8 as ``\\xNN`` escapes."""
    return os.fsencode(rel).decode("utf-8", "backslashreplace")


def _why_not(rel: str, full: Path) -> tuple[str | None, str]:
    """Why the file at ``full`` cannot be a memory (None: it can), and its text."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:  # os.walk keeps undecodable bytes as lone surrogates
        return "the file name is not UTF-8 (a memory path is UTF-8 text)", ""
    try:
        st = full.lstat()
        data = full.read_bytes() if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_CONTENT_BYTES else b""
    except OSError as exc:
        return f"cannot read it: {exc.strerror}", ""
    if stat.S_ISLNK(st.st_mode):
        return "symbolic link (not followed)", ""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a FIFO, device or socket)", ""
    violation = path_violation("/" + rel)
    if violation is not None:
        return f"not a valid memory path: {violation.message}", ""
    size = max(st.st_size, len(data))
    if size > MAX_CONTENT_BYTES:
        return f"{size} bytes; a memory holds at most {MAX_CONTENT_BYTES}", ""
    try:
        return None, data.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text", ""


def plan_import(root: Path, spec: pathspec.GitIgnoreSpec | None = None) -> ImportPlan:
    """Which files of ``root`` become memories, which are skipped and why (names as ``shown_name``), and
    which are excluded (by default the VCS folders)."""
    plan = ImportPlan()
    for rel, full in _walk(root, exclusions((), vcs=True) if spec is None else spec, plan.excluded):
        if rel == MARKER_FILENAME:
            continue
        why, text = _why_not(rel, full)
        if why is None:
            plan.files.append(LocalFile("/" + rel, text))
        else:
            plan.skipped.append((shown_name(rel), why))
    return plan


Change = Literal["create", "update", "unchanged"]


def change_of(file: LocalFile, listed: dict[str, tuple[str, str]]) -> Change:
    """What a file does to the store, given its listing (path to memory id and hash)."""
    current = listed.get(file.path)
    if current is None:
        return "create"
    return "unchanged" if current[1] == content_sha256(file.content) else "update"


@dataclass
class ImportResult:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def done(self) -> int:
        return self.created + self.updated + self.unchanged + len(self.failed)


async def listed_hashes(client: StoreClient, patience: Patience, store_id: str) -> dict[str, tuple[str, str]]:
    """Each memory of the store by path: its id and content hash (the basic view: no content)."""
    return {
        m.path: (m.id, m.content_sha256)
        async for m in each_memory(client, patience, store_id, view="basic", limit=100)
    }


async def import_files(
    client: StoreClient,
    store_id: str,
    files: list[LocalFile],
    *,
    concurrency: int,
    patience: Patience,
    result: ImportResult,
    on_done: Callable[[], None] = lambda: None,
) -> None:
    """Create each file as a memory; a path that already exists is updated when its content differs
    (preconditioned on the listed hash, so a concurrent edit is never overwritten). ``result`` counts as
    it goes (what was done is known when the work is cut short)."""
    listed = await listed_hashes(client, patience, store_id)
    gate = asyncio.Semaphore(concurrency)

    async def one(f: LocalFile) -> None:
        async with gate:
            change = change_of(f, listed)
            try:
                if change == "create":
                    await patience.call(lambda: client.create_memory(store_id, f.path, f.content))
                    result.created += 1
                elif change == "update":
                    memory_id, sha = listed[f.path]
                    await patience.call(
                        lambda: client.update_memory(
                            store_id, memory_id, content=f.content, expected_sha256=sha
                        )
                    )
                    result.updated += 1
                else:
                    result.unchanged += 1
            except errors.TransportError:
                raise  # no answer before the first: the command fails as a whole
            except errors.StoreError as exc:
                result.failed.append((f.path, str(exc)))
            on_done()

    try:
        async with asyncio.TaskGroup() as group:  # GaveUp (or no answer at all) in one stops every other
            for f in files:
                group.create_task(one(f))
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None


def _summary(store_id: str, plan: ImportPlan, result: ImportResult) -> str:
    left = len(plan.files) - result.done
    return (
        f"imported into {store_id}: {result.created} created, {result.updated} updated, "
        f"{result.unchanged} unchanged, {len(plan.skipped)} skipped, {len(plan.excluded)} excluded, "
        f"{len(result.failed)} failed" + (f", {left} not sent" if left else "")
    )


async def preview(client: StoreClient, store_id: str, plan: ImportPlan, patience: Patience) -> None:
    """List on stdout what a real run would send (``create PATH``, ``update PATH``); send nothing."""
    listed = await listed_hashes(client, patience, store_id)
    changes = [(change_of(f, listed), f.path) for f in plan.files]
    for change, path in changes:
        if change != "unchanged":
            click.echo(f"{change} {path}")
    count = {kind: sum(c == kind for c, _ in changes) for kind in ("create", "update", "unchanged")}
    click.echo(
        f"dry run for {store_id}: {count['create']} to create, {count['update']} to update, "
        f"{count['unchanged']} unchanged, {len(plan.skipped)} skipped, {len(plan.excluded)} excluded; "
        "nothing was sent",
        err=True,
    )


def _say_plan(plan: ImportPlan, *, dry: bool) -> None:
    for rel, why in plan.skipped:
        click.echo(f"skipped {rel}: {why}", err=True)
    for rel in plan.excluded:
        if dry or rel.rstrip("/").rsplit("/", 1)[-1] in {p.rstrip("/") for p in VCS_PATTERNS}:
            click.echo(f"excluded {rel}", err=True)


@click.command("import")
@click.argument("store_id", type=ID)
@click.argument("directory", type=NonEmptyPath(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--exclude",
    "patterns",
    multiple=True,
    metavar="PATTERN",
    help="Leave out what this gitignore pattern matches (relative to DIRECTORY, e.g. '*.log', 'build/', "
    "'/drafts'); repeat for more.",
)
@click.option(
    "--include-vcs",
    is_flag=True,
    help="Send version-control folders too (.git/, .hg/, .svn/, .bzr/, _darcs/, .jj/, CVS/: left out by "
    "default).",
)
@click.option("--dry-run", is_flag=True, help="List what would be created or updated (stdout); send nothing.")
@click.option("--concurrency", default=16, show_default=True, type=click.IntRange(1, 64))
@give_up_option
@progress_option
@admin_options
def import_(  # noqa: PLR0913 - click passes each of the command's options as a parameter
    *,
    store_id: str,
    directory: Path,
    patterns: tuple[str, ...],
    include_vcs: bool,
    dry_run: bool,
    concurrency: int,
    give_up_after: float,
    progress: bool | None,
    url: str,
    admin_key_file: Path | None,
) -> None:
    """Upload a directory tree into a store: each UTF-8 file becomes the memory at its relative path."""
    plan = plan_import(directory, exclusions(patterns, vcs=not include_vcs))
    _say_plan(plan, dry=dry_run)
    patience = Patience(give_up_after)
    result = ImportResult()

    async def work(client: StoreClient) -> None:
        if dry_run:
            await preview(client, store_id, plan, patience)
            return
        with progress_of("importing", len(plan.files), progress) as step:
            await import_files(
                client,
                store_id,
                plan.files,
                concurrency=concurrency,
                patience=patience,
                result=result,
                on_done=step,
            )

    try:
        with quiet_transport_retries():
            run_with_client(url, admin_key_file, work, interruptible="the import")
    except pid1.Signalled as exc:
        raise interrupted(exc.signal, f"{_summary(store_id, plan, result)}; {RESUME}") from None
    except GaveUp as gave_up:
        raise stopped(gave_up, _summary(store_id, plan, result)) from None
    if dry_run:
        return
    for path, why in sorted(result.failed):
        click.echo(f"failed {path}: {why}", err=True)
    click.echo(_summary(store_id, plan, result), err=True)
    if plan.skipped or result.failed:
        sys.exit(ExitCode.PARTIAL)
